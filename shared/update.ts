import * as z from "zod/mini";
import { text } from "./protocol/envelope.js";
import {
  DEFAULT_HEALTH_WINDOW_MS,
  MAX_HEALTH_WINDOW_MS,
  MAX_TRIAL_STARTS,
  MIN_HEALTH_WINDOW_MS,
  type NativeTarget,
} from "./update-limits.js";

export * from "./update-auth.js";
export * from "./update-limits.js";

/*
 * Over-the-air agent updates (docs/rollouts.md, "Agent updates"): what both ends agree on. The
 * coordinator serves a published bundle's archive by its sha256; the built-in `agent.update`
 * handler downloads it, with the agent's own message key vouching for the request, checks it and
 * installs it beside the running one.
 */

/** The handler that installs a bundle. */
export const AGENT_UPDATE_HANDLER = "agent.update";

/** What a native addon runs on, and what a device reports in `hello.target` (NativeTarget). */
export const nativeTargetSchema: z.ZodMiniType<NativeTarget> = z.object({
  /** Node's `process.platform`: linux. */
  platform: text(32, 1),
  /** Node's `process.arch`: x64, arm64, arm, … */
  arch: text(32, 1),
  /** The C library: glibc, musl, or unknown. */
  libc: text(32, 1),
  /** NODE_MODULE_VERSION (`process.versions.modules`); null when not known. */
  nodeAbi: z.nullable(z.int().check(z.gte(1))),
});

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
  version: text(64, 1),
  /** The firmware profile it was built for. */
  profile: text(64, 1),
  /** What its native addon runs on. */
  target: nativeTargetSchema,
  /** How long the new agent has to register after each start, before the device goes back. */
  healthWindowMs: z.optional(
    z.int().check(z.gte(MIN_HEALTH_WINDOW_MS), z.lte(MAX_HEALTH_WINDOW_MS)),
  ),
});
export type AgentUpdateParams = z.infer<typeof agentUpdateParamsSchema>;

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
