import { afterEach, describe, expect, it } from "vitest";
import type { DownMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

/**
 * An operator's retry is one more run. A retry that fails again, even retryably, ends there: the
 * handler acts on equipment, and one retry asked for must not become two runs.
 */
describe("operator retry", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("runs a retried execution once, even when it fails retryably again", async () => {
    const { broker, coordinator } = await startedCoordinator(cleanups);
    const agent = await fakeAgent(broker, `${broker.prefix}-r`, { handlers: ["fail"] });
    cleanups.push(() => agent.close());
    let seq = 0;
    /** Answers the dispatch of `id` as a run that failed retryably. */
    const failRun = async (id: string) => {
      const d = await agent.waitFor(
        `dispatch of ${id}`,
        (m): m is Extract<DownMessage, { type: "dispatch" }> =>
          m.type === "dispatch" && m.executionId === id,
      );
      const at = Date.now();
      await agent.report({ type: "accepted", executionId: id, round: d.round, seq: ++seq });
      await agent.report({
        type: "finished",
        executionId: id,
        round: d.round,
        seq: ++seq,
        outcome: "failed",
        retryable: true,
        message: "valve stuck",
        startedAt: at,
        finishedAt: at + 1,
      });
    };
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
