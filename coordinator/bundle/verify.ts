import { readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { readTarGz } from "../../shared/tar.js";
import { IDENTITY_FILE, identityProblems } from "./identity.js";
import { compareWithManifest, MANIFEST_FILE, type Manifest, parseManifest } from "./manifest.js";
import { checkSignature, SIGNATURE_FILE, type TrustedKey } from "./signature.js";

/** What `ax bundle verify` trusts. */
export interface VerifyOptions {
  /** The coordinator's bundle signing public key; without it a signed bundle cannot pass. */
  trusted?: TrustedKey | undefined;
  /**
   * Pass a bundle without manifest.sig (a development build, `--unsigned`) when its checksums
   * match; `signature` then says `unsigned`. @default false
   */
  allowUnsigned?: boolean | undefined;
}

export interface VerifyResult {
  /** What was read: the archive, or the bundle folder. */
  source: string;
  manifest: Manifest | undefined;
  /**
   * `valid`: manifest.sig verifies with the trusted key; `unsigned`: there is none; `invalid`:
   * it is malformed or does not verify; `unchecked`: no manifest to check it against.
   */
  signature: "valid" | "unsigned" | "invalid" | "unchecked";
  /** The agent whose identity (ax-identity.json) the bundle holds, if any. */
  identityAgentId: string | undefined;
  /**
   * One line per problem, naming the file: the signature's first, then each file that differs
   * from the manifest. Empty when the bundle is signed by the trusted key and matches.
   */
  problems: string[];
}

/** The files of an archive's single top folder, by name within it; `name` names it in problems. */
function archiveFiles(
  gz: Buffer,
  name: string,
): { files: Map<string, Buffer>; problems: string[] } {
  const files = new Map<string, Buffer>();
  const problems: string[] = [];
  const entries = readTarGz(gz);
  const tops = new Set(entries.map((e) => e.name.split("/")[0]));
  if (tops.size !== 1) {
    problems.push(`${name}: must hold one folder, holds ${[...tops].join(", ") || "nothing"}`);
  }
  for (const e of entries) {
    if (e.name.endsWith("/")) {
      if (e.name.split("/").length > 2) problems.push(`${e.name}: not in the manifest`);
      continue;
    }
    const rest = e.name.slice(e.name.indexOf("/") + 1);
    files.set(rest, e.data);
  }
  return { files, problems };
}

/** The files of a bundle folder (not recursive: a bundle is flat). */
function folderFiles(dir: string): { files: Map<string, Buffer>; problems: string[] } {
  const files = new Map<string, Buffer>();
  const problems: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isFile()) files.set(name, readFileSync(path));
    else problems.push(`${name}: not in the manifest`);
  }
  return { files, problems };
}

/**
 * `ax bundle verify`: checks a bundle — its NAME.tar.gz, its folder, or the folder's
 * manifest.json — against its manifest: every file listed is there with its size and sha256,
 * and nothing else is — and manifest.sig: present, and a signature of manifest.json's bytes by
 * `options.trusted`. Returns the problems; never throws for a bad bundle, only when the path
 * cannot be read at all.
 */
export function verifyBundle(path: string, options: VerifyOptions = {}): VerifyResult {
  const stat = statSync(path);
  const isArchive = stat.isFile() && basename(path) !== MANIFEST_FILE;
  if (isArchive) {
    let gz: Buffer;
    try {
      gz = readFileSync(path);
    } catch (err) {
      return unreadable(path, basename(path), err);
    }
    return { ...verifyArchive(gz, basename(path), options), source: path };
  }
  const dir = stat.isDirectory() ? path : dirname(path);
  let read: { files: Map<string, Buffer>; problems: string[] };
  try {
    read = folderFiles(dir);
  } catch (err) {
    return unreadable(path, basename(path), err);
  }
  return checkFiles(dir, read, false, options);
}

/**
 * Checks a bundle's archive (NAME.tar.gz) held in memory, as {@link verifyBundle} checks one on
 * disk; `name` stands for it in `source` and in the problems. An archive that is not a gzipped
 * tar is one problem, never a throw.
 */
export function verifyArchive(gz: Buffer, name: string, options: VerifyOptions = {}): VerifyResult {
  let read: { files: Map<string, Buffer>; problems: string[] };
  try {
    read = archiveFiles(gz, name);
  } catch (err) {
    return unreadable(name, name, err);
  }
  return checkFiles(name, read, true, options);
}

function unreadable(source: string, name: string, err: unknown): VerifyResult {
  return {
    source,
    manifest: undefined,
    signature: "unchecked",
    identityAgentId: undefined,
    problems: [`${name}: cannot be read: ${(err as Error).message}`],
  };
}

/** True when a manifest says it is of a development build (`"unsigned": true`). */
function markedUnsigned(text: Buffer): boolean {
  try {
    return (JSON.parse(text.toString("utf8")) as { unsigned?: unknown }).unsigned === true;
  } catch {
    return false;
  }
}

/** The verdict on a bundle's files, read from its archive or its folder. */
function checkFiles(
  source: string,
  read: { files: Map<string, Buffer>; problems: string[] },
  isArchive: boolean,
  options: VerifyOptions,
): VerifyResult {
  const none = { signature: "unchecked" as const, identityAgentId: undefined };
  const text = read.files.get(MANIFEST_FILE);
  if (text === undefined) {
    return {
      source,
      manifest: undefined,
      ...none,
      problems: [...read.problems, `${MANIFEST_FILE}: missing`],
    };
  }
  const sig = read.files.get(SIGNATURE_FILE);
  // --allow-unsigned passes a build made unsigned (its manifest says so), never a signed one
  // whose manifest.sig was taken away.
  const sigProblems =
    sig === undefined && options.allowUnsigned && markedUnsigned(text)
      ? []
      : checkSignature(text, sig, options.trusted);
  const signature = sig === undefined ? "unsigned" : sigProblems.length === 0 ? "valid" : "invalid";
  const parsed = parseManifest(text.toString("utf8"));
  if (!parsed.ok) {
    return {
      source,
      manifest: undefined,
      signature,
      identityAgentId: undefined,
      problems: [...sigProblems, ...read.problems, ...parsed.problems],
    };
  }
  const ignore = [SIGNATURE_FILE, ...(isArchive ? [] : [`${parsed.manifest.profile.name}.tar.gz`])];
  const problems = [
    ...sigProblems,
    ...read.problems,
    ...compareWithManifest(parsed.manifest, read.files, ignore),
  ];
  let identityAgentId: string | undefined;
  const identity = read.files.get(IDENTITY_FILE);
  if (identity !== undefined) {
    const r = identityProblems(identity.toString("utf8"));
    if (r.ok) identityAgentId = r.identity.agentId;
    else problems.push(...r.problems.map((p) => `${IDENTITY_FILE}: ${p}`));
  }
  return { source, manifest: parsed.manifest, signature, identityAgentId, problems };
}
