import type { Clock, TimerHandle } from "../../shared/clock.js";
import { describeIssue } from "../../shared/protocol/codec.js";
import type { Dispatch, LocalState, Outcome } from "../../shared/protocol/index.js";
import { TimingWheel } from "../../shared/wheel.js";
import { HandlerFailure, type HandlerRegistry } from "../handlers/registry.js";
import type { ReportBody } from "../outbox.js";

/** An execution the agent holds under one round. */
interface Held {
  dispatch: Dispatch;
  state: "scheduled" | "queued" | "running";
  wheelHandle: number | undefined;
  deadlineHandle: number | undefined;
  abort: AbortController | undefined;
  timeoutTimer: TimerHandle | undefined;
  /** Coordinator time it started at, once running. */
  startedAt: number | undefined;
}

interface Done {
  round: number;
  attempt: number;
  state: LocalState;
}

export interface ExecutorOptions {
  clock: Clock;
  handlers: HandlerRegistry;
  /** Coordinator time now, as this agent estimates it. */
  coordNow(): number;
  /** Converts a coordinator timestamp to the local monotonic timeline. */
  toMono(coordTime: number): number;
  concurrency: number;
  queue: number;
  maxPending: number;
  tickMs: number;
  report(body: ReportBody): void;
  log(
    level: "debug" | "info" | "warn" | "error",
    message: string,
    fields?: Record<string, unknown>,
  ): void;
}

/** Finished executions remembered to answer duplicates and late cancels. */
const DONE_MEMORY = 10_000;

const OUTCOME_STATE: Record<Outcome, LocalState> = {
  succeeded: "succeeded",
  failed: "failed",
  timed_out: "timed_out",
  expired: "expired",
  canceled: "canceled",
  interrupted: "interrupted",
};

/**
 * Holds dispatched executions on the agent's fine wheel, starts them at `fireAt` (never early,
 * never after `deadline`), runs their handlers within the concurrency limit, and reports.
 */
export class Executor {
  private readonly held = new Map<string, Held>();
  private readonly done = new Map<string, Done>();
  private readonly queue: string[] = [];
  private readonly wheel: TimingWheel<{ id: string; kind: "fire" | "deadline" }>;
  private running = 0;
  shuttingDown = false;

  constructor(private readonly o: ExecutorOptions) {
    this.wheel = new TimingWheel((entry) => this.onWheel(entry.id, entry.kind), {
      clock: o.clock,
      tickMs: o.tickMs,
      slots: 512,
      onError: (err) => o.log("error", `wheel callback failed: ${(err as Error).message}`),
    });
  }

  get counts(): { running: number; queued: number; scheduled: number; held: number } {
    let scheduled = 0;
    for (const h of this.held.values()) if (h.state === "scheduled") scheduled++;
    return { running: this.running, queued: this.queue.length, scheduled, held: this.held.size };
  }

  runningRefs(): { executionId: string; round: number }[] {
    const out: { executionId: string; round: number }[] = [];
    for (const [id, h] of this.held)
      if (h.state === "running") out.push({ executionId: id, round: h.dispatch.round });
    return out;
  }

  /** Handles a valid dispatch (rules 3, 5, 6, 7). */
  dispatch(d: Dispatch): void {
    const { executionId: id, round } = d;
    const held = this.held.get(id);
    const done = this.done.get(id);
    if (held) {
      if (round > held.dispatch.round && held.state !== "running") {
        // Rule 3: a higher round for one not yet started replaces it.
        this.drop(id, held);
      } else {
        this.o.report({
          type: "state",
          executionId: id,
          round: held.dispatch.round,
          localState: held.state,
        });
        return;
      }
    } else if (done && !(d.attempt > done.attempt && round > done.round)) {
      // Rule 3: a finished one is not run again under this attempt. A retry (a new attempt, with
      // its own higher rounds) is new work and runs.
      this.o.report({ type: "state", executionId: id, round: done.round, localState: done.state });
      return;
    }
    const reject = (
      reason: "unknown_handler" | "invalid_params" | "journal_full" | "shutting_down",
      message?: string,
    ) =>
      this.o.report({
        type: "rejected",
        executionId: id,
        round,
        reason,
        ...(message ? { message } : {}),
      });
    if (this.shuttingDown) {
      reject("shutting_down");
      return;
    }
    const handler = this.o.handlers.get(d.handler);
    if (!handler) {
      reject("unknown_handler", `no handler "${d.handler}" on this agent`);
      return;
    }
    const params = handler.params.safeParse(d.params, { error: describeIssue });
    if (!params.success) {
      const first = params.error.issues[0];
      const path = ["params", ...(first?.path.map(String) ?? [])].join(".");
      reject("invalid_params", `${path}: ${first?.message ?? "invalid"}`);
      return;
    }
    if (this.held.size >= this.o.maxPending) {
      reject("journal_full", `holding ${this.held.size} executions`);
      return;
    }
    const now = this.o.coordNow();
    if (now > d.deadline) {
      // Rule 5: expired on arrival — recorded and reported, never started.
      this.finish(d, {
        outcome: "expired",
        retryable: false,
        message: "deadline passed before arrival",
      });
      return;
    }
    const dueNow = d.fireAt <= now;
    if (dueNow && this.running >= this.o.concurrency && this.queue.length >= this.o.queue) {
      // Rule 7: due now, no slot and no queue room: busy, and not kept.
      this.o.report({ type: "busy", executionId: id, round });
      return;
    }
    const entry: Held = {
      dispatch: d,
      state: "scheduled",
      wheelHandle: undefined,
      deadlineHandle: undefined,
      abort: undefined,
      timeoutTimer: undefined,
      startedAt: undefined,
    };
    this.done.delete(id);
    this.held.set(id, entry);
    this.o.report({ type: "accepted", executionId: id, round });
    if (dueNow) this.due(id, entry);
    else entry.wheelHandle = this.wheel.schedule(this.o.toMono(d.fireAt), { id, kind: "fire" });
  }

  /** Rule 8: stops a scheduled, queued or running execution, or says it is too late. */
  cancel(id: string, round: number): void {
    const held = this.held.get(id);
    if (held && round >= held.dispatch.round) {
      if (held.state === "running") held.abort?.abort();
      this.drop(id, held);
      this.finish(held.dispatch, {
        outcome: "canceled",
        retryable: false,
        message: "canceled by the coordinator",
        ...(held.startedAt === undefined ? {} : { startedAt: held.startedAt }),
      });
      return;
    }
    const done = this.done.get(id);
    this.o.report({
      type: "state",
      executionId: id,
      round: held?.dispatch.round ?? done?.round ?? round,
      localState: held?.state ?? done?.state ?? "unknown",
      reason: held ? "stale_round" : done ? "too_late" : "unknown",
    });
  }

  query(id: string, round: number): void {
    const held = this.held.get(id);
    const done = this.done.get(id);
    this.o.report({
      type: "state",
      executionId: id,
      round: held?.dispatch.round ?? done?.round ?? round,
      localState: held?.state ?? done?.state ?? "unknown",
    });
  }

  private onWheel(id: string, kind: "fire" | "deadline"): void {
    const held = this.held.get(id);
    if (!held) return;
    if (kind === "fire") {
      held.wheelHandle = undefined;
      // The wheel runs on the monotonic clock; the offset estimate may have moved since this was
      // scheduled. Never start before fireAt on the coordinator's clock (rule 4).
      const early = this.notYet(held.dispatch.fireAt);
      if (early !== undefined) {
        held.wheelHandle = this.wheel.schedule(early, { id, kind: "fire" });
        return;
      }
      this.due(id, held);
    } else if (held.state === "queued") {
      // Likewise, do not expire it before its deadline on the coordinator's clock.
      const early = this.notYet(held.dispatch.deadline);
      if (early !== undefined) {
        held.deadlineHandle = this.wheel.schedule(early, { id, kind: "deadline" });
        return;
      }
      // Waited for a slot until its deadline: expired, never started late.
      held.deadlineHandle = undefined;
      const i = this.queue.indexOf(id);
      if (i >= 0) this.queue.splice(i, 1);
      this.held.delete(id);
      this.finish(held.dispatch, {
        outcome: "expired",
        retryable: false,
        message: "no free slot before deadline",
      });
    }
  }

  /**
   * When coordinator time `t` is still ahead, the monotonic time to look again; undefined when it
   * has come. At least a microsecond ahead, so float rounding between the two timelines cannot
   * make the wheel spin.
   */
  private notYet(t: number): number | undefined {
    const ahead = t - this.o.coordNow();
    if (ahead <= 0) return undefined;
    const mono = this.o.clock.monoNow();
    return Math.max(this.o.toMono(t), mono + 0.001);
  }

  private due(id: string, held: Held): void {
    if (this.o.coordNow() > held.dispatch.deadline) {
      // drop() also releases a queued one's deadline entry.
      this.drop(id, held);
      this.finish(held.dispatch, {
        outcome: "expired",
        retryable: false,
        message: "deadline passed",
      });
      return;
    }
    if (this.running < this.o.concurrency) {
      this.start(id, held);
      return;
    }
    held.state = "queued";
    this.insertByPriority(id, held.dispatch.priority);
    held.deadlineHandle = this.wheel.schedule(this.o.toMono(held.dispatch.deadline), {
      id,
      kind: "deadline",
    });
  }

  private insertByPriority(id: string, priority: number): void {
    let i = this.queue.length;
    while (i > 0) {
      const other = this.held.get(this.queue[i - 1] as string);
      if (!other || other.dispatch.priority >= priority) break;
      i--;
    }
    this.queue.splice(i, 0, id);
  }

  private start(id: string, held: Held): void {
    const d = held.dispatch;
    const handler = this.o.handlers.get(d.handler);
    if (held.deadlineHandle !== undefined) this.wheel.cancel(held.deadlineHandle);
    held.deadlineHandle = undefined;
    held.state = "running";
    this.running++;
    const startedAt = this.o.coordNow();
    held.startedAt = startedAt;
    const lateMs = Math.max(0, startedAt - d.fireAt);
    this.o.report({ type: "started", executionId: id, round: d.round, startedAt, lateMs });
    const abort = new AbortController();
    held.abort = abort;
    held.timeoutTimer = this.o.clock.setTimer(() => {
      if (this.held.get(id) !== held) return;
      abort.abort();
      this.drop(id, held);
      this.finish(d, {
        outcome: "timed_out",
        retryable: true,
        message: `ran longer than timeoutMs ${d.timeoutMs}`,
        startedAt,
      });
    }, d.timeoutMs);
    const ctx = {
      executionId: id,
      attempt: d.attempt,
      round: d.round,
      shard: d.shard,
      signal: abort.signal,
      progress: (percent?: number, note?: string) => {
        if (this.held.get(id) !== held) return;
        this.o.report({
          type: "progress",
          executionId: id,
          round: d.round,
          ...(percent === undefined ? {} : { percent }),
          ...(note === undefined ? {} : { note: note.slice(0, 1024) }),
        });
      },
      log: (message: string, fields?: Record<string, unknown>) =>
        this.o.log("info", message, { executionId: id, ...fields }),
    };
    const params = handler ? handler.params.safeParse(d.params) : undefined;
    Promise.resolve()
      .then(() => {
        if (!handler || !params?.success)
          throw new HandlerFailure(`handler "${d.handler}" unavailable`, { retryable: false });
        return handler.run(ctx, params.data);
      })
      .then(
        (result) => {
          if (this.held.get(id) !== held) return; // canceled or timed out meanwhile
          this.drop(id, held);
          this.finish(d, {
            outcome: "succeeded",
            retryable: false,
            message: "ok",
            startedAt,
            ...(result && typeof result === "object" ? { result } : {}),
          });
        },
        (err: unknown) => {
          if (this.held.get(id) !== held) return;
          this.drop(id, held);
          this.finish(d, {
            outcome: "failed",
            retryable: err instanceof HandlerFailure ? err.retryable : true,
            message: err instanceof Error ? err.message : String(err),
            startedAt,
          });
        },
      );
  }

  /** Forgets a held execution, releasing its wheel entries, timer and slot. */
  private drop(id: string, held: Held): void {
    if (held.wheelHandle !== undefined) this.wheel.cancel(held.wheelHandle);
    if (held.deadlineHandle !== undefined) this.wheel.cancel(held.deadlineHandle);
    if (held.timeoutTimer !== undefined) this.o.clock.clearTimer(held.timeoutTimer);
    if (held.state === "queued") {
      const i = this.queue.indexOf(id);
      if (i >= 0) this.queue.splice(i, 1);
    }
    if (held.state === "running") {
      this.running--;
      queueMicrotask(() => this.pump());
    }
    this.held.delete(id);
  }

  private pump(): void {
    while (this.running < this.o.concurrency && this.queue.length > 0) {
      const id = this.queue.shift() as string;
      const held = this.held.get(id);
      if (held) this.due(id, held);
    }
  }

  private finish(
    d: Dispatch,
    r: {
      outcome: Outcome;
      retryable: boolean;
      message: string;
      startedAt?: number;
      result?: Record<string, unknown>;
    },
  ): void {
    const { executionId: id, round, attempt } = d;
    this.done.set(id, { round, attempt, state: OUTCOME_STATE[r.outcome] });
    if (this.done.size > DONE_MEMORY) {
      const oldest = this.done.keys().next().value;
      if (oldest !== undefined) this.done.delete(oldest);
    }
    this.o.report({
      type: "finished",
      executionId: id,
      round,
      outcome: r.outcome,
      retryable: r.retryable,
      message: r.message.slice(0, 4096),
      finishedAt: this.o.coordNow(),
      ...(r.startedAt === undefined ? {} : { startedAt: r.startedAt }),
      ...(r.result === undefined ? {} : { result: r.result }),
    });
  }

  /** Resolves when nothing is running, or after `graceMs`. */
  async drainRunning(graceMs: number): Promise<void> {
    const until = this.o.clock.monoNow() + graceMs;
    while (this.running > 0 && this.o.clock.monoNow() < until) {
      await new Promise<void>((resolve) => this.o.clock.setTimer(resolve, 20));
    }
  }

  close(): void {
    for (const [id, held] of this.held) {
      held.abort?.abort();
      if (held.timeoutTimer !== undefined) this.o.clock.clearTimer(held.timeoutTimer);
      this.held.delete(id);
    }
    this.wheel.close();
  }
}
