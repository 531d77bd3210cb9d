import type { NativeTarget } from "../../shared/update.js";
import type { BundleRecord } from "../domain/bundle.js";

/*
 * A published bundle's row, as both stores write and read it: the record's fields as columns,
 * `target` as JSON text (written as the record holds it, read back as it was written).
 */

/** A bundles row without its archive, as both drivers return it. */
export interface BundleRow {
  sha256: string;
  profile: string;
  version: string;
  target: string;
  bytes: number;
  agent_sha256: string;
  key_id: string;
  built_at: number;
  published_at: number;
  published_by: string;
}

/** The record's column values, in the order of the stores' column lists. */
export function bundleValues(
  r: BundleRecord,
): [string, string, string, string, number, string, string, number, number, string] {
  const target: NativeTarget = {
    platform: r.target.platform,
    arch: r.target.arch,
    libc: r.target.libc,
    nodeAbi: r.target.nodeAbi,
  };
  return [
    r.sha256,
    r.profile,
    r.version,
    JSON.stringify(target),
    r.bytes,
    r.agentSha256,
    r.keyId,
    r.builtAt,
    r.publishedAt,
    r.publishedBy,
  ];
}

/** The record a row holds. */
export function bundleOf(row: BundleRow): BundleRecord {
  return {
    sha256: row.sha256,
    profile: row.profile,
    version: row.version,
    target: JSON.parse(row.target) as NativeTarget,
    bytes: Number(row.bytes),
    agentSha256: row.agent_sha256,
    keyId: row.key_id,
    builtAt: row.built_at,
    publishedAt: row.published_at,
    publishedBy: row.published_by,
  };
}
