import { createHmac, timingSafeEqual } from "node:crypto";
import * as z from "zod/mini";
import { ID_PATTERN } from "./ids.js";
import {
  DEFAULT_HEALTH_WINDOW_MS,
  MAX_HEALTH_WINDOW_MS,
  MAX_TRIAL_STARTS,
  MIN_HEALTH_WINDOW_MS,
} from "./update-limits.js";

export {
  DEFAULT_HEALTH_WINDOW_MS,
  MAX_HEALTH_WINDOW_MS,
  MAX_TRIAL_STARTS,
  MIN_HEALTH_WINDOW_MS,
} from "./update-limits.js";

/*
 * Over-the-air agent updates (docs/rollouts.md, "Agent updates"): what both ends agree on. The
 * coordinator serves a published bundle's archive by its sha256; the built-in `agent.update`
 * handler downloads it, with the agent's own message key vouching for the request, checks it and
 * installs it beside the running one.
 */

/** The handler that installs a bundle. */
export const AGENT_UPDATE_HANDLER = "agent.update";

/** What a native addon runs on, and what a device reports in `hello.target`. */
export const nativeTargetSchema = z.object({
  /** Node's `process.platform`: linux. */
  platform: z.string().check(z.minLength(1), z.maxLength(32)),
  /** Node's `process.arch`: x64, arm64, arm, … */
  arch: z.string().check(z.minLength(1), z.maxLength(32)),
  /** The C library: glibc, musl, or unknown. */
  libc: z.string().check(z.minLength(1), z.maxLength(32)),
  /** NODE_MODULE_VERSION (`process.versions.modules`); null when not known. */
  nodeAbi: z.nullable(z.int().check(z.gte(1))),
});
export type NativeTarget = z.infer<typeof nativeTargetSchema>;

const sha256Hex = () =>
  z.string().check(z.regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hex digits"));

/** Most bytes a bundle archive may have. */
export const MAX_BUNDLE_BYTES = 64 * 1024 * 1024;

/** Params of `agent.update`, as the coordinator fills them in from the published bundle. */
export const agentUpdateParamsSchema = z.object({
  /** sha256 of the bundle's archive (NAME.tar.gz): what the coordinator serves it by. */
  sha256: sha256Hex(),
  /** Where to download it: the coordinator's `GET /api/bundles/{sha256}/archive`. */
  url: z.string().check(z.regex(/^https?:\/\/\S+$/, "must be an http:// or https:// URL")),
  /** The archive's size in bytes. */
  bytes: z.int().check(z.gte(1), z.lte(MAX_BUNDLE_BYTES)),
  /** The ax version the bundle was built from. */
  version: z.string().check(z.minLength(1), z.maxLength(64)),
  /** The firmware profile it was built for. */
  profile: z.string().check(z.minLength(1), z.maxLength(64)),
  /** What its native addon runs on. */
  target: nativeTargetSchema,
  /** How long the new agent has to register after each start, before the device goes back. */
  healthWindowMs: z.optional(
    z.int().check(z.gte(MIN_HEALTH_WINDOW_MS), z.lte(MAX_HEALTH_WINDOW_MS)),
  ),
});
export type AgentUpdateParams = z.infer<typeof agentUpdateParamsSchema>;

/**
 * Why a bundle built for `bundle` cannot run on a device reporting `device`, or undefined when it
 * can. A device that reports no target (an agent from before `hello.target`) gets no bundle with
 * a native part: what it would load is unknown.
 */
export function targetMismatch(
  bundle: NativeTarget,
  device: NativeTarget | undefined | null,
): string | undefined {
  if (!device) return "the agent reports no native target (hello.target): update it by hand";
  const diffs: string[] = [];
  if (bundle.platform !== device.platform) {
    diffs.push(`platform ${bundle.platform}, the device runs ${device.platform}`);
  }
  if (bundle.arch !== device.arch) diffs.push(`CPU ${bundle.arch}, the device is ${device.arch}`);
  if (bundle.libc !== device.libc) {
    diffs.push(`C library ${bundle.libc}, the device has ${device.libc}`);
  }
  if (bundle.nodeAbi === null) {
    diffs.push("its native addon names no Node ABI");
  } else if (bundle.nodeAbi !== device.nodeAbi) {
    diffs.push(
      `Node ABI ${bundle.nodeAbi}, the device's Node has ${device.nodeAbi ?? "none known"}`,
    );
  }
  return diffs.length === 0 ? undefined : `bundle built for ${diffs.join("; ")}`;
}

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

/**
 * How long an `agent.update` execution may go unheard of before the coordinator guesses it lost:
 * its agent restarts into the new version, which has up to MAX_TRIAL_STARTS starts of one health
 * window each to register, and then the previous version starts again to report. 0 for any other
 * handler.
 */
export function updateHoldMs(exec: { handler: string; params: unknown }): number {
  if (exec.handler !== AGENT_UPDATE_HANDLER) return 0;
  const window = (exec.params as { healthWindowMs?: unknown } | null)?.healthWindowMs;
  const ms = typeof window === "number" && window > 0 ? window : DEFAULT_HEALTH_WINDOW_MS;
  return ms * (MAX_TRIAL_STARTS + 1);
}
