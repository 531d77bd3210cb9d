import { afterEach, describe, expect, it } from "vitest";
import type { DownMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

type Dispatch = Extract<DownMessage, { type: "dispatch" }>;

/**
 * A job's `deadline` is the latest start of a firing; a retry is a new attempt at a new time,
 * with a start window of its own. A run that failed (or timed out) after the first attempt's
 * deadline is still retried, as docs/scheduling.md says of retryable failures; before, it ended
 * EXPIRED ("could not start by its deadline") although it had started.
 */
describe("a job's retry after the first attempt's deadline", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("runs: the retry gets a start window of its own", async () => {
    const { broker, coordinator } = await startedCoordinator(cleanups);
    const agent = await fakeAgent(broker, `${broker.prefix}-d`, { handlers: ["fail"] });
    cleanups.push(() => agent.close());
    await coordinator.putJob({
      id: "late-fail",
      handler: "fail",
      trigger: { type: "manual" },
      deadline: "500ms",
      timeout: "10s",
      retry: { maxAttempts: 2, baseMs: 50, capMs: 50 },
    });
    const id = await coordinator.triggerJob("late-fail");
    let seq = 0;
    const dispatchOf = (attempt: number) =>
      agent.waitFor(
        `dispatch of attempt ${attempt}`,
        (m): m is Dispatch =>
          m.type === "dispatch" && m.executionId === id && m.attempt === attempt,
      );
    const run = async (d: Dispatch, failAfterMs: number) => {
      const at = Date.now();
      await agent.report({ type: "accepted", executionId: id, round: d.round, seq: ++seq });
      await agent.report({
        type: "started",
        executionId: id,
        round: d.round,
        seq: ++seq,
        startedAt: at,
        lateMs: 0,
      });
      await new Promise((r) => setTimeout(r, failAfterMs));
      await agent.report({
        type: "finished",
        executionId: id,
        round: d.round,
        seq: ++seq,
        outcome: "failed",
        retryable: true,
        message: "valve stuck",
        startedAt: at,
        finishedAt: Date.now(),
      });
    };
    const first = await dispatchOf(1);
    // Fails well after the first attempt's deadline (500 ms after the trigger).
    await run(first, 900);
    const second = await dispatchOf(2);
    expect(second.deadline - second.fireAt).toBe(first.deadline - first.fireAt);
    expect(second.fireAt).toBeGreaterThan(first.deadline);
    await run(second, 0);
    const done = await waitFor("the last attempt's failure", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "FAILED" ? e : undefined;
    });
    expect(done.attempt).toBe(2);
    const events = (await coordinator.store.getTimeline(id)).map((t) => t.event);
    expect(events).not.toContain("expire");
    expect(events.filter((e) => e === "retry_due")).toHaveLength(1);
  });
});
