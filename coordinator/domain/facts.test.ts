import { describe, expect, it } from "vitest";
import { type ExecState, initialSnapshot } from "../../shared/fsm.js";
import {
  decideFact,
  type Fact,
  type HistoryEntry,
  type RecordedExecution,
  roundHistory,
} from "./facts.js";

function exec(state: ExecState, over: Partial<RecordedExecution> = {}): RecordedExecution {
  return {
    ...initialSnapshot({ maxAttempts: 3, maxDispatches: 3 }),
    state,
    round: 1,
    dispatches: 1,
    agentId: "a",
    ...over,
  };
}
const e = (
  event: string,
  round: number,
  agentId: string | null,
  detail: Record<string, unknown> | null = null,
): HistoryEntry => ({
  event,
  round,
  agentId,
  detail,
});
const started = (round: number, agentId = "a"): Fact => ({ kind: "started", round, agentId });
const finished = (
  round: number,
  outcome: "succeeded" | "failed" | "interrupted" | "expired" | "canceled",
  over: Partial<Extract<Fact, { kind: "finished" }>> = {},
): Fact => ({
  kind: "finished",
  round,
  agentId: "a",
  outcome,
  retryable: true,
  started: outcome !== "expired" && outcome !== "canceled",
  ...over,
});

describe("roundHistory", () => {
  it("reads starts, device finishes, attempts and the followed round from a timeline", () => {
    const h = roundHistory([
      e("created", 0, null),
      e("dispatch", 1, "a"),
      e("accepted", 1, "a"),
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
      e("retry_due", 1, null),
      e("dispatch", 2, "b"),
      e("fact", 2, "a", {
        fact: "finished",
        round: 1,
        outcome: "failed",
        decision: "noted",
        started: true,
      }),
      e("started", 2, "b"),
      e("finished", 2, "b", { outcome: "succeeded", retryable: false }),
    ]);
    expect([...h.started.entries()]).toEqual([
      [1, "a"],
      [2, "b"],
    ]);
    // The coordinator's guess about round 1 is not a finish; the device's later report is.
    expect([...h.finished.entries()]).toEqual([
      [1, "failed"],
      [2, "succeeded"],
    ]);
    expect(h.attemptOf.get(1)).toBe(1);
    expect(h.attemptOf.get(2)).toBe(2);
    expect(h.followedRound).toBeNull();
  });
});

describe("decideFact: facts outrank fences", () => {
  const dispatched1 = [e("created", 0, null), e("dispatch", 1, "a")];

  it("a fact already recorded is known", () => {
    const h = roundHistory([...dispatched1, e("started", 1, "a")]);
    expect(decideFact(exec("RUNNING"), h, started(1))).toEqual({ action: "known" });
  });

  it("an older round's start while the newer has not started: the record follows the older, and the newer is cancelled on its agent", () => {
    const h = roundHistory([...dispatched1, e("dispatch_timeout", 2, "b")]);
    const d = decideFact(exec("DISPATCHED", { round: 2, agentId: "b" }), h, started(1));
    expect(d).toMatchObject({
      action: "adopt",
      next: { state: "RUNNING", round: 2, attempt: 1 },
      followRound: 1,
      cancelRound: 2,
      cancelAgent: "b",
    });
  });

  it("on the same agent the newer round needs no cancel (the agent kept the round it started)", () => {
    const h = roundHistory([...dispatched1, e("dispatch_timeout", 2, "a")]);
    const d = decideFact(exec("DISPATCHED", { round: 2 }), h, started(1));
    expect(d.action).toBe("adopt");
    expect(d).not.toHaveProperty("cancelRound");
  });

  it("a finish that contradicts a lapsed-lease guess corrects FAILED to SUCCEEDED", () => {
    const h = roundHistory([
      ...dispatched1,
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
    ]);
    const d = decideFact(exec("FAILED", { maxAttempts: 1 }), h, finished(1, "succeeded"));
    expect(d).toMatchObject({ action: "adopt", next: { state: "SUCCEEDED", round: 1 } });
    if (d.action === "adopt") expect(d.note).toContain("it was recorded FAILED");
  });

  it("a success while the retry of a guessed loss waits: the retry is dropped, the record SUCCEEDED", () => {
    const h = roundHistory([
      ...dispatched1,
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
    ]);
    const d = decideFact(exec("RETRY_WAITING"), h, finished(1, "succeeded"));
    expect(d).toMatchObject({ action: "adopt", next: { state: "SUCCEEDED" } });
  });

  it("a retryable failure the coordinator already answered with a retry is confirmed, not retried twice", () => {
    const h = roundHistory([
      ...dispatched1,
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
      e("retry_due", 1, null),
      e("dispatch", 2, "a"),
    ]);
    const d = decideFact(
      exec("DISPATCHED", { round: 2, attempt: 2 }),
      h,
      finished(1, "interrupted"),
    );
    expect(d.action).toBe("note");
    const waiting = roundHistory([
      ...dispatched1,
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
    ]);
    expect(decideFact(exec("RETRY_WAITING"), waiting, finished(1, "failed")).action).toBe("note");
  });

  it("a later attempt's round not yet started gives way to an earlier attempt's success", () => {
    const h = roundHistory([
      ...dispatched1,
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
      e("retry_due", 1, null),
      e("dispatch", 2, "b"),
    ]);
    const d = decideFact(
      exec("SCHEDULED", { round: 2, attempt: 2, agentId: "b" }),
      h,
      finished(1, "succeeded"),
    );
    expect(d).toMatchObject({
      action: "adopt",
      next: { state: "SUCCEEDED", round: 2, attempt: 1 },
      cancelRound: 2,
      cancelAgent: "b",
    });
  });

  it("two rounds that both ran: both_ran, and the record keeps the later", () => {
    const h = roundHistory([
      ...dispatched1,
      e("started", 1, "a"),
      e("finished", 1, "a", { outcome: "interrupted", retryable: true, guess: true }),
      e("retry_due", 1, null),
      e("dispatch", 2, "b"),
      e("started", 2, "b"),
    ]);
    const running = exec("RUNNING", { round: 2, attempt: 2, agentId: "b" });
    expect(decideFact(running, h, finished(1, "succeeded")).action).toBe("both_ran");
    // A start of round 1 nobody had heard of (its agent was cut off), once round 2 runs.
    const unheard = roundHistory([
      ...dispatched1,
      e("dispatch_timeout", 2, "b"),
      e("started", 2, "b"),
    ]);
    expect(
      decideFact(exec("RUNNING", { round: 2, agentId: "b" }), unheard, started(1)).action,
    ).toBe("both_ran");
  });

  it("a start reported after a dispatch-timeout FAILED reopens the record as RUNNING", () => {
    const h = roundHistory([...dispatched1, e("dispatch_timeout", 1, "a")]);
    const d = decideFact(exec("FAILED"), h, started(1));
    expect(d).toMatchObject({ action: "adopt", next: { state: "RUNNING" } });
  });

  it("an older round that ended without starting says nothing about the execution", () => {
    const h = roundHistory([...dispatched1, e("dispatch_timeout", 2, "b")]);
    const d = decideFact(exec("SCHEDULED", { round: 2, agentId: "b" }), h, finished(1, "canceled"));
    expect(d.action).toBe("note");
  });

  it("the followed round's finish settles the record by the state machine (a retryable failure retries)", () => {
    const h = roundHistory([
      ...dispatched1,
      e("dispatch_timeout", 2, "b"),
      e("fact", 2, "a", {
        fact: "started",
        round: 1,
        decision: "adopted",
        started: true,
        attempt: 1,
      }),
    ]);
    const d = decideFact(exec("RUNNING", { round: 2 }), h, finished(1, "failed"));
    expect(d).toMatchObject({
      action: "adopt",
      next: { state: "RETRY_WAITING", round: 2 },
      scheduleRetry: true,
    });
  });
});
