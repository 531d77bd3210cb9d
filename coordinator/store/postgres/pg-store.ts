/**
 * The PostgreSQL store: several coordinators (and the CLI) on one database.
 *
 * **Schema** (migrations.ts, one schema per store, `schema` option): the tables of the SQLite
 * store with the same columns (jobs, job_versions, fires, executions, timeline, agents,
 * identities, counters, alerts, api_tokens, job_history, events, idempotency, …), plus
 * `coordinators` (membership) and two claim columns on executions. Port times are `double precision` UTC ms (the protocol allows
 * fractions; SQLite keeps them as REAL), database-clock times `bigint` ms; JSON values are
 * `text` holding the JSON as written, so it reads back byte for byte; ids are in the "C"
 * collation, so orders and keyset pages match SQLite's byte order.
 *
 * **Transactions** (tx.ts): each port method's writes commit before its promise resolves, all
 * or none. Writes issued together (in one turn, or while every write slot of the pool is busy)
 * share one transaction (group-commit.ts); if any of them fails, the group rolls back and each
 * runs again alone, so each keeps its own outcome. Point reads issued in one turn share one
 * statement (read-batch.ts). A
 * serialization failure (40001), a deadlock (40P01) or a collision on a key the transaction
 * computed (the next timeline or history seq, the next job version) rolls back and runs again
 * after a jittered 5–60 ms, five tries in all, then fails AX_STORE_BUSY (retryable). Other
 * errors are AX_STORE_FAILED with the pg error as `cause`, retryable when the connection failed.
 * Nothing else is retried: a commit whose outcome is unknown (the connection dropped during
 * COMMIT) is reported, not repeated. {@link PgStore.flush} and {@link PgStore.afterCommit} wait
 * for the writes in flight (commits.ts).
 *
 * **Exactly once**: firing is guarded by the fires primary key after a compare-and-set on the
 * job's next fire time, and a transition is a compare-and-set on (state, round) in one
 * UPDATE … WHERE; under READ COMMITTED the later of two writers waits for the row lock, sees the
 * row moved, and writes nothing. `putJob` with an expected version locks the job row FOR UPDATE.
 *
 * **Membership and fencing** (membership.ts): `joinCoordinators` upserts the id's row with
 * epoch + 1 and a lease by the database clock, and the store object remembers (id, epoch). From
 * then on every write transaction checks its row just before COMMIT, in COMMIT's round trip
 * (`ax_fence`), requiring that epoch and a lease still ahead; otherwise it rolls back with
 * AX_STORE_FENCED (retryable) and the object stays fenced until it joins again. The check takes
 * no row lock: a write may commit within that round trip of a rejoin or a lapse, which the
 * coordinator's own fence (engine/membership.ts), stopping before its lease can lapse, covers.
 *
 * **Claims** (due.ts): `listDue` with `claim` reads its candidates FOR UPDATE SKIP LOCKED,
 * passes over rows another holder claims until a time still ahead (database clock), and claims
 * the rows it returns, in one statement. Claims only save duplicate work; the transition's
 * compare-and-set is what makes a dispatch happen once.
 *
 * **Watching** (listen.ts): writes that create executions or change jobs `pg_notify` the
 * schema's channel inside their transaction (delivered at commit); `watchWork` LISTENs on one
 * dedicated connection, reconnecting when it drops. Notifications sent by this store object's
 * own connections are ignored: `watchWork` reports other writers' work only.
 */
import type { ExecState } from "../../../shared/fsm.js";
import type { BundlePage, BundleRecord } from "../../domain/bundle.js";
import type { JobDefinition } from "../../domain/job.js";
import type {
  RolloutEvent,
  RolloutRecord,
  RolloutState,
  RolloutTarget,
} from "../../domain/rollout.js";
import type {
  AgentRecord,
  AlertRecord,
  ApiTokenRecord,
  CoordinatorRecord,
  DueOptions,
  EventFiring,
  EventRecorded,
  ExecutionFilter,
  ExecutionPage,
  ExecutionPageQuery,
  ExecutionRecord,
  FireBatch,
  IdempotencyRecord,
  IdentityRecord,
  JobChange,
  JobHistoryEntry,
  JobPage,
  NewExecution,
  PeerRecord,
  RolloutCount,
  RolloutPage,
  RoutedRecord,
  Store,
  StoredJob,
  TimelineEntry,
  TransitionWrite,
} from "../port.js";
import { cappedDetailJson, toPeer, toRouted } from "../stored-text.js";
import * as bundles from "./bundles.js";
import { type PgStoreOptions, resolvePgStoreOptions } from "./config.js";
import { StoreConnection, type WriteOptions } from "./connection.js";
import * as due from "./due.js";
import * as ex from "./executions.js";
import * as fires from "./fires.js";
import * as fleet from "./fleet.js";
import * as jobs from "./jobs.js";
import type { WorkKind } from "./listen.js";
import * as listings from "./listings.js";
import * as member from "./membership.js";
import { ReadBatch } from "./read-batch.js";
import * as rollouts from "./rollouts.js";
import { type ExecutionRow, type JobRow, toExecution, toJob } from "./rows.js";
import { type Queryable, run } from "./tx.js";

export type { PgStoreOptions } from "./config.js";

/** Job versions kept read (see PgStore.versions); each is a definition's JSON. */
const MAX_CACHED_VERSIONS = 10_000;

/** A job version's key in PgStore's cache and read batch. */
function versionKey(jobId: string, version: number): string {
  return `${version}\u0000${jobId}`;
}

/** The store on PostgreSQL; open it with {@link PgStore.open}. */
export class PgStore implements Store {
  private readonly db: StoreConnection;
  private readonly detailJson: (detail: Record<string, unknown> | null) => string | null;

  /**
   * Point reads issued in one turn share a statement (read-batch.ts): a wheel tick's fires each
   * read their job, a burst of reports each its execution.
   */
  private readonly jobReads: ReadBatch<string, JobRow, StoredJob | undefined>;
  private readonly executionReads: ReadBatch<string, ExecutionRow, ExecutionRecord | undefined>;
  private readonly peerReads: {
    jobId: ReadBatch<string, ex.KeyedPeerRow, PeerRecord[]>;
    groupKey: ReadBatch<string, ex.KeyedPeerRow, PeerRecord[]>;
  };
  private readonly versionReads: ReadBatch<
    { jobId: string; version: number },
    jobs.JobVersionRow,
    JobDefinition | undefined
  >;
  /**
   * Job versions read: a version is never changed nor its number reused (a job deleted and
   * created again continues its versions), so what was read once holds. The dispatcher reads
   * the version of every execution it dispatches.
   */
  private readonly versions = new Map<string, string>();

  private constructor(db: StoreConnection) {
    this.db = db;
    const max = db.config.maxErrorTextBytes;
    this.detailJson = (detail) => cappedDetailJson(detail, max);
    const byId = (id: string) => id;
    this.jobReads = new ReadBatch({
      fetch: (ids) => db.read("getJob", (q) => jobs.getJobRows(q, ids)),
      keyOf: byId,
      rowKey: (row) => row.id,
      toValue: ([row]) => {
        if (row === undefined) return undefined;
        // The job's row holds its current version's definition, as written to job_versions in
        // the same transaction: the dispatch of what the job fires finds it here.
        this.cacheVersion(row.id, row.version, row.definition);
        return toJob(row);
      },
    });
    this.executionReads = new ReadBatch({
      fetch: (ids) => db.read("getExecution", (q) => ex.getExecutionRows(q, ids)),
      keyOf: byId,
      rowKey: (row) => row.id,
      toValue: ([row]) => (row === undefined ? undefined : toExecution(row)),
    });
    const peers = (by: "jobId" | "groupKey") =>
      new ReadBatch<string, ex.KeyedPeerRow, PeerRecord[]>({
        fetch: (keys) => db.read("listOpenPeers", (q) => ex.listOpenPeerRows(q, by, keys)),
        keyOf: byId,
        rowKey: (row) => row.key,
        toValue: (rows) => rows.map(toPeer),
      });
    this.peerReads = { jobId: peers("jobId"), groupKey: peers("groupKey") };
    this.versionReads = new ReadBatch({
      fetch: (keys) => db.read("getJobVersion", (q) => jobs.getJobVersionRows(q, keys)),
      keyOf: (k) => versionKey(k.jobId, k.version),
      rowKey: (row) => versionKey(row.job_id, row.version),
      toValue: ([row]) => {
        if (row === undefined) return undefined;
        this.cacheVersion(row.job_id, row.version, row.definition);
        return JSON.parse(row.definition) as JobDefinition;
      },
    });
  }

  /** Keeps a version's stored definition (the oldest kept goes past MAX_CACHED_VERSIONS). */
  private cacheVersion(jobId: string, version: number, definition: string): void {
    const key = versionKey(jobId, version);
    if (this.versions.has(key)) return;
    if (this.versions.size >= MAX_CACHED_VERSIONS) {
      const oldest = this.versions.keys().next().value;
      if (oldest !== undefined) this.versions.delete(oldest);
    }
    this.versions.set(key, definition);
  }

  /**
   * Connects, creates the schema if missing and migrates it (once, however many coordinators
   * start together), and returns the store. AX_STORE_MIGRATION when the database was written by
   * a newer build; AX_STORE_FAILED (retryable) when the server cannot be reached.
   */
  static async open(options: PgStoreOptions): Promise<PgStore> {
    const db = new StoreConnection(resolvePgStoreOptions(options));
    await db.open();
    return new PgStore(db);
  }

  get onCommitError(): ((err: Error) => void) | undefined {
    return this.db.onCommitError;
  }
  set onCommitError(fn: ((err: Error) => void) | undefined) {
    this.db.onCommitError = fn;
  }

  /** A one-statement write (on the pool alone, unless joined). */
  private one<T>(
    what: string,
    fn: (q: Queryable) => Promise<T>,
    mapError?: WriteOptions["mapError"],
  ) {
    return this.db.write(what, fn, mapError ? { single: true, mapError } : { single: true });
  }

  afterCommit(fn: () => void): void {
    this.db.commits.afterCommit(fn);
  }

  flush(): Promise<void> {
    return this.db.commits.flush();
  }

  clockNow(): Promise<number> {
    return this.db.readMembership("clockNow", member.clockNow);
  }

  joinCoordinators(
    id: string,
    leaseMs: number,
    info: Record<string, unknown> = {},
  ): Promise<CoordinatorRecord> {
    return this.db.join(id, leaseMs, info);
  }

  renewMembership(info?: Record<string, unknown>): Promise<boolean> {
    return this.db.renew(info);
  }

  leaveCoordinators(): Promise<void> {
    return this.db.leave();
  }

  async listCoordinators(): Promise<CoordinatorRecord[]> {
    return this.db.readMembership("listCoordinators", member.listLive);
  }

  watchWork(fn: (what: WorkKind) => void): () => void {
    return this.db.watch(fn);
  }

  async announceWork(what: WorkKind): Promise<void> {
    await this.db.read("announceWork", (q) => this.db.notify(q, what));
  }

  async putJob(
    definition: JobDefinition,
    nextFireAt: number | null,
    now: number,
    change: JobChange = { actor: "system" },
  ): Promise<StoredJob> {
    return this.db.write("putJob", async (q) => {
      const { job, changed } = await jobs.putJob(q, definition, nextFireAt, now, change);
      if (changed) await this.db.notify(q, "jobs");
      return job;
    });
  }

  async setJobPaused(
    jobId: string,
    paused: boolean,
    now: number,
    actor: string,
  ): Promise<StoredJob | undefined> {
    return this.db.write("setJobPaused", async (q) => {
      const { job, changed } = await jobs.setJobPaused(q, jobId, paused, now, actor);
      if (changed) await this.db.notify(q, "jobs");
      return job;
    });
  }

  async appendJobHistory(entry: Omit<JobHistoryEntry, "seq">): Promise<void> {
    await this.one("appendJobHistory", (q) => jobs.insertJobHistory(q, entry));
  }

  async listJobHistory(
    jobId: string,
    limit = 100,
    beforeSeq = Number.MAX_SAFE_INTEGER,
  ): Promise<JobHistoryEntry[]> {
    return this.db.read("listJobHistory", (q) => jobs.listJobHistory(q, jobId, limit, beforeSeq));
  }

  async getJob(id: string): Promise<StoredJob | undefined> {
    this.db.checkOpen("getJob");
    return this.jobReads.get(id);
  }

  async listJobs(): Promise<StoredJob[]> {
    return this.db.read("listJobs", jobs.listJobs);
  }

  async pausedJobIds(): Promise<string[]> {
    return this.db.read("pausedJobIds", async (q) => {
      const r = await run<{ id: string }>(q, "SELECT id FROM jobs WHERE paused ORDER BY id", []);
      return r.rows.map((row) => row.id);
    });
  }

  async pageJobs(query: { limit: number; cursor?: string }): Promise<JobPage> {
    return this.db.read("pageJobs", (q) => jobs.pageJobs(q, query));
  }

  async listListeningJobs(): Promise<StoredJob[]> {
    return this.db.read("listListeningJobs", jobs.listListeningJobs);
  }

  async getJobVersion(jobId: string, version: number): Promise<JobDefinition | undefined> {
    this.db.checkOpen("getJobVersion");
    const cached = this.versions.get(versionKey(jobId, version));
    if (cached !== undefined) return JSON.parse(cached) as JobDefinition;
    return this.versionReads.get({ jobId, version });
  }

  async listLeadFires(): Promise<{ jobId: string; nextFireAt: number; leadMs: number }[]> {
    return this.db.read("listLeadFires", jobs.listLeadFires);
  }

  async listDueFires(untilMs: number): Promise<{ jobId: string; nextFireAt: number }[]> {
    return this.db.read("listDueFires", (q) => jobs.listDueFires(q, untilMs));
  }

  async listJobsDueBy(untilMs: number): Promise<StoredJob[]> {
    return this.db.read("listJobsDueBy", (q) => jobs.listJobsDueBy(q, untilMs));
  }

  async deleteJob(id: string, change?: { actor: string; at: number }): Promise<boolean> {
    const by = { actor: change?.actor ?? "system", at: change?.at ?? this.db.config.now() };
    return this.db.write("deleteJob", async (q) => {
      const deleted = await jobs.deleteJob(q, id, by);
      if (deleted) await this.db.notify(q, "jobs");
      return deleted;
    });
  }

  async recordFire(fire: {
    jobId: string;
    scheduledFor: number;
    nextFireAt: number | null;
    execution: NewExecution;
    at: number;
  }): Promise<boolean> {
    // Not announced (see recordFires).
    return this.db.write("recordFire", (q) => fires.recordFire(q, fire, this.detailJson), {
      later: true,
    });
  }

  async recordFires(batch: FireBatch): Promise<boolean> {
    // Fires are not announced: the coordinator that fires is the active one, which runs its own
    // loops, and a NOTIFY in each of thousands of fire transactions a second serializes their
    // commits on the notification queue. What operators create (commands, jobs) is announced.
    const max = this.db.config.maxErrorTextBytes;
    return this.db.write("recordFires", (q) => fires.recordFires(q, batch, this.detailJson, max), {
      later: true,
      // The firings of a wheel tick, each of another job, share one statement.
      ...(fires.isSimpleFire(batch)
        ? {
            batch: {
              kind: "simple fire",
              key: `job ${batch.jobId}`,
              item: batch,
              run: this.runSimpleFires,
            },
          }
        : {}),
    });
  }

  /** Runs a group's simple firings together (GroupCommit's batch). */
  private readonly runSimpleFires = (q: Queryable, items: unknown[]) =>
    fires.recordSimpleFires(q, items as FireBatch[], this.detailJson);

  async recordEvent(event: EventFiring): Promise<EventRecorded> {
    // Announced when it created work, as an operator's command is: the coordinators that
    // dispatch what it created learn of it at once.
    return this.db.write("recordEvent", async (q) => {
      const recorded = await fires.recordEvent(q, event, this.detailJson);
      if (recorded.fired.length > 0) await this.db.notify(q, "executions");
      return recorded;
    });
  }

  async createExecution(
    execution: NewExecution,
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<void> {
    await this.db.write("createExecution", async (q) => {
      await ex.insertExecutions(q, [execution], at, [this.detailJson(detail ?? null)]);
      await this.db.notify(q, "executions");
    });
  }

  async createExecutions(
    executions: readonly NewExecution[],
    at: number,
    detail?: Record<string, unknown>,
    idempotency?: IdempotencyRecord,
  ): Promise<void> {
    if (executions.length === 0) return;
    // One detail for the batch, serialised once.
    const json = this.detailJson(detail ?? null);
    await this.db.write("createExecutions", async (q) => {
      if (idempotency) await fleet.putIdempotency(q, idempotency);
      await ex.insertExecutions(
        q,
        executions,
        at,
        executions.map(() => json),
      );
      await this.db.notify(q, "executions");
    });
  }

  async getIdempotency(scope: string): Promise<IdempotencyRecord | undefined> {
    return this.db.read("getIdempotency", async (q) => {
      const r = await run<IdempotencyRecord>(
        q,
        "SELECT scope, request, result, created_at AS at FROM idempotency WHERE scope = $1",
        [scope],
      );
      return r.rows[0];
    });
  }

  async getExecution(id: string): Promise<ExecutionRecord | undefined> {
    this.db.checkOpen("getExecution");
    return this.executionReads.get(id);
  }

  async listExecutions(filter: ExecutionFilter = {}): Promise<ExecutionRecord[]> {
    return this.db.read("listExecutions", (q) => listings.listExecutions(q, filter));
  }

  async listExecutionsInStates(states: ExecState[], limit: number): Promise<ExecutionRecord[]> {
    return this.db.read("listExecutionsInStates", (q) =>
      ex.listExecutionsInStates(q, states, limit),
    );
  }

  async listDue(
    now: number,
    pendingBy: number,
    limit: number,
    options: DueOptions = {},
  ): Promise<due.DueLists> {
    const list = (q: Parameters<typeof due.listDue>[0]) =>
      due.listDue(q, now, pendingBy, limit, options);
    // Claiming writes: fenced like any write. Without a claim it only reads.
    return options.claim ? this.one("listDue", list) : this.db.read("listDue", list);
  }

  async listOpenPeers(by: { jobId: string } | { groupKey: string }): Promise<PeerRecord[]> {
    this.db.checkOpen("listOpenPeers");
    return "jobId" in by
      ? this.peerReads.jobId.get(by.jobId)
      : this.peerReads.groupKey.get(by.groupKey);
  }

  async putAlert(alert: AlertRecord): Promise<void> {
    const max = this.db.config.maxErrorTextBytes;
    await this.one("putAlert", (q) => fleet.putAlert(q, alert, max));
  }

  async updateAlert(
    id: string,
    patch: Pick<AlertRecord, "status" | "attempts" | "lastError" | "updatedAt">,
  ): Promise<void> {
    const max = this.db.config.maxErrorTextBytes;
    await this.one("updateAlert", (q) => fleet.updateAlert(q, id, patch, max));
  }

  async listAlerts(filter: { pending?: boolean; limit?: number } = {}): Promise<AlertRecord[]> {
    return this.db.read("listAlerts", (q) => fleet.listAlerts(q, filter));
  }

  async listRecentlyRouted(jobId: string, limit: number): Promise<RoutedRecord[]> {
    const rows = await this.db.read("listRecentlyRouted", (q) =>
      ex.listRecentlyRouted(q, jobId, limit),
    );
    return rows.map(toRouted);
  }

  async countInFlightByAgent(): Promise<Record<string, number>> {
    return this.db.read("countInFlightByAgent", listings.countInFlightByAgent);
  }

  async applyTransition(write: TransitionWrite): Promise<boolean> {
    const max = this.db.config.maxErrorTextBytes;
    const { followUps, alerts, counters } = write;
    if (followUps !== undefined || alerts !== undefined || counters !== undefined) {
      // What it fires, raises and counts goes in its transaction: one of its own, not a group's
      // shared statement; new work announced, as an event's firing is, for the coordinators
      // that dispatch it.
      return this.db.write("applyTransition", async (q) => {
        const written = await ex.applyTransition(q, write, max, this.detailJson);
        if (!written) return false;
        if (followUps !== undefined) {
          const recorded = await fires.recordEvent(q, followUps, this.detailJson);
          if (recorded.fired.length > 0) await this.db.notify(q, "executions");
        }
        for (const a of alerts ?? []) await fleet.putAlert(q, a, max);
        for (const [name, by] of Object.entries(counters ?? {})) {
          await fleet.bumpCounter(q, name, by);
        }
        return true;
      });
    }
    return this.db.write(
      "applyTransition",
      (q) => ex.applyTransition(q, write, max, this.detailJson),
      {
        single: true,
        // A burst of transitions (a dispatch pass, a batch of reports) shares one statement.
        batch: {
          kind: `transition ${ex.transitionShape(write)}`,
          key: `execution ${write.executionId}`,
          item: write,
          run: this.runTransitions,
        },
      },
    );
  }

  /** Runs a group's transitions of one shape together (GroupCommit's batch). */
  private readonly runTransitions = (q: Queryable, items: unknown[]) =>
    ex.applyTransitions(
      q,
      items as TransitionWrite[],
      this.db.config.maxErrorTextBytes,
      this.detailJson,
    );

  async getTimeline(executionId: string): Promise<TimelineEntry[]> {
    return this.db.read("getTimeline", (q) => listings.getTimeline(q, executionId));
  }

  async purgeFinishedBefore(cutoffMs: number, limit: number): Promise<number> {
    if (!(limit >= 1)) return 0;
    const max = Math.floor(limit);
    return this.db.write("purgeFinishedBefore", (q) => due.purgeFinishedBefore(q, cutoffMs, max));
  }

  async getAgent(agentId: string): Promise<AgentRecord | undefined> {
    return this.db.read("getAgent", (q) => fleet.getAgent(q, agentId));
  }

  async listAgents(): Promise<AgentRecord[]> {
    return this.db.read("listAgents", fleet.listAgents);
  }

  async putAgent(agent: AgentRecord, alerts?: readonly AlertRecord[]): Promise<void> {
    if (alerts?.length) {
      const max = this.db.config.maxErrorTextBytes;
      await this.db.write("putAgent", async (q) => {
        await fleet.putAgents(q, [agent]);
        for (const a of alerts) await fleet.putAlert(q, a, max);
      });
      return;
    }
    await this.one("putAgent", (q) => fleet.putAgents(q, [agent]));
  }

  async putAgents(agents: readonly AgentRecord[]): Promise<void> {
    if (agents.length === 0) return;
    await this.one("putAgents", (q) => fleet.putAgents(q, agents));
  }

  async setAckedSeq(agentId: string, journalId: string, seq: number): Promise<void> {
    await this.one("setAckedSeq", (q) => fleet.setAckedSeq(q, agentId, journalId, seq));
  }

  async putIdentity(identity: IdentityRecord): Promise<void> {
    await this.one("putIdentity", (q) => fleet.putIdentity(q, identity));
  }

  async listIdentities(): Promise<IdentityRecord[]> {
    return this.db.read("listIdentities", fleet.listIdentities);
  }

  async bumpCounter(name: string, by = 1): Promise<void> {
    await this.one("bumpCounter", (q) => fleet.bumpCounter(q, name, by));
  }

  async counters(): Promise<Record<string, number>> {
    return this.db.read("counters", fleet.counters);
  }

  async putApiToken(token: ApiTokenRecord): Promise<void> {
    await this.one(
      "putApiToken",
      (q) => fleet.putApiToken(q, token),
      (err) => fleet.tokenExists(token.name, err),
    );
  }

  async touchApiToken(name: string, at: number): Promise<void> {
    await this.one("touchApiToken", (q) => fleet.touchApiToken(q, name, at));
  }

  async listApiTokens(): Promise<ApiTokenRecord[]> {
    return this.db.read("listApiTokens", fleet.listApiTokens);
  }

  async deleteApiToken(name: string): Promise<boolean> {
    return this.one("deleteApiToken", (q) => fleet.deleteApiToken(q, name));
  }

  async pageExecutions(query: ExecutionPageQuery): Promise<ExecutionPage> {
    return this.db.read("pageExecutions", (q) => listings.pageExecutions(q, query));
  }

  async countOpenExecutions(): Promise<Partial<Record<ExecState, number>>> {
    return this.db.read("countOpenExecutions", listings.countOpenExecutions);
  }

  /** Waits for the writes in flight, then ends the listener and the pool. Idempotent. */
  createRollout(
    r: RolloutRecord,
    event: Omit<RolloutEvent, "seq">,
    idempotency?: IdempotencyRecord,
  ): Promise<boolean> {
    const detail = this.detailJson(event.detail);
    return this.db.write("createRollout", async (q) => {
      if (!(await rollouts.createRollout(q, r, event, detail))) return false;
      // A scope already taken throws here, and the transaction undoes the rollout too.
      if (idempotency) await fleet.putIdempotency(q, idempotency);
      return true;
    });
  }

  getRollout(id: string): Promise<RolloutRecord | undefined> {
    return this.db.read("getRollout", (q) => rollouts.getRollout(q, id));
  }

  pageRollouts(query: {
    limit: number;
    cursor?: string;
    state?: RolloutState;
  }): Promise<RolloutPage> {
    return this.db.read("pageRollouts", (q) => rollouts.pageRollouts(q, query));
  }

  listUnsettledRollouts(): Promise<RolloutRecord[]> {
    return this.db.read("listUnsettledRollouts", (q) => rollouts.listUnsettledRollouts(q));
  }

  updateRollout(
    next: RolloutRecord,
    expectedVersion: number,
    event?: Omit<RolloutEvent, "seq">,
  ): Promise<boolean> {
    const detail = event === undefined ? null : this.detailJson(event.detail);
    return this.db.write("updateRollout", (q) =>
      rollouts.updateRollout(q, next, expectedVersion, event, detail),
    );
  }

  getRolloutTimeline(id: string): Promise<RolloutEvent[]> {
    return this.db.read("getRolloutTimeline", (q) => rollouts.getRolloutTimeline(q, id));
  }

  async reachRolloutTargets(
    rolloutId: string,
    targets: readonly { agentId: string; wave: number; execution: NewExecution }[],
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<string[]> {
    if (targets.length === 0) return [];
    const json = this.detailJson(detail ?? null);
    return this.db.write("reachRolloutTargets", async (q) => {
      const reached = await rollouts.reachRolloutTargets(q, rolloutId, targets, at, json);
      if (reached.length > 0) await this.db.notify(q, "executions");
      return reached;
    });
  }

  listRolloutTargets(rolloutId: string): Promise<RolloutTarget[]> {
    return this.db.read("listRolloutTargets", (q) => rollouts.listRolloutTargets(q, rolloutId));
  }

  countRolloutExecutions(rolloutId: string): Promise<RolloutCount[]> {
    return this.db.read("countRolloutExecutions", (q) =>
      rollouts.countRolloutExecutions(q, rolloutId),
    );
  }

  putBundle(record: BundleRecord, archive: Buffer): Promise<boolean> {
    return this.db.write("putBundle", (q) => bundles.putBundle(q, record, archive));
  }

  getBundle(sha256: string): Promise<BundleRecord | undefined> {
    return this.db.read("getBundle", (q) => bundles.getBundle(q, sha256));
  }

  readBundleArchive(sha256: string): Promise<Buffer | undefined> {
    return this.db.read("readBundleArchive", (q) => bundles.readBundleArchive(q, sha256));
  }

  pageBundles(query: { limit: number; cursor?: string; profile?: string }): Promise<BundlePage> {
    return this.db.read("pageBundles", (q) => bundles.pageBundles(q, query));
  }

  async close(): Promise<void> {
    await this.db.close();
  }
}
