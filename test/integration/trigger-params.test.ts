import { afterEach, describe, expect, it } from "vitest";
import type { Dispatch, DownMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

/**
 * What a trigger adds to a job's params must fit a dispatch with them: each part fitting alone
 * does not make the two together fit, and a dispatch no agent can read fails saying nothing.
 */
describe("params a trigger adds", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  const isDispatch = (m: DownMessage): m is Dispatch => m.type === "dispatch";

  it("gives an after job the marker of a result too large to carry, and fires it", async () => {
    const { broker, coordinator } = await startedCoordinator(cleanups);
    const agent = await fakeAgent(broker, `${broker.prefix}-a`);
    cleanups.push(() => agent.close());
    await coordinator.putJob({ id: "photo", handler: "echo", trigger: { type: "manual" } });
    await coordinator.putJob({
      id: "archive",
      handler: "echo",
      params: { plan: "p".repeat(30_000) },
      trigger: { type: "after", job: "photo", states: ["SUCCEEDED"] },
    });
    const id = await coordinator.triggerJob("photo");
    const d = await agent.waitFor("photo's dispatch", isDispatch);
    const at = Date.now();
    const result = { image: "y".repeat(40_000) };
    await agent.report({ type: "accepted", executionId: id, round: d.round, seq: 1 });
    await agent.report({
      type: "finished",
      executionId: id,
      round: d.round,
      seq: 2,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      startedAt: at,
      finishedAt: at + 1,
      result,
    });
    const next = await waitFor("archive's dispatch", () =>
      agent.received.filter(isDispatch).find((m) => m.executionId !== id),
    );
    expect(next.params.plan).toBe("p".repeat(30_000));
    expect(next.params.after).toEqual({
      jobId: "photo",
      executionId: id,
      state: "SUCCEEDED",
      result: { truncated: true, reason: "too_large", bytes: JSON.stringify(result).length },
      message: "ok",
    });
  });
});
