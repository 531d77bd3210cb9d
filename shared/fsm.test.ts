import { describe, expect, it } from "vitest";
import { seededRandom } from "../test/helpers/random.js";
import {
  ALLOWED_FROM,
  type Effect,
  EXEC_STATES,
  type ExecEvent,
  type ExecEventType,
  type ExecSnapshot,
  type ExecState,
  initialSnapshot,
  TERMINAL_STATES,
  type TransitionResult,
  transition,
} from "./fsm.js";
import { OUTCOMES } from "./protocol/execution.js";

const EVENT_TYPES = Object.keys(ALLOWED_FROM) as ExecEventType[];

/** A snapshot with test defaults: 3 attempts, 3 dispatches per attempt. */
function snap(state: ExecState, over: Partial<ExecSnapshot> = {}): ExecSnapshot {
  return { state, round: 0, attempt: 1, maxAttempts: 3, dispatches: 0, maxDispatches: 3, ...over };
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** An event of `type`; round-carrying events carry `round`. */
function eventOf(type: ExecEventType, round: number): ExecEvent {
  switch (type) {
    case "dispatch":
    case "retry_due":
    case "cancel":
    case "expire":
      return { type };
    case "skip":
      return { type, reason: "overlap" };
    case "dispatch_timeout":
    case "accepted":
    case "busy":
    case "started":
      return { type, round };
    case "rejected":
      return { type, round, reason: "unknown_handler" };
    case "finished":
      return { type, round, outcome: "succeeded", retryable: false };
    case "timed_out":
      return { type, round, retryable: false };
  }
}

function expectOk(r: TransitionResult): { next: ExecSnapshot; effects: Effect[] } {
  if (!r.ok) throw new Error(`expected ok, got ${r.error.code}: ${r.error.message}`);
  return r;
}

/** Applies `events` in order, each of which must be legal; returns every step's result. */
function run(start: ExecSnapshot, events: readonly ExecEvent[]) {
  const steps: { next: ExecSnapshot; effects: Effect[] }[] = [];
  let s = start;
  for (const e of events) {
    const step = expectOk(transition(deepFreeze(s), e));
    steps.push(step);
    s = step.next;
  }
  return { final: s, steps };
}

interface LegalCase {
  name: string;
  from: ExecSnapshot;
  event: ExecEvent;
  /** The fields of the next snapshot that differ from `from`; all others must stay as they were. */
  patch: Partial<ExecSnapshot>;
  effects: Effect[];
}

// Every case starts with attempts left unless it says otherwise (attempt 1 of 3).
const LEGAL: LegalCase[] = [
  // PENDING
  {
    name: "first dispatch: round 0→1, dispatches 0→1, send_dispatch(1)",
    from: snap("PENDING"),
    event: { type: "dispatch" },
    patch: { state: "DISPATCHED", round: 1, dispatches: 1 },
    effects: [{ type: "send_dispatch", round: 1 }],
  },
  {
    name: "dispatch after busy uses a higher round",
    from: snap("PENDING", { round: 2, dispatches: 2 }),
    event: { type: "dispatch" },
    patch: { state: "DISPATCHED", round: 3, dispatches: 3 },
    effects: [{ type: "send_dispatch", round: 3 }],
  },
  {
    name: "dispatch of a retry attempt continues the rounds (rule 2)",
    from: snap("PENDING", { round: 4, attempt: 2, dispatches: 0 }),
    event: { type: "dispatch" },
    patch: { state: "DISPATCHED", round: 5, dispatches: 1 },
    effects: [{ type: "send_dispatch", round: 5 }],
  },
  {
    name: "cancel in PENDING ends it",
    from: snap("PENDING", { round: 1, dispatches: 1 }),
    event: { type: "cancel" },
    patch: { state: "CANCELED" },
    effects: [{ type: "terminal", state: "CANCELED" }],
  },
  {
    name: "expire in PENDING",
    from: snap("PENDING"),
    event: { type: "expire" },
    patch: { state: "EXPIRED" },
    effects: [{ type: "terminal", state: "EXPIRED" }],
  },
  {
    name: "skip in PENDING",
    from: snap("PENDING"),
    event: { type: "skip", reason: "overlap SKIP" },
    patch: { state: "SKIPPED" },
    effects: [{ type: "terminal", state: "SKIPPED" }],
  },

  // DISPATCHED
  {
    name: "dispatch_timeout with dispatches left redispatches with round+1",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "dispatch_timeout", round: 1 },
    patch: { round: 2, dispatches: 2 },
    effects: [{ type: "send_dispatch", round: 2 }],
  },
  {
    name: "dispatch_timeout at maxDispatches fails",
    from: snap("DISPATCHED", { round: 3, dispatches: 3 }),
    event: { type: "dispatch_timeout", round: 3 },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },
  {
    name: "accepted → SCHEDULED",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "accepted", round: 1 },
    patch: { state: "SCHEDULED" },
    effects: [],
  },
  {
    name: "busy → PENDING, round kept, the delivered dispatch not counted as undeliverable",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "busy", round: 1 },
    patch: { state: "PENDING", dispatches: 0 },
    effects: [],
  },
  {
    name: "rejected in DISPATCHED fails, never retried even with attempts left",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "rejected", round: 1, reason: "unknown_handler" },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },
  {
    name: "started in DISPATCHED (accepted lost) → RUNNING",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "started", round: 1 },
    patch: { state: "RUNNING" },
    effects: [],
  },
  {
    name: "finished succeeded in DISPATCHED",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "succeeded", retryable: false },
    patch: { state: "SUCCEEDED" },
    effects: [{ type: "terminal", state: "SUCCEEDED" }],
  },
  {
    name: "finished expired in DISPATCHED (expired on arrival, rule 5)",
    from: snap("DISPATCHED", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "expired", retryable: true },
    patch: { state: "EXPIRED" },
    effects: [{ type: "terminal", state: "EXPIRED" }],
  },
  {
    name: "timed_out in DISPATCHED, retryable with attempts left",
    from: snap("DISPATCHED", { round: 2, dispatches: 2 }),
    event: { type: "timed_out", round: 2, retryable: true },
    patch: { state: "RETRY_WAITING" },
    effects: [{ type: "schedule_retry", attempt: 2 }],
  },
  {
    name: "cancel in DISPATCHED sends cancel, stays",
    from: snap("DISPATCHED", { round: 2, dispatches: 2 }),
    event: { type: "cancel" },
    patch: {},
    effects: [{ type: "send_cancel", round: 2 }],
  },
  {
    name: "expire in DISPATCHED ends it and sends cancel",
    from: snap("DISPATCHED", { round: 2, dispatches: 2 }),
    event: { type: "expire" },
    patch: { state: "EXPIRED" },
    effects: [
      { type: "send_cancel", round: 2 },
      { type: "terminal", state: "EXPIRED" },
    ],
  },

  // SCHEDULED
  {
    name: "rejected in SCHEDULED fails",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "rejected", round: 1, reason: "bad_signature" },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },
  {
    name: "rejected journal_full waits PENDING, the dispatch not counted",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "rejected", round: 1, reason: "journal_full" },
    patch: { state: "PENDING", dispatches: 0 },
    effects: [],
  },
  {
    name: "rejected shutting_down waits PENDING, the dispatch not counted",
    from: snap("DISPATCHED", { round: 2, dispatches: 2 }),
    event: { type: "rejected", round: 2, reason: "shutting_down" },
    patch: { state: "PENDING", dispatches: 1 },
    effects: [],
  },
  {
    name: "started in SCHEDULED → RUNNING",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "started", round: 1 },
    patch: { state: "RUNNING" },
    effects: [],
  },
  {
    name: "finished canceled in SCHEDULED",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "canceled", retryable: true },
    patch: { state: "CANCELED" },
    effects: [{ type: "terminal", state: "CANCELED" }],
  },
  {
    name: "timed_out in SCHEDULED, not retryable",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "timed_out", round: 1, retryable: false },
    patch: { state: "TIMED_OUT" },
    effects: [{ type: "terminal", state: "TIMED_OUT" }],
  },
  {
    name: "cancel in SCHEDULED sends cancel, stays",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "cancel" },
    patch: {},
    effects: [{ type: "send_cancel", round: 1 }],
  },
  {
    name: "expire in SCHEDULED ends it and sends cancel",
    from: snap("SCHEDULED", { round: 1, dispatches: 1 }),
    event: { type: "expire" },
    patch: { state: "EXPIRED" },
    effects: [
      { type: "send_cancel", round: 1 },
      { type: "terminal", state: "EXPIRED" },
    ],
  },

  // RUNNING: finished outcomes
  {
    name: "finished succeeded (retryable ignored)",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "succeeded", retryable: true },
    patch: { state: "SUCCEEDED" },
    effects: [{ type: "terminal", state: "SUCCEEDED" }],
  },
  {
    name: "finished canceled (never retried)",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "canceled", retryable: true },
    patch: { state: "CANCELED" },
    effects: [{ type: "terminal", state: "CANCELED" }],
  },
  {
    name: "finished expired (never retried)",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "expired", retryable: true },
    patch: { state: "EXPIRED" },
    effects: [{ type: "terminal", state: "EXPIRED" }],
  },
  {
    name: "finished failed, retryable, attempts left → retry attempt 2",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "failed", retryable: true },
    patch: { state: "RETRY_WAITING" },
    effects: [{ type: "schedule_retry", attempt: 2 }],
  },
  {
    name: "finished failed, retryable, second of three attempts → retry attempt 3",
    from: snap("RUNNING", { round: 5, attempt: 2, dispatches: 1 }),
    event: { type: "finished", round: 5, outcome: "failed", retryable: true },
    patch: { state: "RETRY_WAITING" },
    effects: [{ type: "schedule_retry", attempt: 3 }],
  },
  {
    name: "finished failed, retryable, last attempt → FAILED",
    from: snap("RUNNING", { round: 7, attempt: 3, dispatches: 1 }),
    event: { type: "finished", round: 7, outcome: "failed", retryable: true },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },
  {
    name: "finished failed, not retryable → FAILED",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "failed", retryable: false },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },
  {
    name: "finished timed_out, retryable, attempts left → retry",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "timed_out", retryable: true },
    patch: { state: "RETRY_WAITING" },
    effects: [{ type: "schedule_retry", attempt: 2 }],
  },
  {
    name: "finished timed_out, retryable, last attempt → TIMED_OUT",
    from: snap("RUNNING", { round: 3, attempt: 3, dispatches: 1 }),
    event: { type: "finished", round: 3, outcome: "timed_out", retryable: true },
    patch: { state: "TIMED_OUT" },
    effects: [{ type: "terminal", state: "TIMED_OUT" }],
  },
  {
    name: "finished timed_out, not retryable → TIMED_OUT",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "timed_out", retryable: false },
    patch: { state: "TIMED_OUT" },
    effects: [{ type: "terminal", state: "TIMED_OUT" }],
  },
  {
    name: "finished interrupted, retryable, attempts left → retry",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "interrupted", retryable: true },
    patch: { state: "RETRY_WAITING" },
    effects: [{ type: "schedule_retry", attempt: 2 }],
  },
  {
    name: "finished interrupted, retryable, last attempt → FAILED",
    from: snap("RUNNING", { round: 1, maxAttempts: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "interrupted", retryable: true },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },
  {
    name: "finished interrupted, not retryable → FAILED",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "finished", round: 1, outcome: "interrupted", retryable: false },
    patch: { state: "FAILED" },
    effects: [{ type: "terminal", state: "FAILED" }],
  },

  // RUNNING: the coordinator's own timeout, cancel
  {
    name: "timed_out in RUNNING, retryable, attempts left → retry",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "timed_out", round: 1, retryable: true },
    patch: { state: "RETRY_WAITING" },
    effects: [{ type: "schedule_retry", attempt: 2 }],
  },
  {
    name: "timed_out in RUNNING, retryable, last attempt → TIMED_OUT",
    from: snap("RUNNING", { round: 9, attempt: 3, dispatches: 2 }),
    event: { type: "timed_out", round: 9, retryable: true },
    patch: { state: "TIMED_OUT" },
    effects: [{ type: "terminal", state: "TIMED_OUT" }],
  },
  {
    name: "timed_out in RUNNING, not retryable → TIMED_OUT",
    from: snap("RUNNING", { round: 1, dispatches: 1 }),
    event: { type: "timed_out", round: 1, retryable: false },
    patch: { state: "TIMED_OUT" },
    effects: [{ type: "terminal", state: "TIMED_OUT" }],
  },
  {
    name: "cancel in RUNNING sends cancel, stays",
    from: snap("RUNNING", { round: 4, attempt: 2, dispatches: 1 }),
    event: { type: "cancel" },
    patch: {},
    effects: [{ type: "send_cancel", round: 4 }],
  },

  // RETRY_WAITING
  {
    name: "retry_due → PENDING, attempt+1, dispatches reset, round kept",
    from: snap("RETRY_WAITING", { round: 4, attempt: 1, dispatches: 2 }),
    event: { type: "retry_due" },
    patch: { state: "PENDING", attempt: 2, dispatches: 0 },
    effects: [],
  },
  {
    name: "cancel in RETRY_WAITING ends it",
    from: snap("RETRY_WAITING", { round: 4, dispatches: 2 }),
    event: { type: "cancel" },
    patch: { state: "CANCELED" },
    effects: [{ type: "terminal", state: "CANCELED" }],
  },
  {
    name: "expire in RETRY_WAITING",
    from: snap("RETRY_WAITING", { round: 4, dispatches: 2 }),
    event: { type: "expire" },
    patch: { state: "EXPIRED" },
    effects: [{ type: "terminal", state: "EXPIRED" }],
  },
];

describe("transition: legal transitions", () => {
  it.each(LEGAL)("$from.state + $event.type: $name", ({ from, event, patch, effects }) => {
    const input = deepFreeze(from);
    const before = structuredClone(input);
    const r = expectOk(transition(input, event));
    expect(r.next).toEqual({ ...before, ...patch });
    expect(r.effects).toEqual(effects);
    expect(input).toEqual(before);
    expect(r.next).not.toBe(input);
  });

  it("the table exercises every (state, event) pair ALLOWED_FROM lists", () => {
    const covered = new Set(LEGAL.map((c) => `${c.from.state}/${c.event.type}`));
    const missing: string[] = [];
    for (const type of EVENT_TYPES) {
      for (const state of ALLOWED_FROM[type]) {
        if (!covered.has(`${state}/${type}`)) missing.push(`${state}/${type}`);
      }
    }
    expect(missing).toEqual([]);
    // And no case is for a pair the machine does not allow.
    for (const c of LEGAL) expect(ALLOWED_FROM[c.event.type]).toContain(c.from.state);
  });

  it("every finish outcome is covered from RUNNING", () => {
    const outcomes = new Set(
      LEGAL.flatMap((c) =>
        c.from.state === "RUNNING" && c.event.type === "finished" ? [c.event.outcome] : [],
      ),
    );
    expect([...outcomes].sort()).toEqual([...OUTCOMES].sort());
  });

  it.each(LEGAL)(
    "exactly one terminal effect iff the transition enters a terminal state: $name",
    ({ from, event }) => {
      const r = expectOk(transition(deepFreeze(from), event));
      const terminals = r.effects.filter((e) => e.type === "terminal");
      if (TERMINAL_STATES.has(r.next.state)) {
        expect(terminals).toEqual([{ type: "terminal", state: r.next.state }]);
      } else {
        expect(terminals).toEqual([]);
      }
    },
  );
});

describe("transition: scenarios", () => {
  it("dispatch_timeout redispatches with round+1 until maxDispatches, then FAILED", () => {
    const { final, steps } = run(initialSnapshot({ maxAttempts: 3, maxDispatches: 3 }), [
      { type: "dispatch" },
      { type: "dispatch_timeout", round: 1 },
      { type: "dispatch_timeout", round: 2 },
      { type: "dispatch_timeout", round: 3 },
    ]);
    expect(steps.map((s) => s.effects)).toEqual([
      [{ type: "send_dispatch", round: 1 }],
      [{ type: "send_dispatch", round: 2 }],
      [{ type: "send_dispatch", round: 3 }],
      [{ type: "terminal", state: "FAILED" }],
    ]);
    expect(final).toEqual({
      state: "FAILED",
      round: 3,
      attempt: 1,
      maxAttempts: 3,
      dispatches: 3,
      maxDispatches: 3,
    });
  });

  it("maxDispatches 1: the first dispatch_timeout fails", () => {
    const { final } = run(initialSnapshot({ maxAttempts: 1, maxDispatches: 1 }), [
      { type: "dispatch" },
      { type: "dispatch_timeout", round: 1 },
    ]);
    expect(final.state).toBe("FAILED");
    expect(final.round).toBe(1);
  });

  it("busy returns to PENDING and the next dispatch uses a higher round; the old round is stale", () => {
    const { final, steps } = run(initialSnapshot({ maxAttempts: 1, maxDispatches: 5 }), [
      { type: "dispatch" },
      { type: "busy", round: 1 },
      { type: "dispatch" },
    ]);
    expect(steps[1]?.next.state).toBe("PENDING");
    expect(steps[2]?.effects).toEqual([{ type: "send_dispatch", round: 2 }]);
    expect(final).toMatchObject({ state: "DISPATCHED", round: 2, dispatches: 1 });
    const late = transition(final, { type: "accepted", round: 1 });
    expect(late.ok).toBe(false);
    if (!late.ok) expect(late.error.code).toBe("stale_round");
  });

  it("a retry is a new attempt whose rounds continue from the last one (rule 2)", () => {
    const { final, steps } = run(initialSnapshot({ maxAttempts: 2, maxDispatches: 3 }), [
      { type: "dispatch" },
      { type: "dispatch_timeout", round: 1 },
      { type: "accepted", round: 2 },
      { type: "started", round: 2 },
      { type: "finished", round: 2, outcome: "failed", retryable: true },
      { type: "retry_due" },
      { type: "dispatch" },
      { type: "accepted", round: 3 },
      { type: "finished", round: 3, outcome: "failed", retryable: true },
    ]);
    expect(steps[4]?.effects).toEqual([{ type: "schedule_retry", attempt: 2 }]);
    expect(steps[5]?.next).toMatchObject({ state: "PENDING", round: 2, attempt: 2, dispatches: 0 });
    expect(steps[6]?.effects).toEqual([{ type: "send_dispatch", round: 3 }]);
    // Second and last attempt: a retryable failure is final now.
    expect(final).toMatchObject({ state: "FAILED", round: 3, attempt: 2, dispatches: 1 });
    expect(steps[8]?.effects).toEqual([{ type: "terminal", state: "FAILED" }]);
  });

  it("a cancel in an active state is ended by the agent's finished(canceled)", () => {
    const { final, steps } = run(initialSnapshot({ maxAttempts: 3, maxDispatches: 3 }), [
      { type: "dispatch" },
      { type: "started", round: 1 },
      { type: "cancel" },
      { type: "finished", round: 1, outcome: "canceled", retryable: false },
    ]);
    expect(steps[2]?.next.state).toBe("RUNNING");
    expect(steps[2]?.effects).toEqual([{ type: "send_cancel", round: 1 }]);
    expect(final.state).toBe("CANCELED");
    expect(steps.flatMap((s) => s.effects).filter((e) => e.type === "terminal")).toHaveLength(1);
  });
});

describe("transition: illegal transitions", () => {
  const illegal: { state: ExecState; type: ExecEventType }[] = [];
  for (const state of EXEC_STATES) {
    for (const type of EVENT_TYPES) {
      if (!ALLOWED_FROM[type].includes(state)) illegal.push({ state, type });
    }
  }

  it("are every pair not listed: 11 states × 12 events − 25 allowed", () => {
    expect(EXEC_STATES).toHaveLength(11);
    expect(EVENT_TYPES).toHaveLength(12);
    expect(illegal).toHaveLength(11 * 12 - 25);
  });

  it("no event is allowed in a terminal state", () => {
    for (const state of TERMINAL_STATES) {
      expect(illegal.filter((p) => p.state === state)).toHaveLength(EVENT_TYPES.length);
    }
  });

  it.each(illegal)("$type in $state is rejected as illegal, input unchanged", ({ state, type }) => {
    const input = deepFreeze(snap(state, { round: 2, attempt: 2, dispatches: 1 }));
    const before = structuredClone(input);
    // The event carries the current round, so only the state can make it illegal.
    const r = transition(input, eventOf(type, 2));
    expect(r).toEqual({
      ok: false,
      error: { code: "illegal", message: `event ${type} is not allowed in state ${state}` },
    });
    expect(input).toEqual(before);
  });
});

describe("transition: stale rounds", () => {
  const roundCases = LEGAL.filter((c) => "round" in c.event);

  it("cover every round-carrying event type", () => {
    expect(new Set(roundCases.map((c) => c.event.type))).toEqual(
      new Set([
        "dispatch_timeout",
        "accepted",
        "busy",
        "rejected",
        "started",
        "finished",
        "timed_out",
      ]),
    );
  });

  it.each(
    roundCases.flatMap((c) => [
      { ...c, round: c.from.round - 1 },
      { ...c, round: c.from.round + 1 },
    ]),
  )(
    "$event.type with round $round at round $from.round is stale: $name",
    ({ from, event, round }) => {
      const input = deepFreeze(from);
      const before = structuredClone(input);
      const r = transition(input, { ...event, round } as ExecEvent);
      expect(r).toEqual({
        ok: false,
        error: {
          code: "stale_round",
          message: `event ${event.type} carries round ${round}, the execution is at round ${from.round}`,
        },
      });
      expect(input).toEqual(before);
    },
  );

  it("an illegal event is reported as illegal even when its round is stale too", () => {
    const r = transition(snap("SUCCEEDED", { round: 3 }), { type: "accepted", round: 1 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.code).toBe("illegal");
  });
});

describe("transition: random event sequences", () => {
  // Events that end an execution from PENDING are rarer, so sequences live long enough to retry.
  const WEIGHTS: Record<ExecEventType, number> = {
    dispatch: 8,
    dispatch_timeout: 6,
    accepted: 6,
    busy: 3,
    rejected: 1,
    started: 6,
    finished: 6,
    timed_out: 3,
    retry_due: 6,
    cancel: 1,
    expire: 1,
    skip: 1,
  };
  const WEIGHTED_TYPES = EVENT_TYPES.flatMap((t) => Array<ExecEventType>(WEIGHTS[t]).fill(t));

  function randomEvent(rand: () => number, s: ExecSnapshot): ExecEvent {
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
    // Mostly an event the state allows, so sequences get far; sometimes any event at all.
    const allowed = WEIGHTED_TYPES.filter((t) => ALLOWED_FROM[t].includes(s.state));
    const type = pick(allowed.length > 0 && rand() < 0.75 ? allowed : EVENT_TYPES);
    const round = s.round;
    // Mostly the current round, sometimes an older or newer one.
    const r = rand() < 0.8 ? round : round + pick([-2, -1, 1]);
    const e = eventOf(type, r);
    if (e.type === "finished") return { ...e, outcome: pick(OUTCOMES), retryable: rand() < 0.6 };
    if (e.type === "timed_out") return { ...e, retryable: rand() < 0.6 };
    return e;
  }

  /** A failed check names the seed, sequence and step so it can be replayed. */
  function check(cond: boolean, what: string, where: string): void {
    if (!cond) throw new Error(`${what}, at ${where}`);
  }

  it.each([1, 2, 3, 42, 2026])("seed %i: invariants hold over 500 random sequences", (seed) => {
    const rand = seededRandom(seed);
    let applied = 0;
    let retries = 0;
    const reached = new Set<ExecState>();
    for (let seq = 0; seq < 500; seq++) {
      let s = initialSnapshot({
        maxAttempts: 1 + Math.floor(rand() * 4),
        maxDispatches: 1 + Math.floor(rand() * 4),
      });
      let terminalEffects = 0;
      let lastSentRound = 0;
      let afterTerminal = 0;
      // Up to 60 events, and once terminal 10 more that must all be refused.
      for (let step = 0; step < 60 && afterTerminal < 10; step++) {
        const event = randomEvent(rand, s);
        const where = `seed ${seed} seq ${seq} step ${step}: ${JSON.stringify(s)} + ${JSON.stringify(event)}`;
        const input = deepFreeze(s);
        const before = JSON.stringify(input);
        const r = transition(input, event);
        check(JSON.stringify(input) === before, "input changed", where);
        if (TERMINAL_STATES.has(s.state)) {
          afterTerminal++;
          check(!r.ok && r.error.code === "illegal", "left a terminal state", where);
        }
        if (!r.ok) continue;
        applied++;
        const next = r.next;
        check(next.round >= s.round, "round decreased", where);
        check(next.attempt <= next.maxAttempts, "attempt past maxAttempts", where);
        check(next.attempt >= s.attempt, "attempt decreased", where);
        check(next.maxAttempts === s.maxAttempts, "maxAttempts changed", where);
        check(next.maxDispatches === s.maxDispatches, "maxDispatches changed", where);
        for (const e of r.effects) {
          if (e.type === "send_dispatch") {
            // Each dispatch goes out under a round never used before (rule 2).
            check(e.round === next.round && e.round > lastSentRound, "round reused", where);
            lastSentRound = e.round;
          }
          if (e.type === "terminal") terminalEffects++;
          if (e.type === "schedule_retry") retries++;
        }
        s = next;
        reached.add(s.state);
      }
      check(
        terminalEffects === (TERMINAL_STATES.has(s.state) ? 1 : 0),
        `${terminalEffects} terminal effects`,
        `seed ${seed} seq ${seq}`,
      );
    }
    // The generator is not vacuous: it applied events, retried, and reached every state.
    expect(applied).toBeGreaterThan(1000);
    expect(retries).toBeGreaterThan(50);
    expect([...reached].sort()).toEqual([...EXEC_STATES].sort());
  });
});
