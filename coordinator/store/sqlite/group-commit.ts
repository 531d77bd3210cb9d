import type Database from "better-sqlite3";
import { AxError } from "../../../shared/errors.js";
import type { WalCheckpointer } from "../../../shared/wal-checkpoint.js";
import type { ExecutionCache } from "./caches.js";
import type { Statements } from "./statements.js";

/** A group commit is forced after this many writes, which bounds a transaction's size. */
export const GROUP_COMMIT_MAX_WRITES = 4096;

/**
 * How a write guards the open group against its own failure: "savepoint" undoes only the failed
 * write; "statement" is one statement, which SQLite undoes by itself after a constraint error;
 * "none" is statements that cannot break a constraint. After any other error under "statement"
 * or "none" the group's state is unknown and it is rolled back whole.
 */
export type WriteGuard = "savepoint" | "statement" | "none";

/** What {@link GroupCommit} is made with. */
export interface GroupCommitConfig {
  db: Database.Database;
  statements: Statements;
  /** Group writes into one commit (see SqliteStoreOptions.groupCommit). */
  groupCommit: boolean;
  /** The least time from one group's commit to the next, ms. */
  commitIntervalMs: number;
  /** Dropped whenever a write or commit is undone: it may hold what was undone. */
  executions: ExecutionCache;
  /** Told of every commit, when WAL checkpoints run off-thread. */
  checkpointer: WalCheckpointer | undefined;
}

/**
 * Every write of the SQLite store goes through here: one IMMEDIATE transaction each, or, under
 * group commit, one open transaction that many writes join and that is committed once per turn of
 * the event loop (or every {@link GROUP_COMMIT_MAX_WRITES} writes, or after the commit interval),
 * with the callbacks and waiters that wait for that commit.
 */
export class GroupCommit {
  private readonly db: Database.Database;
  private readonly statements: Statements;
  readonly groupCommit: boolean;
  private readonly commitIntervalMs: number;
  private readonly executions: ExecutionCache;
  private readonly checkpointer: WalCheckpointer | undefined;

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
  /** When the last group committed (performance.now()), for the commit interval. */
  private lastCommitAt = Number.NEGATIVE_INFINITY;
  /** One transaction wrapper, reused: creating one per call costs more than a short write. */
  private runWrite: Database.Transaction<(f: () => unknown) => unknown> | undefined;
  /**
   * Counts the groups opened: a check made in one group holds until its commit, since the group's
   * IMMEDIATE transaction keeps every other connection from writing meanwhile.
   */
  groupSeq = 0;
  /**
   * Called inside every write's transaction before the write, once this store joined the
   * coordinators (membership.ts): it throws AX_STORE_FENCED to refuse the write. Unset, writes
   * pay one comparison for it.
   */
  fence: (() => void) | undefined;

  constructor(config: GroupCommitConfig) {
    this.db = config.db;
    this.statements = config.statements;
    this.groupCommit = config.groupCommit;
    this.commitIntervalMs = config.commitIntervalMs;
    this.executions = config.executions;
    this.checkpointer = config.checkpointer;
  }

  /**
   * Runs `fn` in an IMMEDIATE transaction, or in the open group. A deferred transaction that
   * reads first cannot wait for another process's write lock: it fails at once with SQLITE_BUSY,
   * whatever busy_timeout says. `unfenced`: the membership's own writes, which the fence does not
   * stop (a fenced store may join again).
   */
  write<T>(fn: () => T, guard: WriteGuard = "savepoint", unfenced = false): T {
    this.runWrite ??= this.db.transaction((f: () => unknown) => f());
    const fence = unfenced ? undefined : this.fence;
    if (!this.groupCommit) {
      const result = (
        fence === undefined
          ? this.runWrite.immediate(fn)
          : this.runWrite.immediate(() => {
              fence();
              return fn();
            })
      ) as T;
      this.checkpointer?.wrote();
      return result;
    }
    if (!this.db.inTransaction) {
      this.statements.prepare("BEGIN IMMEDIATE").run();
      this.groupSeq++;
      const wait = this.lastCommitAt + this.commitIntervalMs - performance.now();
      this.commitTimer =
        wait > 0
          ? { kind: "timeout", handle: setTimeout(() => this.commitGroup(), Math.ceil(wait)) }
          : { kind: "immediate", handle: setImmediate(() => this.commitGroup()) };
    }
    // A fenced write throws here, before it changed anything: the group's other writes stand.
    if (fence !== undefined) fence();
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

  /**
   * One statement: on its own (autocommit) normally, or joining the open group, or in a
   * transaction of its own behind the fence once joined. Returns the statement for its `.run(…)`.
   */
  writeOne(sql: string): { run: (...args: unknown[]) => Database.RunResult } {
    const st = this.statements.prepare(sql);
    if (!this.groupCommit && this.fence === undefined) return st;
    return { run: (...args: unknown[]) => this.write(() => st.run(...args), "statement") };
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

  /** Commits the open group, if any (before the database is closed). */
  commitOpenGroup(): void {
    if (this.db.inTransaction) this.commitGroup();
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
      this.statements.prepare("COMMIT").run();
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
}
