import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import { engineContext, newCommand } from "../../test/helpers/engine.js";
import type { NewExecution } from "../store/port.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import type { EngineContext } from "./context.js";
import { applyEvent } from "./transitions.js";

/**
 * Retry timing on an injected clock: a retryable failure waits a full-jitter backoff of
 * random(0, min(cap, base·2^(n−1))) from the failure, attempt after attempt, and the last
 * attempt's failure is final. The link is never started: no effect here needs the broker.
 */
const stores: SqliteStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

function context(log: EngineContext["log"] = () => {}): {
  ctx: EngineContext;
  clock: FakeClock;
  store: SqliteStore;
} {
  const clock = new FakeClock({ wall: 1_900_000_000_000 });
  const store = new SqliteStore({ path: ":memory:", now: () => clock.wallNow() });
  stores.push(store);
  return { ctx: engineContext({ store, clock, log }), clock, store };
}

/** A command for agent a1, due `now`, retried with base 1 s and cap 3 s. */
function command(id: string, handler: string, maxAttempts: number, now: number): NewExecution {
  return newCommand(id, now, { handler, maxAttempts });
}

describe("retry timing", () => {
  it("waits a jittered, capped backoff after each retryable failure, and stops after the last attempt", async () => {
    const { ctx, clock, store } = context();
    const now = clock.wallNow();
    await store.createExecution(command("ex-r", "fail", 4, now), now);
    const ceilings = [1000, 2000, 3000]; // base·2^(n−1), capped at 3000
    for (let attempt = 1; attempt <= 4; attempt++) {
      expect(await applyEvent(ctx, "ex-r", { type: "dispatch" }, () => ({ agentId: "a1" }))).toBe(
        "applied",
      );
      const e = await store.getExecution("ex-r");
      const round = e?.round ?? 0;
      await applyEvent(ctx, "ex-r", { type: "started", round });
      clock.advance(100);
      const failedAt = clock.wallNow();
      await applyEvent(ctx, "ex-r", {
        type: "finished",
        round,
        outcome: "failed",
        retryable: true,
      });
      const after = await store.getExecution("ex-r");
      if (attempt === 4) {
        expect(after?.state).toBe("FAILED");
        break;
      }
      expect(after?.state).toBe("RETRY_WAITING");
      const wait = (after?.nextAttemptAt ?? 0) - failedAt;
      expect(wait).toBeGreaterThanOrEqual(0);
      expect(wait).toBeLessThan(ceilings[attempt - 1] ?? 0);
      // Not before nextAttemptAt: the retry is due exactly then.
      clock.advance(wait);
      expect(await applyEvent(ctx, "ex-r", { type: "retry_due" })).toBe("applied");
      expect((await store.getExecution("ex-r"))?.attempt).toBe(attempt + 1);
    }
    const timeline = await store.getTimeline("ex-r");
    expect(timeline.filter((t) => t.event === "retry_due")).toHaveLength(3);
    // Rounds rise across attempts and never restart (rule 2).
    const rounds = timeline.map((t) => t.round);
    expect([...rounds].sort((a, b) => a - b)).toEqual(rounds);
  });
});

describe("a report the state machine does not allow", () => {
  it("is dropped, counted and logged with AX_FSM_ILLEGAL_TRANSITION; a stale round without it", async () => {
    const lines: { msg: string; fields: Record<string, unknown> | undefined }[] = [];
    const { ctx, clock, store } = context((_level, msg, fields) => lines.push({ msg, fields }));
    const now = clock.wallNow();
    await store.createExecution(command("ex-i", "echo", 1, now), now);
    await applyEvent(ctx, "ex-i", { type: "dispatch" }, () => ({ agentId: "a1" }));
    const round = (await store.getExecution("ex-i"))?.round ?? 0;
    await applyEvent(ctx, "ex-i", { type: "started", round });
    await applyEvent(ctx, "ex-i", {
      type: "finished",
      round,
      outcome: "succeeded",
      retryable: false,
    });
    // A second start of the same round, after it finished: illegal.
    expect(await applyEvent(ctx, "ex-i", { type: "started", round })).not.toBe("applied");
    // A report of an older round: fenced, not illegal.
    await applyEvent(ctx, "ex-i", { type: "started", round: round - 1 });
    expect((await store.getExecution("ex-i"))?.state).toBe("SUCCEEDED");
    const counters = await store.counters();
    expect(counters.illegal_transitions).toBe(1);
    expect(counters.stale_reports).toBe(1);
    const drops = lines.filter((l) => l.msg.startsWith("dropped "));
    expect(drops.map((l) => l.fields?.code ?? null)).toEqual(["AX_FSM_ILLEGAL_TRANSITION", null]);
    expect(drops[0]?.msg).toBe("dropped started: event started is not allowed in state SUCCEEDED");
  });
});
