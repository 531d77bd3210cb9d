import {
  type ExecSnapshot,
  type ExecState,
  type FinishOutcome,
  TERMINAL_STATES,
  transition,
} from "../../shared/fsm.js";

/**
 * Facts outrank fences (DESIGN §9, issue 15). A round is a fence against *starting* stale work,
 * never against learning what happened: a report from an older round that says a command started
 * or finished is a fact about the device, and the record must hold it. This module decides, from
 * the execution as recorded and its history (read from its timeline), what such a late fact means.
 * It is pure: the engine (engine/facts.ts) reads, asks, and writes the answer.
 */

/** What a device said about one round of an execution, whatever round the record is at. */
export type Fact =
  | { kind: "started"; round: number; agentId: string }
  | {
      kind: "finished";
      round: number;
      agentId: string;
      outcome: FinishOutcome;
      retryable: boolean;
      /** The agent's report also says it had started (its `startedAt`). */
      started: boolean;
    };

/** What the record already says about each round, rebuilt from the timeline. */
export interface RoundHistory {
  /** Rounds a device is recorded to have started, with the agent. */
  started: Map<number, string | null>;
  /** Rounds a device is recorded to have finished, with the outcome it reported. */
  finished: Map<number, FinishOutcome>;
  /** The attempt each dispatched round belonged to. */
  attemptOf: Map<number, number>;
  /** The round the record follows when that is not its latest (one taken over from a fact). */
  followedRound: number | null;
}

/** One timeline entry, as far as the history needs it. */
export interface HistoryEntry {
  event: string;
  round: number;
  agentId: string | null;
  detail: Record<string, unknown> | null;
}

/** Rebuilds {@link RoundHistory} from an execution's timeline, oldest entry first. */
export function roundHistory(entries: readonly HistoryEntry[]): RoundHistory {
  const h: RoundHistory = {
    started: new Map(),
    finished: new Map(),
    attemptOf: new Map(),
    followedRound: null,
  };
  let attempt = 1;
  for (const e of entries) {
    const d = e.detail ?? {};
    switch (e.event) {
      case "retry_due":
        attempt++;
        break;
      case "dispatch":
      case "dispatch_timeout":
        if (!h.attemptOf.has(e.round)) h.attemptOf.set(e.round, attempt);
        break;
      case "started":
        h.started.set(e.round, e.agentId);
        break;
      case "finished":
        // A coordinator's guess (a lapsed lease) is not a device's report.
        if (d.guess !== true && typeof d.outcome === "string") {
          h.finished.set(e.round, d.outcome as FinishOutcome);
          if (typeof d.startedAt === "number" || h.started.has(e.round)) {
            if (!h.started.has(e.round)) h.started.set(e.round, e.agentId);
          }
        }
        break;
      case "fact": {
        const r = typeof d.round === "number" ? d.round : e.round;
        if (d.started === true) h.started.set(r, e.agentId);
        if (typeof d.outcome === "string") h.finished.set(r, d.outcome as FinishOutcome);
        if (d.decision === "adopted") h.followedRound = r;
        if (typeof d.attempt === "number") attempt = d.attempt;
        break;
      }
    }
  }
  return h;
}

/** The execution as recorded: its snapshot and the agent it is with. */
export interface RecordedExecution extends ExecSnapshot {
  agentId: string | null;
}

export type FactDecision =
  /** The record already says this. */
  | { action: "known" }
  /**
   * The record takes the fact: `next` is the new snapshot (the round never goes back: it stays the
   * latest issued, so later dispatches still rise), `followRound` the round it now follows, and
   * `cancelRound` a later round to cancel on `cancelAgent`, because the fact's round ran instead.
   */
  | {
      action: "adopt";
      next: ExecSnapshot;
      followRound: number;
      cancelRound?: number;
      cancelAgent?: string;
      scheduleRetry: boolean;
      note: string;
    }
  /** Both this round and a later one ran: recorded, counted, and the record follows the later. */
  | { action: "both_ran"; note: string }
  /** Recorded on the timeline only (a fact that changes no state: a retry that was right). */
  | { action: "note"; note: string };

/** Where a later round stands: whether any round after `round` is recorded as started. */
function laterStarted(h: RoundHistory, round: number, exec: RecordedExecution): boolean {
  for (const r of h.started.keys()) if (r > round) return true;
  // RUNNING under a round the record follows that is not this one.
  const followed = h.followedRound ?? exec.round;
  return exec.state === "RUNNING" && followed !== round && followed > round;
}

/**
 * What a fact from a device means for the record. The rules, in order:
 *
 * 1. Already recorded (that round's start, or its finish) → `known`.
 * 2. A later round has started too → `both_ran`: the timeline says so, a metric counts it, and
 *    the record keeps following the later round (whose own reports settle it).
 * 3. Otherwise the fact's round is the one that ran, and it outranks every guess the coordinator
 *    made since (a dispatch timeout, a lapsed lease, an expiry by deadline, a redispatch): the
 *    record follows that round — RUNNING for a start, the reported outcome for a finish — and a
 *    later round still held by an agent is cancelled. A failure that the coordinator already
 *    answered with a retry (it guessed the round interrupted) is confirmed, not retried twice.
 */
export function decideFact(exec: RecordedExecution, h: RoundHistory, fact: Fact): FactDecision {
  const r = fact.round;
  if (fact.kind === "started" && h.started.has(r)) return { action: "known" };
  if (fact.kind === "finished" && h.finished.has(r)) return { action: "known" };

  if (laterStarted(h, r, exec)) {
    const what = fact.kind === "started" ? "started" : `finished ${fact.outcome}`;
    return {
      action: "both_ran",
      note: `round ${r} ${what} on agent ${fact.agentId} while a later round also ran: both ran`,
    };
  }

  // An older round that ended without starting (expired, or cancelled because a later one was
  // sent elsewhere) says nothing about what the device did with the execution.
  const followed = h.followedRound ?? exec.round;
  if (fact.kind === "finished" && !fact.started && !h.started.has(r) && r !== followed) {
    return {
      action: "note",
      note: `round ${r} ended ${fact.outcome} on agent ${fact.agentId} without starting`,
    };
  }

  const attempt = h.attemptOf.get(r) ?? exec.attempt;
  const active = exec.state === "DISPATCHED" || exec.state === "SCHEDULED";
  // A later round still held by another agent is cancelled: the fact's round ran instead. (On
  // the same agent there is nothing to cancel: rule 3 kept the round it had started.)
  const cancel =
    active && exec.round !== r && exec.agentId !== null && exec.agentId !== fact.agentId
      ? { cancelRound: exec.round, cancelAgent: exec.agentId }
      : {};
  const base = { ...exec, state: "RUNNING" as ExecState, round: r, attempt };

  if (fact.kind === "started") {
    return {
      action: "adopt",
      next: { ...exec, state: "RUNNING", attempt },
      followRound: r,
      ...cancel,
      scheduleRetry: false,
      note: `round ${r} started on agent ${fact.agentId}; the record follows it`,
    };
  }

  // A finish: what the state machine makes of it from RUNNING in that round's attempt.
  const failure = fact.outcome === "failed" || fact.outcome === "interrupted";
  if (failure && fact.retryable && attempt < exec.attempt) {
    // The coordinator already retried this attempt (it guessed the round lost): the retry was
    // right, and a second one would spend an attempt twice.
    return {
      action: "note",
      note: `round ${r} finished ${fact.outcome} on agent ${fact.agentId}: the retry already under way stands`,
    };
  }
  if (failure && fact.retryable && exec.state === "RETRY_WAITING" && attempt === exec.attempt) {
    return {
      action: "note",
      note: `round ${r} finished ${fact.outcome} on agent ${fact.agentId}: the retry already waiting stands`,
    };
  }
  const result = transition(base, {
    type: "finished",
    round: r,
    outcome: fact.outcome,
    retryable: fact.retryable,
  });
  if (!result.ok) return { action: "note", note: result.error.message };
  const next = { ...result.next, round: exec.round };
  const was = TERMINAL_STATES.has(exec.state) ? ` (it was recorded ${exec.state})` : "";
  return {
    action: "adopt",
    next,
    followRound: r,
    ...cancel,
    scheduleRetry: result.effects.some((e) => e.type === "schedule_retry"),
    note: `round ${r} finished ${fact.outcome} on agent ${fact.agentId}${was}; the record follows it`,
  };
}
