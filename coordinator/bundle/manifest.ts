import { createHash } from "node:crypto";
import { z } from "zod";
import { formatIssues } from "../domain/job.js";

/** The manifest's file name, in the bundle folder and at the top of the archive's folder. */
export const MANIFEST_FILE = "manifest.json";

const fileEntry = z.strictObject({
  sha256: z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hex digits"),
  bytes: z.number().int().nonnegative(),
});

/**
 * manifest.json: what a bundle is and holds. Every file of the bundle but the manifest itself
 * is listed with its size and sha256; `ax bundle verify` checks them.
 */
export const manifestSchema = z.strictObject({
  /** Manifest layout version. */
  format: z.literal(1),
  /** The firmware profile the bundle was built from, as parsed (defaults filled in). */
  profile: z.looseObject({ name: z.string().min(1) }),
  ax: z.strictObject({ version: z.string().min(1) }),
  /** When the build ran (ISO 8601, UTC). */
  builtAt: z.iso.datetime(),
  /** The Node versions that can run it: those the native binding was built for. */
  node: z.strictObject({
    engines: z.string().min(1),
    abi: z.number().int().nullable(),
  }),
  /** What the native binding runs on: the device's OS, CPU and C library. */
  target: z.strictObject({
    platform: z.string(),
    arch: z.string(),
    libc: z.string(),
  }),
  /** The agent file: `node --max-old-space-size=N <agent> --config FILE`. */
  agent: z.string().min(1),
  files: z.record(z.string(), fileEntry),
  /**
   * Present only in a development build (`ax bundle build --unsigned`): it has no manifest.sig,
   * and `ax bundle verify` refuses it unless told `--allow-unsigned`.
   */
  unsigned: z.literal(true).optional(),
});

export type Manifest = z.infer<typeof manifestSchema>;
export type ManifestFile = z.infer<typeof fileEntry>;

export function sha256(data: Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}

export function fileEntryOf(data: Buffer): ManifestFile {
  return { sha256: sha256(data), bytes: data.length };
}

/** Parses manifest.json's text; returns the problems instead of throwing. */
export function parseManifest(
  text: string,
): { ok: true; manifest: Manifest } | { ok: false; problems: string[] } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, problems: [`${MANIFEST_FILE}: not valid JSON: ${(err as Error).message}`] };
  }
  const parsed = manifestSchema.safeParse(raw);
  if (!parsed.success) {
    return {
      ok: false,
      problems: formatIssues(parsed.error)
        .split("\n")
        .map((l) => `${MANIFEST_FILE}: ${l}`),
    };
  }
  if (!Object.hasOwn(parsed.data.files, parsed.data.agent)) {
    return {
      ok: false,
      problems: [`${MANIFEST_FILE}: agent: "${parsed.data.agent}" is not in files`],
    };
  }
  return { ok: true, manifest: parsed.data };
}

const short = (hex: string) => `${hex.slice(0, 12)}…`;

/**
 * Compares the files a bundle holds with its manifest. Returns one line per difference, naming
 * the file and how it differs; none when every listed file is there with its size and sha256 and
 * nothing else is. `ignore` lists names that may be present unlisted (the archive itself).
 */
export function compareWithManifest(
  manifest: Manifest,
  files: ReadonlyMap<string, Buffer>,
  ignore: readonly string[] = [],
): string[] {
  const problems: string[] = [];
  for (const [name, expected] of Object.entries(manifest.files)) {
    const data = files.get(name);
    if (data === undefined) {
      problems.push(`${name}: missing`);
      continue;
    }
    const actual = fileEntryOf(data);
    if (actual.bytes !== expected.bytes) {
      problems.push(`${name}: ${actual.bytes} bytes, the manifest says ${expected.bytes}`);
    }
    if (actual.sha256 !== expected.sha256) {
      problems.push(
        `${name}: sha256 ${short(actual.sha256)}, the manifest says ${short(expected.sha256)}`,
      );
    }
  }
  for (const name of files.keys()) {
    if (name === MANIFEST_FILE || ignore.includes(name)) continue;
    if (!Object.hasOwn(manifest.files, name)) problems.push(`${name}: not in the manifest`);
  }
  return problems;
}
