import { rmSync } from "node:fs";
import type { Clock, TimerHandle } from "../../shared/clock.js";
import { describeIssue } from "../../shared/protocol/codec.js";
import type { Dispatch, Outcome, RejectReason, Report } from "../../shared/protocol/index.js";
import { TimingWheel } from "../../shared/wheel.js";
import { HandlerFailure, type HandlerRegistry, type HandlerResult } from "../handlers/registry.js";
import type { CommandRow, CommandState, Journal, ReportBody } from "../journal/journal.js";
import { processStartTime } from "../process-info.js";
import { CommitQueue } from "./commit-queue.js";
import { fitFinished } from "./fit-report.js";
import type { ProcessControl } from "./process-group.js";
import { settleRunning } from "./recover.js";

/** A command that has come due and holds a place in the queue or an execution slot. */
interface Active {
  row: CommandRow;
  state: "queued" | "running";
  deadlineHandle: number | undefined;
  abort: AbortController | undefined;
  timeoutTimer: TimerHandle | undefined;
  startedAt: number | undefined;
  /** Its handler was called (its start committed). */
  launched?: boolean;
  /**
   * A cancel came while its handler ran: set, the handler was aborted and its end decides the
   * outcome (returned: succeeded, the cancel came too late; threw: canceled), or this timer,
   * {@link CANCEL_GRACE_MS} on, records it canceled.
   */
  canceling?: TimerHandle | undefined;
}

/**
 * How long a canceled handler has to end before it is reported canceled anyway: an exec child
 * gets SIGTERM, then SIGKILL 2 s later (exec.ts), and its exit comes after.
 */
export const CANCEL_GRACE_MS = 3_000;

export interface ExecutorOptions {
  clock: Clock;
  handlers: HandlerRegistry;
  journal: Journal;
  /** Coordinator time now, as this agent estimates it. */
  coordNow(): number;
  /** Converts a coordinator timestamp to the local monotonic timeline. */
  toMono(coordTime: number): number;
  /**
   * How far the offset estimate may be off (half the round trip of its sample): the true
   * coordinator time is within coordNow() ± this. A command starts once even the lowest
   * coordinator time it could be has reached fireAt. @default () => 0
   */
  /** The clock estimate's uncertainty at coordinator time `at`. */
  uncertaintyMs?(at: number): number;
  /** Wraps a report body in the envelope with its seq. */
  envelope(body: ReportBody, seq: number): Report;
  /**
   * Sends a report that is already in the outbox (it is re-sent until acknowledged); called only
   * once the transaction that wrote it has committed.
   */
  publish(report: Report): void;
  /** Sends the reports one commit wrote, in seq order, as `publish` would each. */
  publishBatch?(reports: readonly Report[]): void;
  concurrency: number;
  queue: number;
  tickMs: number;
  /** Slots of the wheel; one revolution is tickMs × wheelSlots. @default 512 */
  wheelSlots?: number;
  /** The machine's processes, for recovery to stop what outlived a crash. @default the real ones */
  processes?: ProcessControl;
  /**
   * Recovery's say for a command found running after a restart, before the rule-13 default: the
   * report to journal, `hold` to leave it running until {@link Executor.finishHeld}, or
   * undefined for the default (an update's execution, agent/update/updater.ts).
   */
  recovered?(row: CommandRow, finishedAt: number): Finished | "hold" | undefined;
  log(
    level: "debug" | "info" | "warn" | "error",
    message: string,
    fields?: Record<string, unknown>,
  ): void;
}

type Finished = Extract<ReportBody, { type: "finished" }>;

const OUTCOME_STATE: Record<Outcome, CommandState> = {
  succeeded: "succeeded",
  failed: "failed",
  timed_out: "timed_out",
  expired: "expired",
  canceled: "canceled",
  interrupted: "interrupted",
};

/**
 * Holds dispatched commands in the journal and on the agent's fine wheel, starts them at `fireAt`
 * (never early, never after `deadline`), runs their handlers within the concurrency limit, and
 * reports through the journal's outbox.
 *
 * Memory: a scheduled command costs one wheel entry (its payload is the journal row id); its
 * dispatch stays on disk until it comes due. Only queued and running commands are in memory.
 * Cancelling a scheduled command updates its row; its wheel entry is skipped when it comes up.
 *
 * Journal writes go through a {@link CommitQueue}: each entry point (dispatch, cancel, query,
 * recover, a batch) is one transaction that first writes what is pending, and what happens
 * between them (results, timeouts, expiries, starts) is folded into the next commit.
 */
export class Executor {
  private readonly active = new Map<number, Active>();
  private readonly queue: number[] = [];
  /** Payload: row id to fire, or −row id for a queued command's deadline. */
  private readonly wheel: TimingWheel<number>;
  private running = 0;
  /**
   * Commands accepted due now whose wheel entry has not come up yet (it comes up on the next
   * tick, after their journal commit). They are due and waiting as much as the queue is: without
   * them a burst inside one tick was accepted whole, and nothing was answered busy (issue 15).
   */
  private readonly arriving = new Set<number>();
  /** Updates let go of by {@link detach}: a cancel comes too late for them. */
  private readonly detached = new Set<string>();
  /**
   * Commands on the wheel to start, by journal row: their fire time, the monotonic time of their
   * wheel entry and its handle, so that {@link retime} can bring one forward when a better clock
   * estimate says it is due sooner, in place of the entry it had.
   */
  private readonly starts = new Map<number, number[]>();
  private readonly commits: CommitQueue;
  shuttingDown = false;

  constructor(private readonly o: ExecutorOptions) {
    this.commits = new CommitQueue({
      journal: o.journal,
      clock: o.clock,
      envelope: o.envelope,
      publish: o.publish,
      ...(o.publishBatch === undefined ? {} : { publishBatch: o.publishBatch }),
      log: o.log,
    });
    this.wheel = new TimingWheel((payload) => this.onWheel(payload), {
      clock: o.clock,
      tickMs: o.tickMs,
      slots: o.wheelSlots ?? 512,
      // Each fire reads and writes the journal (tens of µs); a turn fires at most this many, so
      // a burst of commands due together never blocks the loop for more than a couple of ms.
      maxBatch: 32,
      onError: (err) => o.log("error", `wheel callback failed: ${(err as Error).message}`),
    });
  }

  get counts(): { running: number; queued: number; scheduled: number; open: number } {
    this.flush();
    const c = this.o.journal.countsByState();
    return {
      running: this.running,
      queued: this.queue.length,
      scheduled: c.scheduled,
      open: this.o.journal.open,
    };
  }

  runningRefs(): { executionId: string; round: number }[] {
    const out: { executionId: string; round: number }[] = [];
    for (const a of this.active.values()) {
      if (a.state === "running") out.push({ executionId: a.row.executionId, round: a.row.round });
    }
    return out;
  }

  /**
   * Runs `fn` in one journal transaction, after the changes still pending; the reports written in
   * it are published once it commits. The agent journals a burst of dispatches (and an ack) so.
   */
  batch<T>(fn: () => T): T {
    return this.commits.batch(fn);
  }

  /** Commits the changes still pending, before reading the journal from outside. */
  flush(): void {
    this.commits.flush();
  }

  /**
   * Outboxes a report that changes no command (state, rejected, busy, progress): inside a batch
   * with it, otherwise with the next commit.
   */
  report(body: ReportBody): void {
    this.commits.report(body);
  }

  private move(
    row: CommandRow,
    from: CommandState,
    to: CommandState,
    body?: ReportBody,
    startedAt?: number,
  ): void {
    this.commits.move(row, from, to, body, startedAt);
  }

  /**
   * After a restart (rule 13): a command that was running when the process died is never run
   * again; it is reported as {@link settleRunning} finds it (interrupted before or in its handler,
   * or what its journaled child did), once any child that outlived the agent has been stopped. A
   * scheduled or queued one whose deadline passed while down is reported `expired`; the rest go
   * back on the wheel.
   */
  recover(): { rescheduled: number; interrupted: number; expired: number; settled: number } {
    const now = this.o.coordNow();
    const open = this.o.journal.openCommands();
    // Children are stopped before the transaction: a report must not say "interrupted" while
    // the side effect it is about is still going on, and no transaction waits on a kill.
    const settled = new Map<number, ReturnType<typeof settleRunning> | "hold">();
    const exitFiles: string[] = [];
    for (const row of open) {
      if (row.state !== "running") continue;
      // An update's execution: its outcome is the update's, not the process's (agent/update).
      const update = this.o.recovered?.(row, now);
      if (update !== undefined) {
        settled.set(row.id, update === "hold" ? update : { body: update, stopped: [] });
        continue;
      }
      const exitFile = this.o.journal.exitFile(row.id);
      const s = settleRunning(
        row,
        this.o.journal.children(row.id),
        this.o.journal.sameBoot,
        now,
        this.o.processes,
        exitFile,
      );
      if (exitFile) exitFiles.push(exitFile);
      for (const g of s.stopped) {
        this.o.log("warn", `stopped a child that outlived the agent: pid ${g.pid} ${g.how}`, {
          executionId: row.executionId,
        });
      }
      settled.set(row.id, s);
    }
    const out = this.batch(() => this.recoverIn(open, settled, now));
    // Every command found running is settled and that is journaled: no mark matters any more.
    this.o.journal.forgetLaunches();
    // The children's exit notes too, once what they said is journaled.
    for (const f of exitFiles) rmSync(f, { force: true });
    return out;
  }

  /** Keeps the launch marks small: once grown, only the running commands' stay (at a heartbeat). */
  tidy(): void {
    const running: number[] = [];
    for (const [id, a] of this.active) if (a.state === "running") running.push(id);
    this.o.journal.compactLaunches(running, 64 * 1024);
  }

  private recoverIn(
    open: readonly CommandRow[],
    settled: ReadonlyMap<number, ReturnType<typeof settleRunning> | "hold">,
    now: number,
  ): { rescheduled: number; interrupted: number; expired: number; settled: number } {
    const out = { rescheduled: 0, interrupted: 0, expired: 0, settled: 0 };
    for (const row of open) {
      const s = settled.get(row.id);
      if (s === "hold") continue; // stays running until finishHeld
      if (row.state === "running" && s) {
        this.move(row, "running", OUTCOME_STATE[s.body.outcome], s.body);
        if (s.body.outcome === "interrupted") out.interrupted++;
        else out.settled++;
        continue;
      }
      if (row.state === "queued") this.move(row, "queued", "scheduled");
      if (now > row.dispatch.deadline) {
        this.expire(row, "scheduled", "deadline passed while the agent was down");
        out.expired++;
        continue;
      }
      this.startAt(row.id, row.dispatch.fireAt);
      out.rescheduled++;
    }
    return out;
  }

  /** Handles a valid dispatch (rules 3, 5, 6, 7). */
  dispatch(d: Dispatch): void {
    this.batch(() => this.dispatchIn(d));
  }

  private dispatchIn(d: Dispatch): void {
    const { executionId: id, round } = d;
    const latest = this.o.journal.latest(id);
    /** The round held, not started, that this higher one replaces once it is taken (rule 3). */
    let held: CommandRow | undefined;
    if (latest) {
      const replaceable = latest.state === "scheduled" || latest.state === "queued";
      const retry = !replaceable && latest.state !== "running" && d.attempt > latest.attempt;
      if (round > latest.round && replaceable) {
        // Refused (shutting down, busy, …), the new round leaves the held one as it was: accepted
        // work is never dropped, and an agent holding neither would never run it.
        held = latest;
      } else if (!(round > latest.round && retry)) {
        // Rule 3: already held (or ran, or a stale round): never run again; say what we know. A
        // retry (a new attempt with its own higher rounds) is new work and falls through.
        this.report({
          type: "state",
          executionId: id,
          round: latest.round,
          localState: latest.state,
        });
        return;
      }
    }
    const reject = (reason: RejectReason, message?: string) =>
      this.report({
        type: "rejected",
        executionId: id,
        round,
        reason,
        // A params key quoted in the message could take it past rejected.message's 4096 limit.
        ...(message ? { message: message.slice(0, 1024) } : {}),
      });
    if (this.shuttingDown) {
      reject("shutting_down", "the agent is shutting down");
      return;
    }
    // A dispatch this agent cannot run is the job's or the routing's fault: said in the log too,
    // with its code (docs/errors.md), as well as in the report.
    const refuse = (reason: "unknown_handler" | "invalid_params", message: string) => {
      this.o.log("warn", `rejected ${id}: ${message}`, {
        executionId: id,
        handler: d.handler,
        code: reason === "unknown_handler" ? "AX_HANDLER_UNKNOWN" : "AX_HANDLER_PARAMS",
      });
      reject(reason, message);
    };
    const handler = this.o.handlers.get(d.handler);
    if (!handler) {
      refuse("unknown_handler", `no handler "${d.handler}" on this agent`);
      return;
    }
    const params = handler.params.safeParse(d.params, { error: describeIssue });
    if (!params.success) {
      const first = params.error.issues[0];
      const path = ["params", ...(first?.path.map(String) ?? [])].join(".");
      refuse("invalid_params", `${path}: ${first?.message ?? "invalid"}`);
      return;
    }
    // A round that replaces one held takes its place: it adds no open work to the journal.
    const full = held ? undefined : this.o.journal.fullReason();
    if (full !== undefined) {
      reject("journal_full", full);
      return;
    }
    const now = this.o.coordNow();
    const dueNow = d.fireAt <= now;
    // The held round's place (in line, or due this tick) is the new round's.
    const freed = held && (this.queue.includes(held.id) || this.arriving.has(held.id)) ? 1 : 0;
    const expired = now > d.deadline;
    if (!expired && dueNow && this.waiting() - freed >= this.o.concurrency + this.o.queue) {
      // Rule 7: due now, no slot and no queue room: busy, and not kept.
      this.report({ type: "busy", executionId: id, round });
      return;
    }
    if (held) {
      this.release(held);
      this.move(held, held.state, "canceled");
    }
    if (expired) {
      // Rule 5: expired on arrival — journaled and reported, never started.
      const report = this.o.journal.recordFinished(
        d,
        "expired",
        {
          type: "finished",
          executionId: id,
          round,
          outcome: "expired",
          retryable: false,
          message: "deadline passed before arrival",
          finishedAt: now,
        },
        this.o.envelope,
      );
      if (report) this.commits.written(report);
      return;
    }
    const accepted = this.o.journal.accept(d, this.o.envelope);
    if (!accepted) return; // journaled meanwhile; cannot happen on one thread, but never run twice
    this.commits.written(accepted.report);
    const row: CommandRow = {
      id: accepted.id,
      executionId: id,
      round,
      attempt: d.attempt,
      state: "scheduled",
      dispatch: d,
      startedAt: null,
    };
    // Even a command due now starts from the wheel, on a later turn of the loop: never inside
    // the transaction that journals it, so its side effect cannot happen before that commits.
    this.startAt(row.id, d.fireAt);
    if (dueNow) this.arriving.add(row.id);
  }

  /**
   * Puts journal row `id`, due at coordinator time `fireAt`, on the wheel to start at `mono`, in
   * place of the entry it had: one entry a command, however often the estimate moves (a sample
   * every 25 s retimed a day-ahead command thousands of times).
   */
  private startAt(id: number, fireAt: number, mono = this.startMono(fireAt)): void {
    const old = this.starts.get(id)?.[2];
    if (old !== undefined) this.wheel.cancel(old);
    this.starts.set(id, [fireAt, mono, this.wheel.schedule(mono, id)]);
  }

  /**
   * The clock estimate changed (a new sample): a command whose start is now sooner than its
   * wheel entry says is brought forward. Each start was worked out with the estimate of the
   * moment it was journaled; after a better one (a first sample's wide round trip narrowed, or
   * the first sample after a restart, which recovered the journal with offset 0) it would have
   * started late by the difference. One that is now later needs nothing: its entry comes up
   * early and is put back (onWheel).
   */
  retime(): void {
    for (const [id, [fireAt, mono]] of this.starts) {
      const sooner = this.startMono(fireAt as number);
      // By a millisecond at least: a sample that moves the estimate a hair adds no entries.
      if (sooner < (mono as number) - 1) this.startAt(id, fireAt as number, sooner);
    }
  }

  /** Due commands holding a slot or a place in line: running, queued, or accepted this tick. */
  private waiting(): number {
    return this.running + this.queue.length + this.arriving.size;
  }

  /** Rule 8: stops a scheduled, queued or running command, or says it is too late. */
  cancel(id: string, round: number): void {
    this.batch(() => this.cancelIn(id, round));
  }

  private cancelIn(id: string, round: number): void {
    const latest = this.o.journal.latest(id);
    if (
      latest &&
      // An update that switched to its new version is past stopping: too late (below), and the
      // next process reports how it ended.
      !this.detached.has(id) &&
      round >= latest.round &&
      (latest.state === "scheduled" || latest.state === "queued" || latest.state === "running")
    ) {
      const active = this.active.get(latest.id);
      const startedAt = active?.startedAt;
      if (active?.launched && active.abort !== undefined && latest.state === "running") {
        // Rule 8: its end says whether the cancel stopped it, or came as it finished.
        if (active.canceling === undefined) {
          active.canceling = this.o.clock.setTimer(
            () => this.canceled(active, latest),
            CANCEL_GRACE_MS,
          );
          active.abort.abort();
        }
        return;
      }
      active?.abort?.abort();
      this.release(latest);
      this.move(latest, latest.state, "canceled", {
        type: "finished",
        executionId: id,
        round: latest.round,
        outcome: "canceled",
        retryable: false,
        message: "canceled by the coordinator",
        finishedAt: this.o.coordNow(),
        ...(startedAt === undefined ? {} : { startedAt }),
      });
      return;
    }
    this.report({
      type: "state",
      executionId: id,
      round: latest?.round ?? round,
      localState: latest?.state ?? "unknown",
      reason: !latest ? "unknown" : round < latest.round ? "stale_round" : "too_late",
    });
  }

  /** Journals and reports a running command canceled (rule 8). */
  private canceled(active: Active, row: CommandRow): void {
    if (this.active.get(row.id) !== active || row.state !== "running") return;
    this.release(row);
    this.move(row, "running", "canceled", {
      type: "finished",
      executionId: row.executionId,
      round: row.round,
      outcome: "canceled",
      retryable: false,
      message: "canceled by the coordinator",
      finishedAt: this.o.coordNow(),
      ...(active.startedAt === undefined ? {} : { startedAt: active.startedAt }),
    });
  }

  /** Answers from the journal what this agent knows of an execution. */
  query(id: string, round: number): void {
    this.batch(() => {
      const latest = this.o.journal.latest(id);
      this.report({
        type: "state",
        executionId: id,
        round: latest?.round ?? round,
        localState: latest?.state ?? "unknown",
      });
    });
  }

  private onWheel(payload: number): void {
    if (payload > 0) {
      this.arriving.delete(payload);
      const row = this.o.journal.get(payload);
      // The journal does not show the changes still pending (an expiry of this very row, say):
      // read it as it will be once they are written, so they count without a commit of their own.
      const pending = row && this.commits.stateOf(row.id);
      if (row && pending) row.state = pending;
      if (row?.state !== "scheduled") {
        this.starts.delete(payload);
        return; // canceled or replaced meanwhile
      }
      // The wheel runs on the monotonic clock; the offset estimate may have moved since this was
      // scheduled. Never start before fireAt on the coordinator's clock (rule 4), by as much as
      // the estimate may be off.
      const early = this.notYet(row.dispatch.fireAt, this.margin());
      if (early !== undefined) {
        this.startAt(row.id, row.dispatch.fireAt, early);
        return;
      }
      this.starts.delete(row.id);
      // Rule 13: after SIGTERM nothing new starts. It stays scheduled in the journal and fires
      // after the restart if its deadline still allows (reported neither started nor interrupted).
      if (this.shuttingDown) return;
      this.due(row);
      return;
    }
    const active = this.active.get(-payload);
    if (active?.state !== "queued") return;
    const early = this.notYet(active.row.dispatch.deadline);
    if (early !== undefined) {
      active.deadlineHandle = this.wheel.schedule(early, payload);
      return;
    }
    // Waited for a slot until its deadline: expired, never started late.
    active.deadlineHandle = undefined;
    this.release(active.row);
    this.expire(active.row, "queued", "no free slot before the deadline");
  }

  /**
   * When coordinator time `t` is still ahead, the monotonic time to look again; undefined when it
   * has come. At least a microsecond ahead, so float rounding between the two timelines cannot
   * make the wheel spin.
   */
  private notYet(t: number, margin = 0): number | undefined {
    if (t + margin - this.o.coordNow() <= 0) return undefined;
    return Math.max(this.o.toMono(t) + margin, this.o.clock.monoNow() + 0.001);
  }

  /**
   * The offset estimate's uncertainty, now or at coordinator time `at`: a start waits it out, so
   * it is never early.
   */
  private margin(at = this.o.coordNow()): number {
    return this.o.uncertaintyMs?.(at) ?? 0;
  }

  /**
   * The monotonic time to start a command due at coordinator time `fireAt`: past it by the
   * uncertainty as it will have grown 100 ms after `fireAt` (the estimate ages at 50 ppm), so the
   * check when it comes due, with the uncertainty of that moment, finds it due.
   */
  private startMono(fireAt: number): number {
    return this.o.toMono(fireAt) + this.margin(fireAt + 100);
  }

  private expire(row: CommandRow, from: CommandState, message: string): void {
    this.move(row, from, "expired", {
      type: "finished",
      executionId: row.executionId,
      round: row.round,
      outcome: "expired",
      retryable: false,
      message,
      finishedAt: this.o.coordNow(),
    });
  }

  private due(row: CommandRow): void {
    if (this.o.coordNow() > row.dispatch.deadline) {
      this.expire(row, row.state, "deadline passed");
      return;
    }
    if (this.running < this.o.concurrency) {
      this.start(row);
      return;
    }
    // Accepted work is never dropped (rule 7): it waits for a slot until its deadline.
    this.move(row, row.state, "queued");
    const active: Active = {
      row,
      state: "queued",
      deadlineHandle: this.wheel.schedule(this.o.toMono(row.dispatch.deadline), -row.id),
      abort: undefined,
      timeoutTimer: undefined,
      startedAt: undefined,
    };
    this.active.set(row.id, active);
    this.insertByPriority(row.id, row.dispatch.priority);
  }

  private insertByPriority(id: number, priority: number): void {
    let i = this.queue.length;
    while (i > 0) {
      const other = this.active.get(this.queue[i - 1] as number);
      if (!other || other.row.dispatch.priority >= priority) break;
      i--;
    }
    this.queue.splice(i, 0, id);
  }

  private start(row: CommandRow): void {
    const d = row.dispatch;
    const handler = this.o.handlers.get(d.handler);
    const prev = this.active.get(row.id);
    if (prev?.deadlineHandle !== undefined) this.wheel.cancel(prev.deadlineHandle);
    const startedAt = this.o.coordNow();
    const abort = new AbortController();
    const active: Active = {
      row,
      state: "running",
      deadlineHandle: undefined,
      abort,
      timeoutTimer: undefined,
      startedAt,
    };
    this.active.set(row.id, active);
    this.running++;
    const lateMs = Math.max(0, startedAt - d.fireAt);
    // Rule 13: the handler's side effect may only happen once `running` is in the journal, so it
    // is launched after that commit (shared by the starts of this turn), never before.
    this.commits.start(
      row,
      row.state,
      { type: "started", executionId: d.executionId, round: d.round, startedAt, lateMs },
      startedAt,
      {
        launch: () => this.launch(active, handler),
        abandon: (message) => {
          if (this.active.get(row.id) !== active || row.state !== "running") return;
          this.finish(active, {
            outcome: "interrupted",
            retryable: true,
            message,
            interruptedPhase: "before_handler",
          });
        },
        instead: () => {
          if (this.o.coordNow() <= d.deadline) return undefined;
          this.release(row);
          return {
            to: "expired",
            body: {
              type: "finished",
              executionId: d.executionId,
              round: d.round,
              outcome: "expired",
              retryable: false,
              message: "deadline passed before its start could be journaled",
              finishedAt: this.o.coordNow(),
            },
          };
        },
      },
    );
  }

  /** Runs a started command's handler, with its timeout; its start has committed. */
  private launch(active: Active, handler: ReturnType<HandlerRegistry["get"]>): void {
    const { row, abort } = active;
    const d = row.dispatch;
    const current = () => this.active.get(row.id) === active && row.state === "running";
    // Canceled (or the executor closed) between the start and its commit: never launched.
    if (!current() || abort === undefined) return;
    active.launched = true;
    active.timeoutTimer = this.o.clock.setTimer(() => {
      // Being canceled: the cancel's end decides.
      if (!current() || active.canceling !== undefined) return;
      abort.abort();
      this.finish(active, {
        outcome: "timed_out",
        retryable: true,
        message: `ran longer than timeoutMs ${d.timeoutMs}`,
      });
    }, d.timeoutMs);
    const ctx = {
      executionId: d.executionId,
      attempt: d.attempt,
      round: d.round,
      shard: d.shard,
      signal: abort.signal,
      children: {
        // Written at once, each its own small commit: a crash a moment later must find them.
        spawned: (pid: number) =>
          this.journalChild(d, () =>
            this.o.journal.recordChild(row.id, pid, processStartTime(pid)),
          ),
        exited: (
          pid: number,
          exit: { code: number | null; signal: string | null; stoppedByAgent: boolean },
        ) => this.journalChild(d, () => this.o.journal.recordChildExit(row.id, pid, exit)),
        exitFile: this.o.journal.exitFile(row.id),
      },
      progress: (percent?: number, note?: string) => {
        if (!current()) return;
        // Whatever a handler passes, the report must be valid: one the coordinator refuses is
        // never acknowledged, and every report behind it in the outbox waits. A percent that is
        // not a number (NaN, a string) is left out.
        const pct = typeof percent === "number" && !Number.isNaN(percent) ? percent : undefined;
        this.report({
          type: "progress",
          executionId: d.executionId,
          round: d.round,
          ...(pct === undefined ? {} : { percent: Math.min(100, Math.max(0, pct)) }),
          ...(note === undefined || note === null ? {} : { note: String(note).slice(0, 1024) }),
        });
      },
      log: (message: string, fields?: Record<string, unknown>) =>
        this.o.log("info", message, { executionId: d.executionId, ...fields }),
    };
    const params = handler ? handler.params.safeParse(d.params) : undefined;
    // Entered now, not in a later microtask: its start is what the fire time promised, and the
    // commit's reports are published after the launches (CommitQueue.batch). A synchronous throw
    // fails it like a rejection.
    const run = (): Promise<HandlerResult> => {
      if (!handler || !params?.success) {
        throw new HandlerFailure(`handler "${d.handler}" unavailable`, { retryable: false });
      }
      return Promise.resolve(handler.run(ctx, params.data));
    };
    let running: Promise<HandlerResult>;
    try {
      running = run();
    } catch (err) {
      running = Promise.reject(err);
    }
    running
      .then(
        (result) => {
          if (!current()) return; // canceled or timed out meanwhile
          this.finish(active, {
            outcome: "succeeded",
            retryable: false,
            // Returned after a cancel asked it to stop: it had finished, or finished anyway.
            message:
              active.canceling === undefined
                ? "ok"
                : "ok: it finished before the cancel stopped it",
            // Anything returned is sent, or stands as a marker (fit-report.ts): a string or a
            // number is not a result, and is said to be dropped rather than dropped unsaid.
            ...(result === undefined ? {} : { result: result as Record<string, unknown> }),
          });
        },
        (err: unknown) => {
          if (!current()) return;
          if (active.canceling !== undefined) {
            this.canceled(active, row);
            return;
          }
          this.finish(active, {
            outcome: "failed",
            retryable: err instanceof HandlerFailure ? err.retryable : true,
            message: err instanceof Error ? err.message : String(err),
          });
        },
      )
      .catch((err: unknown) =>
        this.o.log("error", `finishing ${d.executionId} failed: ${(err as Error).message}`),
      );
  }

  /** A child's journal write; a failure is logged (the restart then reports it in_handler). */
  private journalChild(d: Dispatch, write: () => void): void {
    try {
      write();
    } catch (err) {
      this.o.log(
        "error",
        `journaling a child of ${d.executionId} failed: ${(err as Error).message}`,
      );
    }
  }

  private finish(
    active: Active,
    r: {
      outcome: Outcome;
      retryable: boolean;
      message: string;
      result?: Record<string, unknown>;
      interruptedPhase?: "before_handler" | "in_handler";
    },
  ): void {
    const row = active.row;
    this.release(row);
    // A report must fit the protocol's limits, or it would be refused and re-sent forever.
    const body = fitFinished({
      type: "finished",
      executionId: row.executionId,
      round: row.round,
      outcome: r.outcome,
      retryable: r.retryable,
      message: r.message,
      finishedAt: this.o.coordNow(),
      ...(active.startedAt === undefined ? {} : { startedAt: active.startedAt }),
      ...(r.result === undefined ? {} : { result: r.result }),
      ...(r.interruptedPhase === undefined ? {} : { interruptedPhase: r.interruptedPhase }),
    });
    this.move(row, "running", OUTCOME_STATE[r.outcome], body);
  }

  /** Releases what a command holds in memory: its queue place or slot, timers and deadline entry. */
  private release(row: CommandRow): void {
    // Due this tick and let go (canceled, replaced): it no longer holds a place in line.
    this.arriving.delete(row.id);
    const active = this.active.get(row.id);
    if (!active) return;
    if (active.deadlineHandle !== undefined) this.wheel.cancel(active.deadlineHandle);
    if (active.timeoutTimer !== undefined) this.o.clock.clearTimer(active.timeoutTimer);
    if (active.canceling !== undefined) this.o.clock.clearTimer(active.canceling);
    if (active.state === "queued") {
      const i = this.queue.indexOf(row.id);
      if (i >= 0) this.queue.splice(i, 1);
    } else {
      this.running--;
      queueMicrotask(() => this.pump());
    }
    this.active.delete(row.id);
  }

  private pump(): void {
    // Shutting down: queued commands stay queued in the journal and go back on the wheel after
    // the restart (rule 13); only the deadline can still end them.
    if (this.shuttingDown) return;
    while (this.running < this.o.concurrency && this.queue.length > 0) {
      const id = this.queue.shift() as number;
      const active = this.active.get(id);
      if (!active) continue;
      if (active.deadlineHandle !== undefined) this.wheel.cancel(active.deadlineHandle);
      this.active.delete(id);
      this.due(active.row);
    }
  }

  /**
   * Ends a command recovery held as running (an update on trial, see ExecutorOptions.recovered)
   * with the report `body` makes of its row. Nothing when it is no longer running.
   */
  finishHeld(executionId: string, round: number, body: (row: CommandRow) => Finished): void {
    const row = this.o.journal.latest(executionId);
    if (row?.state !== "running" || row.round !== round || this.active.has(row.id)) return;
    const report = body(row);
    this.batch(() => this.move(row, "running", OUTCOME_STATE[report.outcome], report));
  }

  /**
   * Lets go of a running command without ending it: no timeout, no slot, nothing for a shutdown to
   * wait for; it stays `running` in the journal for the next process to settle (an update that
   * switched to its new version, see ExecutorOptions.recovered).
   */
  detach(executionId: string): void {
    this.detached.add(executionId);
    for (const active of this.active.values()) {
      if (active.row.executionId === executionId && active.state === "running") {
        this.release(active.row);
        return;
      }
    }
  }

  /** Resolves when nothing is running (and what finished is journaled), or after `graceMs`. */
  async drainRunning(graceMs: number): Promise<void> {
    const until = this.o.clock.monoNow() + graceMs;
    while (this.running > 0 && this.o.clock.monoNow() < until) {
      await new Promise<void>((resolve) => this.o.clock.setTimer(resolve, 20));
    }
    this.flush();
  }

  /**
   * Stops timers and the wheel. Journaled commands stay: scheduled ones fire after a restart,
   * and one still running is reported `interrupted` then (rule 13).
   */
  close(): void {
    // What finished is journaled before the handles go (a last try; see CommitQueue.close).
    this.commits.close();
    for (const active of this.active.values()) {
      active.abort?.abort();
      if (active.timeoutTimer !== undefined) this.o.clock.clearTimer(active.timeoutTimer);
    }
    this.active.clear();
    this.arriving.clear();
    this.starts.clear();
    this.wheel.close();
  }
}
