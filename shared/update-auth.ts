import { createHmac, timingSafeEqual } from "node:crypto";
import { ID_PATTERN } from "./ids.js";

/*
 * Download authentication. An agent asks for an archive with
 *
 *   Authorization: AX-Agent <agentId> <kid>.<at>.<tag>
 *
 * where tag is the unpadded base64url HMAC-SHA256, under the agent's message key, of
 * `ax-bundle1`, kid, at, agentId and the archive's sha256, each ended by a line feed. `at` is
 * when it asked (UTC ms on the coordinator's clock as it estimates it); the coordinator accepts
 * it within BUNDLE_AUTH_SKEW_MS of its own clock, and only with the agent's current key.
 */

/** How far `at` may be from the coordinator's clock. */
export const BUNDLE_AUTH_SKEW_MS = 300_000;

export const BUNDLE_AUTH_SCHEME = "AX-Agent";

export function bundleAuthTag(
  key: Uint8Array,
  kid: number,
  at: number,
  agentId: string,
  sha256: string,
): Buffer {
  return createHmac("sha256", key)
    .update(`ax-bundle1\n${kid}\n${at}\n${agentId}\n${sha256}\n`, "utf8")
    .digest();
}

/** The Authorization header an agent sends for the archive `sha256`. */
export function bundleAuthorization(
  key: Uint8Array,
  kid: number,
  at: number,
  agentId: string,
  sha256: string,
): string {
  const ms = Math.floor(at);
  const tag = bundleAuthTag(key, kid, ms, agentId, sha256).toString("base64url");
  return `${BUNDLE_AUTH_SCHEME} ${agentId} ${kid}.${ms}.${tag}`;
}

export interface BundleAuth {
  agentId: string;
  kid: number;
  at: number;
  tag: Buffer;
}

const AUTH = /^AX-Agent (\S{1,128}) (\d{1,9})\.(\d{1,16})\.([A-Za-z0-9_-]{43})$/;

/** Reads an `AX-Agent` Authorization header; undefined when it is not one. */
export function parseBundleAuthorization(header: string | undefined): BundleAuth | undefined {
  if (header === undefined) return undefined;
  const m = AUTH.exec(header);
  if (!m) return undefined;
  const agentId = m[1] as string;
  if (!ID_PATTERN.test(agentId)) return undefined;
  const at = Number(m[3]);
  if (!Number.isSafeInteger(at)) return undefined;
  const tag = Buffer.from(m[4] as string, "base64url");
  if (tag.length !== 32) return undefined;
  return { agentId, kid: Number(m[2]), at, tag };
}

/** Whether `auth` is a request for `sha256` made with `key`. Constant time in the tag. */
export function verifyBundleAuth(auth: BundleAuth, key: Uint8Array, sha256: string): boolean {
  const expected = bundleAuthTag(key, auth.kid, auth.at, auth.agentId, sha256);
  return timingSafeEqual(expected, auth.tag);
}
