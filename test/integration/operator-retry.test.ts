import { afterEach, describe, expect, it } from "vitest";
import type { DownMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

type Dispatch = Extract<DownMessage, { type: "dispatch" }>;

const cleanups: Cleanups = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A coordinator and a fake agent with the `fail` handler, whose runs the test answers. */
async function failingAgent() {
  const { broker, coordinator } = await startedCoordinator(cleanups);
  const agent = await fakeAgent(broker, `${broker.prefix}-r`, { handlers: ["fail"] });
  cleanups.push(() => agent.close());
  let seq = 0;
  /**
   * Answers dispatch `d` as a run that failed retryably: accepted, started (with `startedToo`),
   * and finished `failAfterMs` later.
   */
  const failRun = async (d: Dispatch, failAfterMs = 0, startedToo = false) => {
    const ref = { executionId: d.executionId, round: d.round };
    const at = Date.now();
    await agent.report({ type: "accepted", ...ref, seq: ++seq });
    if (startedToo)
      await agent.report({ type: "started", ...ref, seq: ++seq, startedAt: at, lateMs: 0 });
    if (failAfterMs > 0) await new Promise((r) => setTimeout(r, failAfterMs));
    await agent.report({
      type: "finished",
      ...ref,
      seq: ++seq,
      outcome: "failed",
      retryable: true,
      message: "valve stuck",
      startedAt: at,
      finishedAt: Math.max(Date.now(), at + 1),
    });
  };
  return { coordinator, agent, failRun };
}

/**
 * An operator's retry is one more run. A retry that fails again, even retryably, ends there: the
 * handler acts on equipment, and one retry asked for must not become two runs.
 */
describe("operator retry", () => {
  it("runs a retried execution once, even when it fails retryably again", async () => {
    const { coordinator, agent, failRun: answer } = await failingAgent();
    /** Answers the dispatch of `id` as a run that failed retryably. */
    const failRun = async (id: string) =>
      answer(
        await agent.waitFor(
          `dispatch of ${id}`,
          (m): m is Dispatch => m.type === "dispatch" && m.executionId === id,
        ),
      );
    const ended = (id: string) =>
      waitFor(`${id} ended`, async () => {
        const e = await coordinator.store.getExecution(id);
        return e?.state === "FAILED" ? e : undefined;
      });
    const first = await coordinator.sendCommand({ agentId: agent.agentId, handler: "fail" });
    await failRun(first);
    await ended(first);
    const retry = await coordinator.executions.retry(first, "op");
    await failRun(retry);
    const done = await ended(retry);
    expect(done.maxAttempts).toBe(1);
    // Give a second run every chance to be dispatched: none is.
    await new Promise((r) => setTimeout(r, 1_500));
    const dispatches = agent.received.filter(
      (m) => m.type === "dispatch" && m.executionId === retry,
    );
    expect(dispatches).toHaveLength(1);
    const events = (await coordinator.store.getTimeline(retry)).map((e) => e.event);
    expect(events).toEqual(["created", "dispatch", "accepted", "finished"]);
  });
});

/**
 * A job's `deadline` is the latest start of a firing; a retry is a new attempt at a new time,
 * with a start window of its own. A run that failed (or timed out) after the first attempt's
 * deadline is still retried, as docs/scheduling.md says of retryable failures; before, it ended
 * EXPIRED ("could not start by its deadline") although it had started.
 */
describe("a job's retry after the first attempt's deadline", () => {
  it("runs: the retry gets a start window of its own", async () => {
    const { coordinator, agent, failRun } = await failingAgent();
    await coordinator.putJob({
      id: "late-fail",
      handler: "fail",
      trigger: { type: "manual" },
      deadline: "500ms",
      timeout: "10s",
      retry: { maxAttempts: 2, baseMs: 50, capMs: 50 },
    });
    const id = await coordinator.triggerJob("late-fail");
    const dispatchOf = (attempt: number) =>
      agent.waitFor(
        `dispatch of attempt ${attempt}`,
        (m): m is Dispatch =>
          m.type === "dispatch" && m.executionId === id && m.attempt === attempt,
      );
    const first = await dispatchOf(1);
    // Fails well after the first attempt's deadline (500 ms after the trigger).
    await failRun(first, 900, true);
    const second = await dispatchOf(2);
    expect(second.deadline - second.fireAt).toBe(first.deadline - first.fireAt);
    expect(second.fireAt).toBeGreaterThan(first.deadline);
    await failRun(second, 0, true);
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
