import type Database from "better-sqlite3";
import { AxError } from "../../../shared/errors.js";
import { type ExecState, TERMINAL_STATES } from "../../../shared/fsm.js";
import { openSqlite, openSqliteReadonly } from "../../../shared/sqlite.js";
import { WalCheckpointer } from "../../../shared/wal-checkpoint.js";
import type { JobDefinition } from "../../domain/job.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import type {
  AgentRecord,
  AlertRecord,
  ApiTokenRecord,
  DueOptions,
  ExecutionFilter,
  ExecutionPage,
  ExecutionPageQuery,
  ExecutionRecord,
  IdentityRecord,
  JobChange,
  JobHistoryEntry,
  JobPage,
  NewExecution,
  PeerRecord,
  Store,
  StoredJob,
  TimelineEntry,
  TransitionWrite,
} from "../port.js";
import { SQLITE_MIGRATIONS } from "./migrations.js";
import {
  type AgentRow,
  type AlertRow,
  type ApiTokenRow,
  type ExecutionRow,
  type JobHistoryRow,
  type JobRow,
  PATCH_COLUMNS,
  type TimelineRow,
  toAgent,
  toAlert,
  toApiToken,
  toExecution,
  toJob,
  toJobHistoryEntry,
  toTimelineEntry,
} from "./rows.js";

/**
 * Stored error text (an execution's message, a timeline entry's detail) is capped at this many
 * UTF-8 bytes by default, so one bad handler cannot bloat the store (DESIGN §6).
 */
export const DEFAULT_MAX_ERROR_TEXT_BYTES = 2048;

/**
 * The states a purge may delete. Written out, not built from TERMINAL_STATES: the purge query must
 * repeat the WHERE clause of the partial index `executions_finished` (migration 8) exactly.
 */
export const TERMINAL_SQL =
  "(state = 'SUCCEEDED' OR state = 'FAILED' OR state = 'TIMED_OUT' OR state = 'EXPIRED' OR state = 'CANCELED' OR state = 'SKIPPED')";

/** The WHERE clause of the partial indexes of open executions (migration 8), word for word. */
export const OPEN_SQL =
  "(state = 'PENDING' OR state = 'DISPATCHED' OR state = 'SCHEDULED' OR state = 'RUNNING' OR state = 'RETRY_WAITING')";

/**
 * The WHERE clause of the partial index `jobs_listening` (migration 9), word for word: the jobs
 * whose trigger is `event` or `after`.
 */
export const LISTENING_SQL =
  "(json_extract(definition, '$.trigger.type') = 'event' OR json_extract(definition, '$.trigger.type') = 'after')";

/** A definition as versions compare it: `paused` is the job's state, not part of a version. */
function versionedJson(definition: JobDefinition): string {
  const { paused: _state, ...rest } = definition;
  return canonicalJson(rest);
}

/** The UPDATE of each patch shape, made when first needed (a few shapes occur in practice). */
const applyTransitionSql: (string | undefined)[] = [];

/**
 * A transition's compare-and-set for one patch shape (a bit per {@link PATCH_COLUMNS} entry the
 * patch sets): the snapshot, then the patched columns (`message` also sets `message_bytes`),
 * then id, expected state and round. Only the columns a transition changes are in its SET list,
 * so it binds a dozen values instead of forty, and SQLite rewrites only the indexes on them.
 */
function applyTransitionSqlFor(shape: number): string {
  let sql = applyTransitionSql[shape];
  if (sql === undefined) {
    const set = ["state = ?", "round = ?", "attempt = ?", "max_attempts = ?", "dispatches = ?"];
    set.push("max_dispatches = ?", "updated_at = ?");
    PATCH_COLUMNS.forEach(([key, column], i) => {
      if ((shape & (1 << i)) === 0) return;
      set.push(key === "message" ? "message = ?, message_bytes = ?" : `${column} = ?`);
    });
    sql = `UPDATE executions SET ${set.join(", ")} WHERE id = ? AND state = ? AND round = ?`;
    applyTransitionSql[shape] = sql;
  }
  return sql;
}

/** How many executions {@link SqliteStore} keeps in memory under group commit. */
const EXECUTION_CACHE_SIZE = 20_000;

/** How many parsed job definitions {@link SqliteStore} keeps. */
const DEFINITION_CACHE_SIZE = 4096;

/** Freezes `value` and everything in it; returns it. */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** JSON with every object's keys sorted: key order alone never makes a new job version. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/**
 * Cuts `text` to at most `maxBytes` UTF-8 bytes, never inside a character, and returns it with the
 * full size in bytes. (A lone surrogate counts as U+FFFD, three bytes, which is how it is stored.)
 */
function capUtf8(text: string, maxBytes: number): { text: string; bytes: number } {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes <= maxBytes) return { text, bytes };
  const buf = Buffer.from(text, "utf8");
  let end = Math.max(0, maxBytes);
  // The first byte left out is a continuation byte (10xxxxxx) when the cap falls inside a
  // character: back up to that character's lead byte and leave it out whole.
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return { text: buf.toString("utf8", 0, end), bytes };
}

/** Translates a driver error into an AxError, keeping AxErrors as they are. */
function wrap<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof AxError) throw err;
    throw new AxError("AX_STORE_FAILED", `store: ${what} failed: ${(err as Error).message}`, {
      cause: err,
      retryable: (err as { code?: string }).code === "SQLITE_BUSY",
    });
  }
}

export interface SqliteStoreOptions {
  /** The database file; `:memory:` for a throwaway store. */
  path: string;
  now?: () => number;
  /**
   * Cap, in UTF-8 bytes, on an execution's stored message and a timeline entry's detail JSON.
   * @default 2048
   */
  maxErrorTextBytes?: number;
  /**
   * Group commit: writes join one open transaction, committed once per turn of the event loop
   * (or every {@link GROUP_COMMIT_MAX_WRITES} writes), instead of one commit each. Their
   * effects are visible to this store's reads at once and durable at the commit; callers gate
   * whatever tells the outside world about a write behind {@link SqliteStore.afterCommit}.
   * Only for a store that is the file's sole writer in its thread: a second connection in the
   * same thread would wait on the open transaction's lock while holding the thread.
   * @default false
   */
  groupCommit?: boolean;
  /**
   * Group commit: the least time, in ms, from one commit to the next. A group opened sooner waits
   * for the rest of it (a timer) instead of committing at the end of its loop turn. Under a steady
   * stream of writes each commit then carries many turns' writes: pages that several of them
   * change are written to the WAL once, and a commit's fixed costs are paid less often. After a
   * quiet spell a write still commits at the end of its turn.
   * @default 0
   */
  commitIntervalMs?: number;
  /**
   * Where WAL checkpoints run: "thread" (a worker thread with its own connection, so the fsyncs
   * and copying of a checkpoint never hold up the coordinator's event loop; see
   * shared/wal-checkpoint.ts) or "inline" (inside a commit, as SQLite does by default).
   * @default "inline"
   */
  checkpoint?: "thread" | "inline";
  /**
   * Open an existing store for reading only: a missing file, or one whose schema is not this
   * build's, is refused (AX_STORE_FAILED, AX_STORE_MIGRATION); writes fail with AX_STORE_FAILED.
   * @default false
   */
  readonly?: boolean;
}

/** Inserts or replaces one agent's record. */
const PUT_AGENT_SQL = `INSERT INTO agents (agent_id, record, instance_id, journal_id, acked_seq, status)
   VALUES (@agentId, @record, @instanceId, @journalId, @ackedSeq, @status)
   ON CONFLICT (agent_id) DO UPDATE SET record = @record, instance_id = @instanceId,
     journal_id = @journalId, acked_seq = @ackedSeq, status = @status`;

/** A group commit is forced after this many writes, which bounds a transaction's size. */
export const GROUP_COMMIT_MAX_WRITES = 4096;

/** The embedded store: one SQLite file in WAL mode. */
export class SqliteStore implements Store {
  private readonly db: Database.Database;
  /** Prepared statements by SQL text: preparing on every call cost more than running them. */
  private readonly statements = new Map<string, Database.Statement>();

  private prepare(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }
  private readonly maxErrorTextBytes: number;

  private readonly groupCommit: boolean;
  /** Told when a group commit failed: its writes were rolled back and its callbacks dropped. */
  onCommitError: ((err: Error) => void) | undefined;
  /** The open group's state: writes in it, callbacks and waiters for its commit, its timer. */
  private groupWrites = 0;
  private afterCommitQueue: (() => void)[] = [];
  private flushWaiters: { resolve: () => void; reject: (err: Error) => void }[] = [];
  private commitTimer:
    | { kind: "immediate"; handle: ReturnType<typeof setImmediate> }
    | { kind: "timeout"; handle: ReturnType<typeof setTimeout> }
    | undefined;
  private readonly commitIntervalMs: number;
  /** When the last group committed (performance.now()), for {@link SqliteStoreOptions.commitIntervalMs}. */
  private lastCommitAt = Number.NEGATIVE_INFINITY;
  /** Off-thread WAL checkpoints, when asked for. */
  private checkpointer: WalCheckpointer | undefined;

  /** The clock of writes that take no time of their caller's. */
  private readonly nowMs: () => number;

  constructor(options: SqliteStoreOptions) {
    this.nowMs = options.now ?? Date.now;
    this.maxErrorTextBytes = options.maxErrorTextBytes ?? DEFAULT_MAX_ERROR_TEXT_BYTES;
    this.groupCommit = options.groupCommit ?? false;
    this.commitIntervalMs = options.commitIntervalMs ?? 0;
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
          migrations: { steps: SQLITE_MIGRATIONS, now: this.nowMs() },
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
  }

  /**
   * Runs `fn` in an IMMEDIATE transaction. A deferred one that reads first cannot wait for another
   * process's write lock: it fails at once with SQLITE_BUSY, whatever busy_timeout says.
   */
  private write<T>(fn: () => T, guard: "savepoint" | "statement" | "none" = "savepoint"): T {
    this.runWrite ??= this.db.transaction((f: () => unknown) => f());
    if (!this.groupCommit) {
      const result = this.runWrite.immediate(fn) as T;
      this.checkpointer?.wrote();
      return result;
    }
    if (!this.db.inTransaction) {
      this.prepare("BEGIN IMMEDIATE").run();
      const wait = this.lastCommitAt + this.commitIntervalMs - performance.now();
      this.commitTimer =
        wait > 0
          ? { kind: "timeout", handle: setTimeout(() => this.commitGroup(), Math.ceil(wait)) }
          : { kind: "immediate", handle: setImmediate(() => this.commitGroup()) };
    }
    let result: T;
    if (guard === "savepoint") {
      // Inside the open transaction better-sqlite3 runs `fn` in a savepoint: a write that throws
      // undoes only its own changes, not the group's.
      try {
        result = this.runWrite(fn) as T;
      } catch (err) {
        // What the failed write cached may have been undone with it.
        this.executions.clear();
        throw err;
      }
    } else {
      // One statement ("statement": SQLite undoes a failed one by itself) or statements that
      // cannot break a constraint ("none") need no savepoint. After any other error the group's
      // state is unknown: it is rolled back whole, as a failed commit would be.
      try {
        result = fn();
      } catch (err) {
        const constraint = (err as { code?: string }).code?.startsWith("SQLITE_CONSTRAINT");
        if (!(guard === "statement" && constraint)) this.failGroup(err);
        throw err;
      }
    }
    if (++this.groupWrites >= GROUP_COMMIT_MAX_WRITES) this.commitGroup();
    return result;
  }

  /** Rolls the open group back and tells its waiters and the owner why. */
  private failGroup(err: unknown): void {
    this.executions.clear();
    this.clearCommitTimer();
    this.groupWrites = 0;
    const waiters = this.flushWaiters;
    this.afterCommitQueue = [];
    this.flushWaiters = [];
    if (this.db.inTransaction) this.db.exec("ROLLBACK");
    const error = new AxError(
      "AX_STORE_FAILED",
      `store: commit failed: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
    for (const w of waiters) w.reject(error);
    this.onCommitError?.(error);
  }

  private clearCommitTimer(): void {
    const timer = this.commitTimer;
    this.commitTimer = undefined;
    if (timer?.kind === "timeout") clearTimeout(timer.handle);
    else if (timer?.kind === "immediate") clearImmediate(timer.handle);
  }

  /** Commits the open group, then runs its after-commit callbacks; on failure rolls it back. */
  private commitGroup(): void {
    this.clearCommitTimer();
    this.groupWrites = 0;
    const callbacks = this.afterCommitQueue;
    const waiters = this.flushWaiters;
    this.afterCommitQueue = [];
    this.flushWaiters = [];
    if (!this.db.inTransaction) {
      for (const w of waiters) w.resolve();
      for (const cb of callbacks) queueMicrotask(cb);
      return;
    }
    try {
      this.prepare("COMMIT").run();
      this.lastCommitAt = performance.now();
    } catch (err) {
      this.flushWaiters = waiters;
      this.failGroup(err);
      return;
    }
    this.checkpointer?.wrote();
    for (const w of waiters) w.resolve();
    // Deferred, so a commit forced inside a write never runs callers' code inside that write.
    for (const cb of callbacks) queueMicrotask(cb);
  }

  /**
   * Runs `fn` once every write made so far is committed: at once (as a microtask) when none is
   * pending, else after the group's commit — or never, if that commit fails.
   */
  afterCommit(fn: () => void): void {
    if (this.groupCommit && this.db.inTransaction) this.afterCommitQueue.push(fn);
    else queueMicrotask(fn);
  }

  /** Resolves when every write made so far is committed; rejects if that commit fails. */
  flush(): Promise<void> {
    if (!this.groupCommit || !this.db.inTransaction) return Promise.resolve();
    return new Promise((resolve, reject) => this.flushWaiters.push({ resolve, reject }));
  }

  /** One transaction wrapper, reused: creating one per call costs more than a short write. */
  private runWrite: Database.Transaction<(f: () => unknown) => unknown> | undefined;

  async putJob(
    definition: JobDefinition,
    nextFireAt: number | null,
    now: number,
    change: JobChange = { actor: "system" },
  ): Promise<StoredJob> {
    return wrap("putJob", () =>
      this.write(() => {
        const json = JSON.stringify(definition);
        const row = this.prepare("SELECT * FROM jobs WHERE id = ?").get(definition.id) as
          | JobRow
          | undefined;
        if (row && versionedJson(JSON.parse(row.definition)) === versionedJson(definition)) {
          return toJob(row);
        }
        // A job deleted and created again continues its versions (deleteJob keeps them).
        const version = (row?.version ?? this.lastJobVersion(definition.id)) + 1;
        this.prepare(
          `INSERT INTO jobs (id, version, definition, next_fire_at, paused, created_at, updated_at,
               updated_by)
             VALUES (@id, @version, @definition, @nextFireAt, @paused, @now, @now, @actor)
             ON CONFLICT (id) DO UPDATE SET version = @version, definition = @definition,
               next_fire_at = @nextFireAt, updated_at = @now, updated_by = @actor`,
        ).run({
          id: definition.id,
          version,
          definition: json,
          nextFireAt,
          paused: definition.paused ? 1 : 0,
          now,
          actor: change.actor,
        });
        this.prepare(
          "INSERT INTO job_versions (job_id, version, definition, created_at) VALUES (?, ?, ?, ?)",
        ).run(definition.id, version, json, now);
        this.insertJobHistory({
          jobId: definition.id,
          at: now,
          action: row ? "updated" : "created",
          version,
          actor: change.actor,
          detail: null,
        });
        return toJob(this.prepare("SELECT * FROM jobs WHERE id = ?").get(definition.id) as JobRow);
      }),
    );
  }

  async setJobPaused(
    jobId: string,
    paused: boolean,
    now: number,
    actor: string,
  ): Promise<StoredJob | undefined> {
    return wrap("setJobPaused", () =>
      this.write(() => {
        const row = this.prepare("SELECT * FROM jobs WHERE id = ?").get(jobId) as
          | JobRow
          | undefined;
        if (!row) return undefined;
        if ((row.paused === 1) === paused) return toJob(row);
        this.prepare("UPDATE jobs SET paused = ? WHERE id = ?").run(paused ? 1 : 0, jobId);
        this.insertJobHistory({
          jobId,
          at: now,
          action: paused ? "paused" : "resumed",
          version: row.version,
          actor,
          detail: null,
        });
        return toJob({ ...row, paused: paused ? 1 : 0 });
      }),
    );
  }

  async getJob(id: string): Promise<StoredJob | undefined> {
    return wrap("getJob", () => {
      const cached = this.definitions.get(id);
      // The definition's text is read only when the cache cannot answer: one query either way.
      const row = this.prepare(
        cached
          ? "SELECT id, version, next_fire_at, paused, created_at, updated_at, updated_by FROM jobs WHERE id = ?"
          : "SELECT * FROM jobs WHERE id = ?",
      ).get(id) as (Omit<JobRow, "definition"> & { definition?: string }) | undefined;
      if (!row) return undefined;
      let definition: JobDefinition;
      if (cached?.version === row.version) {
        definition = cached.definition;
      } else {
        const json =
          row.definition ??
          this.prepare("SELECT definition FROM jobs WHERE id = ?").pluck().get(id);
        definition = deepFreeze(JSON.parse(json as string) as JobDefinition);
        if (this.definitions.size >= DEFINITION_CACHE_SIZE) {
          // The oldest entry goes (a Map iterates in insertion order).
          const oldest = this.definitions.keys().next().value;
          if (oldest !== undefined) this.definitions.delete(oldest);
        }
        this.definitions.set(id, { version: row.version, definition });
      }
      return {
        id: row.id,
        version: row.version,
        definition,
        nextFireAt: row.next_fire_at,
        paused: row.paused === 1,
        createdAt: row.created_at,
        updatedAt: row.updated_at,
        updatedBy: row.updated_by,
      };
    });
  }

  /**
   * Parsed definitions by job id and version: a job is read when it fires and again when its
   * execution is dispatched, and parsing its JSON each time cost more than reading the row.
   * Frozen, since callers share them. Versions only rise, so a version seen is its definition.
   */
  private readonly definitions = new Map<string, { version: number; definition: JobDefinition }>();

  /**
   * Executions as last written or read, by id, when this store is its file's only writer (group
   * commit): every report and dispatch reads its execution first, and most were written moments
   * before. Updated on every write, dropped on any failed one. Callers share the records and
   * never change them.
   */
  private executions = new Map<string, ExecutionRecord>();

  private cacheExecution(e: ExecutionRecord): void {
    if (!this.groupCommit) return;
    if (this.executions.size >= EXECUTION_CACHE_SIZE && !this.executions.has(e.id)) {
      // The oldest quarter goes at once, into a new map. Deleting the oldest entry one at a time
      // left the map's deleted slots at its front for every later lookup of "the oldest" to step
      // over: creating 10,000 executions took three times as long once the cache was full.
      const keep = [...this.executions].slice(EXECUTION_CACHE_SIZE / 4);
      this.executions = new Map(keep);
    }
    this.executions.set(e.id, e);
  }

  async getJobVersion(jobId: string, version: number): Promise<JobDefinition | undefined> {
    const cached = this.definitions.get(jobId);
    if (cached?.version === version) return cached.definition;
    const json = wrap("getJobVersion", () =>
      this.prepare("SELECT definition FROM job_versions WHERE job_id = ? AND version = ?")
        .pluck()
        .get(jobId, version),
    ) as string | undefined;
    return json === undefined ? undefined : deepFreeze(JSON.parse(json) as JobDefinition);
  }

  async listJobs(): Promise<StoredJob[]> {
    return wrap("listJobs", () =>
      (this.prepare("SELECT * FROM jobs ORDER BY id").all() as JobRow[]).map(toJob),
    );
  }

  async pageJobs(query: { limit: number; cursor?: string }): Promise<JobPage> {
    const limit = Math.max(1, Math.floor(query.limit));
    // One row more than the page says whether there is a next one.
    const rows = wrap("pageJobs", () =>
      query.cursor === undefined
        ? (this.prepare("SELECT * FROM jobs ORDER BY id LIMIT ?").all(limit + 1) as JobRow[])
        : (this.prepare("SELECT * FROM jobs WHERE id > ? ORDER BY id LIMIT ?").all(
            query.cursor,
            limit + 1,
          ) as JobRow[]),
    );
    const items = rows.slice(0, limit).map(toJob);
    const last = items.at(-1);
    return { items, nextCursor: rows.length > limit && last ? last.id : null };
  }

  async listListeningJobs(): Promise<StoredJob[]> {
    return wrap("listListeningJobs", () =>
      (this.prepare(`SELECT * FROM jobs WHERE ${LISTENING_SQL} ORDER BY id`).all() as JobRow[]).map(
        toJob,
      ),
    );
  }

  async listLeadFires(): Promise<{ jobId: string; nextFireAt: number; leadMs: number }[]> {
    return wrap("listLeadFires", () =>
      (
        this.prepare(
          // INDEXED BY: left to itself the planner walked jobs_next_fire, every active job, and
          // parsed each definition: about 100 ms of the event loop per scan at 100,000 jobs.
          `SELECT id, next_fire_at, json_extract(definition, '$.dispatchLead') AS lead
             FROM jobs INDEXED BY jobs_lead
             WHERE json_extract(definition, '$.dispatchLead') IS NOT NULL
               AND paused = 0 AND next_fire_at IS NOT NULL`,
        ).all() as { id: string; next_fire_at: number; lead: number }[]
      ).map((r) => ({ jobId: r.id, nextFireAt: r.next_fire_at, leadMs: r.lead })),
    );
  }

  async listDueFires(untilMs: number): Promise<{ jobId: string; nextFireAt: number }[]> {
    return wrap("listDueFires", () =>
      (
        this.prepare(
          "SELECT id, next_fire_at FROM jobs WHERE paused = 0 AND next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at",
        ).all(untilMs) as { id: string; next_fire_at: number }[]
      ).map((r) => ({ jobId: r.id, nextFireAt: r.next_fire_at })),
    );
  }

  async listJobsDueBy(untilMs: number): Promise<StoredJob[]> {
    return wrap("listJobsDueBy", () =>
      (
        this.prepare(
          "SELECT * FROM jobs WHERE paused = 0 AND next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at",
        ).all(untilMs) as JobRow[]
      ).map(toJob),
    );
  }

  async recordFire(fire: {
    jobId: string;
    scheduledFor: number;
    nextFireAt: number | null;
    execution: NewExecution;
    at: number;
  }): Promise<boolean> {
    return wrap("recordFire", () =>
      this.write(() => {
        // Compare-and-set on the job's next fire time: only one writer advances it.
        const advanced = this.prepare(
          "UPDATE jobs SET next_fire_at = ?, updated_at = ? WHERE id = ? AND next_fire_at = ?",
        ).run(fire.nextFireAt, fire.at, fire.jobId, fire.scheduledFor);
        if (advanced.changes !== 1) return false;
        const inserted = this.prepare(
          "INSERT OR IGNORE INTO fires (job_id, scheduled_for, fired_at, execution_id) VALUES (?, ?, ?, ?)",
        ).run(fire.jobId, fire.scheduledFor, fire.at, fire.execution.id);
        if (inserted.changes !== 1) return false;
        this.insertExecution(fire.execution, fire.at, { scheduledFor: fire.scheduledFor });
        return true;
      }),
    );
  }

  async recordFires(batch: {
    jobId: string;
    expectedNext: number;
    nextFireAt: number | null;
    fires: { scheduledFor: number; executions: NewExecution[] }[];
    missed: number[];
    at: number;
  }): Promise<boolean> {
    return wrap("recordFires", () =>
      this.write(() => {
        // Compare-and-set on the job's next fire time: only one writer advances it.
        const advanced = this.prepare(
          "UPDATE jobs SET next_fire_at = ?, updated_at = ? WHERE id = ? AND next_fire_at = ?",
        ).run(batch.nextFireAt, batch.at, batch.jobId, batch.expectedNext);
        if (advanced.changes !== 1) return false;
        const insertFire = this.prepare(
          "INSERT OR IGNORE INTO fires (job_id, scheduled_for, fired_at, execution_id, status) VALUES (?, ?, ?, ?, ?)",
        );
        for (const t of batch.missed) insertFire.run(batch.jobId, t, batch.at, "", "missed");
        for (const fire of batch.fires) {
          const first = fire.executions[0];
          if (!first) continue;
          // A nominal time already in the ledger is never fired again.
          if (
            insertFire.run(batch.jobId, fire.scheduledFor, batch.at, first.id, "fired").changes !==
            1
          )
            continue;
          for (const e of fire.executions) {
            this.insertExecution({ ...e, scheduledFor: fire.scheduledFor }, batch.at, {
              scheduledFor: fire.scheduledFor,
              ...(e.shardTotal ? { shard: `${e.shardIndex}/${e.shardTotal}` } : {}),
            });
          }
        }
        return true;
      }),
    );
  }

  async createExecution(
    execution: NewExecution,
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<void> {
    wrap("createExecution", () =>
      this.write(() => this.insertExecution(execution, at, detail ?? null)),
    );
  }

  async createExecutions(
    executions: readonly NewExecution[],
    at: number,
    detail?: Record<string, unknown>,
  ): Promise<void> {
    if (executions.length === 0) return;
    wrap("createExecutions", () =>
      this.write(() => {
        // One detail for the batch, serialised once; each execution is new, so its first
        // timeline entry is seq 1 without looking.
        const detailJson = this.detailJson(detail ?? null);
        for (const e of executions) this.insertExecution(e, at, detail ?? null, detailJson);
      }),
    );
  }

  private insertExecution(
    e: NewExecution,
    at: number,
    detail: Record<string, unknown> | null,
    detailJson: string | null = this.detailJson(detail),
  ): void {
    const params = JSON.stringify(e.params);
    const tags = e.tags && Object.keys(e.tags).length > 0 ? JSON.stringify(e.tags) : null;
    // The row as toExecution would read it back (JSON values parsed from what is stored).
    const r: ExecutionRecord = {
      id: e.id,
      kind: e.kind,
      jobId: e.jobId,
      jobVersion: e.jobVersion,
      handler: e.handler,
      params: JSON.parse(params) as Record<string, unknown>,
      targetAgentId: e.targetAgentId,
      agentId: null,
      state: "PENDING",
      round: 0,
      attempt: 1,
      maxAttempts: e.maxAttempts,
      dispatches: 0,
      maxDispatches: e.maxDispatches,
      fireAt: e.fireAt,
      deadline: e.deadline,
      timeoutMs: e.timeoutMs,
      dispatchTimeoutMs: e.dispatchTimeoutMs,
      priority: e.priority,
      retryBaseMs: e.retryBaseMs,
      retryCapMs: e.retryCapMs,
      createdAt: e.createdAt,
      updatedAt: e.createdAt,
      dispatchedAt: null,
      startedAt: null,
      finishedAt: null,
      lateMs: null,
      nextAttemptAt: null,
      result: null,
      message: null,
      messageBytes: null,
      scheduledFor: e.scheduledFor ?? null,
      shardIndex: e.shardIndex ?? null,
      shardTotal: e.shardTotal ?? null,
      groupKey: e.groupKey ?? null,
      tags: tags === null ? {} : (JSON.parse(tags) as Record<string, string>),
    };
    // Positional parameters: binding named ones cost a property lookup each, per row.
    this.prepare(
      `INSERT INTO executions (id, kind, job_id, job_version, handler, params, target_agent_id, agent_id,
           state, round, attempt, max_attempts, dispatches, max_dispatches, fire_at, deadline, timeout_ms,
           dispatch_timeout_ms, priority, retry_base_ms, retry_cap_ms, created_at, updated_at,
           scheduled_for, shard_index, shard_total, group_key, tags)
         VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 'PENDING', 0, 1, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(
      r.id,
      r.kind,
      r.jobId,
      r.jobVersion,
      r.handler,
      params,
      r.targetAgentId,
      r.maxAttempts,
      r.maxDispatches,
      r.fireAt,
      r.deadline,
      r.timeoutMs,
      r.dispatchTimeoutMs,
      r.priority,
      r.retryBaseMs,
      r.retryCapMs,
      r.createdAt,
      r.createdAt,
      r.scheduledFor,
      r.shardIndex,
      r.shardTotal,
      r.groupKey,
      tags,
    );
    // A new execution's first entry: seq 1, with no look at the timeline.
    this.prepare(
      `INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
         VALUES (?, 1, ?, 'created', NULL, 'PENDING', 0, NULL, ?)`,
    ).run(e.id, at, detailJson);
    this.cacheExecution(r);
  }

  private appendTimeline(
    executionId: string,
    at: number,
    event: string,
    from: ExecState | null,
    to: ExecState,
    round: number,
    agentId: string | null,
    detail: Record<string, unknown> | null,
  ): void {
    this.prepare(
      `INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
         VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM timeline WHERE execution_id = ?), ?, ?, ?, ?, ?, ?, ?)`,
    ).run(executionId, executionId, at, event, from, to, round, agentId, this.detailJson(detail));
  }

  /** A detail's JSON, or a marker with its size when it is over the byte cap. */
  private detailJson(detail: Record<string, unknown> | null): string | null {
    if (detail === null) return null;
    const json = JSON.stringify(detail);
    const bytes = Buffer.byteLength(json, "utf8");
    return bytes <= this.maxErrorTextBytes ? json : JSON.stringify({ truncated: true, bytes });
  }

  async getExecution(id: string): Promise<ExecutionRecord | undefined> {
    const cached = this.executions.get(id);
    if (cached) return cached;
    const row = wrap("getExecution", () =>
      this.prepare("SELECT * FROM executions WHERE id = ?").get(id),
    ) as ExecutionRow | undefined;
    if (!row) return undefined;
    const e = toExecution(row);
    this.cacheExecution(e);
    return e;
  }

  async listExecutions(filter: ExecutionFilter = {}): Promise<ExecutionRecord[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.jobId !== undefined) {
      where.push("job_id = ?");
      args.push(filter.jobId);
    }
    if (filter.agentId !== undefined) {
      where.push("agent_id = ?");
      args.push(filter.agentId);
    }
    if (filter.groupKey !== undefined) {
      where.push("group_key = ?");
      args.push(filter.groupKey);
    }
    if (filter.scheduledFor !== undefined) {
      where.push("scheduled_for = ?");
      args.push(filter.scheduledFor);
    }
    if (filter.states !== undefined && filter.states.length > 0) {
      where.push(`state IN (${filter.states.map(() => "?").join(", ")})`);
      args.push(...filter.states);
    }
    const sql = `SELECT * FROM executions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY created_at DESC, id DESC LIMIT ?`;
    args.push(filter.limit ?? 100);
    return wrap("listExecutions", () =>
      (this.prepare(sql).all(...args) as ExecutionRow[]).map(toExecution),
    );
  }

  async listExecutionsInStates(states: ExecState[], limit: number): Promise<ExecutionRecord[]> {
    if (states.length === 0) return [];
    // Open states only: the partial index of open executions serves the query.
    const open = states.every((st) => !TERMINAL_STATES.has(st)) ? `${OPEN_SQL} AND ` : "";
    const sql = `SELECT * FROM executions WHERE ${open}state IN (${states.map(() => "?").join(", ")})
      ORDER BY priority DESC, fire_at, created_at LIMIT ?`;
    return wrap("listExecutionsInStates", () =>
      (this.prepare(sql).all(...states, limit) as ExecutionRow[]).map(toExecution),
    );
  }

  async listDue(
    now: number,
    pendingBy: number,
    limit: number,
    options: DueOptions = {},
  ): Promise<{
    pending: ExecutionRecord[];
    retry: ExecutionRecord[];
    dispatchTimedOut: ExecutionRecord[];
  }> {
    const order = "ORDER BY priority DESC, fire_at, created_at LIMIT ?";
    const commandsBy = Math.max(pendingBy, options.commandsBy ?? pendingBy);
    const skip = options.skipTargets ?? [];
    return wrap("listDue", () => ({
      pending: this.selectExecutions(
        `FROM executions WHERE ${OPEN_SQL} AND state = 'PENDING' AND fire_at <= ?
           AND (fire_at <= ? OR kind = 'command')
           ${skip.length > 0 ? "AND (target_agent_id IS NULL OR deadline < ? OR target_agent_id NOT IN (SELECT value FROM json_each(?)))" : ""}
           ${order}`,
        commandsBy,
        pendingBy,
        // A command for an agent out of reach is still read once its deadline has passed, so that
        // it is expired rather than left PENDING for ever.
        ...(skip.length > 0 ? [now, JSON.stringify(skip)] : []),
        limit,
      ),
      retry: this.selectExecutions(
        `FROM executions WHERE ${OPEN_SQL} AND state = 'RETRY_WAITING'
           AND (COALESCE(next_attempt_at, 0) <= ? OR deadline < ?) ${order}`,
        now,
        now,
        limit,
      ),
      dispatchTimedOut: this.selectExecutions(
        `FROM executions WHERE ${OPEN_SQL} AND state = 'DISPATCHED'
           AND COALESCE(dispatched_at, 0) + dispatch_timeout_ms <= ? ${order}`,
        now,
        limit,
      ),
    }));
  }

  /**
   * The executions a query selects (`rest`: its FROM clause onwards), in its order. Under group
   * commit only their ids are read and the records come from the cache where it holds them: the
   * dispatcher's executions were mostly written moments before, and reading and decoding every
   * column of each again was a tenth of the coordinator's time at 2,000 fires/s.
   */
  private selectExecutions(rest: string, ...args: unknown[]): ExecutionRecord[] {
    if (!this.groupCommit) {
      return (this.prepare(`SELECT * ${rest}`).all(...args) as ExecutionRow[]).map(toExecution);
    }
    const ids = this.prepare(`SELECT id ${rest}`)
      .pluck()
      .all(...args) as string[];
    const out: ExecutionRecord[] = [];
    for (const id of ids) {
      let e = this.executions.get(id);
      if (!e) {
        const row = this.prepare("SELECT * FROM executions WHERE id = ?").get(id) as
          | ExecutionRow
          | undefined;
        if (!row) continue;
        e = toExecution(row);
        this.cacheExecution(e);
      }
      out.push(e);
    }
    return out;
  }

  async listOpenPeers(by: { jobId: string } | { groupKey: string }): Promise<PeerRecord[]> {
    // By job: INDEXED BY, or the planner walks executions_job for its order, through every
    // finished execution the job ever had.
    const [column, index] =
      "jobId" in by ? ["job_id", "INDEXED BY executions_open_job"] : ["group_key", ""];
    const rows = wrap("listOpenPeers", () =>
      this.prepare(
        `SELECT id, state, created_at, job_id, scheduled_for, shard_total FROM executions ${index}
           WHERE ${column} = ? AND ${OPEN_SQL} ORDER BY created_at, id`,
      ).all("jobId" in by ? by.jobId : by.groupKey),
    ) as {
      id: string;
      state: ExecState;
      created_at: number;
      job_id: string | null;
      scheduled_for: number | null;
      shard_total: number | null;
    }[];
    return rows.map((r) => ({
      id: r.id,
      state: r.state,
      createdAt: r.created_at,
      jobId: r.job_id,
      scheduledFor: r.scheduled_for,
      shardTotal: r.shard_total,
    }));
  }

  async putAlert(a: AlertRecord): Promise<void> {
    wrap("putAlert", () =>
      this.writeOne(
        `INSERT INTO alerts (id, kind, url, payload, status, attempts, last_error, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        a.id,
        a.kind,
        a.url,
        JSON.stringify(a.payload),
        a.status,
        a.attempts,
        a.lastError === null ? null : capUtf8(a.lastError, this.maxErrorTextBytes).text,
        a.createdAt,
        a.updatedAt,
      ),
    );
  }

  async updateAlert(
    id: string,
    p: Pick<AlertRecord, "status" | "attempts" | "lastError" | "updatedAt">,
  ): Promise<void> {
    wrap("updateAlert", () =>
      this.writeOne(
        "UPDATE alerts SET status = ?, attempts = ?, last_error = ?, updated_at = ? WHERE id = ?",
      ).run(
        p.status,
        p.attempts,
        p.lastError === null ? null : capUtf8(p.lastError, this.maxErrorTextBytes).text,
        p.updatedAt,
        id,
      ),
    );
  }

  async listAlerts(filter: { pending?: boolean; limit?: number } = {}): Promise<AlertRecord[]> {
    const sql = filter.pending
      ? "SELECT * FROM alerts WHERE status = 'pending' ORDER BY created_at LIMIT ?"
      : "SELECT * FROM alerts ORDER BY created_at DESC LIMIT ?";
    const rows = wrap("listAlerts", () => this.prepare(sql).all(filter.limit ?? 100)) as AlertRow[];
    return rows.map(toAlert);
  }

  async countInFlightByAgent(): Promise<Record<string, number>> {
    const rows = wrap("countInFlightByAgent", () =>
      this.prepare(
        `SELECT agent_id, COUNT(*) AS n FROM executions
           WHERE ${OPEN_SQL} AND state IN ('DISPATCHED', 'SCHEDULED', 'RUNNING')
             AND agent_id IS NOT NULL
           GROUP BY agent_id`,
      ).all(),
    ) as { agent_id: string; n: number }[];
    return Object.fromEntries(rows.map((r) => [r.agent_id, r.n]));
  }

  async applyTransition(w: TransitionWrite): Promise<boolean> {
    return wrap("applyTransition", () =>
      this.write(() => {
        const p = w.patch;
        const args: unknown[] = [
          w.next.state,
          w.next.round,
          w.next.attempt,
          w.next.maxAttempts,
          w.next.dispatches,
          w.next.maxDispatches,
          w.at,
        ];
        const cached = this.executions.get(w.executionId);
        const updated: Record<string, unknown> | undefined = cached && {
          ...cached,
          ...w.next,
          updatedAt: w.at,
        };
        let shape = 0;
        for (let i = 0; i < PATCH_COLUMNS.length; i++) {
          const key = (PATCH_COLUMNS[i] as (typeof PATCH_COLUMNS)[number])[0];
          if (!(key in p)) continue;
          shape |= 1 << i;
          let value: unknown = p[key] ?? null;
          if (key === "result" && value !== null) {
            value = JSON.stringify(value);
            if (updated) updated.result = JSON.parse(value as string);
          } else if (key === "message") {
            const capped =
              typeof value === "string" ? capUtf8(value, this.maxErrorTextBytes) : null;
            args.push(capped?.text ?? null, capped?.bytes ?? null);
            if (updated) {
              updated.message = capped?.text ?? null;
              updated.messageBytes = capped?.bytes ?? null;
            }
            continue;
          } else if (updated) {
            updated[key] = value;
          }
          args.push(value);
        }
        args.push(w.executionId, w.expected.state, w.expected.round);
        const res = this.prepare(applyTransitionSqlFor(shape)).run(...args);
        if (res.changes !== 1) {
          // Not as the caller read it: whatever is cached is not to be trusted either.
          this.executions.delete(w.executionId);
          return false;
        }
        if (updated) this.executions.set(w.executionId, updated as unknown as ExecutionRecord);
        if (w.steps) {
          for (const st of w.steps) {
            this.appendTimeline(
              w.executionId,
              st.at,
              st.event,
              st.from,
              st.to,
              st.round,
              st.agentId,
              st.detail ?? null,
            );
          }
          return true;
        }
        const agentId =
          p.agentId ??
          (w.agentId !== undefined
            ? w.agentId
            : (
                this.prepare("SELECT agent_id FROM executions WHERE id = ?").get(w.executionId) as {
                  agent_id: string | null;
                }
              ).agent_id);
        this.appendTimeline(
          w.executionId,
          w.at,
          w.event,
          w.expected.state,
          w.next.state,
          w.next.round,
          agentId,
          w.detail ?? null,
        );
        return true;
        // An UPDATE by key and timeline rows numbered in the same statement break no constraint.
      }, "none"),
    );
  }

  async getTimeline(executionId: string): Promise<TimelineEntry[]> {
    const rows = wrap("getTimeline", () =>
      this.prepare("SELECT * FROM timeline WHERE execution_id = ? ORDER BY seq").all(executionId),
    ) as TimelineRow[];
    return rows.map(toTimelineEntry);
  }

  async purgeFinishedBefore(cutoffMs: number, limit: number): Promise<number> {
    // SQLite reads a negative LIMIT as "no limit".
    if (!(limit >= 1)) return 0;
    const max = Math.floor(limit);
    return wrap("purgeFinishedBefore", () =>
      this.write(() => {
        // INDEXED BY: without statistics the planner prefers executions_state and then reads
        // every terminal row to sort them, which makes each batch cost the whole table.
        const ids = this.prepare(
          `SELECT id FROM executions INDEXED BY executions_finished
             WHERE ${TERMINAL_SQL} AND COALESCE(finished_at, updated_at) < ?
             ORDER BY COALESCE(finished_at, updated_at) LIMIT ?`,
        )
          .pluck()
          .all(cutoffMs, max) as string[];
        const dropTimeline = this.prepare("DELETE FROM timeline WHERE execution_id = ?");
        const dropExecution = this.prepare("DELETE FROM executions WHERE id = ?");
        for (const id of ids) {
          dropTimeline.run(id);
          dropExecution.run(id);
          this.executions.delete(id);
        }
        // The fires ledger makes firing exactly-once, and deleting its old rows is safe only
        // because a job's next_fire_at only moves forward: recordFire first compare-and-sets
        // next_fire_at from the nominal time it fires, so a time below the job's current
        // next_fire_at can never be fired again and its row guards nothing. A row at or after
        // next_fire_at may still be needed (a putJob from a stale read can set next_fire_at back
        // to a time already fired; only the row stops a second fire), so it is never deleted. A
        // job with no next fire time (exhausted, or gone) only gets a new one after `now`, far
        // past the cutoff, which also leaves a stale read the whole retention age of margin.
        this.prepare(
          `DELETE FROM fires WHERE (job_id, scheduled_for) IN (
               SELECT f.job_id, f.scheduled_for FROM fires f LEFT JOIN jobs j ON j.id = f.job_id
               WHERE f.scheduled_for < @cutoff AND f.fired_at < @cutoff
                 AND (j.next_fire_at IS NULL OR f.scheduled_for < j.next_fire_at)
               ORDER BY f.scheduled_for LIMIT @max)`,
        ).run({ cutoff: cutoffMs, max });
        // Alerts age out with the executions they are about; a pending one is still being sent.
        this.prepare(
          `DELETE FROM alerts WHERE id IN (
             SELECT id FROM alerts WHERE created_at < ? AND status != 'pending'
             ORDER BY created_at LIMIT ?)`,
        ).run(cutoffMs, max);
        return ids.length;
      }),
    );
  }

  async getAgent(agentId: string): Promise<AgentRecord | undefined> {
    const row = wrap("getAgent", () =>
      this.prepare("SELECT record, acked_seq FROM agents WHERE agent_id = ?").get(agentId),
    ) as AgentRow | undefined;
    return row ? toAgent(row) : undefined;
  }

  async listAgents(): Promise<AgentRecord[]> {
    const rows = wrap("listAgents", () =>
      this.prepare("SELECT record, acked_seq FROM agents ORDER BY agent_id").all(),
    ) as AgentRow[];
    return rows.map(toAgent);
  }

  async putAgent(agent: AgentRecord): Promise<void> {
    wrap("putAgent", () =>
      this.writeOne(PUT_AGENT_SQL).run({ ...agent, record: JSON.stringify(agent) }),
    );
  }

  async putAgents(agents: readonly AgentRecord[]): Promise<void> {
    if (agents.length === 0) return;
    wrap("putAgents", () =>
      this.write(() => {
        const put = this.prepare(PUT_AGENT_SQL);
        for (const agent of agents) put.run({ ...agent, record: JSON.stringify(agent) });
      }),
    );
  }

  async setAckedSeq(agentId: string, journalId: string, seq: number): Promise<void> {
    wrap("setAckedSeq", () =>
      this.writeOne(
        "UPDATE agents SET acked_seq = ? WHERE agent_id = ? AND journal_id = ? AND acked_seq < ?",
      ).run(seq, agentId, journalId, seq),
    );
  }

  async putIdentity(identity: IdentityRecord): Promise<void> {
    wrap("putIdentity", () =>
      this.writeOne(
        `INSERT INTO identities (agent_id, record) VALUES (?, ?)
           ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record`,
      ).run(identity.agentId, JSON.stringify(identity)),
    );
  }

  async listIdentities(): Promise<IdentityRecord[]> {
    const rows = wrap("listIdentities", () =>
      this.prepare("SELECT record FROM identities ORDER BY agent_id").pluck().all(),
    ) as string[];
    return rows.map((r) => JSON.parse(r) as IdentityRecord);
  }

  async bumpCounter(name: string, by = 1): Promise<void> {
    wrap("bumpCounter", () =>
      this.writeOne(
        "INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
      ).run(name, by),
    );
  }

  async counters(): Promise<Record<string, number>> {
    const rows = wrap("counters", () => this.prepare("SELECT name, value FROM counters").all()) as {
      name: string;
      value: number;
    }[];
    return Object.fromEntries(rows.map((r) => [r.name, r.value]));
  }

  /**
   * One statement: on its own (autocommit) normally, or joining the open group. Returns the
   * statement for its `.run(…)`.
   */
  private writeOne(sql: string): { run: (...args: unknown[]) => Database.RunResult } {
    const st = this.prepare(sql);
    if (!this.groupCommit) return st;
    return { run: (...args: unknown[]) => this.write(() => st.run(...args), "statement") };
  }

  async close(): Promise<void> {
    if (!this.db.open) return;
    if (this.db.inTransaction) this.commitGroup();
    this.checkpointer?.close();
    this.db.close();
  }

  /** The highest version a job ever had (0 for none): versions are never reused. */
  private lastJobVersion(id: string): number {
    return (
      (this.prepare("SELECT MAX(version) FROM job_versions WHERE job_id = ?").pluck().get(id) as
        | number
        | null) ?? 0
    );
  }

  async deleteJob(id: string, change?: { actor: string; at: number }): Promise<boolean> {
    return wrap("deleteJob", () =>
      this.write(() => {
        this.definitions.delete(id);
        const version = this.prepare("SELECT version FROM jobs WHERE id = ?").pluck().get(id) as
          | number
          | undefined;
        if (version === undefined) return false;
        this.prepare("DELETE FROM jobs WHERE id = ?").run(id);
        this.insertJobHistory({
          jobId: id,
          at: change?.at ?? this.nowMs(),
          action: "deleted",
          version,
          actor: change?.actor ?? "system",
          detail: null,
        });
        return true;
      }),
    );
  }

  async appendJobHistory(entry: Omit<JobHistoryEntry, "seq">): Promise<void> {
    wrap("appendJobHistory", () => this.write(() => this.insertJobHistory(entry)));
  }

  private insertJobHistory(e: Omit<JobHistoryEntry, "seq">): void {
    this.prepare(
      `INSERT INTO job_history (job_id, seq, at, action, version, actor, detail)
         SELECT @jobId, COALESCE(MAX(seq), 0) + 1, @at, @action, @version, @actor, @detail
         FROM job_history WHERE job_id = @jobId`,
    ).run({ ...e, detail: e.detail === null ? null : JSON.stringify(e.detail) });
  }

  async listJobHistory(jobId: string, limit = 100): Promise<JobHistoryEntry[]> {
    const rows = wrap("listJobHistory", () =>
      this.prepare(
        `SELECT * FROM (SELECT * FROM job_history WHERE job_id = ? ORDER BY seq DESC LIMIT ?)
           ORDER BY seq`,
      ).all(jobId, Math.max(1, Math.floor(limit))),
    ) as JobHistoryRow[];
    return rows.map(toJobHistoryEntry);
  }

  async putApiToken(t: ApiTokenRecord): Promise<void> {
    wrap("putApiToken", () => {
      try {
        this.writeOne(
          `INSERT INTO api_tokens (name, digest, role, created_at, created_by, last_used_at)
             VALUES (?, ?, ?, ?, ?, ?)`,
        ).run(t.name, t.digest, t.role, t.createdAt, t.createdBy, t.lastUsedAt);
      } catch (err) {
        if ((err as { code?: string }).code?.startsWith("SQLITE_CONSTRAINT")) {
          throw new AxError("AX_API_TOKEN_EXISTS", `a token named "${t.name}" exists already`, {
            context: { name: t.name },
          });
        }
        throw err;
      }
    });
  }

  async touchApiToken(name: string, at: number): Promise<void> {
    wrap("touchApiToken", () =>
      this.writeOne("UPDATE api_tokens SET last_used_at = ? WHERE name = ?").run(at, name),
    );
  }

  async listApiTokens(): Promise<ApiTokenRecord[]> {
    const rows = wrap("listApiTokens", () =>
      this.prepare("SELECT * FROM api_tokens ORDER BY name").all(),
    ) as ApiTokenRow[];
    return rows.map(toApiToken);
  }

  async deleteApiToken(name: string): Promise<boolean> {
    return wrap(
      "deleteApiToken",
      () => this.writeOne("DELETE FROM api_tokens WHERE name = ?").run(name).changes === 1,
    );
  }

  async pageExecutions(query: ExecutionPageQuery): Promise<ExecutionPage> {
    const limit = Math.max(1, Math.floor(query.limit));
    const where: string[] = [];
    const args: unknown[] = [];
    const add = (sql: string, ...values: unknown[]) => {
      where.push(sql);
      args.push(...values);
    };
    if (query.jobId !== undefined) add("job_id = ?", query.jobId);
    // A command waits for its agent with agent_id unset: it is that agent's all the same.
    if (query.agentId !== undefined) add("COALESCE(agent_id, target_agent_id) = ?", query.agentId);
    if (query.kind !== undefined) add("kind = ?", query.kind);
    if (query.states !== undefined && query.states.length > 0) {
      add(`state IN (${query.states.map(() => "?").join(", ")})`, ...query.states);
    }
    if (query.createdFrom !== undefined) add("created_at >= ?", query.createdFrom);
    if (query.createdBefore !== undefined) add("created_at < ?", query.createdBefore);
    if (query.cursor !== undefined) {
      const after = decodeExecutionCursor(query.cursor);
      add("(created_at, id) < (?, ?)", after.createdAt, after.id);
    }
    // One row more than the page says whether there is a next one.
    const sql = `SELECT * FROM executions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY created_at DESC, id DESC LIMIT ?`;
    const rows = wrap(
      "pageExecutions",
      () => this.prepare(sql).all(...args, limit + 1) as ExecutionRow[],
    );
    const items = rows.slice(0, limit).map(toExecution);
    const last = items.at(-1);
    return {
      items,
      nextCursor:
        rows.length > limit && last
          ? encodeExecutionCursor({ createdAt: last.createdAt, id: last.id })
          : null,
    };
  }

  async countOpenExecutions(): Promise<Partial<Record<ExecState, number>>> {
    // OPEN_SQL word for word: the partial index of open executions answers it without the table.
    const rows = wrap("countOpenExecutions", () =>
      this.prepare(
        `SELECT state, COUNT(*) AS n FROM executions WHERE ${OPEN_SQL} GROUP BY state`,
      ).all(),
    ) as { state: ExecState; n: number }[];
    return Object.fromEntries(rows.map((r) => [r.state, r.n]));
  }
}
