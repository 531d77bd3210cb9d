import type { ExecSnapshot, ExecState } from "../../shared/fsm.js";
import type { BundlePage, BundleRecord } from "../domain/bundle.js";
import type { JobDefinition } from "../domain/job.js";
import type {
  RolloutEvent,
  RolloutRecord,
  RolloutState,
  RolloutTarget,
} from "../domain/rollout.js";
import type {
  AgentRecord,
  ApiTokenRecord,
  ExecutionKind,
  ExecutionRecord,
  IdentityRecord,
  JobHistoryEntry,
  StoredJob,
  TimelineEntry,
} from "./records.js";

// The records are defined once, as zod schemas, in records.ts; the port speaks in their types.
export type {
  AgentRecord,
  ApiTokenRecord,
  ExecutionKind,
  ExecutionRecord,
  IdentityRecord,
  JobAction,
  JobHistoryEntry,
  StoredJob,
  TimelineEntry,
} from "./records.js";

/** A page of jobs; `nextCursor` is null on the last page. */
export interface JobPage {
  items: StoredJob[];
  nextCursor: string | null;
}

/** Who changes a job, for its history. */
export interface JobChange {
  actor: string;
  /**
   * The version the writer read (0: the job must not exist yet). When given and the stored job is
   * at another version, nothing is written and the call fails with AX_STORE_CONFLICT: of two
   * operators editing one job, one wins and the other is told.
   */
  expectedVersion?: number;
}

/**
 * A coordinator sharing the store, as the store records it. Times are the store's clock
 * ({@link Store.clockNow}), so coordinator clocks may disagree without effect.
 */
/** What {@link Store.watchWork} says changed. */
export type WorkKind = "executions" | "jobs" | "access";

export interface CoordinatorRecord {
  id: string;
  /** One more each time this id joins: it fences the writes of the coordinator's earlier lives. */
  epoch: number;
  joinedAt: number;
  renewedAt: number;
  /** Its membership lapses at this time unless renewed; then others take over its claims. */
  leaseUntil: number;
  /** What it reports of itself (version, host, what it holds), shown by /api/health. */
  info: Record<string, unknown>;
}

/** Claims for one coordinator among several: see {@link DueOptions.claim}. */
export interface DueClaim {
  /** The claiming coordinator's id (its membership, {@link Store.joinCoordinators}). */
  holder: string;
  /** How long the claim holds, by the store's clock. */
  ttlMs: number;
}

/** Fields a new execution may leave out (they default to null / {}). */
type OptionalOnCreate = "scheduledFor" | "shardIndex" | "shardTotal" | "groupKey" | "tags";

/** A new execution (state PENDING, round 0, attempt 1). */
export type NewExecution = Omit<
  ExecutionRecord,
  | "state"
  | "round"
  | "attempt"
  | "dispatches"
  | "updatedAt"
  | "agentId"
  | "dispatchedAt"
  | "startedAt"
  | "finishedAt"
  | "lateMs"
  | "nextAttemptAt"
  | "result"
  | "message"
  | "messageBytes"
  | OptionalOnCreate
> &
  Partial<Pick<ExecutionRecord, OptionalOnCreate>>;

/** A webhook alert and how its delivery went. */
export interface AlertRecord {
  id: string;
  /** execution.failed, execution.timed_out, execution.expired, fire.missed, agent.offline */
  kind: string;
  url: string;
  payload: Record<string, unknown>;
  status: "pending" | "delivered" | "failed";
  attempts: number;
  lastError: string | null;
  createdAt: number;
  updatedAt: number;
}

/** How far ahead {@link Store.listDue} looks for device commands, and whom it passes over. */
export interface DueOptions {
  /**
   * Device commands (kind `command`) are due for dispatch from this far on: as soon as they are
   * known, up to the horizon. @default pendingBy
   */
  commandsBy?: number;
  /** Commands aimed at these agents are left out of `pending` (offline, or shutting down), unless past their deadline (to be expired). */
  skipTargets?: readonly string[];
  /**
   * Instead of {@link skipTargets}: of the commands, `pending` holds only those aimed at these
   * agents (the ones in reach), and those past their deadline (to be expired), whoever they are
   * for; executions with no target (a job's, routed at dispatch) are in it as ever. A
   * dispatcher with fewer agents in reach than out of reach passes this: the store then reads
   * the commands of those few agents through an index by target, instead of passing over every
   * command waiting for an agent out of reach, which at 100,000 of them took tens of ms a read.
   * Commands for agents the dispatcher does not know (queued for an agent still to come) are not
   * in it until their deadline: no agent could take them. Ignored when `skipTargets` is given.
   */
  onlyTargets?: readonly string[];
  /**
   * Several coordinators on one store: every row returned is claimed for `holder` until the
   * store's clock plus `ttlMs`, and rows another holder claims (claim not expired) are passed
   * over, so one row is never handed to two coordinators at once (PostgreSQL: `FOR UPDATE SKIP
   * LOCKED`). A claim only saves duplicate work: the compare-and-set of
   * {@link Store.applyTransition} stays what makes a dispatch happen once.
   */
  claim?: DueClaim;
  /**
   * At most this many `pending` rows (the other lists keep `limit`): a dispatcher with room for
   * only a few more dispatches reads only as many; 0 reads none. @default limit
   */
  pendingLimit?: number;
  /**
   * false: `retry` and `dispatchTimedOut` are not read (both empty). They come due by the clock,
   * at a retry's time or a dispatch timeout's end, not by what a pass did, so a dispatcher that
   * runs a pass after every fire and burst of reports reads them at a pace of its own.
   * @default true
   */
  timeouts?: boolean;
}

/**
 * The dispatcher's order of due work: higher priority first, then earlier fire time, then
 * creation, then id (for rows a store gathered from several reads, or an UPDATE … RETURNING
 * gave back unordered).
 */
export function dueOrder(a: ExecutionRecord, b: ExecutionRecord): number {
  return (
    b.priority - a.priority ||
    a.fireAt - b.fireAt ||
    a.createdAt - b.createdAt ||
    (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
  );
}

/** The limit of `pending` in {@link Store.listDue}: `limit` (negative: none), or less. */
export function pendingLimitOf(limit: number, options: DueOptions): number {
  const p = options.pendingLimit;
  if (p === undefined) return limit;
  return limit < 0 ? p : Math.min(limit, p);
}

/** What overlap, group and concurrency rules need of an execution. */
export type PeerRecord = Pick<
  ExecutionRecord,
  "id" | "state" | "createdAt" | "jobId" | "scheduledFor" | "shardTotal"
>;

/**
 * What routing remembers of a job's past executions (STICKY's agent, SHARD_BROADCAST's
 * placement): an execution that has had an agent, with its state and shard.
 */
export type RoutedRecord = Pick<ExecutionRecord, "agentId" | "state" | "shardIndex" | "shardTotal">;

/** Fields a transition may change besides the snapshot. */
export type ExecutionPatch = Partial<
  Pick<
    ExecutionRecord,
    | "agentId"
    | "dispatchedAt"
    | "startedAt"
    | "finishedAt"
    | "lateMs"
    | "nextAttemptAt"
    | "result"
    | "message"
    | "fireAt"
    | "deadline"
  >
>;

/** A transition decided by the domain, to be written if the execution is still as it was read. */
export interface TransitionWrite {
  executionId: string;
  /** The state and round the decision was based on (compare-and-set). */
  expected: { state: ExecState; round: number };
  next: ExecSnapshot;
  patch: ExecutionPatch;
  at: number;
  event: string;
  detail?: Record<string, unknown>;
  /**
   * The agent the timeline entry names: the patch's, else the execution's current one. Callers
   * that read the execution pass it; without it the store reads it.
   */
  agentId?: string | null;
  /**
   * When one write folds several transitions (reports of one burst about one execution), their
   * timeline entries in order; without it the write is one entry, `expected.state` → `next`.
   */
  steps?: TimelineStep[];
  /**
   * What the transition fires, recorded in its transaction when it is written, and only then (an
   * `after` trigger's follow-ups, keyed by {@link followUpKey}): a crash between the two cannot
   * end the execution and lose them, and the ledger fires each follower once.
   */
  followUps?: EventFiring;
  /**
   * The alerts the transition raises (an execution that failed, timed out or expired, one per
   * webhook that wants it), recorded in its transaction when it is written, and only then: a
   * crash between the two cannot record the end and lose its alert.
   */
  alerts?: readonly AlertRecord[];
  /**
   * Diagnostic counters the transition adds to (`counters()`: a late fact's decision, an
   * unreadable report), in its transaction when it is written, and only then: the count and the
   * timeline entry it counts are both recorded or neither.
   */
  counters?: Readonly<Record<string, number>>;
}

/** One folded transition's timeline entry. */
export interface TimelineStep {
  event: string;
  from: ExecState;
  to: ExecState;
  round: number;
  agentId: string | null;
  at: number;
  detail?: Record<string, unknown>;
}

/** Who changes a job, for its history. */
export interface ExecutionFilter {
  jobId?: string;
  groupKey?: string;
  /** Only executions fired for this nominal time (with jobId: one firing's shards). */
  scheduledFor?: number;
  states?: ExecState[];
  agentId?: string;
  limit?: number;
}

/** A page of the executions listing: filters, and where the previous page ended. */
export interface ExecutionPageQuery {
  jobId?: string;
  /** Any of these states. */
  states?: ExecState[];
  /**
   * The agent it ran or runs on — or, for a command not yet dispatched, the agent it is aimed at.
   */
  agentId?: string;
  kind?: ExecutionKind;
  /** Created at or after this time (UTC ms). */
  createdFrom?: number;
  /** Created before this time (UTC ms). */
  createdBefore?: number;
  /** `nextCursor` of the previous page; without it the listing starts at the newest. */
  cursor?: string;
  /** Rows per page, at least 1. */
  limit: number;
}

/** Executions newest first (creation time, then id), and the cursor of the next page. */
export interface ExecutionPage {
  items: ExecutionRecord[];
  /** Null on the last page. */
  nextCursor: string | null;
}

/** An event message's firing, as {@link Store.recordEvent} records it. */
export interface EventFiring {
  name: string;
  msgId: string;
  /** The jobs it fires, each with its executions (one, or one per shard). */
  fires: readonly { jobId: string; executions: readonly NewExecution[] }[];
  at: number;
  /** The coordinator that read it (among several on one store). */
  by?: string;
  /**
   * What the executions' first timeline entry says fired them, in place of the event's name and
   * `msgId` (an `after` trigger's follow-up names the execution it follows: {@link followUpKey}).
   */
  cause?: Record<string, unknown>;
}

/**
 * The event ledger's key for the follow-ups of an execution that ended in `state` (an `after`
 * trigger, {@link TransitionWrite.followUps}). No event message can take it: an event's name is one
 * topic level, without `/`.
 */
export function followUpKey(
  source: { jobId: string; executionId: string },
  state: string,
): { name: string; msgId: string } {
  return { name: `after/${source.jobId}`, msgId: `${source.executionId}/${state}` };
}

/** What {@link Store.recordEvent} did: whether the message was new, and the jobs it fired. */
export interface EventRecorded {
  first: boolean;
  fired: string[];
}

/** The first timeline entry's detail of an execution an event fired (Store.recordEvent). */
export function eventEntryDetail(
  event: { name: string; msgId: string; by?: string; cause?: Record<string, unknown> },
  e: NewExecution,
): Record<string, unknown> {
  return {
    ...(event.cause ?? { event: event.name, msgId: event.msgId }),
    ...(e.shardTotal ? { shard: `${e.shardIndex}/${e.shardTotal}` } : {}),
    ...(event.by === undefined ? {} : { coordinator: event.by }),
  };
}

/**
 * A firing decided under a job's misfire policy ({@link Store.recordFires}): the job's next fire
 * time moves from `expectedNext` to `nextFireAt`, each of `fires` gets its executions (one per
 * shard), each of `missed` a missed fire row.
 */
/**
 * What an operator's request made with an `Idempotency-Key` created (docs/api.md): kept with the
 * executions it made, so that the same request again answers the same.
 */
export interface IdempotencyRecord {
  /** Who asked, what, and the key: a hash (operations/idempotency.ts). */
  scope: string;
  /** The request's body, hashed: the same key with another body is refused. */
  request: string;
  /** The operation's result, as JSON. */
  result: string;
  at: number;
}

export interface FireBatch {
  jobId: string;
  expectedNext: number;
  nextFireAt: number | null;
  fires: { scheduledFor: number; executions: NewExecution[] }[];
  missed: number[];
  at: number;
  /** The coordinator that fired (among several on one store): named in each execution's first timeline entry. */
  by?: string;
  /**
   * The alerts of the nominal times missed (`fire.missed`), written in the same transaction as
   * their fire rows, and only when the job advances: the record never holds the one without the
   * other.
   */
  alerts?: AlertRecord[];
  /**
   * How many nominal times were missed, those past the enumeration's cap included: added to the
   * `missed_fires` counter in the same transaction, when the job advances.
   */
  missedCount?: number;
}

/** A page of rollouts, newest first; `nextCursor` is null on the last page. */
export interface RolloutPage {
  items: RolloutRecord[];
  nextCursor: string | null;
}

/** A rollout's executions counted by wave and state. */
export interface RolloutCount {
  wave: number;
  state: ExecState;
  count: number;
}

/**
 * The coordinator's store, in domain operations. Async so that SQLite and PostgreSQL both fit;
 * every method is atomic on its own.
 *
 * Writes may be grouped into one commit (SQLite's group commit): a write's effects are visible
 * to this store's reads when its promise resolves, and durable once committed. Whatever tells
 * the world outside the process about a write — a dispatch, an ack to an agent, an answer to an
 * operator — waits for that commit, through {@link Store.afterCommit} or {@link Store.flush}.
 */
export interface Store {
  /**
   * The store's clock, UTC ms: the database server's for PostgreSQL, the process's for SQLite.
   * Membership leases and claims are measured by it.
   */
  clockNow(): Promise<number>;
  /**
   * Joins the coordinators that share this store as `id`: a new epoch (one more than any earlier
   * one of that id) and a lease of `leaseMs` by the store's clock. From then on every write made
   * through this store object is fenced: it fails with AX_STORE_FENCED, writing nothing, once
   * the lease has lapsed unrenewed or a newer epoch of the same id has joined. Before joining,
   * writes are not fenced (one coordinator, the CLI's own commands).
   */
  joinCoordinators(
    id: string,
    leaseMs: number,
    info?: Record<string, unknown>,
  ): Promise<CoordinatorRecord>;
  /**
   * Renews the membership's lease (and its `info`, when given). False when it could not be: the
   * lease had lapsed or a newer epoch joined, and this store's writes are fenced for good (join
   * again for a new epoch).
   */
  renewMembership(info?: Record<string, unknown>): Promise<boolean>;
  /** Ends the membership now (a clean stop), so the others take over its claims at once. */
  leaveCoordinators(): Promise<void>;
  /** The coordinators whose lease has not lapsed by the store's clock, oldest joined first. */
  listCoordinators(): Promise<CoordinatorRecord[]>;
  /**
   * Calls `fn` soon after another writer (another coordinator, the CLI) created executions,
   * changed jobs, or changed who may act (`access`: API tokens, agents' enrolments), so the loops
   * need not wait for their next pass and every coordinator knows the same tokens and agents
   * (PostgreSQL: LISTEN/NOTIFY). Returns the function that stops it. A store with one writer may
   * never call it.
   */
  watchWork(fn: (what: WorkKind) => void): () => void;
  /**
   * Tells the other writers' {@link watchWork} that `what` changed, outside any write: for work
   * whose writes are not announced one by one (fires recorded by a coordinator that is not the
   * active one, which coalesces them into one call). A store with one writer does nothing.
   */
  announceWork(what: WorkKind): Promise<void>;

  /** Runs `fn` once every write made so far is committed; never, if that commit fails. */
  afterCommit(fn: () => void): void;
  /** Resolves when every write made so far is committed; rejects if that commit fails. */
  flush(): Promise<void>;
  /** Told when a commit failed: its writes were undone and their after-commit work dropped. */
  onCommitError: ((err: Error) => void) | undefined;

  /**
   * Creates the job, or a new version when its definition changed, and records the change in
   * the job's history with `change.actor` (default `system`). Returns the stored job. The
   * definition's `paused` is the state a new job starts in; it is not compared between versions,
   * and an update keeps the job's state (see {@link setJobPaused}).
   */
  putJob(
    definition: JobDefinition,
    nextFireAt: number | null,
    now: number,
    change?: JobChange,
  ): Promise<StoredJob>;
  /**
   * Pauses or resumes a job: its state only, its version and next fire time unchanged, recorded
   * in its history (`paused` or `resumed`, with the current version and `actor`) when it changes.
   * Undefined when there is no such job.
   */
  setJobPaused(
    jobId: string,
    paused: boolean,
    now: number,
    actor: string,
  ): Promise<StoredJob | undefined>;
  /** Adds an entry to a job's history (a manual trigger); its seq is the next one. */
  appendJobHistory(entry: Omit<JobHistoryEntry, "seq">): Promise<void>;
  /**
   * A job's history, oldest first: at most `limit` (default 100) of the newest entries, or with
   * `beforeSeq` of the newest before that entry (a page further back).
   */
  listJobHistory(jobId: string, limit?: number, beforeSeq?: number): Promise<JobHistoryEntry[]>;
  getJob(id: string): Promise<StoredJob | undefined>;
  listJobs(): Promise<StoredJob[]>;
  /** The ids of the paused jobs, in id order (without reading every definition). */
  pausedJobIds(): Promise<string[]>;
  /**
   * One page of jobs in id order: at most `limit`, after the job `cursor` names (the previous
   * page's `nextCursor`, which is its last id). Jobs added or deleted between pages neither
   * repeat nor shift the rest.
   */
  pageJobs(query: { limit: number; cursor?: string }): Promise<JobPage>;
  /**
   * The jobs whose trigger is `event` or `after`, paused or not: what event messages and
   * transitions are matched against. Found without reading the other jobs.
   */
  listListeningJobs(): Promise<StoredJob[]>;
  /** One version of a job's definition (every version is kept), or undefined. */
  getJobVersion(jobId: string, version: number): Promise<JobDefinition | undefined>;
  /**
   * Ids, next fire times and leads of the jobs, not paused, that set a `dispatchLead` of their
   * own (no definitions): found without reading the other jobs.
   */
  listLeadFires(): Promise<{ jobId: string; nextFireAt: number; leadMs: number }[]>;
  /** Ids and next fire times of the jobs, not paused, due at or before `untilMs` (no definitions). */
  listDueFires(untilMs: number): Promise<{ jobId: string; nextFireAt: number }[]>;
  /** Jobs, not paused, whose next fire time is at or before `untilMs`. */
  listJobsDueBy(untilMs: number): Promise<StoredJob[]>;

  /**
   * Records the firing of (jobId, scheduledFor) exactly once: in one transaction it advances the
   * job's next fire time from `scheduledFor` to `nextFireAt` (only if it still is `scheduledFor`),
   * inserts the UNIQUE fire row, and creates the execution with its first timeline entry.
   * Returns false when that nominal time was already fired (by this or another coordinator).
   */
  recordFire(fire: {
    jobId: string;
    scheduledFor: number;
    nextFireAt: number | null;
    execution: NewExecution;
    at: number;
  }): Promise<boolean>;

  /**
   * Records a firing decided under the job's misfire policy, exactly once: in one transaction it
   * advances the job's next fire time from `expectedNext` to `nextFireAt` (only if it still is
   * `expectedNext`), inserts a UNIQUE fire row and the executions (one per shard) for every
   * nominal time in `fires`, and a `missed` fire row for every one in `missed`. Returns false, and
   * writes nothing, when another writer got there first.
   */
  recordFires(batch: FireBatch): Promise<boolean>;

  /**
   * Fires an event message once for each job: in one transaction it records (`name`, `msgId`) in
   * the event ledger, and (`name`, `msgId`, job) for each of `fires` with the executions it
   * creates (each with its first timeline entry: the event's name and `msgId`, and `by` as
   * `coordinator`). A job already in the ledger for that message gets nothing: a redelivery
   * (also after a restart), or another coordinator that read the same message first. Keyed by
   * job, a coordinator that has not yet heard of a job just created cannot stop another from
   * firing it. Returns whether the message was new to the ledger (`first`: one reader counts
   * it) and the jobs this call fired. The ledger's rows go with retention
   * ({@link purgeFinishedBefore}, by `at`).
   */
  recordEvent(event: EventFiring): Promise<EventRecorded>;

  /**
   * Creates an execution outside any job (a device command, a retry); `detail` goes into its
   * first timeline entry (who asked for it).
   */
  createExecution(
    execution: NewExecution,
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<void>;
  /**
   * Creates several executions at once, all or none (a device command to many agents): one
   * write for the batch, where a loop of {@link createExecution} pays one per execution. With
   * `idempotency`, its record is written in the same transaction; a scope already recorded
   * refuses the whole write (another request with the key made its executions).
   */
  createExecutions(
    executions: readonly NewExecution[],
    at: number,
    detail?: Record<string, unknown>,
    idempotency?: IdempotencyRecord,
  ): Promise<void>;
  /** The record of an operator's request made with an `Idempotency-Key`, by its scope. */
  getIdempotency(scope: string): Promise<IdempotencyRecord | undefined>;
  getExecution(id: string): Promise<ExecutionRecord | undefined>;
  listExecutions(filter?: ExecutionFilter): Promise<ExecutionRecord[]>;
  /** Executions in `states` ordered by priority (high first), then fire time. */
  listExecutionsInStates(states: ExecState[], limit: number): Promise<ExecutionRecord[]>;
  /**
   * What the dispatcher must act on at `now`, each list at most `limit` long and in dispatch
   * order (priority, high first, then fire time): `pending`, PENDING with a fire time at or
   * before `pendingBy`; `retry`, RETRY_WAITING whose next attempt is due, or a command's whose
   * deadline passed (a job's retry has a start window of its own, from its time);
   * `dispatchTimedOut`, DISPATCHED for `dispatchTimeoutMs` or longer.
   */
  listDue(
    now: number,
    pendingBy: number,
    limit: number,
    options?: DueOptions,
  ): Promise<{
    pending: ExecutionRecord[];
    retry: ExecutionRecord[];
    dispatchTimedOut: ExecutionRecord[];
  }>;
  /**
   * The open (not terminal) executions of a job or of a group, with only what overlap, group and
   * concurrency rules look at, oldest first.
   */
  listOpenPeers(by: { jobId: string } | { groupKey: string }): Promise<PeerRecord[]>;
  /**
   * A job's latest `limit` executions that have had an agent, newest first (by creation): what
   * STICKY and SHARD_BROADCAST derive their memory from in a process that has routed none of
   * the job's executions yet (after a restart, or on a coordinator that took over).
   */
  listRecentlyRouted(jobId: string, limit: number): Promise<RoutedRecord[]>;
  /** Records a new alert (status pending, no attempt yet). */
  putAlert(alert: AlertRecord): Promise<void>;
  /** Records an attempt's outcome. */
  updateAlert(
    id: string,
    patch: Pick<AlertRecord, "status" | "attempts" | "lastError" | "updatedAt">,
  ): Promise<void>;
  /** Alerts, newest first; only pending ones (oldest first) with `pending`. */
  listAlerts(filter?: { pending?: boolean; limit?: number }): Promise<AlertRecord[]>;
  /** How many executions each agent holds (DISPATCHED, SCHEDULED or RUNNING), by agent id. */
  countInFlightByAgent(): Promise<Record<string, number>>;
  /**
   * Writes a transition if the execution is still in `expected`; appends it to the timeline.
   * `patch.message` is stored capped, with its full size in `messageBytes`.
   */
  applyTransition(write: TransitionWrite): Promise<boolean>;
  getTimeline(executionId: string): Promise<TimelineEntry[]>;
  /**
   * Retention (DESIGN §6): deletes up to `limit` executions in a terminal state whose finish time
   * (`finishedAt`, else `updatedAt`) is before `cutoffMs`, oldest first, with their timelines, in
   * one short transaction; fire records older than the cutoff may go too, but never one at or
   * after its job's next fire time; event ledger rows recorded before the cutoff go too; settled
   * rollouts finished before the cutoff go too, with their timelines and targets. Returns how many executions were deleted (0 when `limit` < 1).
   */
  purgeFinishedBefore(cutoffMs: number, limit: number): Promise<number>;

  getAgent(agentId: string): Promise<AgentRecord | undefined>;
  listAgents(): Promise<AgentRecord[]>;
  /**
   * Writes an agent's record. Its acked seq never goes down while the journal is the same (a
   * record read before another coordinator acknowledged more, written back later, keeps what
   * the agent was told); a new journal starts from the record's. `alerts` (an `agent.offline`
   * alert) are written in the same transaction: both or neither.
   */
  putAgent(agent: AgentRecord, alerts?: readonly AlertRecord[]): Promise<void>;
  /** Writes several agents at once, all or none (heartbeat figures, persisted in batches). */
  putAgents(agents: readonly AgentRecord[]): Promise<void>;
  /** Sets the highest contiguous stored seq of the agent's current journal. */
  setAckedSeq(agentId: string, journalId: string, seq: number): Promise<void>;

  /** Adds `by` to a named counter (invalid messages, stale reports, …). */
  putIdentity(identity: IdentityRecord): Promise<void>;
  listIdentities(): Promise<IdentityRecord[]>;
  bumpCounter(name: string, by?: number): Promise<void>;
  counters(): Promise<Record<string, number>>;

  /**
   * Deletes a job: it fires no more. Its executions stay (with their job id and version), and so
   * does its fire ledger, so a job created again under the same id never fires a nominal time
   * twice; its versions continue from the last one. Returns false when no job has that id.
   */
  deleteJob(id: string, change?: { actor: string; at: number }): Promise<boolean>;

  /** Creates an API token's record; AX_API_TOKEN_EXISTS when the name is taken. */
  putApiToken(token: ApiTokenRecord): Promise<void>;
  /** Records when a token was last used. */
  touchApiToken(name: string, at: number): Promise<void>;
  listApiTokens(): Promise<ApiTokenRecord[]>;
  /** Deletes a token's record; false when there is none. */
  deleteApiToken(name: string): Promise<boolean>;
  /**
   * One page of executions matching every filter given, newest first by (createdAt, id), with
   * keyset paging: a cursor names the last row seen, so pages neither repeat nor skip a row while
   * new ones are created. A malformed cursor is AX_STORE_BAD_CURSOR.
   */
  pageExecutions(query: ExecutionPageQuery): Promise<ExecutionPage>;
  /** How many executions are in each open (not terminal) state; states with none are left out. */
  countOpenExecutions(): Promise<Partial<Record<ExecState, number>>>;

  /**
   * Creates a rollout with its first timeline entry, and the `idempotency` record of the request
   * that made it in the same transaction. False, writing nothing, when its id is taken; throws,
   * writing nothing, when the idempotency scope is taken.
   */
  createRollout(
    rollout: RolloutRecord,
    event: Omit<RolloutEvent, "seq">,
    idempotency?: IdempotencyRecord,
  ): Promise<boolean>;
  getRollout(id: string): Promise<RolloutRecord | undefined>;
  /** Rollouts newest first (creation time, then id), optionally in one state. */
  pageRollouts(query: {
    limit: number;
    cursor?: string;
    state?: RolloutState;
  }): Promise<RolloutPage>;
  /** Rollouts not yet settled: not final, or final with executions still open. */
  listUnsettledRollouts(): Promise<RolloutRecord[]>;
  /**
   * Writes `next` if the stored rollout is still at `expectedVersion` (its version becomes one
   * more), with `event` appended to its timeline when given. False, writing nothing, otherwise.
   */
  updateRollout(
    next: RolloutRecord,
    expectedVersion: number,
    event?: Omit<RolloutEvent, "seq">,
  ): Promise<boolean>;
  /** A rollout's timeline, oldest first. */
  getRolloutTimeline(id: string): Promise<RolloutEvent[]>;
  /**
   * Reaches agents for a rollout, in one transaction and only while it is IN_PROGRESS: for each
   * target whose agent the rollout has not reached yet, records the target and creates its
   * execution. Returns the agent ids reached now (none when the rollout is not IN_PROGRESS).
   */
  reachRolloutTargets(
    rolloutId: string,
    targets: readonly { agentId: string; wave: number; execution: NewExecution }[],
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<string[]>;
  /** Every agent a rollout reached, with its execution and wave. */
  listRolloutTargets(rolloutId: string): Promise<RolloutTarget[]>;
  /** A rollout's executions counted by wave and state (purged executions are not counted). */
  countRolloutExecutions(rolloutId: string): Promise<RolloutCount[]>;

  /**
   * Publishes a bundle: its record and its archive, under `record.sha256` (the archive's). False,
   * changing nothing, when a bundle with that sha256 is already there: a published bundle is
   * never replaced.
   */
  putBundle(record: BundleRecord, archive: Buffer): Promise<boolean>;
  /** A published bundle's record (without its archive), or undefined. */
  getBundle(sha256: string): Promise<BundleRecord | undefined>;
  /** A published bundle's archive bytes, or undefined. */
  readBundleArchive(sha256: string): Promise<Buffer | undefined>;
  /**
   * Published bundles newest published first (publish time, then sha256), optionally of one
   * profile, with keyset paging as {@link pageExecutions}: `next` is absent on the last page.
   */
  pageBundles(query: { limit: number; cursor?: string; profile?: string }): Promise<BundlePage>;

  close(): Promise<void>;
}
