import pg from "pg";
import { AxError } from "../../../shared/errors.js";
import type { CoordinatorRecord } from "../port.js";
import { CommitTracker } from "./commits.js";
import { clientConfig, type PgStoreConfig } from "./config.js";
import { type Batchable, GroupCommit } from "./group-commit.js";
import { type WorkKind, WorkListener, workChannel } from "./listen.js";
import * as member from "./membership.js";
import { fenceAndCommit, fencedError, isFenceError, type Membership } from "./membership.js";
import { migratePg, PG_MIGRATIONS } from "./migrations.js";
import {
  brokenClients,
  type Queryable,
  run,
  type TransactionOptions,
  transaction,
  translatePgError,
} from "./tx.js";

/** How {@link StoreConnection.write} runs a write. */
export interface WriteOptions {
  /** One statement: without membership it runs on the pool, no BEGIN/COMMIT. */
  single?: boolean;
  mapError?: (err: unknown) => AxError | undefined;
  /**
   * New work (a fire): queued after the writes about work under way, so that a store slower
   * than the rate delays new fires (their misfire policy then decides) rather than the dispatches
   * and reports of executions already made.
   */
  later?: boolean;
  /** How a group may run this write together with others of its kind (group-commit.ts). */
  batch?: Batchable;
}

/**
 * What every PgStore method runs through: the pool, reads and fenced write transactions, the
 * commit contract, the work channel and its listener, and closing all of it.
 */
export class StoreConnection {
  readonly pool: pg.Pool;
  /** Tells of failed writes (the store's `onCommitError`). */
  onCommitError: ((err: Error) => void) | undefined;
  readonly commits = new CommitTracker((err) => this.onCommitError?.(err));
  /** This store's membership, once joined. */
  membership: Membership | undefined;
  private closed = false;
  /** Server process ids of the pool's connections: their own notifications are not news. */
  private readonly pids = new Set<number>();
  private readonly watchers = new Set<(what: WorkKind) => void>();
  private listener: WorkListener | undefined;
  /** Listeners being stopped (their last watcher went), awaited by close. */
  private readonly stopping = new Set<Promise<void>>();
  /** The schema's work channel, known once opened. */
  private channel = "";

  /**
   * The membership's own connection (join, renew, the members, the clock): a renewal never
   * waits in the pool's queue behind the hot path's transactions, which under load held it past
   * the lease and fenced a coordinator that was working.
   */
  private readonly memberPool: pg.Pool;

  /**
   * Writes share transactions (group-commit.ts), two transactions at a time: one fills while the
   * other commits. Fewer, fuller transactions cost the database less per write (a commit, its
   * WAL flush, the fence check): on the 2-core bench machine at 300 fires/s the server's CPU per
   * fire was 3.0 ms with up to five at once and 2.1 ms with two; with one, the writes of a group
   * (each a round trip) queued behind each other and starts came 0.3 s late. The rest of the
   * pool serves reads (the firing scan, the dispatcher's lists, the API).
   */
  private readonly groups: GroupCommit;

  constructor(readonly config: PgStoreConfig) {
    this.pool = new pg.Pool({ ...clientConfig(config), max: config.poolMax });
    this.groups = new GroupCommit(
      (what, fn, options) => transaction(this.pool, what, fn, options),
      {
        maxGroups: Math.min(2, Math.max(1, config.poolMax - 1)),
        groupOptions: () => this.fenceOptions("group of writes", {}),
      },
    );
    this.memberPool = new pg.Pool({
      ...clientConfig(config),
      connectionTimeoutMillis: config.membershipTimeoutMs,
      query_timeout: config.membershipTimeoutMs,
      max: 1,
    });
    this.memberPool.on("connect", (c) => c.on("error", () => brokenClients.add(c)));
    this.memberPool.on("error", () => {});
    const pidOf = (c: pg.PoolClient) => (c as unknown as { processID: number | null }).processID;
    this.pool.on("connect", (c) => {
      const pid = pidOf(c);
      if (pid !== null) this.pids.add(pid);
      // A connection that breaks while checked out (the server restarted mid-transaction) emits
      // 'error', which the pool only listens for on idle ones: unheard, it would end the process.
      // The caller's query fails instead, and the transaction drops the connection (tx.ts).
      c.on("error", () => brokenClients.add(c));
    });
    this.pool.on("remove", (c) => {
      const pid = pidOf(c);
      if (pid !== null) this.pids.delete(pid);
    });
    // An idle connection broke (the server restarted): the pool drops it, and the next query
    // opens another or fails and is reported to its caller. Without a listener the process
    // would die of an unhandled 'error' event.
    this.pool.on("error", () => {});
  }

  /** Migrates the schema and learns its name; closes the pool if that fails. */
  async open(): Promise<void> {
    try {
      const client = await this.pool.connect().catch((err: unknown) => {
        throw translatePgError("open", err);
      });
      try {
        await migratePg(client, PG_MIGRATIONS, this.config.now(), this.config.schema);
        const r = await client.query<{ schema: string | null }>(
          "SELECT current_schema() AS schema",
        );
        const schema = r.rows[0]?.schema;
        if (!schema) {
          throw new AxError("AX_STORE_FAILED", "store: open failed: the connection has no schema");
        }
        this.channel = workChannel(schema);
      } finally {
        client.release();
      }
    } catch (err) {
      this.closed = true;
      await this.pool.end().catch(() => {});
      await this.memberPool.end().catch(() => {});
      throw err;
    }
  }

  checkOpen(what: string): void {
    if (this.closed) {
      throw new AxError("AX_STORE_FAILED", `store: ${what} failed: the store is closed`);
    }
  }

  /** Runs a read (one statement or several, each its own snapshot) on the pool. */
  async read<T>(what: string, fn: (q: Queryable) => Promise<T>): Promise<T> {
    this.checkOpen(what);
    try {
      return await fn(this.pool);
    } catch (err) {
      throw translatePgError(what, err);
    }
  }

  /** A read of the membership (the members, the clock) on its own connection. */
  async readMembership<T>(what: string, fn: (q: Queryable) => Promise<T>): Promise<T> {
    this.checkOpen(what);
    try {
      return await fn(this.memberPool);
    } catch (err) {
      throw translatePgError(what, err);
    }
  }

  /** Runs a write transaction, fenced once joined, tracked for flush and afterCommit. */
  write<T>(what: string, fn: (q: Queryable) => Promise<T>, options: WriteOptions = {}): Promise<T> {
    return this.commits.track(this.runWrite(what, fn, options));
  }

  private async runWrite<T>(
    what: string,
    fn: (q: Queryable) => Promise<T>,
    options: WriteOptions,
  ): Promise<T> {
    this.checkOpen(what);
    return this.groups.write(
      what,
      fn,
      this.fenceOptions(what, options),
      options.later === true,
      options.batch,
    );
  }

  /** A write's transaction options: fenced once joined (refused at once if fenced already). */
  private fenceOptions(what: string, options: WriteOptions): TransactionOptions {
    const m = this.membership;
    if (m?.fenced) throw fencedError(m, what);
    const tx: TransactionOptions = {};
    const { mapError } = options;
    if (m) {
      tx.commit = fenceAndCommit(m);
      tx.mapError = (err) => {
        if (!isFenceError(err)) return mapError?.(err);
        m.fenced = true;
        return fencedError(m, what);
      };
    } else {
      if (options.single) tx.single = true;
      if (mapError) tx.mapError = mapError;
    }
    return tx;
  }

  /**
   * Joins the coordinators as `id` (Store.joinCoordinators). Not fenced itself: joining is what
   * makes a new epoch, after a lapse or a takeover too; from its commit on, writes are fenced.
   */
  async join(
    id: string,
    leaseMs: number,
    info: Record<string, unknown>,
  ): Promise<CoordinatorRecord> {
    if (!(Number.isFinite(leaseMs) && leaseMs > 0)) {
      throw new AxError(
        "AX_STORE_FAILED",
        `store: joinCoordinators failed: leaseMs must be a positive number of ms, not ${leaseMs}`,
        { context: { field: "leaseMs", value: leaseMs } },
      );
    }
    const lease = Math.ceil(leaseMs);
    this.checkOpen("joinCoordinators");
    const record = await this.commits.track(
      transaction(this.memberPool, "joinCoordinators", (q) => member.join(q, id, lease, info), {
        single: true,
      }),
    );
    this.membership = { id, epoch: record.epoch, leaseMs: lease, fenced: false };
    return record;
  }

  /** Renews the lease (Store.renewMembership); false, and fenced for good, when it could not be. */
  async renew(info: Record<string, unknown> | undefined): Promise<boolean> {
    this.checkOpen("renewMembership");
    const m = this.membership;
    // Never joined: there is nothing to renew (as SQLite answers).
    if (!m || m.fenced) return false;
    // Its own fence: the UPDATE renews only the same epoch with a lease still ahead.
    const renewed = await transaction(
      this.memberPool,
      "renewMembership",
      (q) => member.renew(q, m, info),
      { single: true },
    );
    if (!renewed) m.fenced = true;
    return renewed;
  }

  /**
   * Ends the membership now (Store.leaveCoordinators). This object's later writes are refused
   * as fenced: the others may already be taking over its work.
   */
  async leave(): Promise<void> {
    this.checkOpen("leaveCoordinators");
    const m = this.membership;
    if (!m || m.fenced) return;
    // After the writes already started: each checks the lease as it commits, so one committing
    // after the leave would be refused. Not fenced itself (it ends the lease the fence checks):
    // the UPDATE ends only this epoch's lease, and changes nothing once it has lapsed.
    await this.commits.settle();
    await this.commits.track(
      transaction(this.pool, "leaveCoordinators", (q) => member.leave(q, m), { single: true }),
    );
    m.fenced = true;
  }

  /** Tells the other store objects on this schema, at commit, that `what` changed. */
  async notify(q: Queryable, what: WorkKind): Promise<void> {
    await run(q, { name: "ax_notify", text: "SELECT pg_notify($1, $2)" }, [this.channel, what]);
  }

  /** Starts calling `fn` for other writers' work; returns the function that stops it. */
  watch(fn: (what: WorkKind) => void): () => void {
    if (this.closed) return () => {};
    // Each watcher its own wrapper, so one function watching twice is two watches.
    const watcher = (what: WorkKind) => fn(what);
    this.watchers.add(watcher);
    if (!this.listener) {
      this.listener = new WorkListener({
        client: clientConfig(this.config),
        channel: this.channel,
        ownPids: this.pids,
        onWork: (what) => {
          for (const w of [...this.watchers]) w(what);
        },
      });
      void this.listener.start();
    }
    return () => {
      this.watchers.delete(watcher);
      if (this.watchers.size === 0 && this.listener) {
        const stopped = this.listener.stop();
        this.listener = undefined;
        this.stopping.add(stopped);
        void stopped.then(() => this.stopping.delete(stopped));
      }
    };
  }

  /** Waits for the writes in flight, then ends the listener and the pool. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.commits.settle();
    this.watchers.clear();
    const listener = this.listener;
    this.listener = undefined;
    await listener?.stop();
    await Promise.all([...this.stopping]);
    await this.pool.end();
    await this.memberPool.end();
  }
}
