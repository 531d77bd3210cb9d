import { readFileSync } from "node:fs";
import type Database from "better-sqlite3";
import { AxError } from "../../shared/errors.js";
import { newId } from "../../shared/ids.js";
import { transactionOf } from "../../shared/migrate.js";
import type { Dispatch, LocalState, Report } from "../../shared/protocol/index.js";
import { openSqlite } from "../../shared/sqlite.js";
import { WalCheckpointer } from "../../shared/wal-checkpoint.js";
import { LaunchLog } from "./launch-log.js";
import { acquireJournalLock, type JournalLock } from "./lock.js";
import { JOURNAL_MIGRATIONS } from "./migrations.js";

/** States a journaled command can be in; the last six are terminal. */
export type CommandState = Exclude<LocalState, "unknown">;

export const OPEN_STATES: ReadonlySet<CommandState> = new Set(["scheduled", "queued", "running"]);

/** The WHERE clause of the partial index of open commands (migration 2), word for word. */
export const OPEN_SQL = "(state = 'scheduled' OR state = 'queued' OR state = 'running')";

/** One journaled command. */
export interface CommandRow {
  id: number;
  executionId: string;
  round: number;
  attempt: number;
  state: CommandState;
  dispatch: Dispatch;
  startedAt: number | null;
  /** Read by openCommands: the handler was launched (see LaunchLog). */
  began?: boolean;
}

/** A child process a handler started, as journaled (see {@link Journal.recordChild}). */
export interface ChildRecord {
  pid: number;
  /** processStartTime of the child; undefined where it cannot be read. */
  startTime: string | undefined;
  /** How it ended, once it has (journaled at its exit, before the handler's report). */
  exit:
    | { code: number | null; signal: string | null; stoppedByAgent: boolean; at: number }
    | undefined;
}

export interface JournalOptions {
  /** SQLite file; `:memory:` for tests. */
  path: string;
  /**
   * The agent this journal belongs to. When set (and the journal is a file), opening it takes an
   * exclusive lock (`<path>.lock`, see lock.ts) and checks the agentId the journal was created
   * by: a journal held by another live process or written by another agent is refused.
   */
  agentId?: string | undefined;
  /**
   * Path of better-sqlite3's native addon (`better_sqlite3.node`). A bundle ships it beside the
   * agent file and has no node_modules to look it up in. @default looked up in node_modules
   */
  nativeBinding?: string | undefined;
  /**
   * `NORMAL` (default): in WAL mode a commit survives a crash of the process but the last commits
   * may be lost on power loss. `FULL`: every commit is on disk before it returns. See
   * docs/benchmarks.md for what each costs.
   */
  synchronous?: "NORMAL" | "FULL";
  /**
   * With `NORMAL`, still make the commit that marks a command `running` durable before its
   * handler runs, so a power loss cannot make it run twice. @default true
   */
  syncStart?: boolean;
  /**
   * "thread": WAL checkpoints run on a worker thread (shared/wal-checkpoint.ts), so their fsyncs
   * never hold up the agent's event loop; "inline": inside commits, as SQLite does. A `:memory:`
   * journal has no WAL. @default "thread"
   */
  checkpoint?: "thread" | "inline";
  /** Where the checkpoint thread imports better-sqlite3 from (a bundle: the agent file). */
  sqliteModule?: string | undefined;
  /** Told when checkpoints cannot run on their thread and go back inline. */
  log?: (level: "debug" | "warn", message: string) => void;
  /** Open commands (scheduled, queued, running) held at most; beyond it dispatches are rejected journal_full. */
  maxOpen: number;
  /** Unacknowledged reports held at most before new dispatches are rejected journal_full. @default 100000 */
  maxOutbox?: number;
  /** Terminal commands are kept this long to answer duplicates and late cancels. @default 24 h */
  retainMs?: number;
  now: () => number;
}

interface CommandDbRow {
  id: number;
  execution_id: string;
  round: number;
  attempt: number;
  state: CommandState;
  dispatch: string;
  started_at: number | null;
}

function toRow(r: CommandDbRow): CommandRow {
  return {
    id: r.id,
    executionId: r.execution_id,
    round: r.round,
    attempt: r.attempt,
    state: r.state,
    dispatch: JSON.parse(r.dispatch) as Dispatch,
    startedAt: r.started_at,
  };
}

/** This boot of the machine (Linux), or undefined where it cannot be read. */
function bootId(): string | undefined {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Records `agentId` as the journal's owner when it has none (a new journal, or one created before
 * journals had owners), or throws AX_AGENT_JOURNAL_FOREIGN when another agent owns it: its
 * commands and seqs are that agent's, and the coordinator knows them under that agent's id.
 */
function claimFor(db: Database.Database, path: string, agentId: string): void {
  const row = db.prepare("SELECT value FROM meta WHERE key = 'agent_id'").get() as
    | { value: string }
    | undefined;
  if (row === undefined) {
    db.prepare("INSERT INTO meta (key, value) VALUES ('agent_id', ?)").run(agentId);
    return;
  }
  if (row.value !== agentId) {
    throw new AxError(
      "AX_AGENT_JOURNAL_FOREIGN",
      `journal ${path} belongs to agent "${row.value}", not to this agent "${agentId}": each agent needs its own journal (set journal.path, or leave it out for the per-agent default)`,
      { context: { path, owner: row.value, agentId } },
    );
  }
}

/** A report body before the envelope and seq are added. */
export type ReportBody = Report extends infer R
  ? R extends Report
    ? Omit<R, "v" | "msgId" | "sentAt" | "seq">
    : never
  : never;

/**
 * The agent's durable journal (DESIGN §6): the commands it holds, keyed UNIQUE (executionId,
 * round), and the outbox of numbered reports waiting for the coordinator's `ack`. Each change of
 * a command's state and the report that tells of it are written in one transaction, so after a
 * crash the two always agree.
 */
export class Journal {
  readonly journalId: string;
  private readonly db: Database.Database;
  private lastSeqValue: number;
  private openCount: number;
  private outboxCount: number;
  /**
   * The JSON each report was outboxed as, so its publish sends those bytes instead of
   * serialising it again (a report is published right after its commit).
   */
  private readonly encodedReports = new WeakMap<Report, string>();
  private readonly maxOutbox: number;
  private readonly retainMs: number;
  private readonly syncStart: boolean;
  /** True inside a {@link Journal.batch} opened `durable` whose commit will be fsynced. */
  private durableBatch = false;
  /** Highest `ack` applied in this process. */
  private ackedUpTo = 0;
  /** One prepared transaction wrapper, reused: creating one per call costs more than the commit. */
  private readonly runTx: (fn: () => unknown) => unknown;
  private readonly stmt;
  /** Off-thread WAL checkpoints, unless inline or in memory. */
  readonly checkpointer: WalCheckpointer | undefined;
  private readonly lock: JournalLock | undefined;
  private readonly sameBootValue: boolean;
  private readonly launches: LaunchLog;

  constructor(private readonly options: JournalOptions) {
    this.maxOutbox = options.maxOutbox ?? 100_000;
    this.syncStart = (options.synchronous ?? "NORMAL") === "NORMAL" && (options.syncStart ?? true);
    this.retainMs = options.retainMs ?? 86_400_000;
    let opened: Database.Database | undefined;
    const agentId = options.agentId;
    // Before the file is even opened: a second process must not recover the first one's work.
    this.lock =
      agentId !== undefined && options.path !== ":memory:"
        ? acquireJournalLock(options.path, agentId)
        : undefined;
    try {
      opened = openSqlite(options.path, {
        label: "journal",
        synchronous: options.synchronous ?? "NORMAL",
        nativeBinding: options.nativeBinding,
        migrations: { steps: JOURNAL_MIGRATIONS, now: options.now() },
      });
      if (agentId !== undefined) claimFor(opened, options.path, agentId);
      this.db = opened;
    } catch (err) {
      // The caller gets no Journal to close, so one another agent owns must not keep its file
      // handle (openSqlite closes its own on failure), nor its lock.
      if (opened?.open) opened.close();
      this.lock?.release();
      if (err instanceof AxError) throw err;
      throw new AxError(
        "AX_STORE_FAILED",
        `journal ${options.path}: cannot open: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
    const db = this.db;
    this.stmt = {
      getMeta: db.prepare("SELECT value FROM meta WHERE key = ?"),
      setMeta: db.prepare(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      ),
      insert: db.prepare(
        `INSERT INTO commands (execution_id, round, attempt, state, dispatch, fire_at, deadline, priority, received_at)
         VALUES (@executionId, @round, @attempt, @state, @dispatch, @fireAt, @deadline, @priority, @receivedAt)`,
      ),
      byId: db.prepare(
        "SELECT id, execution_id, round, attempt, state, dispatch, started_at FROM commands WHERE id = ?",
      ),
      latest: db.prepare(
        "SELECT id, execution_id, round, attempt, state, dispatch, started_at FROM commands WHERE execution_id = ? ORDER BY round DESC LIMIT 1",
      ),
      setState: db.prepare(
        "UPDATE commands SET state = @state, started_at = COALESCE(@startedAt, started_at), finished_at = @finishedAt WHERE id = @id",
      ),
      open: db.prepare(
        `SELECT id, execution_id, round, attempt, state, dispatch, started_at FROM commands WHERE ${OPEN_SQL} ORDER BY fire_at`,
      ),
      countOpen: db.prepare(`SELECT COUNT(*) AS n FROM commands WHERE ${OPEN_SQL}`),
      countByState: db.prepare(
        `SELECT state, COUNT(*) AS n FROM commands WHERE ${OPEN_SQL} GROUP BY state`,
      ),
      outboxInsert: db.prepare("INSERT INTO outbox (seq, message) VALUES (?, ?)"),
      outboxAll: db.prepare("SELECT message FROM outbox ORDER BY seq"),
      outboxFirst: db.prepare("SELECT message FROM outbox ORDER BY seq LIMIT 1"),
      outboxAck: db.prepare("DELETE FROM outbox WHERE seq <= ?"),
      outboxCount: db.prepare("SELECT COUNT(*) AS n FROM outbox"),
      childInsert: db.prepare(
        "INSERT OR REPLACE INTO children (command_id, pid, start_time) VALUES (?, ?, ?)",
      ),
      childExit: db.prepare(
        "UPDATE children SET exit_code = @code, exit_signal = @signal, stopped_by_agent = @stopped, exited_at = @at WHERE command_id = @id AND pid = @pid",
      ),
      childrenOf: db.prepare(
        "SELECT pid, start_time, exit_code, exit_signal, stopped_by_agent, exited_at FROM children WHERE command_id = ? ORDER BY rowid",
      ),
      childrenDelete: db.prepare("DELETE FROM children WHERE command_id = ?"),
      purge: db.prepare(
        "DELETE FROM commands WHERE id IN (SELECT id FROM commands WHERE finished_at IS NOT NULL AND finished_at < ? LIMIT ?)",
      ),
    };
    this.journalId = this.meta("journal_id") ?? this.initMeta("journal_id", newId("j"));
    const boot = bootId();
    this.sameBootValue = boot !== undefined && this.meta("boot_id") === boot;
    if (boot !== undefined && !this.sameBootValue) this.initMeta("boot_id", boot);
    this.launches = new LaunchLog(
      options.path === ":memory:" ? undefined : `${options.path}.launches`,
    );
    // Every seq handed out is either still in the outbox or was acknowledged, and `ack` records
    // the last seq in meta before deleting rows, so the larger of the two is the last one.
    const maxOutboxSeq =
      (db.prepare("SELECT MAX(seq) AS s FROM outbox").get() as { s: number | null }).s ?? 0;
    this.lastSeqValue = Math.max(Number(this.meta("last_seq") ?? "0"), maxOutboxSeq);
    this.runTx = transactionOf(db);
    if ((options.checkpoint ?? "thread") === "thread" && options.path !== ":memory:") {
      this.checkpointer = new WalCheckpointer(db, {
        path: options.path,
        nativeBinding: options.nativeBinding,
        sqliteModule: options.sqliteModule,
        synchronous: options.synchronous ?? "NORMAL",
        log: (level, message) => options.log?.(level, `journal: ${message}`),
      });
    }
    this.openCount = (this.stmt.countOpen.get() as { n: number }).n;
    this.outboxCount = (this.stmt.outboxCount.get() as { n: number }).n;
  }

  private meta(key: string): string | undefined {
    return (this.stmt.getMeta.get(key) as { value: string } | undefined)?.value;
  }

  private initMeta(key: string, value: string): string {
    this.stmt.setMeta.run(key, value);
    return value;
  }

  /**
   * The clock estimate the agent keeps across restarts (agent.ts), as it last wrote it: only
   * within one boot of the device, since it is anchored to the boot's monotonic clock.
   */
  get clock(): string | undefined {
    return this.sameBootValue ? this.meta("clock") : undefined;
  }

  set clock(value: string) {
    this.initMeta("clock", value);
  }

  /** The highest seq handed out (rule 1: survives restarts). */
  get lastSeq(): number {
    return this.lastSeqValue;
  }

  /** Open commands: scheduled, queued or running. */
  get open(): number {
    return this.openCount;
  }

  get outboxDepth(): number {
    return this.outboxCount;
  }

  /** Why a new dispatch cannot be journaled now, or undefined when it can. */
  fullReason(): string | undefined {
    if (this.openCount >= this.options.maxOpen)
      return `holding ${this.openCount} open commands (maxPending ${this.options.maxOpen})`;
    if (this.outboxCount >= this.maxOutbox)
      return `${this.outboxCount} reports await acknowledgement (limit ${this.maxOutbox})`;
    return undefined;
  }

  /** The latest round journaled for an execution. */
  latest(executionId: string): CommandRow | undefined {
    const r = this.guard("latest", () => this.stmt.latest.get(executionId)) as
      | CommandDbRow
      | undefined;
    return r ? toRow(r) : undefined;
  }

  get(id: number): CommandRow | undefined {
    const r = this.guard("get", () => this.stmt.byId.get(id)) as CommandDbRow | undefined;
    return r ? toRow(r) : undefined;
  }

  /** Every open command, earliest fire time first, with its launch mark (for a restart). */
  openCommands(): CommandRow[] {
    const launched = this.guard("openCommands", () => this.launches.read());
    return (this.guard("openCommands", () => this.stmt.open.all()) as CommandDbRow[]).map((r) => ({
      ...toRow(r),
      began: launched.has(r.id),
    }));
  }

  countsByState(): { scheduled: number; queued: number; running: number } {
    const out = { scheduled: 0, queued: 0, running: 0 };
    const rows = this.guard("countsByState", () => this.stmt.countByState.all()) as {
      state: keyof typeof out;
      n: number;
    }[];
    for (const r of rows) out[r.state] = r.n;
    return out;
  }

  /** Runs one statement outside a transaction, translating its failure (a closed or broken file). */
  private guard<T>(what: string, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw new AxError("AX_STORE_FAILED", `journal: ${what} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /** Adds a report to the outbox inside the current transaction; returns it numbered. */
  private enqueue(body: ReportBody, envelope: (body: ReportBody, seq: number) => Report): Report {
    const seq = this.lastSeqValue + 1;
    const report = envelope(body, seq);
    const json = JSON.stringify(report);
    this.stmt.outboxInsert.run(seq, json);
    this.encodedReports.set(report, json);
    this.lastSeqValue = seq;
    this.outboxCount++;
    return report;
  }

  private tx<T>(what: string, fn: () => T): T {
    const seqBefore = this.lastSeqValue;
    const openBefore = this.openCount;
    const outboxBefore = this.outboxCount;
    try {
      const result = this.runTx(fn) as T;
      // A commit (not a savepoint inside a batch) moves the WAL on.
      if (!this.db.inTransaction) this.checkpointer?.wrote();
      return result;
    } catch (err) {
      // The transaction rolled back: so do the counters kept beside it.
      this.lastSeqValue = seqBefore;
      this.openCount = openBefore;
      this.outboxCount = outboxBefore;
      throw new AxError("AX_STORE_FAILED", `journal: ${what} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /**
   * Journals a dispatch as `scheduled` and its `accepted` report in one transaction: a dispatch is
   * written before it is acknowledged. Returns the command's id, or undefined when this
   * (executionId, round) is already journaled.
   */
  accept(
    d: Dispatch,
    envelope: (body: ReportBody, seq: number) => Report,
  ): { id: number; report: Report } | undefined {
    return this.tx("accept", () => {
      let id: number;
      try {
        id = Number(
          this.stmt.insert.run({
            executionId: d.executionId,
            round: d.round,
            attempt: d.attempt,
            state: "scheduled",
            dispatch: JSON.stringify(d),
            fireAt: d.fireAt,
            deadline: d.deadline,
            priority: d.priority,
            receivedAt: this.options.now(),
          }).lastInsertRowid,
        );
      } catch (err) {
        if ((err as { code?: string }).code === "SQLITE_CONSTRAINT_UNIQUE") return undefined;
        throw err;
      }
      this.openCount++;
      const report = this.enqueue(
        { type: "accepted", executionId: d.executionId, round: d.round },
        envelope,
      );
      return { id, report };
    });
  }

  /**
   * Journals a dispatch that ends at once (expired on arrival) with its `finished` report, so a
   * redelivery finds it.
   */
  recordFinished(
    d: Dispatch,
    state: CommandState,
    body: ReportBody,
    envelope: (body: ReportBody, seq: number) => Report,
  ): Report | undefined {
    return this.tx("recordFinished", () => {
      try {
        this.stmt.insert.run({
          executionId: d.executionId,
          round: d.round,
          attempt: d.attempt,
          state,
          dispatch: JSON.stringify(d),
          fireAt: d.fireAt,
          deadline: d.deadline,
          priority: d.priority,
          receivedAt: this.options.now(),
        });
      } catch (err) {
        if ((err as { code?: string }).code === "SQLITE_CONSTRAINT_UNIQUE") return undefined;
        throw err;
      }
      this.db
        .prepare("UPDATE commands SET finished_at = ? WHERE execution_id = ? AND round = ?")
        .run(this.options.now(), d.executionId, d.round);
      return this.enqueue(body, envelope);
    });
  }

  /** Moves a command to `state` and outboxes `body` (if any) in one transaction. */
  transition(
    id: number,
    from: CommandState,
    state: CommandState,
    body: ReportBody | undefined,
    envelope: (body: ReportBody, seq: number) => Report,
    startedAt?: number,
  ): Report | undefined {
    // The commit that marks a command running is the last one before its side effect. Under
    // NORMAL a power loss could undo it and the command would run again after the reboot; so
    // unless told otherwise, that one commit is made durable (fsynced) like under FULL.
    const syncThis = state === "running" && this.syncStart;
    if (syncThis && this.db.inTransaction) {
      // SQLite cannot change the safety level inside a transaction: the batch this joins decides
      // whether its commit is fsynced, and must have been opened durable.
      if (!this.durableBatch) {
        throw new AxError(
          "AX_STORE_FAILED",
          "journal: a command marked running inside a batch needs batch(fn, { durable: true })",
        );
      }
      return this.transitionTx(id, from, state, body, envelope, startedAt);
    }
    if (syncThis) this.db.pragma("synchronous = FULL");
    try {
      return this.transitionTx(id, from, state, body, envelope, startedAt);
    } finally {
      if (syncThis) this.db.pragma("synchronous = NORMAL");
    }
  }

  private transitionTx(
    id: number,
    from: CommandState,
    state: CommandState,
    body: ReportBody | undefined,
    envelope: (body: ReportBody, seq: number) => Report,
    startedAt?: number,
  ): Report | undefined {
    return this.tx("transition", () => {
      const terminal = !OPEN_STATES.has(state);
      this.stmt.setState.run({
        id,
        state,
        startedAt: startedAt ?? null,
        finishedAt: terminal ? this.options.now() : null,
      });
      if (OPEN_STATES.has(from) && terminal) this.openCount--;
      // Its children matter only while it may be found running after a crash.
      if (terminal && from === "running") this.stmt.childrenDelete.run(id);
      return body ? this.enqueue(body, envelope) : undefined;
    });
  }

  /** Outboxes a report that changes no command (state, rejected, busy, progress). */
  report(body: ReportBody, envelope: (body: ReportBody, seq: number) => Report): Report {
    return this.tx("report", () => this.enqueue(body, envelope));
  }

  /**
   * Runs `fn` in one transaction: the journal operations inside it commit together (each one
   * becomes a savepoint). One commit for many dispatches is what makes a burst cheap.
   *
   * `durable`: the batch marks commands running, so its commit is made durable as
   * {@link Journal.transition} makes a lone start's (`syncStart`). Inside another batch it joins
   * that one, which must then be durable itself.
   */
  batch<T>(fn: () => T, options: { durable?: boolean } = {}): T {
    if (!options.durable || !this.syncStart || this.db.inTransaction) return this.tx("batch", fn);
    this.db.pragma("synchronous = FULL");
    this.durableBatch = true;
    try {
      return this.tx("batch", fn);
    } finally {
      this.durableBatch = false;
      this.db.pragma("synchronous = NORMAL");
    }
  }

  /** The JSON `report` was outboxed as, when this journal wrote it (see `encodedReports`). */
  encoded(report: Report): string | undefined {
    return this.encodedReports.get(report);
  }

  /** Unacknowledged reports, oldest first, as the JSON texts first sent (to re-send unchanged). */
  pendingReportTexts(): string[] {
    return (
      this.guard("pendingReports", () => this.stmt.outboxAll.all()) as { message: string }[]
    ).map((r) => r.message);
  }

  /** Unacknowledged reports, oldest first, exactly as first sent. */
  pendingReports(): Report[] {
    return (
      this.guard("pendingReports", () => this.stmt.outboxAll.all()) as { message: string }[]
    ).map((r) => JSON.parse(r.message) as Report);
  }

  /** The oldest unacknowledged report, if any. */
  oldestReport(): Report | undefined {
    const r = this.guard("oldestReport", () => this.stmt.outboxFirst.get()) as
      | { message: string }
      | undefined;
    return r ? (JSON.parse(r.message) as Report) : undefined;
  }

  /** Drops every report with seq ≤ upTo (the coordinator stored them). */
  ack(upTo: number): void {
    if (upTo <= this.ackedUpTo) return; // nothing new: a repeated or stale ack costs no write
    const removed = this.tx("ack", () => {
      // Record the last seq before deleting the rows that held it (see the constructor).
      this.stmt.setMeta.run("last_seq", String(this.lastSeqValue));
      return this.stmt.outboxAck.run(upTo).changes;
    });
    this.ackedUpTo = upTo;
    this.outboxCount = Math.max(0, this.outboxCount - removed);
  }

  /**
   * Marks commands whose start has committed as launched, just before their handlers run (see
   * LaunchLog: not a commit, and after a power loss {@link sameBoot} says not to trust it).
   */
  markBegan(ids: readonly number[]): void {
    try {
      this.launches.mark(ids);
    } catch (err) {
      throw new AxError("AX_STORE_FAILED", `journal: markBegan failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /** Empties the launch marks: after recovery has settled every command found running. */
  forgetLaunches(): void {
    this.guard("forgetLaunches", () => this.launches.clear());
  }

  /**
   * Once the launch marks have grown past `bytes`, keeps only those of `running` (the commands
   * running now; no other mark can matter).
   */
  compactLaunches(running: readonly number[], bytes: number): void {
    if (this.launches.size < bytes) return;
    this.guard("compactLaunches", () => this.launches.compact(running));
  }

  /**
   * Journals a child process the handler of command `id` started, at once (a crash right after
   * the spawn must find it). Not fsynced, like {@link markBegan}: a power loss ends the child too.
   */
  recordChild(id: number, pid: number, startTime: string | undefined): void {
    this.unsynced("recordChild", () => this.stmt.childInsert.run(id, pid, startTime ?? null));
  }

  /**
   * Journals how a child ended, the moment it did: even if the agent dies before the handler's
   * report commits, the restart can then say what the child did.
   */
  recordChildExit(
    id: number,
    pid: number,
    exit: { code: number | null; signal: string | null; stoppedByAgent: boolean },
  ): void {
    this.unsynced("recordChildExit", () =>
      this.stmt.childExit.run({
        id,
        pid,
        code: exit.code,
        signal: exit.signal,
        stopped: exit.stoppedByAgent ? 1 : 0,
        at: this.options.now(),
      }),
    );
  }

  /**
   * Where a child of command `id` may leave its exit status when no agent is left to see it
   * (exec's wrapper appends `pid status`): beside the journal, so it has the journal's fate.
   * Undefined for a journal in memory.
   */
  exitFile(id: number): string | undefined {
    return this.options.path === ":memory:" ? undefined : `${this.options.path}.exit-${id}`;
  }

  /** The child processes journaled for command `id`, in the order they started. */
  children(id: number): ChildRecord[] {
    const rows = this.guard("children", () => this.stmt.childrenOf.all(id)) as {
      pid: number;
      start_time: string | null;
      exit_code: number | null;
      exit_signal: string | null;
      stopped_by_agent: number | null;
      exited_at: number | null;
    }[];
    return rows.map((r) => ({
      pid: r.pid,
      startTime: r.start_time ?? undefined,
      exit:
        r.exited_at === null
          ? undefined
          : {
              code: r.exit_code,
              signal: r.exit_signal,
              stoppedByAgent: r.stopped_by_agent === 1,
              at: r.exited_at,
            },
    }));
  }

  /**
   * True when the journal was last opened since the machine last booted: what was written
   * without an fsync (launch marks, children) is all there, and recorded pids may still be live.
   * False after a reboot, or where the boot cannot be told (no /proc).
   */
  get sameBoot(): boolean {
    return this.sameBootValue;
  }

  /** One transaction whose commit is not fsynced (see markBegan); joins an open one. */
  private unsynced(what: string, fn: () => void): void {
    if (this.db.inTransaction) {
      this.tx(what, fn);
      return;
    }
    this.db.pragma("synchronous = OFF");
    try {
      this.tx(what, fn);
    } finally {
      this.db.pragma(`synchronous = ${this.options.synchronous ?? "NORMAL"}`);
    }
  }

  /** Deletes at most `limit` terminal commands finished before the retention window; returns how many. */
  purge(limit = 500): number {
    const n = this.guard("purge", () =>
      this.stmt.purge.run(this.options.now() - this.retainMs, limit),
    ).changes;
    if (n > 0) this.checkpointer?.wrote();
    return n;
  }

  close(): void {
    this.checkpointer?.close();
    this.launches.close();
    if (this.db.open) this.db.close();
    this.lock?.release();
  }
}
