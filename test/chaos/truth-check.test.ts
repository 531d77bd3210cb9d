import { describe, expect, it } from "vitest";
import type { ExecutionRecord, TimelineEntry } from "../../coordinator/store/port.js";
import type { JournalRow } from "../helpers/chaos/journals.js";
import type { RecordedExecution } from "../helpers/chaos/record.js";
import { caughtUp, checkTruth } from "../helpers/chaos/truth.js";

/**
 * The truth check on hand-made records and journals: it must catch each way a record can
 * disagree with the devices, or the chaos scenarios prove nothing.
 */

const T0 = 1_800_000_000_000;

function execution(id: string, patch: Partial<ExecutionRecord> = {}): ExecutionRecord {
  return {
    id,
    kind: "command",
    jobId: null,
    jobVersion: null,
    handler: "file.write",
    params: { path: `/x/effects/${id}`, value: "x\n", append: true },
    targetAgentId: "a1",
    agentId: "a1",
    state: "SUCCEEDED",
    round: 1,
    attempt: 1,
    maxAttempts: 1,
    dispatches: 1,
    maxDispatches: 3,
    fireAt: T0 + 10_000,
    deadline: T0 + 40_000,
    timeoutMs: 30_000,
    dispatchTimeoutMs: 5_000,
    priority: 0,
    retryBaseMs: 1_000,
    retryCapMs: 60_000,
    createdAt: T0,
    updatedAt: T0,
    dispatchedAt: T0,
    startedAt: null,
    finishedAt: null,
    lateMs: null,
    nextAttemptAt: null,
    result: null,
    message: null,
    messageBytes: null,
    scheduledFor: null,
    shardIndex: null,
    shardTotal: null,
    groupKey: null,
    tags: {},
    ...patch,
  };
}

function entry(
  id: string,
  seq: number,
  event: string,
  toState: ExecutionRecord["state"],
  round: number,
  detail: Record<string, unknown> | null = null,
): TimelineEntry {
  return {
    executionId: id,
    seq,
    at: T0 + seq,
    event,
    fromState: null,
    toState,
    round,
    agentId: "a1",
    reason: null,
    detail,
    actor: null,
  };
}

/** A run that went well: dispatched, started and succeeded in round 1. */
function ranOnce(id: string, state: ExecutionRecord["state"] = "SUCCEEDED"): RecordedExecution {
  return {
    execution: execution(id, { state }),
    timeline: [
      entry(id, 1, "dispatch", "DISPATCHED", 1),
      entry(id, 2, "started", "RUNNING", 1),
      entry(id, 3, "finished", state, 1, { outcome: state.toLowerCase() }),
    ],
  };
}

function row(id: string, patch: Partial<JournalRow> = {}): JournalRow {
  return {
    agentId: "a1",
    executionId: id,
    round: 1,
    attempt: 1,
    state: "succeeded",
    fireAt: T0 + 10_000,
    deadline: T0 + 40_000,
    startedAt: T0 + 10_005,
    finishedAt: T0 + 10_010,
    ...patch,
  };
}

const effects = (done: Record<string, number>) => ({
  done: new Map(Object.entries(done)),
  begun: new Map(Object.entries(done)),
});

describe("the chaos truth check", () => {
  it("counts a record that matches its journal and effects as truthful", () => {
    const r = checkTruth({
      scenario: "ok",
      record: [ranOnce("e1")],
      journals: [row("e1")],
      effects: effects({ e1: 1 }),
    });
    expect(r).toMatchObject({ total: 1, truthful: 1, lost: 0, twice: 0, late: 0, nonTerminal: 0 });
    expect(r.findings).toEqual([]);
  });

  it("flags FAILED where the journal says succeeded, and the effect the record denies", () => {
    const rec: RecordedExecution = {
      execution: execution("e1", { state: "FAILED" }),
      timeline: [
        entry("e1", 1, "dispatch", "DISPATCHED", 1),
        entry("e1", 2, "finished", "FAILED", 1, { reason: "lease lapsed", guess: true }),
      ],
    };
    const r = checkTruth({
      scenario: "s",
      record: [rec],
      journals: [row("e1")],
      effects: effects({ e1: 1 }),
    });
    expect(r.truthful).toBe(0);
    expect(r.findings[0]?.problems).toEqual([
      "round 1 ran on a1 (journal: succeeded) but the record never says it started",
      "recorded FAILED, the journal says round 1 succeeded on a1",
    ]);
    expect(r.effectFindings).toEqual([
      "e1: effect done 1×, begun 1×; the record says succeeded 0×, the journals started 1×",
    ]);
  });

  it("flags a run the record claims that no journal started", () => {
    const r = checkTruth({
      scenario: "s",
      record: [ranOnce("e1")],
      journals: [],
      effects: effects({}),
    });
    expect(r.findings[0]?.problems).toContain(
      "the record says round 1 ran, but no journal started it",
    );
  });

  it("counts lost work, open work and an effect that happened twice", () => {
    const never: RecordedExecution = {
      execution: execution("e2", { state: "FAILED", message: "undeliverable" }),
      timeline: [entry("e2", 1, "dispatch_timeout", "FAILED", 1)],
    };
    const open: RecordedExecution = {
      execution: execution("e3", { state: "RUNNING" }),
      timeline: [entry("e3", 1, "started", "RUNNING", 1)],
    };
    const r = checkTruth({
      scenario: "s",
      record: [ranOnce("e1"), never, open],
      journals: [row("e1"), row("e3", { state: "running", finishedAt: null })],
      effects: effects({ e1: 2, e3: 0 }),
    });
    expect(r).toMatchObject({ total: 3, lost: 1, nonTerminal: 1, twice: 1 });
    expect(r.lostFindings[0]).toBe("e2 (command, FAILED, round 1): undeliverable — in no journal");
    expect(r.truthful).toBe(1);
  });

  it("takes two rounds that both ran as truthful only when the timeline keeps both outcomes", () => {
    const journals = [row("e1"), row("e1", { round: 2, agentId: "a2" })];
    const both = (withFact: boolean): RecordedExecution => ({
      execution: execution("e1", { round: 2 }),
      timeline: [
        entry("e1", 1, "started", "RUNNING", 1),
        entry("e1", 2, "started", "RUNNING", 2),
        entry("e1", 3, "finished", "SUCCEEDED", 2, { outcome: "succeeded" }),
        ...(withFact
          ? [
              entry("e1", 4, "fact", "SUCCEEDED", 2, {
                round: 1,
                started: true,
                outcome: "succeeded",
              }),
            ]
          : []),
      ],
    });
    const kept = checkTruth({
      scenario: "s",
      record: [both(true)],
      journals,
      effects: effects({ e1: 2 }),
    });
    expect(kept).toMatchObject({ truthful: 1, twice: 1 });
    const dropped = checkTruth({
      scenario: "s",
      record: [both(false)],
      journals,
      effects: effects({ e1: 2 }),
    });
    expect(dropped.truthful).toBe(0);
    expect(dropped.findings[0]?.problems).toContain(
      "two rounds ran; the timeline lacks round 1's outcome succeeded",
    );
  });

  it("measures lateness against the tick, and holds only the chosen executions to it", () => {
    const r = checkTruth({
      scenario: "s",
      record: [ranOnce("e1"), ranOnce("e2")],
      journals: [row("e1", { startedAt: T0 + 10_015 }), row("e2", { startedAt: T0 + 12_500 })],
      effects: effects({ e1: 1, e2: 1 }),
      mustBeOnTime: (e) => e.id === "e2",
    });
    expect(r).toMatchObject({
      late: 1,
      maxLateMs: 2_500,
      onTimeRequired: 1,
      lateRequired: 1,
      requiredLateMs: [2_500],
      requiredNeverRan: 0,
    });
  });

  it("tells one held to time and a fraction of a millisecond over the tick from one that never ran", () => {
    const r = checkTruth({
      scenario: "s",
      record: [ranOnce("e1")],
      journals: [row("e1", { startedAt: T0 + 10_020.3 })],
      effects: effects({ e1: 1 }),
      mustBeOnTime: () => true,
    });
    // Late by 20.3 ms, shown as 20: late, not lost.
    expect(r).toMatchObject({ lateRequired: 1, requiredLateMs: [20], requiredNeverRan: 0 });
  });

  it("is caught up only once every final journal outcome is in the record", () => {
    const journals = [row("e1")];
    expect(caughtUp([execution("e1", { state: "RUNNING" })], journals)).toBe(false);
    expect(caughtUp([execution("e1")], journals)).toBe(true);
    // Still scheduled on the agent: nothing to catch up on yet.
    expect(
      caughtUp([execution("e1", { state: "SCHEDULED" })], [row("e1", { state: "scheduled" })]),
    ).toBe(true);
  });
});
