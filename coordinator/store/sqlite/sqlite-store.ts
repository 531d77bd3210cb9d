import type Database from "better-sqlite3";
import type { ExecState } from "../../../shared/fsm.js";
import { openSqlite, openSqliteReadonly } from "../../../shared/sqlite.js";
import { WalCheckpointer } from "../../../shared/wal-checkpoint.js";
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
  WorkKind,
} from "../port.js";
import * as alerts from "./alerts-counters.js";
import * as bundles from "./bundles.js";
import { DefinitionCache, ExecutionCache } from "./caches.js";
import type { StoreContext } from "./context.js";
import * as due from "./due.js";
import * as queries from "./execution-queries.js";
import * as executions from "./executions.js";
import * as fleet from "./fleet.js";
import { GroupCommit } from "./group-commit.js";
import * as jobs from "./jobs.js";
import { Membership } from "./membership.js";
import { SQLITE_MIGRATIONS } from "./migrations.js";
import type { SqliteStoreOptions } from "./options.js";
import { purgeFinishedBefore } from "./retention.js";
import * as rollouts from "./rollouts.js";
import { Statements } from "./statements.js";
import { DEFAULT_MAX_ERROR_TEXT_BYTES } from "./values.js";

/*
 * The SQLite adapter of the Store port. This file composes it: the class below opens the file and
 * hands each method to the part that owns its concern — statements.ts (SQL and prepared
 * statements), options.ts, group-commit.ts (transactions, group commit, after-commit work), caches.ts,
 * jobs.ts, executions.ts (writes), execution-queries.ts and due.ts (reads), retention.ts,
 * fleet.ts (agents, identities, tokens), alerts-counters.ts, rollouts.ts, bundles.ts (published
 * bundles), membership.ts (coordinators sharing the file, and the fence on this object's writes).
 */

export { GROUP_COMMIT_MAX_WRITES } from "./group-commit.js";
export type { SqliteStoreOptions } from "./options.js";
export { LISTENING_SQL, OPEN_SQL, TERMINAL_SQL } from "./statements.js";
export { DEFAULT_MAX_ERROR_TEXT_BYTES } from "./values.js";

/** The embedded store: one SQLite file in WAL mode. */
export class SqliteStore implements Store {
  private readonly db: Database.Database;
  /** Off-thread WAL checkpoints, when asked for. */
  private readonly checkpointer: WalCheckpointer | undefined;
  /** What the parts share (context.ts). */
  private readonly ctx: StoreContext;
  /** This object's membership of the coordinators sharing the file, once it joined. */
  private readonly membership: Membership;

  constructor(options: SqliteStoreOptions) {
    const nowMs = options.now ?? Date.now;
    const groupCommit = options.groupCommit ?? false;
    const open = {
      label: "store",
      // WAL with NORMAL loses at most the last transactions on power loss, never consistency.
      synchronous: "NORMAL",
      // 64 MiB of page cache (SQLite's default is 2 MiB): the open executions' indexes, the
      // jobs' next-fire index and the newest rows stay in memory instead of being read back
      // from the file for every transition.
      cacheKiB: 65536,
    } as const;
    this.db = options.readonly
      ? openSqliteReadonly(options.path, { ...open, migrations: SQLITE_MIGRATIONS })
      : openSqlite(options.path, {
          ...open,
          migrations: { steps: SQLITE_MIGRATIONS, now: nowMs() },
        });
    try {
      if (options.checkpoint === "thread" && options.path !== ":memory:" && !options.readonly) {
        this.checkpointer = new WalCheckpointer(this.db, {
          path: options.path,
          synchronous: "NORMAL",
        });
      }
    } catch (err) {
      // Nobody else holds the handle of a store that failed to open.
      this.db.close();
      throw err;
    }
    const statements = new Statements(this.db);
    const executionCache = new ExecutionCache(groupCommit);
    this.ctx = {
      db: this.db,
      statements,
      writer: new GroupCommit({
        db: this.db,
        statements,
        groupCommit,
        commitIntervalMs: options.commitIntervalMs ?? 0,
        executions: executionCache,
        checkpointer: this.checkpointer,
      }),
      executions: executionCache,
      definitions: new DefinitionCache(),
      maxErrorTextBytes: options.maxErrorTextBytes ?? DEFAULT_MAX_ERROR_TEXT_BYTES,
      nowMs,
    };
    this.membership = new Membership(this.ctx);
  }

  /** The store's clock: the `now` option, the process's clock by default. */
  async clockNow(): Promise<number> {
    return this.ctx.nowMs();
  }

  /**
   * Joins as `id` with a new epoch. From then on every write of this object reads the
   * coordinators row inside its transaction (once per group under group commit) and fails with
   * AX_STORE_FENCED, writing nothing, when the lease lapsed or a newer epoch joined.
   */
  async joinCoordinators(
    id: string,
    leaseMs: number,
    info: Record<string, unknown> = {},
  ): Promise<CoordinatorRecord> {
    return this.membership.join(id, leaseMs, info);
  }

  async renewMembership(info?: Record<string, unknown>): Promise<boolean> {
    return this.membership.renew(info);
  }

  /** Ends the lease now; this object's writes are fenced from then on (join again to write). */
  async leaveCoordinators(): Promise<void> {
    this.membership.leave();
  }

  async listCoordinators(): Promise<CoordinatorRecord[]> {
    return this.membership.list();
  }

  /**
   * Never calls `fn`: a SQLite file has one coordinator writing it, whose loops see their own
   * writes, and the CLI's commands go through that coordinator's API. Returns a stop that does
   * nothing.
   */
  watchWork(_fn: (what: WorkKind) => void): () => void {
    return () => {};
  }

  async announceWork(_what: WorkKind): Promise<void> {}

  /** Told when a group commit failed: its writes were rolled back and its callbacks dropped. */
  get onCommitError(): ((err: Error) => void) | undefined {
    return this.ctx.writer.onCommitError;
  }
  set onCommitError(fn: ((err: Error) => void) | undefined) {
    this.ctx.writer.onCommitError = fn;
  }

  /**
   * Runs `fn` once every write made so far is committed: at once (as a microtask) when none is
   * pending, else after the group's commit — or never, if that commit fails.
   */
  afterCommit(fn: () => void): void {
    this.ctx.writer.afterCommit(fn);
  }

  /** Resolves when every write made so far is committed; rejects if that commit fails. */
  flush(): Promise<void> {
    return this.ctx.writer.flush();
  }

  async putJob(
    definition: JobDefinition,
    nextFireAt: number | null,
    now: number,
    change: JobChange = { actor: "system" },
  ): Promise<StoredJob> {
    return jobs.putJob(this.ctx, definition, nextFireAt, now, change);
  }

  async setJobPaused(
    jobId: string,
    paused: boolean,
    now: number,
    actor: string,
  ): Promise<StoredJob | undefined> {
    return jobs.setJobPaused(this.ctx, jobId, paused, now, actor);
  }

  async getJob(id: string): Promise<StoredJob | undefined> {
    return jobs.getJob(this.ctx, id);
  }

  async getJobVersion(jobId: string, version: number): Promise<JobDefinition | undefined> {
    return jobs.getJobVersion(this.ctx, jobId, version);
  }

  async listJobs(): Promise<StoredJob[]> {
    return jobs.listJobs(this.ctx);
  }

  async pausedJobIds(): Promise<string[]> {
    return jobs.pausedJobIds(this.ctx);
  }

  async pageJobs(query: { limit: number; cursor?: string }): Promise<JobPage> {
    return jobs.pageJobs(this.ctx, query);
  }

  async listListeningJobs(): Promise<StoredJob[]> {
    return jobs.listListeningJobs(this.ctx);
  }

  async listLeadFires(): Promise<{ jobId: string; nextFireAt: number; leadMs: number }[]> {
    return jobs.listLeadFires(this.ctx);
  }

  async listDueFires(untilMs: number): Promise<{ jobId: string; nextFireAt: number }[]> {
    return jobs.listDueFires(this.ctx, untilMs);
  }

  async listJobsDueBy(untilMs: number): Promise<StoredJob[]> {
    return jobs.listJobsDueBy(this.ctx, untilMs);
  }

  async deleteJob(id: string, change?: { actor: string; at: number }): Promise<boolean> {
    return jobs.deleteJob(this.ctx, id, change);
  }

  async appendJobHistory(entry: Omit<JobHistoryEntry, "seq">): Promise<void> {
    jobs.appendJobHistory(this.ctx, entry);
  }

  async listJobHistory(
    jobId: string,
    limit = 100,
    beforeSeq = Number.MAX_SAFE_INTEGER,
  ): Promise<JobHistoryEntry[]> {
    return jobs.listJobHistory(this.ctx, jobId, limit, beforeSeq);
  }

  async recordFire(fire: {
    jobId: string;
    scheduledFor: number;
    nextFireAt: number | null;
    execution: NewExecution;
    at: number;
  }): Promise<boolean> {
    return executions.recordFire(this.ctx, fire);
  }

  async recordFires(batch: FireBatch): Promise<boolean> {
    return executions.recordFires(this.ctx, batch);
  }

  async recordEvent(event: EventFiring): Promise<EventRecorded> {
    return executions.recordEvent(this.ctx, event);
  }

  async createExecution(
    execution: NewExecution,
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<void> {
    executions.createExecution(this.ctx, execution, at, detail);
  }

  async createExecutions(
    list: readonly NewExecution[],
    at: number,
    detail?: Record<string, unknown>,
    idempotency?: IdempotencyRecord,
  ): Promise<void> {
    executions.createExecutions(this.ctx, list, at, detail, idempotency);
  }

  async getIdempotency(scope: string): Promise<IdempotencyRecord | undefined> {
    return executions.getIdempotency(this.ctx, scope);
  }

  async applyTransition(w: TransitionWrite): Promise<boolean> {
    return executions.applyTransition(this.ctx, w);
  }

  async getExecution(id: string): Promise<ExecutionRecord | undefined> {
    return queries.getExecution(this.ctx, id);
  }

  async listExecutions(filter: ExecutionFilter = {}): Promise<ExecutionRecord[]> {
    return queries.listExecutions(this.ctx, filter);
  }

  async listExecutionsInStates(states: ExecState[], limit: number): Promise<ExecutionRecord[]> {
    return queries.listExecutionsInStates(this.ctx, states, limit);
  }

  async listDue(
    now: number,
    pendingBy: number,
    limit: number,
    options: DueOptions = {},
  ): Promise<due.DueWork> {
    return due.listDue(this.ctx, now, pendingBy, limit, options);
  }

  async listOpenPeers(by: { jobId: string } | { groupKey: string }): Promise<PeerRecord[]> {
    return queries.listOpenPeers(this.ctx, by);
  }

  async listRecentlyRouted(jobId: string, limit: number): Promise<RoutedRecord[]> {
    return queries.listRecentlyRouted(this.ctx, jobId, limit);
  }

  async countInFlightByAgent(): Promise<Record<string, number>> {
    return queries.countInFlightByAgent(this.ctx);
  }

  async getTimeline(executionId: string): Promise<TimelineEntry[]> {
    return queries.getTimeline(this.ctx, executionId);
  }

  async pageExecutions(query: ExecutionPageQuery): Promise<ExecutionPage> {
    return queries.pageExecutions(this.ctx, query);
  }

  async countOpenExecutions(): Promise<Partial<Record<ExecState, number>>> {
    return queries.countOpenExecutions(this.ctx);
  }

  async purgeFinishedBefore(cutoffMs: number, limit: number): Promise<number> {
    return purgeFinishedBefore(this.ctx, cutoffMs, limit);
  }

  async putAlert(a: AlertRecord): Promise<void> {
    alerts.putAlert(this.ctx, a);
  }

  async updateAlert(
    id: string,
    p: Pick<AlertRecord, "status" | "attempts" | "lastError" | "updatedAt">,
  ): Promise<void> {
    alerts.updateAlert(this.ctx, id, p);
  }

  async listAlerts(filter: { pending?: boolean; limit?: number } = {}): Promise<AlertRecord[]> {
    return alerts.listAlerts(this.ctx, filter);
  }

  async bumpCounter(name: string, by = 1): Promise<void> {
    alerts.bumpCounter(this.ctx, name, by);
  }

  async counters(): Promise<Record<string, number>> {
    return alerts.counters(this.ctx);
  }

  async getAgent(agentId: string): Promise<AgentRecord | undefined> {
    return fleet.getAgent(this.ctx, agentId);
  }

  async listAgents(): Promise<AgentRecord[]> {
    return fleet.listAgents(this.ctx);
  }

  async putAgent(agent: AgentRecord, alerts?: readonly AlertRecord[]): Promise<void> {
    fleet.putAgent(this.ctx, agent, alerts);
  }

  async putAgents(agents: readonly AgentRecord[]): Promise<void> {
    fleet.putAgents(this.ctx, agents);
  }

  async setAckedSeq(agentId: string, journalId: string, seq: number): Promise<void> {
    fleet.setAckedSeq(this.ctx, agentId, journalId, seq);
  }

  async putIdentity(identity: IdentityRecord): Promise<void> {
    fleet.putIdentity(this.ctx, identity);
  }

  async listIdentities(): Promise<IdentityRecord[]> {
    return fleet.listIdentities(this.ctx);
  }

  async putApiToken(t: ApiTokenRecord): Promise<void> {
    fleet.putApiToken(this.ctx, t);
  }

  async touchApiToken(name: string, at: number): Promise<void> {
    fleet.touchApiToken(this.ctx, name, at);
  }

  async listApiTokens(): Promise<ApiTokenRecord[]> {
    return fleet.listApiTokens(this.ctx);
  }

  async deleteApiToken(name: string): Promise<boolean> {
    return fleet.deleteApiToken(this.ctx, name);
  }

  async createRollout(
    r: RolloutRecord,
    event: Omit<RolloutEvent, "seq">,
    idempotency?: IdempotencyRecord,
  ): Promise<boolean> {
    return rollouts.createRollout(this.ctx, r, event, idempotency);
  }

  async getRollout(id: string): Promise<RolloutRecord | undefined> {
    return rollouts.getRollout(this.ctx, id);
  }

  async pageRollouts(query: {
    limit: number;
    cursor?: string;
    state?: RolloutState;
  }): Promise<RolloutPage> {
    return rollouts.pageRollouts(this.ctx, query);
  }

  async listUnsettledRollouts(): Promise<RolloutRecord[]> {
    return rollouts.listUnsettledRollouts(this.ctx);
  }

  async updateRollout(
    next: RolloutRecord,
    expectedVersion: number,
    event?: Omit<RolloutEvent, "seq">,
  ): Promise<boolean> {
    return rollouts.updateRollout(this.ctx, next, expectedVersion, event);
  }

  async getRolloutTimeline(id: string): Promise<RolloutEvent[]> {
    return rollouts.getRolloutTimeline(this.ctx, id);
  }

  async reachRolloutTargets(
    rolloutId: string,
    targets: readonly { agentId: string; wave: number; execution: NewExecution }[],
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<string[]> {
    return rollouts.reachRolloutTargets(this.ctx, rolloutId, targets, at, detail);
  }

  async listRolloutTargets(rolloutId: string): Promise<RolloutTarget[]> {
    return rollouts.listRolloutTargets(this.ctx, rolloutId);
  }

  async countRolloutExecutions(rolloutId: string): Promise<RolloutCount[]> {
    return rollouts.countRolloutExecutions(this.ctx, rolloutId);
  }

  async putBundle(record: BundleRecord, archive: Buffer): Promise<boolean> {
    return bundles.putBundle(this.ctx, record, archive);
  }

  async getBundle(sha256: string): Promise<BundleRecord | undefined> {
    return bundles.getBundle(this.ctx, sha256);
  }

  async readBundleArchive(sha256: string): Promise<Buffer | undefined> {
    return bundles.readBundleArchive(this.ctx, sha256);
  }

  async pageBundles(query: {
    limit: number;
    cursor?: string;
    profile?: string;
  }): Promise<BundlePage> {
    return bundles.pageBundles(this.ctx, query);
  }

  async close(): Promise<void> {
    if (!this.db.open) return;
    this.ctx.writer.commitOpenGroup();
    this.checkpointer?.close();
    this.db.close();
  }
}
