import { z } from "zod";
import { AxError } from "../../shared/errors.js";
import {
  AGENT_UPDATE_HANDLER,
  type AgentUpdateParams,
  MAX_HEALTH_WINDOW_MS,
  MIN_HEALTH_WINDOW_MS,
} from "../../shared/update.js";
import { publicBaseUrl } from "../config.js";
import type { BundleRecord } from "../domain/bundle.js";
import type { EngineContext } from "../engine/context.js";
import { encodeExecutionCursor } from "../store/cursor.js";
import type { ExecutionRecord } from "../store/port.js";
import { executionRecordSchema } from "../store/records.js";

/*
 * `agent.update` as an operator asks for it (docs/rollouts.md, "Agent updates"): they name a
 * published bundle, and the coordinator fills in what the agent needs from the bundle's record.
 * Operators never write the URL or the target themselves, so a command cannot point devices at
 * an archive the coordinator did not check, nor claim a target the bundle was not built for.
 */

/** What an operator gives as the params of an `agent.update` command or rollout. */
export const agentUpdateRequestSchema = z
  .object({
    bundle: z
      .string({
        error: (iss) =>
          iss.input === undefined
            ? "is required: the sha256 of a published bundle"
            : "must be the sha256 of a published bundle (64 lowercase hex digits)",
      })
      .regex(
        /^[0-9a-f]{64}$/,
        "must be the sha256 of a published bundle (64 lowercase hex digits)",
      ),
    healthWindowMs: z
      .number()
      .int("must be a whole number of milliseconds")
      .min(MIN_HEALTH_WINDOW_MS, `must be at least ${MIN_HEALTH_WINDOW_MS}`)
      .max(MAX_HEALTH_WINDOW_MS, `must be at most ${MAX_HEALTH_WINDOW_MS}`)
      .optional(),
  })
  .strict();
export type AgentUpdateRequest = z.output<typeof agentUpdateRequestSchema>;

/** Where a bundle's archive is served: the route `GET /api/bundles/{sha256}/archive`. */
export function bundleArchiveUrl(base: string, sha256: string): string {
  return `${base}/api/bundles/${sha256}/archive`;
}

/** The params an agent receives for `bundle` (the bundle's record, the request's window). */
export function agentUpdateParams(
  base: string,
  bundle: BundleRecord,
  healthWindowMs: number | undefined,
): AgentUpdateParams {
  return {
    sha256: bundle.sha256,
    url: bundleArchiveUrl(base, bundle.sha256),
    bytes: bundle.bytes,
    version: bundle.version,
    profile: bundle.profile,
    target: bundle.target,
    ...(healthWindowMs === undefined ? {} : { healthWindowMs }),
  };
}

/**
 * Checks the params of a command of `handler` as the operator gave them, before anything else is
 * looked up (docs/api.md: the body is validated before anything happens): for `agent.update`,
 * `{ bundle, healthWindowMs? }`, returned parsed; any other handler's as given (its agent checks
 * them). `at` is the params' path in the request body (such as `["params"]`), which each refusal
 * names: AX_API_INVALID_REQUEST (a 400).
 */
export function checkCommandParams(
  handler: string,
  params: Record<string, unknown>,
  at: readonly string[],
): Record<string, unknown> {
  if (handler !== AGENT_UPDATE_HANDLER) return params;
  const parsed = agentUpdateRequestSchema.safeParse(params);
  if (!parsed.success) {
    const issue = parsed.error.issues[0] as z.core.$ZodIssue;
    if (issue.code === "unrecognized_keys") {
      throw invalid(
        [...at, issue.keys[0] as string],
        `unknown field: ${AGENT_UPDATE_HANDLER} takes { "bundle": SHA256, "healthWindowMs"?: MS }; the coordinator fills in the rest from the published bundle`,
      );
    }
    throw invalid([...at, ...issue.path.map(String)], issue.message);
  }
  return parsed.data;
}

/**
 * The params of a command of `handler` as stored and dispatched: for `agent.update`, the full
 * {@link AgentUpdateParams} of the published bundle the operator's `{ bundle, healthWindowMs? }`
 * names; any other handler's as given. Refusals as {@link checkCommandParams}'s, and for a
 * bundle not published.
 */
export async function commandParams(
  ctx: EngineContext,
  handler: string,
  params: Record<string, unknown>,
  at: readonly string[],
): Promise<Record<string, unknown>> {
  if (handler !== AGENT_UPDATE_HANDLER) return params;
  const { bundle: sha256, healthWindowMs } = checkCommandParams(handler, params, at) as z.infer<
    typeof agentUpdateRequestSchema
  >;
  const bundle = await ctx.store.getBundle(sha256);
  if (bundle === undefined) {
    throw invalid(
      [...at, "bundle"],
      `no published bundle has sha256 ${sha256}; publish it with ax bundle publish`,
    );
  }
  // The address the API listens on, once it does: `http.port` 0 picks its port only then.
  const base = publicBaseUrl({ ...ctx.config.http, ...ctx.listening });
  if (base === undefined) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      "http.publicUrl: not set, and http.port is 0 (a port picked at start), so agents could not be told where to download the bundle: set http.publicUrl to the URL agents reach this coordinator's API at",
      { context: { field: "http.publicUrl" } },
    );
  }
  return agentUpdateParams(base, bundle, healthWindowMs);
}

function invalid(path: readonly (string | number)[], problem: string): AxError {
  const name = path.join(".");
  return new AxError("AX_API_INVALID_REQUEST", `${name}: ${problem}`, {
    context: { issues: [{ path: ["body", ...path], message: problem }] },
  });
}

// --- update history (GET /api/agents/{id}/updates) ----------------------------------------------

/** One `agent.update` execution of an agent, as its update history shows it. */
export const agentUpdateEntrySchema = z.object({
  executionId: z.string(),
  createdAt: z.number(),
  dispatchedAt: z.number().nullable().meta({ description: "When it was sent; null if never." }),
  finishedAt: z.number().nullable(),
  state: executionRecordSchema.shape.state,
  fromVersion: z.string().nullable().meta({
    description:
      "The bundle version the agent ran when it was offered the update; null if it never was.",
  }),
  fromSha256: z.string().nullable(),
  version: z.string().nullable().meta({ description: "The bundle version it installs." }),
  sha256: z.string().nullable().meta({ description: "The sha256 of the bundle it installs." }),
  rolloutId: z.string().nullable().meta({ description: "The rollout that sent it, if one did." }),
  message: z.string().nullable(),
});
export type AgentUpdateEntry = z.output<typeof agentUpdateEntrySchema>;

export const agentUpdatePageSchema = z.object({
  items: z.array(agentUpdateEntrySchema).meta({ description: "Newest first." }),
  nextCursor: z.string().nullable().meta({
    description:
      "Pass as cursor for more; null once the agent's executions are all looked through.",
  }),
});
export type AgentUpdatePage = z.output<typeof agentUpdatePageSchema>;

/** Executions of the agent one history page looks through at most, newest first. */
export const UPDATE_HISTORY_SCAN = 1_000;
const SCAN_PAGE = 200;

/**
 * An agent's `agent.update` executions, newest first: up to `limit` of them among its newest
 * {@link UPDATE_HISTORY_SCAN} device commands after `cursor` (a bounded read: the store lists
 * executions by agent, not by handler). `nextCursor` goes on where this page stopped.
 */
export async function updateHistory(
  ctx: EngineContext,
  agentId: string,
  query: { limit: number; cursor?: string | undefined },
): Promise<AgentUpdatePage> {
  const found: ExecutionRecord[] = [];
  let cursor = query.cursor;
  let scanned = 0;
  let exhausted = false;
  while (found.length < query.limit && scanned < UPDATE_HISTORY_SCAN && !exhausted) {
    const page = await ctx.store.pageExecutions({
      agentId,
      kind: "command",
      limit: Math.min(SCAN_PAGE, UPDATE_HISTORY_SCAN - scanned),
      ...(cursor === undefined ? {} : { cursor }),
    });
    let i = 0;
    for (; i < page.items.length && found.length < query.limit; i++) {
      const e = page.items[i] as ExecutionRecord;
      scanned++;
      cursor = encodeExecutionCursor(e);
      if (e.handler === AGENT_UPDATE_HANDLER) found.push(e);
    }
    // Every row of the last page looked at: there is nothing more to look through.
    exhausted = i === page.items.length && page.nextCursor === null;
  }
  const items = await Promise.all(found.map((e) => historyEntry(ctx, e)));
  return { items, nextCursor: exhausted ? null : (cursor ?? null) };
}

async function historyEntry(ctx: EngineContext, e: ExecutionRecord): Promise<AgentUpdateEntry> {
  const timeline = await ctx.store.getTimeline(e.id);
  const from = timeline.find((t) => t.event === "dispatch" && t.detail?.from !== undefined)?.detail
    ?.from as { version?: unknown; sha256?: unknown } | undefined;
  const rolloutId = timeline[0]?.detail?.rolloutId;
  const str = (v: unknown) => (typeof v === "string" ? v : null);
  return {
    executionId: e.id,
    createdAt: e.createdAt,
    dispatchedAt: e.dispatchedAt,
    finishedAt: e.finishedAt,
    state: e.state,
    fromVersion: str(from?.version),
    fromSha256: str(from?.sha256),
    version: str(e.params.version),
    sha256: str(e.params.sha256),
    rolloutId: str(rolloutId),
    message: e.message,
  };
}
