import { z } from "zod";
import { EXEC_STATES, type ExecSnapshot } from "../../shared/fsm.js";
import { PRESENCE_STATUSES } from "../../shared/protocol/presence.js";
import { nativeTargetSchema } from "../../shared/update.js";
import { API_ROLES } from "../config.js";
import { jobDefinitionSchema } from "../domain/job.js";

/*
 * The records the store keeps and the API shows, each defined once (issue 17). The store port's
 * types are inferred from these schemas, the HTTP response schemas extend or pick them, and the
 * CLI reads the API's answers as those types. Times are UTC milliseconds throughout, in the store
 * and on the wire alike.
 *
 * These schemas describe what is stored: the store does not parse its rows with them (a row is
 * written by this build's own code), a test checks that it reads each back in exactly this shape.
 * They are in the form the OpenAPI document shows.
 */

const stateSchema = z.enum(EXEC_STATES);
const jsonObject = z.record(z.string(), z.unknown());
const stringTags = z.record(z.string(), z.string());
const nullableMs = z.number().nullable();

/** An execution's two kinds: fired by a job, or a device command sent through the API. */
export const EXECUTION_KINDS = ["job", "command"] as const;
export const executionKindSchema = z.enum(EXECUTION_KINDS);
export type ExecutionKind = z.output<typeof executionKindSchema>;

/** An execution as stored, with the state machine's fields (shared/fsm.ts `ExecSnapshot`). */
export const executionRecordSchema = z.object({
  id: z.string(),
  kind: executionKindSchema,
  jobId: z.string().nullable(),
  jobVersion: z.number().int().nullable(),
  handler: z.string(),
  params: jsonObject,
  targetAgentId: z
    .string()
    .nullable()
    .meta({ description: "For commands: the agent it must run on." }),
  agentId: z.string().nullable(),
  state: stateSchema,
  round: z.number().int(),
  attempt: z.number().int(),
  maxAttempts: z.number().int(),
  dispatches: z.number().int(),
  maxDispatches: z.number().int(),
  fireAt: z.number().meta({
    description: "The nominal time (jobs) or requested time (commands); the agent fires at it.",
  }),
  deadline: z.number(),
  timeoutMs: z.number(),
  dispatchTimeoutMs: z.number(),
  priority: z.number().int(),
  retryBaseMs: z.number(),
  retryCapMs: z.number(),
  createdAt: z.number(),
  updatedAt: z.number(),
  dispatchedAt: nullableMs,
  startedAt: nullableMs,
  finishedAt: nullableMs,
  lateMs: nullableMs,
  nextAttemptAt: nullableMs,
  result: jsonObject.nullable(),
  message: z.string().nullable().meta({
    description:
      "Error or status text, capped by the store at its byte limit (never inside a character).",
  }),
  messageBytes: z.number().int().nullable().meta({
    description:
      "The size in UTF-8 bytes of message as written, before the cap; null when there is none.",
  }),
  scheduledFor: nullableMs.meta({
    description: "The nominal time a job execution fired for (null for commands and manual runs).",
  }),
  shardIndex: z
    .number()
    .int()
    .nullable()
    .meta({ description: "This execution's shard of its firing, when the job is sharded." }),
  shardTotal: z.number().int().nullable(),
  groupKey: z.string().nullable().meta({
    description: "Executions with the same group key run one at a time across the fleet.",
  }),
  tags: stringTags.meta({ description: "Agent tags required to run it (all must match)." }),
});
/** An execution row. Its state machine's fields make it an {@link ExecSnapshot}. */
export type ExecutionRecord = z.output<typeof executionRecordSchema>;

/** One entry of an execution's timeline. */
export const timelineEntrySchema = z.object({
  executionId: z.string(),
  seq: z.number().int(),
  at: z.number(),
  event: z.string(),
  fromState: stateSchema.nullable(),
  toState: stateSchema,
  round: z.number().int(),
  agentId: z.string().nullable(),
  reason: z.string().nullable().meta({
    description:
      "Why, when the event carried a reason (detail.reason): an overlap skip, a lease fail-over…",
  }),
  detail: jsonObject.nullable().meta({
    description:
      "As written, or { truncated: true, bytes } when its JSON was over the store's byte limit.",
  }),
  actor: z
    .string()
    .nullable()
    .meta({ description: "The API token (its name) that asked for it: cancel, retry, command." }),
});
export type TimelineEntry = z.output<typeof timelineEntrySchema>;

/** What an agent's hello and heartbeats tell the registry. */
export const agentRecordSchema = z.object({
  agentId: z.string(),
  instanceId: z.string(),
  journalId: z.string(),
  ackedSeq: z
    .number()
    .int()
    .meta({ description: "Highest contiguous report seq stored for this journal." }),
  status: z.enum(PRESENCE_STATUSES),
  profile: z.string(),
  bundleVersion: z.string(),
  bundleSha256: z.string(),
  target: z.optional(nativeTargetSchema).meta({
    description:
      "What its native addon must be built for (hello.target): platform, arch, libc, nodeAbi. Absent from agents that do not report it; they are offered no agent.update.",
  }),
  handlers: z.array(z.string()),
  concurrency: z.number().int(),
  queue: z.number().int(),
  tags: stringTags,
  connectedAt: z.number(),
  lastSeenAt: z.number(),
  clockOffsetMs: z.number(),
  clockUncertaintyMs: z.number(),
  load: z.number(),
  journalDepth: z.number().int(),
  outboxDepth: z.number().int(),
});
export type AgentRecord = z.output<typeof agentRecordSchema>;

/** A job as stored: its current definition and version, and when it fires next. */
export const storedJobSchema = z.object({
  id: z.string(),
  version: z.number().int(),
  definition: jobDefinitionSchema,
  nextFireAt: z.number().nullable().meta({
    description:
      "Next nominal fire time, or null when the trigger is exhausted. Kept while the job is paused: then it is the first nominal time not fired, which resuming hands to the misfire policy.",
  }),
  paused: z.boolean().meta({
    description: "A paused job fires nothing. State, not definition: pausing makes no version.",
  }),
  createdAt: z.number(),
  updatedAt: z.number(),
  updatedBy: z
    .string()
    .nullable()
    .meta({ description: "The API token (its name), or system, that wrote this version." }),
});
export type StoredJob = z.output<typeof storedJobSchema>;

/** What a change to a job was, in its history. */
export const JOB_ACTIONS = [
  "created",
  "updated",
  "paused",
  "resumed",
  "deleted",
  "triggered",
] as const;
export type JobAction = (typeof JOB_ACTIONS)[number];

/** One entry of a job's history: who changed it, or fired it by hand, and when. */
export const jobHistoryEntrySchema = z.object({
  jobId: z.string(),
  seq: z.number().int().meta({ description: "1, 2, … per job, in order." }),
  at: z.number(),
  action: z.enum(JOB_ACTIONS),
  version: z.number().int().nullable().meta({
    description: "The version written (created…resumed), the one deleted or the one fired.",
  }),
  actor: z.string().meta({
    description: "The API token's name that did it, or system (the jobs file, the engine).",
  }),
  detail: jsonObject
    .nullable()
    .meta({ description: "Such as the execution ids a trigger created." }),
});
export type JobHistoryEntry = z.output<typeof jobHistoryEntrySchema>;

/**
 * An API token made through the API (`POST /api/tokens`). Only the SHA-256 digest of the token
 * is kept, so a copy of the store is no credential.
 */
export const apiTokenRecordSchema = z.object({
  name: z.string(),
  role: z.enum(API_ROLES),
  digest: z.string().meta({ description: "SHA-256 of the token, hex." }),
  createdAt: z.number(),
  createdBy: z.string().meta({ description: "The name of the token that created it." }),
  lastUsedAt: z.number().nullable().meta({ description: "Kept to the minute." }),
});
export type ApiTokenRecord = z.output<typeof apiTokenRecordSchema>;

/**
 * An agent's enrolment (docs/security.md). Its keys are derived from the fleet key and
 * `generation`, never stored.
 */
export const identityRecordSchema = z.object({
  agentId: z.string(),
  generation: z
    .number()
    .int()
    .meta({ description: "Key generation: 1 at enrolment, one more per rotation." }),
  tags: stringTags.meta({
    description: "Tags the coordinator routes by; an enrolled agent's hello cannot change them.",
  }),
  status: z.enum(["enrolled", "revoked"]),
  enrolledAt: z.number(),
  updatedAt: z.number().meta({ description: "When it was last enrolled, rotated or revoked." }),
  actor: z.string().meta({ description: "Which API token (its name) made the last change." }),
});
export type IdentityRecord = z.output<typeof identityRecordSchema>;

// The state machine reads and writes an execution's snapshot fields: a record must be one.
const recordIsSnapshot = (r: ExecutionRecord): ExecSnapshot => r;
void recordIsSnapshot;
