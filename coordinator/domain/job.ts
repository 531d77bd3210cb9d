import "./zod-messages.js";
import { z } from "zod";
import { TERMINAL_STATE_NAMES } from "../../shared/fsm.js";
import { HANDLER_NAME_PATTERN, ID_PATTERN } from "../../shared/ids.js";
import { MAX_OBJECT_KEYS } from "../../shared/protocol/envelope.js";
import { MAX_JSON_DEPTH } from "../../shared/protocol/json-depth.js";
import { AGENT_UPDATE_HANDLER } from "../../shared/update.js";
import { durationSchema, positiveDurationSchema } from "./duration.js";
import { MAX_VIRTUAL_NODES } from "./hash-ring.js";
import { noZoneProblem, parseIsoInstant } from "./instant.js";
import { isValidTimeZone, validateCron } from "./schedule.js";

/**
 * Why `agent.update` is no job's handler: its params are the coordinator's to fill in from a
 * published bundle, which a command or a rollout does at creation; a job's would go to devices as
 * written, URL and target included.
 */
export const AGENT_UPDATE_NOT_A_JOB = `${AGENT_UPDATE_HANDLER} installs a bundle: send it as a command (ax command send --bundle) or a rollout (ax rollout create --bundle), not a job`;

const ID_MESSAGE = "must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit";

/** A job, group or event id: it may travel in an MQTT topic (see ID_PATTERN). */
export const idSchema = z.string().regex(ID_PATTERN, ID_MESSAGE);

/** An instant: UTC milliseconds or an ISO 8601 time; resolves to UTC milliseconds. */
export const instantSchema = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const noZone = typeof value === "string" ? noZoneProblem(value) : undefined;
  if (noZone !== undefined) {
    ctx.addIssue({ code: "custom", message: noZone });
    return z.NEVER;
  }
  const ms = typeof value === "number" ? value : parseIsoInstant(value);
  if (ms === undefined || !Number.isFinite(ms) || ms < 0) {
    ctx.addIssue({
      code: "custom",
      message: `must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got ${JSON.stringify(value)})`,
    });
    return z.NEVER;
  }
  return ms;
});

/**
 * Fires on a cron expression's local times in `tz`. Around daylight-saving changes a fixed time
 * that is skipped fires once right after the gap and one that repeats fires once, while
 * interval-like expressions follow the local clock (see `nextFireAfter` in schedule.ts).
 */
const cronTriggerSchema = z
  .object({
    type: z.literal("cron"),
    /** 5 fields (minute hour day month weekday) or 6 (seconds first). */
    expr: z.string().min(1),
    /** IANA time zone; UTC unless given, never the host's zone. */
    tz: z.string().default("UTC"),
  })
  .strict()
  .superRefine((t, ctx) => {
    if (!isValidTimeZone(t.tz)) {
      ctx.addIssue({
        code: "custom",
        path: ["tz"],
        message: `"${t.tz}" is not a known IANA time zone`,
      });
      return;
    }
    const problem = validateCron(t.expr, t.tz);
    if (problem) ctx.addIssue({ code: "custom", path: ["expr"], message: problem });
  });

const intervalSchema = durationSchema.refine((ms) => ms >= 100, "must be at least 100ms");

const everyTriggerSchema = z
  .object({
    type: z.literal("every"),
    /** The interval, e.g. `2s` or 2000. */
    every: intervalSchema.optional(),
    /** The interval in milliseconds: the resolved form, so a stored definition parses again. */
    everyMs: intervalSchema.optional(),
    /** Fire times are anchor + k × every; UTC ms or ISO time. @default 0 (the epoch) */
    anchor: instantSchema.optional(),
  })
  .strict()
  .superRefine((t, ctx) => {
    if ((t.every === undefined) === (t.everyMs === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: ["every"],
        message: 'give the interval as every (e.g. "2s")',
      });
    }
  })
  .transform(({ type, every, everyMs, anchor }) => ({
    type,
    everyMs: (every ?? everyMs) as number,
    ...(anchor === undefined ? {} : { anchor }),
  }));

const atTriggerSchema = z.object({ type: z.literal("at"), at: instantSchema }).strict();

/** Fires once, `delayMs` after the job version is stored. */
const delayTriggerSchema = z
  .object({
    type: z.literal("delay"),
    /** How long after the job version is stored, e.g. `10m` or 600000. */
    delay: durationSchema.optional(),
    /** The same in milliseconds: the resolved form, so a stored definition parses again. */
    delayMs: durationSchema.optional(),
  })
  .strict()
  .superRefine((t, ctx) => {
    if ((t.delay === undefined) === (t.delayMs === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: ["delay"],
        message: 'give the delay as delay (e.g. "10m")',
      });
    }
  })
  .transform(({ type, delay, delayMs }) => ({ type, delayMs: (delay ?? delayMs) as number }));

/** Fired by a message on `ax/v1/events/{name}`; no time-based fires. */
const eventTriggerSchema = z.object({ type: z.literal("event"), name: idSchema }).strict();

/** Fires when an execution of job `job` ends in one of `states`. */
const afterTriggerSchema = z
  .object({
    type: z.literal("after"),
    job: idSchema,
    /** @default ["SUCCEEDED"] */
    states: z.array(z.enum(TERMINAL_STATE_NAMES)).min(1).default(["SUCCEEDED"]),
  })
  .strict();

/** Fired only by an operator (CLI, API, console). */
const manualTriggerSchema = z.object({ type: z.literal("manual") }).strict();

/** When a job fires; the output is the resolved form, which parses again to itself. */
export const triggerSchema = z.discriminatedUnion("type", [
  cronTriggerSchema,
  everyTriggerSchema,
  atTriggerSchema,
  delayTriggerSchema,
  eventTriggerSchema,
  afterTriggerSchema,
  manualTriggerSchema,
]);
export type TriggerInput = z.input<typeof triggerSchema>;
export type Trigger = z.output<typeof triggerSchema>;

export const retrySchema = z
  .object({
    /** Total attempts including the first. @default 1 */
    maxAttempts: z.number().int().min(1).max(100).default(1),
    /** @default 1000 */
    baseMs: durationSchema.default(1000),
    /** @default 60000 */
    capMs: durationSchema.default(60_000),
  })
  .strict();

/** What happens when a job fires while an execution of it is still running. */
export const overlapSchema = z
  .object({
    /**
     * `PARALLEL`: run both; `SKIP`: the new execution is SKIPPED; `QUEUE`: it waits for the
     * running one (serial); `REPLACE`: the running one is canceled. @default "SKIP"
     */
    policy: z.enum(["PARALLEL", "SKIP", "QUEUE", "REPLACE"]).default("SKIP"),
    /** With `QUEUE`: executions waiting at most; a fire beyond it is SKIPPED. @default 10 */
    queueMax: z.number().int().min(1).max(1000).default(10),
  })
  .strict();

const MISFIRE_WINDOW_MS = 3_600_000;

/** What happens to fires missed while the coordinator was down. */
export const misfireSchema = z
  .object({
    /**
     * `FIRE_ONCE`: the latest missed fire fires once; `SKIP`: none fires, the job waits for its
     * next fire time; `CATCH_UP`: the latest `maxCatchUp` missed fires within `window` fire.
     * @default "FIRE_ONCE"
     */
    policy: z.enum(["FIRE_ONCE", "SKIP", "CATCH_UP"]).default("FIRE_ONCE"),
    /** With `CATCH_UP`: the most missed fires fired. @default 10 */
    maxCatchUp: z.number().int().min(1).max(10_000).default(10),
    /** With `CATCH_UP`: only missed fires this long before now or less fire. @default 1h */
    window: durationSchema.optional(),
    /** The same in milliseconds: the resolved form, so a stored definition parses again. */
    windowMs: durationSchema.optional(),
  })
  .strict()
  .superRefine((m, ctx) => {
    if (m.window !== undefined && m.windowMs !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["window"],
        message: 'give the window once, as window (e.g. "1h")',
      });
    }
  })
  .transform(({ policy, maxCatchUp, window, windowMs }) => ({
    policy,
    maxCatchUp,
    windowMs: window ?? windowMs ?? MISFIRE_WINDOW_MS,
  }));

const TAG_NAME_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

/** Agent tags a job requires: only agents whose tags include all of these run it. */
export const tagsSchema = z.record(
  z.string().regex(TAG_NAME_PATTERN),
  z.string().max(128),
  // zod names a bad key only as "Invalid key in record"; say what a tag name is.
  {
    error: (issue) =>
      issue.code === "invalid_key" ? "must be a tag name: 1-64 of A-Z a-z 0-9 . _ -" : undefined,
  },
);

/** How an execution's agent is chosen; docs/scheduling.md ("Routing") describes each. */
export const ROUTING_STRATEGIES = [
  "FIRST",
  "ROUND_ROBIN",
  "RANDOM",
  "CONSISTENT_HASH",
  "LEAST_LOADED",
  "LEAST_RECENTLY_USED",
  "STICKY",
  "FAILOVER",
  "SHARD_BROADCAST",
  "TARGET",
] as const;
export type RoutingStrategy = (typeof ROUTING_STRATEGIES)[number];

/** Strategies that hash a key, and so take `hashKey` and `virtualNodes`. */
const HASHING: readonly RoutingStrategy[] = ["CONSISTENT_HASH", "STICKY"];

/** Fields only some strategies take, and which. */
const ONLY_FOR = {
  agents: ["TARGET", "FAILOVER"],
  selector: ["TARGET"],
  hashKey: HASHING,
  virtualNodes: HASHING,
} as const satisfies Record<string, readonly RoutingStrategy[]>;

/** A dotted path into params: `deviceId`, `device.id`, `sensors.0`. */
const HASH_KEY_PATTERN = /^[^.]+(\.[^.]+)*$/;

/**
 * Which agent runs an execution. The output is the input as given (no defaults beyond
 * `strategy`), so a stored `{ strategy: "ROUND_ROBIN" }` parses again to itself.
 */
export const routingSchema = z
  .object({
    /** @default "ROUND_ROBIN" */
    strategy: z.enum(ROUTING_STRATEGIES).default("ROUND_ROBIN"),
    /**
     * CONSISTENT_HASH and STICKY: the dotted path in params of the value to hash, such as
     * `deviceId` or `device.id`. @default the job id
     */
    hashKey: z
      .string()
      .max(256)
      .regex(HASH_KEY_PATTERN, "must be a dotted path into params such as deviceId or device.id")
      .optional(),
    /** TARGET: the agents that may run it; FAILOVER: the order to try agents in (only these). */
    agents: z.array(idSchema).min(1).max(1000).optional(),
    /** TARGET: the tags an agent must have to run it. */
    selector: tagsSchema.optional(),
    /** CONSISTENT_HASH and STICKY: points per agent on the hash ring. @default 2048 */
    virtualNodes: z.number().int().min(1).max(MAX_VIRTUAL_NODES).optional(),
  })
  .strict()
  .superRefine((r, ctx) => {
    for (const [field, strategies] of Object.entries(ONLY_FOR)) {
      if (r[field as keyof typeof ONLY_FOR] === undefined) continue;
      if ((strategies as readonly RoutingStrategy[]).includes(r.strategy)) continue;
      ctx.addIssue({
        code: "custom",
        path: [field],
        message: `only for strategy ${strategies.join(" or ")}, not ${r.strategy}`,
      });
    }
    if (r.strategy === "TARGET") {
      if (r.agents === undefined && r.selector === undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["agents"],
          message: "TARGET needs agents (agent ids) or selector (tags)",
        });
      }
      if (r.agents !== undefined && r.selector !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["selector"],
          message: "TARGET takes agents or selector, not both",
        });
      }
      // An empty selector would match every agent: almost certainly a template gone wrong.
      if (r.selector !== undefined && Object.keys(r.selector).length === 0) {
        ctx.addIssue({ code: "custom", path: ["selector"], message: "must name at least one tag" });
      }
    }
    const seen = new Set<string>();
    r.agents?.forEach((id, i) => {
      if (seen.has(id)) {
        ctx.addIssue({
          code: "custom",
          path: ["agents", i],
          message: `duplicate agent id "${id}"`,
        });
      }
      seen.add(id);
    });
  });
export type RoutingInput = z.input<typeof routingSchema>;
export type Routing = z.output<typeof routingSchema>;

/** Deepest nesting a handler's params may have: the dispatch that carries them stays within the
 * protocol's depth limit (MAX_JSON_DEPTH, with the envelope and params' own level). */
export const MAX_PARAMS_DEPTH = MAX_JSON_DEPTH - 2;
/** Largest params in bytes of JSON: the dispatch that carries them must fit in one payload. */
export const MAX_PARAMS_BYTES = 60_000;

/** How deeply `value` nests arrays and objects (an object alone is 1), without recursion; stops past `limit`. */
function nesting(value: unknown, limit: number): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== "object") continue;
    if (depth > deepest) deepest = depth;
    if (deepest > limit) return deepest;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return deepest;
}

/**
 * Handler params (a job's, a command's, an event's payload): an object that a dispatch can carry
 * to any agent — at most MAX_OBJECT_KEYS keys, MAX_PARAMS_DEPTH levels and MAX_PARAMS_BYTES of
 * JSON. Refused here, with the field named, rather than answered `rejected` by every agent later.
 */
export const paramsSchema = z.record(z.string(), z.unknown()).superRefine((params, ctx) => {
  const keys = Object.keys(params).length;
  if (keys > MAX_OBJECT_KEYS) {
    ctx.addIssue({ code: "custom", message: `has ${keys} keys, more than ${MAX_OBJECT_KEYS}` });
    return;
  }
  const depth = nesting(params, MAX_PARAMS_DEPTH);
  if (depth > MAX_PARAMS_DEPTH) {
    ctx.addIssue({
      code: "custom",
      message: `nests deeper than ${MAX_PARAMS_DEPTH} levels of arrays and objects`,
    });
    return;
  }
  const bytes = Buffer.byteLength(JSON.stringify(params));
  if (bytes > MAX_PARAMS_BYTES) {
    ctx.addIssue({
      code: "custom",
      message: `is ${bytes} bytes of JSON, more than ${MAX_PARAMS_BYTES} (put large data on a side channel and pass a reference)`,
    });
  }
});

/**
 * A job definition as users write it (JSON jobs file, CLI). The output is the resolved form
 * (defaults filled in, durations in milliseconds), which is stored and parses again to itself.
 */
export const jobDefinitionSchema = z
  .object({
    id: idSchema,
    handler: z
      .string()
      .regex(HANDLER_NAME_PATTERN, "must be a handler name such as echo or mqtt.publish"),
    /** Passed to the handler. @default {} */
    params: paramsSchema.default({}),
    trigger: triggerSchema,
    /** @default { strategy: "ROUND_ROBIN" } */
    routing: routingSchema.default({ strategy: "ROUND_ROBIN" }),
    /** Only agents whose tags include all of these run the job. @default {} */
    tags: tagsSchema.default({}),
    /** Executions per fire, one per shard (each told its shard number). @default 1 */
    shards: z.number().int().min(1).max(1024).default(1),
    /** @default { policy: "SKIP", queueMax: 10 } */
    overlap: overlapSchema.default({ policy: "SKIP", queueMax: 10 }),
    /** @default { policy: "FIRE_ONCE", maxCatchUp: 10, windowMs: 3600000 } (window 1h) */
    misfire: misfireSchema.default({
      policy: "FIRE_ONCE",
      maxCatchUp: 10,
      windowMs: MISFIRE_WINDOW_MS,
    }),
    /**
     * Executions of all jobs with the same group run one at a time across the fleet, in fire
     * order (FIFO). @default none
     */
    group: idSchema.optional(),
    /** Most executions of this job running at once across the fleet. @default no limit */
    concurrency: z.number().int().min(1).max(10_000).optional(),
    /** Longest a run may take on the agent. @default 60s */
    timeout: positiveDurationSchema.default(60_000),
    /** Latest start after the nominal fire time; past it the execution is EXPIRED. @default 60s */
    deadline: durationSchema.default(60_000),
    /**
     * How far ahead of each fire time its executions are created and dispatched, so the agent
     * holds them in its journal and fires them from its own wheel through outages shorter than
     * this. At most 24h. @default the coordinator's `dispatchLead` (500 ms)
     */
    dispatchLead: durationSchema.refine((ms) => ms <= 86_400_000, "must be at most 24h").optional(),
    /** No `accepted` within this → redispatch with round+1. @default 5s */
    dispatchTimeout: positiveDurationSchema.default(5_000),
    /** Dispatches per attempt before the attempt fails as undeliverable. @default 3 */
    maxDispatches: z.number().int().min(1).max(20).default(3),
    /** @default { maxAttempts: 1, baseMs: 1000, capMs: 60000 } */
    retry: retrySchema.default({ maxAttempts: 1, baseMs: 1000, capMs: 60_000 }),
    /** Higher dispatches first when agents are saturated. @default 0 */
    priority: z.number().int().min(-1000).max(1000).default(0),
    /** A paused job does not fire. @default false */
    paused: z.boolean().default(false),
  })
  .strict();
export type JobDefinitionInput = z.input<typeof jobDefinitionSchema>;
export type JobDefinition = z.output<typeof jobDefinitionSchema>;

/** Formats zod issues as `path: message` lines, one per issue. */
export function formatIssues(error: z.ZodError, root = ""): string {
  return error.issues
    .map((i) => {
      const path = [root, ...i.path.map(String)].filter(Boolean).join(".");
      return `${path || "(root)"}: ${i.message}`;
    })
    .join("\n");
}
