import type { NativeTarget } from "../../shared/update.js";

/**
 * A bundle published to the coordinator (`ax bundle publish`): a built, signed agent bundle's
 * archive, checked against the coordinator's own bundle key and served to agents by its sha256
 * for `agent.update` (docs/rollouts.md, "Agent updates").
 */
export interface BundleRecord {
  /** sha256 of the archive (NAME.tar.gz), lowercase hex: its name everywhere. */
  sha256: string;
  /** The firmware profile it was built from (manifest `profile.name`). */
  profile: string;
  /** The ax version it was built from (manifest `ax.version`). */
  version: string;
  /** What its native addon runs on: manifest `target` with `node.abi` as `nodeAbi`. */
  target: NativeTarget;
  /** The archive's size in bytes. */
  bytes: number;
  /** The sha256 of its agent file, as its manifest records it: what agents report in hello. */
  agentSha256: string;
  /** The signing key's id (manifest.sig `keyId`). */
  keyId: string;
  /** When it was built (manifest `builtAt`, ms) and published (ms). */
  builtAt: number;
  publishedAt: number;
  /** Who published it: the operator token's name. */
  publishedBy: string;
}

/** One page of published bundles, newest first. */
export interface BundlePage {
  items: BundleRecord[];
  /** Cursor for the next page; absent on the last. */
  next?: string;
}
