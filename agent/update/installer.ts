/**
 * The heavy half of `agent.update`: download, checks and the install into the other slot. Built
 * into its own file, update.mjs, beside the agent, and loaded only when an update runs, so an
 * agent carries its bytes on flash but never in memory otherwise (agent/update/updater.ts holds
 * the rest). It imports Node built-ins and small shared modules, never zod.
 */

import { createHash, createPublicKey, verify } from "node:crypto";
import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { makeDirs } from "../../shared/make-dirs.js";
import { readTar } from "../../shared/tar-read.js";
import { bundleAuthorization } from "../../shared/update-auth.js";
import { type NativeTarget, targetMismatch } from "../../shared/update-limits.js";
import { DOWNLOADS_DIR, type Slot, syncDir } from "./state.js";

/** Why an update failed; `retryable` says whether trying again may help. */
export class InstallFailure extends Error {
  constructor(
    message: string,
    readonly retryable = true,
  ) {
    super(message);
    this.name = "InstallFailure";
  }
}

export interface Wanted {
  sha256: string;
  url: string;
  bytes: number;
  version: string;
  profile: string;
}

export interface DownloadOptions {
  root: string;
  /** Who asks, with the message key and generation that vouch for the request. */
  agentId: string;
  key: Buffer;
  generation: number;
  /** Coordinator time as the agent estimates it: the request's `at`. */
  coordNow: () => number;
  signal: AbortSignal;
  log: (message: string, fields?: Record<string, unknown>) => void;
}

/** Downloads the archive into ROOT/downloads (resuming a partial one), checking size and sha256. */
export async function download(w: Wanted, o: DownloadOptions): Promise<Buffer> {
  const dir = join(o.root, DOWNLOADS_DIR);
  makeDirs(dir);
  const part = join(dir, `${w.sha256}.tar.gz`);
  let have = existsSync(part) ? statSync(part).size : 0;
  if (have > w.bytes) {
    rmSync(part, { force: true });
    have = 0;
  }
  if (have < w.bytes) {
    const headers: Record<string, string> = {
      authorization: bundleAuthorization(o.key, o.generation, o.coordNow(), o.agentId, w.sha256),
    };
    if (have > 0) headers.range = `bytes=${have}-`;
    let res: Response;
    try {
      res = await fetch(w.url, { headers, signal: o.signal });
    } catch (err) {
      throw new InstallFailure(`download from ${w.url} failed: ${(err as Error).message}`);
    }
    if (res.status === 200 && have > 0) have = 0; // the server sent it whole: start over
    if (res.status !== 200 && res.status !== 206) {
      const text = (await res.text().catch(() => "")).slice(0, 300);
      throw new InstallFailure(
        `download from ${w.url}: HTTP ${res.status} ${text}`,
        res.status >= 500 || res.status === 408 || res.status === 429,
      );
    }
    o.log(have > 0 ? "resuming the download" : "downloading", { from: have, bytes: w.bytes });
    const fd = openSync(part, have > 0 ? "a" : "w");
    try {
      if (res.body) {
        for await (const chunk of res.body) {
          const bytes = Buffer.from(chunk as Uint8Array);
          if (have + bytes.length > w.bytes) {
            rmSync(part, { force: true });
            throw new InstallFailure(`download: more than the ${w.bytes} bytes announced`);
          }
          let off = 0;
          while (off < bytes.length) off += writeSync(fd, bytes, off);
          have += bytes.length;
        }
      }
      fsyncSync(fd);
    } catch (err) {
      throw err instanceof InstallFailure
        ? err
        : new InstallFailure(
            `download interrupted at ${have} of ${w.bytes} bytes: ${(err as Error).message}`,
          );
    } finally {
      closeSync(fd);
    }
    if (have !== w.bytes) {
      throw new InstallFailure(`download ended at ${have} of ${w.bytes} bytes; resumed next time`);
    }
  }
  const data = readFileSync(part);
  const sha = createHash("sha256").update(data).digest("hex");
  if (sha !== w.sha256) {
    rmSync(part, { force: true });
    // Not a download to resume or retry: bytes of the announced size that are not the bundle
    // (rollouts.md, "What happens on failure": refused before install).
    throw new InstallFailure(
      `refused before install: the archive's sha256 is ${sha.slice(0, 12)}…, the command names ${w.sha256.slice(0, 12)}…`,
      false,
    );
  }
  return data;
}

const MANIFEST_FILE = "manifest.json";
const SIGNATURE_FILE = "manifest.sig";
/** A device's own secret never comes in a bundle sent to many devices. */
const IDENTITY_FILE = "ax-identity.json";

export type BundleFiles = Map<string, { data: Buffer; mode: number }>;

/**
 * The archive's files, once its manifest's signature verifies with the key this device trusts
 * (never one that came with the bundle) and every file matches the manifest, its target this
 * device, its version and profile the command's; refused otherwise, before anything is installed.
 */
export function verifyBundle(
  archive: Buffer,
  w: Wanted,
  publicKeyPem: string,
  device: NativeTarget,
): BundleFiles {
  const refuse = (why: string) => new InstallFailure(`refused before install: ${why}`, false);
  let entries: ReturnType<typeof readTar>;
  try {
    entries = readTar(gunzipSync(archive));
  } catch (err) {
    throw refuse(`not a bundle archive: ${(err as Error).message}`);
  }
  const files: BundleFiles = new Map();
  for (const e of entries) {
    if (e.name.endsWith("/")) continue;
    const slash = e.name.indexOf("/");
    const name = slash < 0 ? e.name : e.name.slice(slash + 1);
    if (name === "" || name.includes("/") || name.startsWith(".")) {
      throw refuse(`unexpected path in the archive: ${e.name}`);
    }
    files.set(name, { data: e.data, mode: e.mode ?? 0o644 });
  }
  const manifestBytes = files.get(MANIFEST_FILE)?.data;
  if (!manifestBytes) throw refuse(`no ${MANIFEST_FILE}`);
  const sigText = files.get(SIGNATURE_FILE)?.data.toString("utf8");
  if (sigText === undefined) throw refuse(`no ${SIGNATURE_FILE}: the bundle is not signed`);
  let signed = false;
  try {
    const sig = JSON.parse(sigText) as { alg?: unknown; sig?: unknown };
    signed =
      sig.alg === "ed25519" &&
      typeof sig.sig === "string" &&
      verify(null, manifestBytes, createPublicKey(publicKeyPem), Buffer.from(sig.sig, "base64"));
  } catch {
    signed = false;
  }
  if (!signed) {
    throw refuse(
      `${SIGNATURE_FILE}: the signature does not verify with the coordinator's bundle key this device holds`,
    );
  }
  let m: {
    profile?: { name?: unknown };
    ax?: { version?: unknown };
    node?: { abi?: unknown };
    target?: { platform?: unknown; arch?: unknown; libc?: unknown };
    agent?: unknown;
    files?: Record<string, { sha256?: unknown; bytes?: unknown }>;
  };
  try {
    m = JSON.parse(manifestBytes.toString("utf8"));
  } catch (err) {
    throw refuse(`${MANIFEST_FILE}: not valid JSON: ${(err as Error).message}`);
  }
  if (typeof m.files !== "object" || m.files === null) throw refuse(`${MANIFEST_FILE}: no files`);
  for (const [name, want] of Object.entries(m.files)) {
    const got = files.get(name)?.data;
    if (!got) throw refuse(`${name}: missing`);
    const sha = createHash("sha256").update(got).digest("hex");
    if (got.length !== want.bytes || sha !== want.sha256) {
      throw refuse(`${name}: does not match the manifest`);
    }
  }
  for (const name of files.keys()) {
    if (name !== MANIFEST_FILE && name !== SIGNATURE_FILE && !Object.hasOwn(m.files, name)) {
      throw refuse(`${name}: not in the manifest`);
    }
  }
  if (files.has(IDENTITY_FILE)) throw refuse(`it carries a device identity (${IDENTITY_FILE})`);
  if (m.agent !== "agent.mjs" || !files.has("agent.mjs")) {
    throw refuse(`its agent is ${String(m.agent)}, not agent.mjs`);
  }
  const t = m.target ?? {};
  const abi = m.node?.abi;
  const mismatch = targetMismatch(
    {
      platform: String(t.platform),
      arch: String(t.arch),
      libc: String(t.libc),
      nodeAbi: typeof abi === "number" ? abi : null,
    },
    device,
  );
  if (mismatch) throw refuse(mismatch);
  if (m.ax?.version !== w.version || m.profile?.name !== w.profile) {
    throw refuse(
      `it is ${String(m.profile?.name)} ${String(m.ax?.version)}, the command says ${w.profile} ${w.version}`,
    );
  }
  return files;
}

/** Writes the files into a fresh folder beside the slot, fsynced, then renames it into place. */
export function installSlot(root: string, slot: Slot, files: BundleFiles): void {
  const tmp = join(root, `.install-${slot}`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o755 });
  for (const [name, f] of files) {
    const fd = openSync(join(tmp, name), "w", f.mode & 0o777);
    try {
      let off = 0;
      while (off < f.data.length) off += writeSync(fd, f.data, off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
  syncDir(tmp);
  rmSync(join(root, slot), { recursive: true, force: true });
  renameSync(tmp, join(root, slot));
  syncDir(root);
}
