import { z } from "zod";
import { ERROR_CODES, type ErrorCode } from "../../shared/errors.js";
import { EXEC_STATES, type ExecState } from "../../shared/fsm.js";
import { HANDLER_NAME_PATTERN } from "../../shared/ids.js";
import type { BundleRecord } from "../domain/bundle.js";
import { positiveDurationSchema } from "../domain/duration.js";
import { noZoneProblem, parseIsoInstant } from "../domain/instant.js";
import {
  idSchema,
  instantSchema,
  jobDefinitionSchema,
  paramsSchema,
  tagsSchema,
  triggerSchema,
} from "../domain/job.js";
import { ROLLOUT_STATES, rolloutSpecSchema } from "../domain/rollout.js";
import {
  agentRecordSchema,
  apiTokenRecordSchema,
  executionKindSchema,
  executionRecordSchema,
  identityRecordSchema,
  jobHistoryEntrySchema,
  storedJobSchema,
  timelineEntrySchema,
} from "../store/records.js";

/**
 * The HTTP API's schemas: requests are validated with them, and the OpenAPI document is generated
 * from them. Response schemas are the store's records (store/records.ts), extended where the API
 * shows more of a record than the store keeps.
 */

/**
 * Cross-field checks run even when a field already failed (zod skips them after an aborting
 * issue by default), so that a 400 lists every problem at once. They read fields defensively.
 */

/** A listing's `limit` query parameter: `noun` per page, 1 to `max`, `def` when not given. */
export function pageLimit(noun: string, max: number, def: number) {
  return z.coerce
    .number()
    .int()
    .min(1)
    .max(max)
    .default(def)
    .meta({ description: `${noun} per page (1-${max}).` });
}

/** A listing's `cursor` query parameter: the previous page's nextCursor. */
export function pageCursor() {
  return z
    .string()
    .min(1)
    .max(512)
    .optional()
    .meta({ description: "The previous page's nextCursor." });
}

export const EVEN_WITH_ISSUES = {
  when: (p: { value: unknown }) => typeof p.value === "object" && p.value !== null,
};

const ERROR_CODE_NAMES = Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]];

export const errorSchema = z
  .object({
    error: z.object({
      code: z.enum(ERROR_CODE_NAMES),
      message: z.string(),
      /** Every problem found in the request, each with the field's path. */
      issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
    }),
  })
  .meta({
    description: "An error: its stable code, a message, and for a bad request every issue.",
  });

// --- path parameters -------------------------------------------------------------------------

export const idParams = z.object({ id: idSchema.meta({ description: "The resource's id." }) });
export const eventParams = z.object({
  name: idSchema.meta({ description: "The event name, as in ax/v1/events/{name}." }),
});

// --- query values ------------------------------------------------------------------------------

/**
 * An instant in a query string: UTC milliseconds or an ISO 8601 time with its zone, as in a body
 * (domain/instant.ts): a time without one is refused, never read in the coordinator's zone.
 */
const queryInstant = z
  .string()
  .transform((value, ctx) => {
    const ms = /^\d+(\.\d+)?$/.test(value) ? Number(value) : parseIsoInstant(value);
    if (ms === undefined || !Number.isFinite(ms)) {
      ctx.addIssue({
        code: "custom",
        message:
          noZoneProblem(value) ??
          `must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got ${JSON.stringify(value)})`,
      });
      return z.NEVER;
    }
    return ms;
  })
  .meta({ description: "UTC milliseconds or an ISO 8601 time with Z or an offset." });

const statesList = z
  .string()
  .transform((value, ctx) => {
    const states = value.split(",").map((s) => s.trim());
    const bad = states.filter((s) => !(EXEC_STATES as readonly string[]).includes(s));
    if (bad.length > 0) {
      ctx.addIssue({
        code: "custom",
        message: `${bad.map((s) => JSON.stringify(s)).join(", ")} ${bad.length === 1 ? "is not a state" : "are not states"}; states are ${EXEC_STATES.join(", ")}`,
      });
      return z.NEVER;
    }
    return states as ExecState[];
  })
  .meta({ description: `Comma-separated states: ${EXEC_STATES.join(", ")}.` });

export const EXECUTIONS_PAGE_MAX = 500;

export const executionsQuery = z
  .object({
    job: idSchema.optional().meta({ description: "Only this job's executions." }),
    state: statesList.optional(),
    agent: idSchema
      .optional()
      .meta({ description: "Only executions that ran (or wait to run) on this agent." }),
    kind: executionKindSchema.optional(),
    from: queryInstant.optional().meta({ description: "Created at or after this time." }),
    to: queryInstant.optional().meta({ description: "Created before this time." }),
    limit: pageLimit("Executions", EXECUTIONS_PAGE_MAX, 50),
    cursor: pageCursor(),
  })
  .strict()
  .superRefine((q, ctx) => {
    if (typeof q.from === "number" && typeof q.to === "number" && q.to <= q.from) {
      ctx.addIssue({ code: "custom", path: ["to"], message: "must be after from" });
    }
  }, EVEN_WITH_ISSUES);

export const PREVIEW_MAX = 1000;

const previewCount = z.coerce
  .number()
  .int()
  .min(1)
  .max(PREVIEW_MAX)
  .default(10)
  .meta({ description: "How many fire times (1-1000)." });

export const jobPreviewQuery = z
  .object({
    n: previewCount,
    after: queryInstant
      .optional()
      .meta({ description: "Fire times after this one; now if not given." }),
  })
  .strict();

// --- request bodies ----------------------------------------------------------------------------

/** A job update: the definition, its `id` optional (the path names the job). */
export const jobUpdateBody = jobDefinitionSchema.partial({ id: true });

export const previewBody = z
  .object({
    trigger: triggerSchema,
    n: previewCount,
    after: instantSchema
      .optional()
      .meta({ description: "Fire times after this one; now if not given." }),
  })
  .strict();

export const commandBody = z
  .object({
    agentId: idSchema.optional().meta({
      description:
        "The agent to run it on: one the coordinator knows (enrolled, or connected once), unless queue is true.",
    }),
    selector: z
      .object({
        tags: tagsSchema.refine((t) => Object.keys(t).length > 0, "give at least one tag"),
      })
      .strict()
      .optional()
      .meta({
        description:
          "Every known agent whose tags include all of these and that offers the handler gets one.",
      }),
    handler: z
      .string()
      .regex(HANDLER_NAME_PATTERN, "must be a handler name such as echo or mqtt.publish"),
    params: paramsSchema.default({}),
    at: instantSchema.optional().meta({ description: "When to run it; now if not given." }),
    deadline: instantSchema.optional().meta({
      description: "Latest start; past it the command is EXPIRED. at + 30 s if not given.",
    }),
    timeout: positiveDurationSchema
      .optional()
      .meta({ description: "Longest run, at least 1ms. 30s if not given." }),
    priority: z.number().int().min(-1000).max(1000).default(0),
    queue: z
      .boolean()
      .default(false)
      .meta({
        description:
          "With agentId: create the command even if the coordinator does not know that agent yet; " +
          "it runs if the agent enrols and connects before the deadline, else ends EXPIRED.",
      }),
  })
  .strict()
  .superRefine((c, ctx) => {
    if ((c.agentId === undefined) === (c.selector === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: ["agentId"],
        message: "give exactly one of agentId and selector",
      });
    }
    if (c.queue === true && c.selector !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["queue"],
        message: "applies to an agentId only: a selector matches known agents",
      });
    }
    if (typeof c.at === "number" && typeof c.deadline === "number" && c.deadline <= c.at) {
      ctx.addIssue({ code: "custom", path: ["deadline"], message: "must be after at" });
    }
  }, EVEN_WITH_ISSUES);

export const eventBody = z
  .object({
    payload: paramsSchema
      .default({})
      .meta({ description: "Merged into the params of every job the event fires." }),
  })
  .strict();

// --- responses ---------------------------------------------------------------------------------

const coordinatorMemberSchema = z.object({
  id: z.string(),
  epoch: z.number().int(),
  joinedAt: z.number(),
  renewedAt: z.number(),
  leaseUntil: z.number().meta({
    description: "Its membership lapses then (the store's clock, UTC ms) unless renewed.",
  }),
  info: z.record(z.string(), z.unknown()).meta({
    description:
      "What it reports of itself: version, host, role, firing (`cluster.firing`), dispatch (`cluster.dispatch`), fired (firings it recorded since it started), agentsOnline (of the agents it handles), agentsHandled (with dispatch `shared`: the agents of its share, online or not), leasesHeld (executions its agents hold), storeRoundTripMs (its lag to the database).",
  }),
});

export const healthSchema = z.object({
  status: z.literal("ok"),
  version: z.string(),
  uptimeS: z.number(),
  cluster: z
    .object({
      id: z.string().meta({ description: "This coordinator's `cluster.id`." }),
      epoch: z.number().int().meta({ description: "Its epoch: one more at each start." }),
      role: z.enum(["active", "standby", "fenced"]),
      firing: z.enum(["active", "shared"]).meta({
        description:
          "`cluster.firing`: the active coordinator fires every job, or each live one its share.",
      }),
      dispatch: z.enum(["active", "shared"]).meta({
        description:
          "`cluster.dispatch`: the active coordinator dispatches and takes every agent's reports, or each live one those of its share.",
      }),
      clockOffsetMs: z.number().meta({
        description: "The database's clock minus this process's, as last measured.",
      }),
      coordinators: z.array(coordinatorMemberSchema).meta({
        description:
          "Every live coordinator on the store, oldest first: the first is the active one (with `cluster.dispatch` `shared`, every one is active, and the first also runs rollouts and retention).",
      }),
    })
    .optional()
    .meta({ description: "Only on a PostgreSQL store that several coordinators share." }),
});

export const readinessSchema = z.object({
  ready: z.boolean(),
  store: z.boolean(),
  mqtt: z.boolean(),
  role: z.enum(["active", "standby", "fenced"]).meta({
    description: "Ready only when active: a standby or fenced coordinator answers 503.",
  }),
});

/**
 * A job as the API shows it: as stored (paused is its state). While it is paused, `nextFireAt`
 * is null: it fires nothing until resumed.
 */
export const jobSchema = storedJobSchema;

/** The most jobs one page of the listing holds. */
export const JOBS_PAGE_MAX = 1000;

export const jobsQuery = z
  .object({
    limit: z.coerce
      .number()
      .int()
      .min(1)
      .max(JOBS_PAGE_MAX)
      .default(500)
      .meta({ description: `Jobs per page (1-${JOBS_PAGE_MAX}).` }),
    cursor: idSchema.optional().meta({ description: "The previous page's nextCursor." }),
  })
  .strict();

/** A page's pointer to the next one (executions and jobs are paged alike). */
const nextCursorSchema = z
  .string()
  .nullable()
  .meta({ description: "Pass as cursor for the next page; null on the last page." });

export const jobListSchema = z.object({
  items: z.array(jobSchema),
  nextCursor: nextCursorSchema,
});

export const previewSchema = z.object({
  times: z.array(z.number()).meta({ description: "Nominal fire times, UTC milliseconds." }),
  tz: z
    .string()
    .optional()
    .meta({ description: "The IANA time zone the times are reckoned in: a cron trigger's tz." }),
});

export const executionIdsSchema = z.object({ executionIds: z.array(z.string()) });

/** An execution as stored. */
export const executionSchema = executionRecordSchema;

export const executionPageSchema = z.object({
  items: z.array(executionSchema),
  nextCursor: nextCursorSchema,
});

/** One entry of an execution's timeline, as stored. */
export { timelineEntrySchema };

export const executionDetailSchema = z.object({
  execution: executionSchema,
  timeline: z.array(timelineEntrySchema),
});

export const retrySchema = z.object({ executionId: z.string(), retryOf: z.string() });

/** An agent as the API shows it: its record, and what the registry knows of it now. */
export const agentSchema = agentRecordSchema.extend({
  live: z.boolean().meta({ description: "Online and not backing off after a busy answer." }),
  inFlight: z.number().int().meta({ description: "Executions dispatched to it and not ended." }),
});

/** The most agents one page of the fleet listing holds. */
export const AGENTS_PAGE_MAX = 1000;

/** `site=north,rack=1`: agents whose tags include all of these. */
const tagFilter = z
  .string()
  .max(4096)
  .transform((value, ctx) => {
    const tags: Record<string, string> = {};
    for (const pair of value.split(",")) {
      const eq = pair.indexOf("=");
      const key = pair.slice(0, eq).trim();
      if (eq <= 0 || key === "") {
        ctx.addIssue({
          code: "custom",
          message: `must be KEY=VALUE pairs separated by commas, got "${pair}"`,
        });
        return z.NEVER;
      }
      if (Object.hasOwn(tags, key)) {
        // An agent has one value per tag: two for one key would match nothing, or silently
        // only the last.
        ctx.addIssue({ code: "custom", message: `names tag "${key}" twice` });
        return z.NEVER;
      }
      tags[key] = pair.slice(eq + 1).trim();
    }
    return tags;
  })
  .meta({ description: "Agents whose tags include all of these: KEY=VALUE[,KEY=VALUE…]." });

export const agentsQuery = z
  .object({
    status: z.enum(["online", "offline"]).optional(),
    tag: tagFilter.optional(),
    profile: z.string().min(1).max(128).optional().meta({ description: "The firmware profile." }),
    version: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .meta({ description: "The bundle version the agent runs (`dev` from sources)." }),
    handler: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .meta({ description: "Only agents that offer this handler." }),
    q: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .meta({ description: "A part of the agent id, any case." }),
    limit: z.coerce
      .number()
      .int()
      .min(1)
      .max(AGENTS_PAGE_MAX)
      .default(AGENTS_PAGE_MAX)
      .meta({ description: `Agents per page (1-${AGENTS_PAGE_MAX}).` }),
    cursor: idSchema
      .optional()
      .meta({ description: "The previous page's nextCursor (the last agent id it held)." }),
  })
  .strict();

export const agentListSchema = z.object({
  items: z.array(agentSchema).meta({ description: "By agent id." }),
  nextCursor: z
    .string()
    .nullable()
    .meta({ description: "Pass as cursor for the next page; null on the last page." }),
  total: z.number().int().meta({ description: "Agents matching the filters, on all pages." }),
  counts: z
    .object({ online: z.number().int(), offline: z.number().int() })
    .meta({ description: "Of the agents matching the filters, how many are online and offline." }),
});

export const commandResultSchema = z.object({
  executionIds: z.array(z.string()),
  targets: z.array(z.object({ agentId: z.string(), executionId: z.string() })),
});

export const eventResultSchema = z.object({
  event: z.string(),
  fired: z.number().int().meta({ description: "How many jobs the event fired." }),
});

/** An API token as the API shows it: its record, never its digest. */
export const tokenViewSchema = apiTokenRecordSchema.omit({ digest: true });

/** An agent's enrolment, as stored. */
export const identitySchema = identityRecordSchema;

/** One entry of a job's history, as stored. */
export { jobHistoryEntrySchema };

// --- the API's answers as types, for its clients (the CLI) --------------------------------------

export type JobView = z.output<typeof jobSchema>;
export type JobList = z.output<typeof jobListSchema>;
export type ExecutionView = z.output<typeof executionSchema>;
export type ExecutionPageView = z.output<typeof executionPageSchema>;
export type ExecutionDetail = z.output<typeof executionDetailSchema>;
export type RetryResult = z.output<typeof retrySchema>;
export type AgentView = z.output<typeof agentSchema>;
export type AgentList = z.output<typeof agentListSchema>;
export type CommandResult = z.output<typeof commandResultSchema>;
export type TokenView = z.output<typeof tokenViewSchema>;
export type IdentityView = z.output<typeof identitySchema>;

// --- rollouts (docs/rollouts.md) ----------------------------------------------------------------

export const rolloutBody = rolloutSpecSchema;

export const rolloutsQuery = z
  .object({
    state: z.enum(ROLLOUT_STATES).optional(),
    limit: pageLimit("Rollouts", 500, 50),
    cursor: pageCursor(),
  })
  .strict();

export const rolloutActionBody = z
  .object({
    reason: z.string().min(1).max(1024).optional().meta({
      description: "Why, for the rollout's timeline.",
    }),
  })
  .strict();

const countsByState = z.record(z.string(), z.number().int());

export const rolloutSchema = z.object({
  id: z.string(),
  description: z.string().nullable(),
  version: z.number().int(),
  state: z.enum(ROLLOUT_STATES),
  selector: z.record(z.string(), z.unknown()),
  command: z.record(z.string(), z.unknown()),
  rate: z.record(z.string(), z.unknown()),
  waves: z.array(z.object({ percent: z.number(), soak: z.number() })),
  abort: z.record(z.string(), z.unknown()).nullable(),
  endsAt: z.number().nullable(),
  wave: z.number().int().meta({ description: "The index of the wave being reached." }),
  soakUntil: z.number().nullable(),
  createdAt: z.number(),
  updatedAt: z.number(),
  startedAt: z.number().nullable(),
  finishedAt: z.number().nullable(),
  createdBy: z.string(),
  reason: z.string().nullable(),
  settled: z.boolean().meta({
    description: "Ended, and every execution it created ended too.",
  }),
  progress: z.object({
    matching: z.number().int(),
    reached: z.number().int(),
    byState: countsByState,
    succeeded: z.number().int(),
    failed: z.number().int(),
    open: z.number().int(),
    waves: z.array(
      z.object({
        percent: z.number(),
        soak: z.number(),
        cap: z.number().int(),
        reached: z.number().int(),
        byState: countsByState,
      }),
    ),
  }),
});

export const rolloutListSchema = z.object({
  items: z.array(rolloutSchema),
  nextCursor: z.string().nullable(),
});

export const rolloutDetailSchema = z.object({
  rollout: rolloutSchema,
  timeline: z.array(
    z.object({
      seq: z.number().int(),
      at: z.number(),
      fromState: z.enum(ROLLOUT_STATES).nullable(),
      toState: z.enum(ROLLOUT_STATES),
      event: z.string(),
      actor: z.string().nullable(),
      reason: z.string().nullable(),
      detail: z.record(z.string(), z.unknown()).nullable(),
    }),
  ),
});

// --- published bundles (docs/bundles.md, "Publishing a bundle") ---------------------------------

const sha256Schema = z
  .string()
  .regex(/^[0-9a-f]{64}$/, "must be a sha256: 64 lowercase hex digits")
  .meta({ description: "The sha256 of the bundle's archive (NAME.tar.gz), lowercase hex." });

export const sha256Params = z.object({ sha256: sha256Schema });

/** Bundles per page, at most. */
export const BUNDLES_PAGE_MAX = 500;

export const bundlesQuery = z
  .object({
    profile: z
      .string()
      .min(1)
      .max(64)
      .optional()
      .meta({ description: "Only bundles built from this firmware profile." }),
    limit: pageLimit("Bundles", BUNDLES_PAGE_MAX, 50),
    cursor: pageCursor(),
  })
  .strict();

/** A published bundle (coordinator/domain/bundle.ts), without its archive. */
export const bundleSchema = z.object({
  sha256: z.string(),
  profile: z.string(),
  version: z.string().meta({ description: "The ax version it was built from." }),
  target: z.object({
    platform: z.string(),
    arch: z.string(),
    libc: z.string(),
    nodeAbi: z.number().int().nullable(),
  }),
  bytes: z.number().int().meta({ description: "The archive's size in bytes." }),
  agentSha256: z.string().meta({ description: "The sha256 of its agent file." }),
  keyId: z.string().meta({ description: "The id of the key that signed it." }),
  builtAt: z.number(),
  publishedAt: z.number(),
  publishedBy: z.string().meta({ description: "The name of the token that published it." }),
});

export const bundleListSchema = z.object({
  items: z.array(bundleSchema),
  nextCursor: z.string().nullable(),
});

// The response schema and the domain record must stay one shape.
type SameShape<A, B> = [A] extends [B] ? ([B] extends [A] ? true : never) : never;
const bundleShapeMatches: SameShape<z.output<typeof bundleSchema>, BundleRecord> = true;
void bundleShapeMatches;
