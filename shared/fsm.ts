/**
 * The execution state machine of DESIGN §3, as data plus one pure function. The coordinator's
 * engine asks `transition` what an event means and performs the effects it returns; an event that
 * is not allowed in the current state, or that carries an older round, changes nothing.
 */

import type { Finished, RejectReason } from "./protocol/execution.js";

export const EXEC_STATES = [
  "PENDING",
  "DISPATCHED",
  "SCHEDULED",
  "RUNNING",
  "RETRY_WAITING",
  "SUCCEEDED",
  "FAILED",
  "TIMED_OUT",
  "EXPIRED",
  "CANCELED",
  "SKIPPED",
] as const;
export type ExecState = (typeof EXEC_STATES)[number];

/** The final states, in a fixed order (for schemas); {@link TERMINAL_STATES} for lookups. */
export const TERMINAL_STATE_NAMES = [
  "SUCCEEDED",
  "FAILED",
  "TIMED_OUT",
  "EXPIRED",
  "CANCELED",
  "SKIPPED",
] as const satisfies readonly ExecState[];

export const TERMINAL_STATES: ReadonlySet<ExecState> = new Set(TERMINAL_STATE_NAMES);

/** States in which an agent may hold the execution under its current round. */
export const ACTIVE_STATES: ReadonlySet<ExecState> = new Set([
  "DISPATCHED",
  "SCHEDULED",
  "RUNNING",
]);

/** What the machine needs to know of an execution. */
export interface ExecSnapshot {
  state: ExecState;
  /** Fencing token: rises with every (re)dispatch, across attempts (rule 2). 0 before the first. */
  round: number;
  /** 1 for the first try; a retry is a new attempt. */
  attempt: number;
  maxAttempts: number;
  /** Dispatches sent for the current attempt (the first plus redispatches). */
  dispatches: number;
  maxDispatches: number;
}

/** Outcomes an agent reports in `finished`: the protocol's list (shared/protocol/execution.ts). */
export type FinishOutcome = Finished["outcome"];

export type ExecEvent =
  /** The engine routed the execution to an agent. */
  | { type: "dispatch" }
  /** No `accepted` came within dispatchTimeoutMs. */
  | { type: "dispatch_timeout"; round: number }
  | { type: "accepted"; round: number }
  /** The agent's queue is full: back to PENDING to be re-routed or to wait; never dropped. */
  | { type: "busy"; round: number }
  | { type: "rejected"; round: number; reason: RejectReason }
  | { type: "started"; round: number }
  | { type: "finished"; round: number; outcome: FinishOutcome; retryable: boolean }
  /** The coordinator's own run timeout or lapsed lease with no answer. */
  | { type: "timed_out"; round: number; retryable: boolean }
  | { type: "retry_due" }
  | { type: "cancel" }
  /** The deadline passed before the execution started. */
  | { type: "expire" }
  /** The overlap rule decided this execution must not run. */
  | { type: "skip"; reason: string };

export type ExecEventType = ExecEvent["type"];

export type Effect =
  | { type: "send_dispatch"; round: number }
  | { type: "send_cancel"; round: number }
  | { type: "schedule_retry"; attempt: number }
  | { type: "terminal"; state: ExecState };

export type TransitionError =
  | { code: "illegal"; message: string }
  | { code: "stale_round"; message: string };

export type TransitionResult =
  | { ok: true; next: ExecSnapshot; effects: Effect[] }
  | { ok: false; error: TransitionError };

/** The states each event is allowed in. Everything not listed is an illegal transition. */
export const ALLOWED_FROM: Readonly<Record<ExecEventType, readonly ExecState[]>> = {
  dispatch: ["PENDING"],
  dispatch_timeout: ["DISPATCHED"],
  accepted: ["DISPATCHED"],
  busy: ["DISPATCHED"],
  rejected: ["DISPATCHED", "SCHEDULED"],
  // `accepted` may be lost or overtaken; `started` implies it.
  started: ["DISPATCHED", "SCHEDULED"],
  finished: ["DISPATCHED", "SCHEDULED", "RUNNING"],
  timed_out: ["DISPATCHED", "SCHEDULED", "RUNNING"],
  retry_due: ["RETRY_WAITING"],
  // In an active state the cancel is sent to the agent; its `finished` answer ends it (rule 8).
  cancel: ["PENDING", "RETRY_WAITING", "DISPATCHED", "SCHEDULED", "RUNNING"],
  expire: ["PENDING", "RETRY_WAITING", "DISPATCHED", "SCHEDULED"],
  skip: ["PENDING"],
};

/** Rejection reasons that say "not now" rather than "never": the execution waits. */
export const TRANSIENT_REJECTIONS: ReadonlySet<RejectReason> = new Set<RejectReason>([
  "shutting_down",
  "journal_full",
]);

const OUTCOME_STATE: Readonly<Record<FinishOutcome, ExecState>> = {
  succeeded: "SUCCEEDED",
  failed: "FAILED",
  timed_out: "TIMED_OUT",
  expired: "EXPIRED",
  canceled: "CANCELED",
  // An interrupted run (agent died mid-run) failed unless a retry takes it.
  interrupted: "FAILED",
};

function to(
  snapshot: ExecSnapshot,
  patch: Partial<ExecSnapshot>,
  effects: Effect[],
): TransitionResult {
  const next = { ...snapshot, ...patch };
  if (TERMINAL_STATES.has(next.state) && !TERMINAL_STATES.has(snapshot.state)) {
    effects.push({ type: "terminal", state: next.state });
  }
  return { ok: true, next, effects };
}

/** A failure that may be retried: wait for the next attempt, or end in `finalState`. */
function failOrRetry(s: ExecSnapshot, finalState: ExecState, retryable: boolean): TransitionResult {
  if (retryable && s.attempt < s.maxAttempts) {
    return to(s, { state: "RETRY_WAITING" }, [{ type: "schedule_retry", attempt: s.attempt + 1 }]);
  }
  return to(s, { state: finalState }, []);
}

/**
 * The next snapshot and the effects to perform for `event` in `snapshot`. Pure: it reads no clock
 * and does no I/O; `snapshot` is never modified.
 */
export function transition(snapshot: ExecSnapshot, event: ExecEvent): TransitionResult {
  const s = snapshot;
  if (!ALLOWED_FROM[event.type].includes(s.state)) {
    return {
      ok: false,
      error: { code: "illegal", message: `event ${event.type} is not allowed in state ${s.state}` },
    };
  }
  // Rounds are fencing tokens: a report from an older (re)dispatch is dropped (DESIGN §3).
  if ("round" in event && event.round !== s.round) {
    return {
      ok: false,
      error: {
        code: "stale_round",
        message: `event ${event.type} carries round ${event.round}, the execution is at round ${s.round}`,
      },
    };
  }
  switch (event.type) {
    case "dispatch":
      return to(s, { state: "DISPATCHED", round: s.round + 1, dispatches: s.dispatches + 1 }, [
        { type: "send_dispatch", round: s.round + 1 },
      ]);
    case "dispatch_timeout":
      if (s.dispatches >= s.maxDispatches) return to(s, { state: "FAILED" }, []);
      return to(s, { round: s.round + 1, dispatches: s.dispatches + 1 }, [
        { type: "send_dispatch", round: s.round + 1 },
      ]);
    case "accepted":
      return to(s, { state: "SCHEDULED" }, []);
    case "busy":
      // The dispatch was delivered, so it does not count toward the undeliverable limit; an agent
      // that stays busy leaves the execution waiting until its deadline, never dropped.
      return to(s, { state: "PENDING", dispatches: Math.max(0, s.dispatches - 1) }, []);
    case "rejected":
      // An agent shutting down, or whose journal is full, refuses for now: like `busy`, the
      // work waits for it (or another agent) instead of failing.
      if (TRANSIENT_REJECTIONS.has(event.reason)) {
        return to(s, { state: "PENDING", dispatches: Math.max(0, s.dispatches - 1) }, []);
      }
      // Any other rejection is about the dispatch itself (unknown handler, bad params): final.
      return to(s, { state: "FAILED" }, []);
    case "started":
      return to(s, { state: "RUNNING" }, []);
    case "finished": {
      const final = OUTCOME_STATE[event.outcome];
      if (
        event.outcome === "succeeded" ||
        event.outcome === "canceled" ||
        event.outcome === "expired"
      ) {
        return to(s, { state: final }, []);
      }
      return failOrRetry(s, final, event.retryable);
    }
    case "timed_out":
      return failOrRetry(s, "TIMED_OUT", event.retryable);
    case "retry_due":
      return to(s, { state: "PENDING", attempt: s.attempt + 1, dispatches: 0 }, []);
    case "cancel":
      if (ACTIVE_STATES.has(s.state)) return to(s, {}, [{ type: "send_cancel", round: s.round }]);
      return to(s, { state: "CANCELED" }, []);
    case "expire":
      if (ACTIVE_STATES.has(s.state)) {
        return to(s, { state: "EXPIRED" }, [{ type: "send_cancel", round: s.round }]);
      }
      return to(s, { state: "EXPIRED" }, []);
    case "skip":
      return to(s, { state: "SKIPPED" }, []);
  }
}

/** Just the state machine's fields of `x` (an execution record, say), as a snapshot to write. */
export function snapshotOf(x: ExecSnapshot): ExecSnapshot {
  return {
    state: x.state,
    round: x.round,
    attempt: x.attempt,
    maxAttempts: x.maxAttempts,
    dispatches: x.dispatches,
    maxDispatches: x.maxDispatches,
  };
}

/** A fresh execution's snapshot. */
export function initialSnapshot(options: {
  maxAttempts: number;
  maxDispatches: number;
}): ExecSnapshot {
  return {
    state: "PENDING",
    round: 0,
    attempt: 1,
    maxAttempts: options.maxAttempts,
    dispatches: 0,
    maxDispatches: options.maxDispatches,
  };
}
