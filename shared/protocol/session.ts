import * as z from "zod/mini";
import { nativeTargetSchema } from "../update.js";
import {
  count,
  durationMs,
  envelopeShape,
  executionRefShape,
  handlerName,
  id,
  MAX_TAGS,
  maxKeys,
  positive,
  text,
  timestamp,
} from "./envelope.js";

/** NTP's first three timestamps: t0 agent sent, t1 coordinator received, t2 coordinator sent. */
export const clockSampleSchema = z.object({
  t0: timestamp(),
  t1: timestamp(),
  t2: timestamp(),
});
export type ClockSample = z.infer<typeof clockSampleSchema>;

const tagValue = text(128);

/** Agent → coordinator, first message of every connection. */
export const helloSchema = z.object({
  ...envelopeShape,
  type: z.literal("hello"),
  agentId: id(),
  instanceId: id(),
  journalId: id(),
  lastSeq: count(),
  profile: text(64, 1),
  bundle: z.object({
    version: text(64, 1),
    sha256: z.string().check(z.regex(/^([0-9a-f]{64}|dev)$/, "must be 64 hex digits or 'dev'")),
  }),
  handlers: z.array(handlerName()).check(z.maxLength(256)),
  capacity: z.object({
    concurrency: positive(),
    queue: count(),
  }),
  tags: z
    .record(z.string().check(z.regex(/^[A-Za-z0-9._-]{1,64}$/, "bad tag name")), tagValue)
    .check(maxKeys(MAX_TAGS)),
  /**
   * Present when this agent reads batches of commands on its down topic: the largest payload it
   * reads, in bytes. Absent: send it each command as a message of its own.
   */
  batchBytes: z.optional(z.int().check(z.gte(1024))),
  /**
   * What this agent's native addon must be built for: its OS, CPU, C library and Node ABI. The
   * coordinator offers it only bundles built for the same (an `agent.update`). Absent from agents
   * before this field: they are offered none.
   */
  target: z.optional(nativeTargetSchema),
});
export type Hello = z.infer<typeof helloSchema>;

/** Agent → coordinator every `heartbeatMs`; renews the leases of running executions. */
export const heartbeatSchema = z.object({
  ...envelopeShape,
  type: z.literal("heartbeat"),
  instanceId: id(),
  running: z.array(z.object(executionRefShape)).check(z.maxLength(10_000)),
  queued: count(),
  scheduled: count(),
  load: z.number().check(z.gte(0)),
  clockOffset: z.object({
    offsetMs: z.number(),
    uncertaintyMs: z.number().check(z.gte(0)),
  }),
  journal: z.object({
    depth: count(),
    outboxDepth: count(),
  }),
  /**
   * True once the agent has begun to shut down (SIGTERM): it starts nothing new and answers new
   * dispatches `rejected` (`shutting_down`), so the coordinator routes nothing more to it. Absent
   * (or false) otherwise.
   */
  shuttingDown: z.optional(z.boolean()),
  /**
   * Whether the agent wants a clock sample (a `time` answer) for this heartbeat. `false`: its
   * estimate needs none now, and the coordinator sends none. Absent (as from agents before this
   * field) or `true`: answered with `time`.
   */
  time: z.optional(z.boolean()),
  /**
   * True when the agent runs nothing, holds no command and has no report waiting for an ack, and
   * its welcome gave `idleHeartbeatMs`: its next heartbeat may be that far off. Absent (or false)
   * otherwise, and from agents before this field.
   */
  idle: z.optional(z.boolean()),
});
export type Heartbeat = z.infer<typeof heartbeatSchema>;

/** Coordinator → agent in answer to hello. */
export const welcomeSchema = z.object({
  ...envelopeShape,
  type: z.literal("welcome"),
  instanceId: id(),
  heartbeatMs: z.int().check(z.gte(100), z.lte(600_000)),
  clock: clockSampleSchema,
  /**
   * Present when this coordinator reads batches of reports on the up topic (decodeAll): the
   * largest payload it reads, in bytes. Absent: send each report as a message of its own.
   */
  batchBytes: z.optional(z.int().check(z.gte(1024))),
  /**
   * Present when an idle agent may heartbeat less often: while it runs nothing, holds no command
   * and has no report waiting for an ack, its heartbeats may be this far apart (it says `idle` in
   * them); the rest of the time, `heartbeatMs`. Absent: every heartbeat `heartbeatMs` apart.
   */
  idleHeartbeatMs: z.optional(z.int().check(z.gte(100), z.lte(3_600_000))),
});
export type Welcome = z.infer<typeof welcomeSchema>;

/** Coordinator → agent in answer to a heartbeat: one more clock sample. */
export const timeSchema = z.object({
  ...envelopeShape,
  type: z.literal("time"),
  clock: clockSampleSchema,
});
export type Time = z.infer<typeof timeSchema>;

/** Coordinator → agent: every report with `seq` ≤ `upTo` is stored (rule 1). */
export const ackSchema = z.object({
  ...envelopeShape,
  type: z.literal("ack"),
  upTo: count(),
  /**
   * The journal the ack is about (hello's journalId). An agent ignores an ack naming another
   * journal, so an ack meant for a wiped device's old journal never prunes the new one's outbox.
   */
  journalId: z.optional(id()),
  /**
   * Asks the agent to re-send now, in seq order, every report of its outbox with seq > upTo: the
   * coordinator has found a gap (a report it never received), or has restarted.
   */
  replay: z.optional(z.boolean()),
});
export type Ack = z.infer<typeof ackSchema>;

/** Durations are validated where they are used; exported for message builders. */
export { durationMs };
