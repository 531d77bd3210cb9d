import { AxError } from "../../../shared/errors.js";
import {
  isConnectionError,
  type Queryable,
  type TransactionOptions,
  translatePgError,
} from "./tx.js";

/**
 * True when a transaction failed on its connection (translated: AX_STORE_FAILED, retryable):
 * whether it committed is unknown.
 */
function isConnectionFailure(err: unknown): boolean {
  if (err instanceof AxError) {
    return err.code === "AX_STORE_FAILED" && err.retryable === true;
  }
  return isConnectionError(err);
}

/**
 * A write that a group may run together with others of its kind in one statement (the
 * transitions of a burst of reports, the fires of a wheel tick): what the group saves then is
 * the round trips, one per write, which on a busy machine cost both ends a wake-up each.
 */
export interface Batchable<I = unknown> {
  /** Writes of one kind in a group run as one call of `run`. */
  kind: string;
  /**
   * What the write changes (an execution's id, a job's): two writes on one key never share a
   * call, and the later runs after the earlier, as they would one by one.
   */
  key: string;
  item: I;
  /** Runs items of this kind, in one statement; returns each one's result, in their order. */
  run: (q: Queryable, items: I[]) => Promise<unknown[]>;
}

/**
 * Writes in one transaction, at most. At 64, one coordinator at 2,000 fires/s waited for groups
 * in turn: each carried its 64 writes in about as many round trips as a larger one, and the
 * dispatches fell behind their fire times (start p99 0.09 and 0.82 s in two runs). At 256 and
 * 1,024 it kept up (p99 29 to 59 ms in most runs), and the server spent 5 to 10 % less CPU per
 * fire, for fewer commits. The price is a failing write's: its group is run again one write at a
 * time, so a conflict (an operator's stale job version) costs up to this many transactions.
 */
export const MAX_GROUP_WRITES = 256;

/** A write waiting for its group. */
interface Queued {
  what: string;
  fn: (q: Queryable) => Promise<unknown>;
  options: TransactionOptions;
  batch: Batchable | undefined;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/** How {@link GroupCommit} runs a transaction: tx.ts's `transaction` on the store's pool. */
export type RunTransaction = <T>(
  what: string,
  fn: (q: Queryable) => Promise<T>,
  options: TransactionOptions,
) => Promise<T>;

export interface GroupCommitOptions {
  /** Transactions in flight at once; the rest of the pool is left to reads. */
  maxGroups: number;
  /** Writes in one transaction, at most. @default {@link MAX_GROUP_WRITES} */
  maxWrites?: number;
  /** Options of a group's own transaction (its fence). */
  groupOptions: () => TransactionOptions;
}

/**
 * Group commit for PostgreSQL: the writes issued while every group slot is busy (or in the same
 * turn of the event loop) share one transaction. A write's own statements are unchanged; what
 * the group saves is its BEGIN, its fence check and its COMMIT (and the server's WAL flush),
 * which were most of a small write's round trips: each of thousands of transitions a second was
 * four round trips, three of them this overhead.
 *
 * Writes marked `later` (new work: fires) fill a group's room after the others (work under way:
 * transitions, reports), so that when the database is slower than the rate, it is new fires that
 * wait, not the dispatches and reports of the executions already made.
 *
 * Each write keeps its own outcome. If anything in a group fails (a conflict a write reports by
 * throwing, a constraint), the group's transaction rolls back whole and each of its writes runs
 * again alone, as it would have without grouping, so one write's failure is never another's.
 * A lost connection is the exception: the group may have committed before its reply was lost,
 * so nothing runs again and every write of the group gets the (retryable) error, as a write
 * alone would have. Writes are functions of the transaction and may run more than once already
 * (tx.ts retries serialization failures), so running one again after a rollback is safe.
 */
export class GroupCommit {
  /** Writes about work already under way (transitions, reports): served first. */
  private readonly queue: Queued[] = [];
  /** New work (fires): a group's room after the others. */
  private readonly later: Queued[] = [];
  private running = 0;
  private pumpScheduled = false;
  private readonly maxWrites: number;

  constructor(
    private readonly run: RunTransaction,
    private readonly options: GroupCommitOptions,
  ) {
    this.maxWrites = options.maxWrites ?? MAX_GROUP_WRITES;
  }

  /** Queues a write; resolves with its result once its transaction committed. */
  write<T, I = unknown>(
    what: string,
    fn: (q: Queryable) => Promise<T>,
    options: TransactionOptions,
    later = false,
    batch?: Batchable<I>,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      (later ? this.later : this.queue).push({
        what,
        fn,
        options,
        // Its run gets only items of its own kind, which are all I.
        batch: batch as Batchable | undefined,
        resolve: resolve as (value: unknown) => void,
        reject,
      });
      if (!this.pumpScheduled) {
        this.pumpScheduled = true;
        // The writes issued in this same synchronous run join the first group.
        queueMicrotask(() => {
          this.pumpScheduled = false;
          this.pump();
        });
      }
    });
  }

  /** Writes waiting for a slot. */
  get waiting(): number {
    return this.queue.length + this.later.length;
  }

  private pump(): void {
    while (this.waiting > 0 && this.running < this.options.maxGroups) {
      const group = this.queue.splice(0, this.maxWrites);
      if (group.length < this.maxWrites) {
        group.push(...this.later.splice(0, this.maxWrites - group.length));
      }
      this.running++;
      void this.runGroup(group).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async runGroup(group: Queued[]): Promise<void> {
    if (group.length === 1) {
      await this.alone(group[0] as Queued);
      return;
    }
    let results: unknown[];
    try {
      results = await this.run(
        `${group.length} writes`,
        (q) => runInOrder(q, group),
        this.options.groupOptions(),
      );
    } catch (err) {
      // The connection failed: the group may have committed (a reply lost during COMMIT), so
      // nothing runs again; each write is told, as its own transaction would have been.
      if (isConnectionFailure(err)) {
        const cause = err instanceof AxError && err.cause !== undefined ? err.cause : err;
        for (const w of group) w.reject(translatePgError(w.what, cause));
        return;
      }
      // The membership is fenced: each write alone would be refused the same way.
      if (err instanceof AxError && err.code === "AX_STORE_FENCED") {
        for (const w of group) w.reject(err);
        return;
      }
      // Rolled back whole: each write alone, with its own outcome and error.
      await Promise.all(group.map((w) => this.alone(w)));
      return;
    }
    group.forEach((w, i) => {
      w.resolve(results[i]);
    });
  }

  private async alone(w: Queued): Promise<void> {
    try {
      w.resolve(await this.run(w.what, w.fn, w.options));
    } catch (err) {
      w.reject(err);
    }
  }
}

/**
 * Runs a group's writes in one transaction, in their order, except that batchable writes of one
 * kind run together: they gather until a write that is not batchable, or one on a key already
 * gathered, comes; then each kind's gathered writes run as one call (a kind of one write runs
 * its own function), and the gathering starts again. So writes on one key keep their order, and
 * every write still gets its own result.
 */
async function runInOrder(q: Queryable, group: readonly Queued[]): Promise<unknown[]> {
  const out: unknown[] = new Array(group.length);
  let kinds = new Map<string, { run: Batchable["run"]; at: number[] }>();
  const keys = new Set<string>();
  const release = async () => {
    for (const { run, at } of kinds.values()) {
      if (at.length === 1) {
        const i = at[0] as number;
        out[i] = await (group[i] as Queued).fn(q);
        continue;
      }
      const results = await run(
        q,
        at.map((i) => (group[i] as Queued).batch?.item),
      );
      at.forEach((i, j) => {
        out[i] = results[j];
      });
    }
    kinds = new Map();
    keys.clear();
  };
  for (let i = 0; i < group.length; i++) {
    const w = group[i] as Queued;
    const b = w.batch;
    if (b === undefined) {
      await release();
      out[i] = await w.fn(q);
      continue;
    }
    if (keys.has(b.key)) await release();
    keys.add(b.key);
    const kind = kinds.get(b.kind);
    if (kind === undefined) kinds.set(b.kind, { run: b.run, at: [i] });
    else kind.at.push(i);
  }
  await release();
  return out;
}
