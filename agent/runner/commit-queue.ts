import type { Clock, TimerHandle } from "../../shared/clock.js";
import type { Report } from "../../shared/protocol/index.js";
import type { CommandRow, CommandState, Journal, ReportBody } from "../journal/journal.js";

/** What a deferred start needs from the executor. */
export interface StartHooks {
  /** Runs the handler. Called only once the `running` write has committed. */
  launch(): void;
  /**
   * Called instead of `launch` when the launch could not be journaled (Journal.markBegan): the
   * handler is never run, and the command must be ended as not begun.
   */
  abandon(message: string): void;
  /**
   * Asked before the write of a start whose first commit failed and is being retried: what to
   * journal instead when it may no longer start (its deadline passed meanwhile), having released
   * what it held; undefined when it still may.
   */
  instead(): { to: CommandState; body: ReportBody } | undefined;
}

/** A change already made in memory whose journal write waits for the next commit. */
type Change =
  | {
      kind: "move";
      row: CommandRow;
      from: CommandState;
      to: CommandState;
      body: ReportBody | undefined;
      startedAt: number | undefined;
      start: StartHooks | undefined;
      /** A commit holding it failed before: a start must be checked again (StartHooks.instead). */
      retried: boolean;
    }
  | { kind: "report"; body: ReportBody };

export interface CommitQueueOptions {
  journal: Journal;
  clock: Clock;
  envelope(body: ReportBody, seq: number): Report;
  /** Sends a report; called only after the transaction that wrote it has committed. */
  publish(report: Report): void;
  /** Sends the reports of one commit (two or more) together; without it, `publish` each. */
  publishBatch?(reports: readonly Report[]): void;
  log(level: "error", message: string, fields?: Record<string, unknown>): void;
}

/** How long after a failed commit the changes it held are tried again (unless a commit comes sooner). */
export const RETRY_MS = 1_000;

/**
 * Folds the executor's journal writes into as few commits as keep every guarantee.
 *
 * Why: a command's start and its finish were two commits, so a steady stream cost two commits
 * (≈ 8 WAL frames) per command, and the WAL then needed a checkpoint several times a second,
 * each one stalling the event loop. Now a change that happens outside a transaction — a handler's
 * result, a timeout, an expiry or a queueing fired by the wheel, a progress report — is applied in
 * memory at once and written with the next commit the agent makes anyway: the next start, the
 * next batch of dispatches, a cancel or query; at the latest on `setImmediate` after it was
 * queued. Every transaction writes the waiting changes first, in the order they happened, so
 * reports get the same seqs as if each had committed alone, and each is published only after
 * the commit that holds it.
 *
 * Starts are never folded into a later commit: the `running` write commits (durably, with
 * `syncStart`) before the handler is launched, in a microtask after the wheel's turn, so the
 * starts one turn fires share one commit.
 *
 * A commit that fails (rolled back) loses nothing: the changes it held are logged and kept, in
 * order, for the next commit or a retry after {@link RETRY_MS}; until then {@link stateOf} still
 * answers reads with their state. A start whose deadline passes while it waits is journaled
 * expired instead and never launched. Changes still unwritten when the process dies are lost
 * with it, as a commit lost on power loss is: a command left `running` in the journal is
 * reported `interrupted` after the restart, never run again (rule 13); a scheduled or queued one
 * fires or expires as usual.
 */
export class CommitQueue {
  private pending: Change[] = [];
  /** Each row with a pending move, and the state it will have in the journal once written. */
  private readonly pendingState = new Map<number, CommandState>();
  /** Reports written inside the open transaction, published once it commits. */
  private held: Report[] | undefined;
  private microtaskQueued = false;
  private immediate: NodeJS.Immediate | undefined;
  private retryTimer: TimerHandle | undefined;
  private closed = false;

  constructor(private readonly o: CommitQueueOptions) {}

  /**
   * The state a row will have in the journal once the pending changes are written, if one of
   * them moves it; for reads made outside a batch (which do not see them yet).
   */
  stateOf(id: number): CommandState | undefined {
    return this.pendingState.get(id);
  }

  /**
   * Moves a command to `to` (and outboxes `body`): in the open batch if there is one, otherwise
   * with the next commit. `row.state` changes at once either way.
   */
  move(
    row: CommandRow,
    from: CommandState,
    to: CommandState,
    body?: ReportBody,
    startedAt?: number,
  ): void {
    row.state = to;
    if (this.held) {
      const report = this.o.journal.transition(row.id, from, to, body, this.o.envelope, startedAt);
      if (report) this.held.push(report);
      return;
    }
    this.defer({ kind: "move", row, from, to, body, startedAt, start: undefined, retried: false });
  }

  /**
   * Marks a command running and launches its handler once that has committed: in a durable
   * transaction of its own, in a microtask, shared with whatever else is pending then.
   */
  start(
    row: CommandRow,
    from: CommandState,
    body: ReportBody,
    startedAt: number,
    hooks: StartHooks,
  ): void {
    row.state = "running";
    // Even inside a batch: that one may not be durable, and the handler waits for the commit.
    this.defer({
      kind: "move",
      row,
      from,
      to: "running",
      body,
      startedAt,
      start: hooks,
      retried: false,
    });
  }

  /** Outboxes a report that changes no command: in the open batch, or with the next commit. */
  report(body: ReportBody): void {
    if (this.held) this.held.push(this.o.journal.report(body, this.o.envelope));
    else this.defer({ kind: "report", body });
  }

  /**
   * A report the journal wrote inside the open batch (accept, recordFinished): published once it
   * commits. Outside a batch it has committed already.
   */
  written(report: Report): void {
    if (this.held) this.held.push(report);
    else this.o.publish(report);
  }

  /**
   * Runs `fn` in one transaction that first writes the pending changes; publishes the reports
   * written in it and launches the handlers of its starts once it has committed. Inside another
   * batch it joins that one. Throws what the transaction threw, after keeping the pending
   * changes for a retry.
   */
  batch<T>(fn: () => T): T {
    if (this.held) return fn();
    const changes = this.pending;
    this.pending = [];
    const held: Report[] = [];
    const launches: { id: number; hooks: StartHooks }[] = [];
    this.held = held;
    let out: T;
    try {
      out = this.o.journal.batch(
        () => {
          for (const c of changes) this.write(c, held, launches);
          return fn();
        },
        { durable: changes.some((c) => c.kind === "move" && c.start !== undefined) },
      );
    } catch (err) {
      // Rolled back: nothing in it was written or sent. Its changes stay first in line.
      this.pending = changes.concat(this.pending);
      if (changes.length > 0) {
        for (const c of changes) if (c.kind === "move") c.retried = true;
        this.o.log("error", `journaling ${changes.length} changes failed; kept to retry`, {
          error: (err as Error).message,
        });
        this.retryLater();
      }
      throw err;
    } finally {
      this.held = undefined;
    }
    this.pendingState.clear();
    for (const c of this.pending) if (c.kind === "move") this.pendingState.set(c.row.id, c.to);
    // Launch marks before the launches: a command found running after a crash without one never
    // reached its handler, and is reported so (interrupted before_handler, recover.ts).
    let launching = launches;
    if (launches.length > 0) {
      try {
        this.o.journal.markBegan(launches.map((l) => l.id));
      } catch (err) {
        const message = `not started: its launch could not be journaled (${(err as Error).message})`;
        this.o.log("error", `journaling ${launches.length} launches failed; not launched`, {
          error: (err as Error).message,
        });
        for (const l of launches) l.hooks.abandon(message);
        launching = [];
      }
    }
    // The handlers first: their start is what is timed, and a handler cannot reach this queue
    // synchronously (what it reports is deferred), so the reports still go out in seq order.
    for (const l of launching) l.hooks.launch();
    if (held.length > 1 && this.o.publishBatch) this.o.publishBatch(held);
    else for (const r of held) this.o.publish(r);
    return out;
  }

  /** Commits the pending changes now, if any. A failure is logged and retried, not thrown. */
  flush(): void {
    if (this.pending.length === 0 || this.held) return;
    try {
      this.batch(() => undefined);
    } catch {
      // Logged and kept by batch().
    }
  }

  /**
   * Writes what is pending (a last try) and stops the timers. What still cannot be written is
   * left as the journal has it, as a crash would leave it (see the class comment).
   */
  close(): void {
    this.flush();
    this.closed = true;
    if (this.immediate !== undefined) clearImmediate(this.immediate);
    this.immediate = undefined;
    if (this.retryTimer !== undefined) this.o.clock.clearTimer(this.retryTimer);
    this.retryTimer = undefined;
    if (this.pending.length > 0) {
      this.o.log("error", `${this.pending.length} changes were never journaled`, {
        rows: this.pending.flatMap((c) => (c.kind === "move" ? [c.row.id] : [])),
      });
    }
  }

  private defer(change: Change): void {
    this.pending.push(change);
    if (change.kind === "move") this.pendingState.set(change.row.id, change.to);
    if (this.closed) return;
    if (change.kind === "move" && change.start) {
      // A handler waits for this commit: make it once the current turn's work (the other starts
      // the wheel fires now) is queued, not later — a start is never deferred to another turn.
      if (this.microtaskQueued) return;
      this.microtaskQueued = true;
      queueMicrotask(() => {
        this.microtaskQueued = false;
        this.flush();
      });
      return;
    }
    // Nothing waits for it: leave the rest of this turn the chance to carry it in a commit.
    this.immediate ??= setImmediate(() => {
      this.immediate = undefined;
      this.flush();
    });
  }

  private write(c: Change, held: Report[], launches: { id: number; hooks: StartHooks }[]): void {
    if (c.kind === "report") {
      held.push(this.o.journal.report(c.body, this.o.envelope));
      return;
    }
    if (c.start && c.retried) {
      const other = c.start.instead();
      if (other) {
        Object.assign(c, {
          to: other.to,
          body: other.body,
          startedAt: undefined,
          start: undefined,
        });
        c.row.state = other.to;
      }
    }
    const report = this.o.journal.transition(
      c.row.id,
      c.from,
      c.to,
      c.body,
      this.o.envelope,
      c.startedAt,
    );
    if (report) held.push(report);
    if (c.start) launches.push({ id: c.row.id, hooks: c.start });
  }

  private retryLater(): void {
    if (this.closed || this.retryTimer !== undefined) return;
    this.retryTimer = this.o.clock.setTimer(() => {
      this.retryTimer = undefined;
      this.flush();
    }, RETRY_MS);
  }
}
