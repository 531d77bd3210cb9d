import * as z from "zod/mini";
import {
  count,
  durationMs,
  envelopeShape,
  executionRefShape,
  handlerName,
  jsonObject,
  seqShape,
  text,
  timestamp,
} from "./envelope.js";

/** Coordinator → agent: run `handler` at `fireAt`, not after `deadline`. */
export const dispatchSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  type: z.literal("dispatch"),
  attempt: z.int().check(z.gte(1)),
  handler: handlerName(),
  params: jsonObject(),
  fireAt: timestamp(),
  deadline: timestamp(),
  // A timer's longest delay (Node's, as most runtimes'): a longer one would fire at once.
  timeoutMs: z.int().check(z.gte(1), z.lte(2_147_483_647)),
  shard: z.optional(
    z.object({ index: count(), total: z.int().check(z.gte(1)) }).check(
      z.refine((s) => s.index < s.total, {
        message: "index must be less than total",
        path: ["index"],
      }),
    ),
  ),
  priority: z.int().check(z.gte(-1000), z.lte(1000)),
  sig: z.optional(text(1024)),
});
export type Dispatch = z.infer<typeof dispatchSchema>;

/** Coordinator → agent: stop a scheduled or running execution (rule 8). */
export const cancelSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  type: z.literal("cancel"),
});
export type Cancel = z.infer<typeof cancelSchema>;

/** Coordinator → agent: what do you know of this execution? */
export const querySchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  type: z.literal("query"),
});
export type Query = z.infer<typeof querySchema>;

/** Stable reason codes for `rejected` (DESIGN §5). */
export const REJECT_REASONS = [
  "unknown_handler",
  "invalid_params",
  "invalid_dispatch",
  "journal_full",
  "shutting_down",
  "bad_signature",
] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

export const acceptedSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("accepted"),
});
export type Accepted = z.infer<typeof acceptedSchema>;

export const busySchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("busy"),
});
export type Busy = z.infer<typeof busySchema>;

export const rejectedSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("rejected"),
  reason: z.enum(REJECT_REASONS),
  message: z.optional(text(4096)),
});
export type Rejected = z.infer<typeof rejectedSchema>;

export const startedSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("started"),
  startedAt: timestamp(),
  lateMs: durationMs(),
});
export type Started = z.infer<typeof startedSchema>;

export const progressSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("progress"),
  percent: z.optional(z.number().check(z.gte(0), z.lte(100))),
  note: z.optional(text(1024)),
});
export type Progress = z.infer<typeof progressSchema>;

export const OUTCOMES = [
  "succeeded",
  "failed",
  "timed_out",
  "expired",
  "canceled",
  "interrupted",
] as const;
export type Outcome = (typeof OUTCOMES)[number];

export const finishedSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("finished"),
  outcome: z.enum(OUTCOMES),
  retryable: z.boolean(),
  message: text(4096),
  result: z.optional(jsonObject()),
  startedAt: z.optional(timestamp()),
  finishedAt: timestamp(),
  /**
   * With outcome `interrupted`: whether the handler had begun (`in_handler`: its side effects may
   * have happened, in part) or not (`before_handler`: nothing of it ran). Absent otherwise.
   */
  interruptedPhase: z.optional(z.enum(["before_handler", "in_handler"])),
});
export type Finished = z.infer<typeof finishedSchema>;

export const LOCAL_STATES = [
  "scheduled",
  "queued",
  "running",
  "succeeded",
  "failed",
  "timed_out",
  "expired",
  "canceled",
  "interrupted",
  "unknown",
] as const;
export type LocalState = (typeof LOCAL_STATES)[number];

export const stateSchema = z.object({
  ...envelopeShape,
  ...executionRefShape,
  ...seqShape,
  type: z.literal("state"),
  localState: z.enum(LOCAL_STATES),
  reason: z.optional(text(256)),
});
export type State = z.infer<typeof stateSchema>;
