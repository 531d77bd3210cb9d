import { readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { compareWithManifest, MANIFEST_FILE, type Manifest, parseManifest } from "./manifest.js";
import { readTarGz } from "./tar.js";

export interface VerifyResult {
  /** What was read: the archive, or the bundle folder. */
  source: string;
  manifest: Manifest | undefined;
  /** One line per difference, naming the file; empty when the bundle matches its manifest. */
  problems: string[];
}

/** The files of an archive's single top folder, by name within it. */
function archiveFiles(path: string): { files: Map<string, Buffer>; problems: string[] } {
  const files = new Map<string, Buffer>();
  const problems: string[] = [];
  const entries = readTarGz(readFileSync(path));
  const tops = new Set(entries.map((e) => e.name.split("/")[0]));
  if (tops.size !== 1) {
    problems.push(
      `${basename(path)}: must hold one folder, holds ${[...tops].join(", ") || "nothing"}`,
    );
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
 * and nothing else is. Returns the differences; never throws for a bad bundle, only when the
 * path cannot be read at all.
 */
export function verifyBundle(path: string): VerifyResult {
  const stat = statSync(path);
  const isArchive = stat.isFile() && basename(path) !== MANIFEST_FILE;
  const dir = stat.isDirectory() ? path : dirname(path);
  let read: { files: Map<string, Buffer>; problems: string[] };
  try {
    read = isArchive ? archiveFiles(path) : folderFiles(dir);
  } catch (err) {
    return {
      source: path,
      manifest: undefined,
      problems: [`${basename(path)}: cannot be read: ${(err as Error).message}`],
    };
  }
  const source = isArchive ? path : dir;
  const text = read.files.get(MANIFEST_FILE);
  if (text === undefined) {
    return {
      source,
      manifest: undefined,
      problems: [...read.problems, `${MANIFEST_FILE}: missing`],
    };
  }
  const parsed = parseManifest(text.toString("utf8"));
  if (!parsed.ok)
    return { source, manifest: undefined, problems: [...read.problems, ...parsed.problems] };
  const ignore = isArchive ? [] : [`${parsed.manifest.profile.name}.tar.gz`];
  return {
    source,
    manifest: parsed.manifest,
    problems: [...read.problems, ...compareWithManifest(parsed.manifest, read.files, ignore)],
  };
}
