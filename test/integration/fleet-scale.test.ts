import { afterEach, describe, expect, it } from "vitest";
import { MAX_UNANSWERED_DISPATCHES } from "../../coordinator/engine/execution-loop.js";
import type { Dispatch, DownMessage, Time } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

/**
 * What lets one coordinator carry a large fleet (issue 18): commands to one agent leave as
 * batches, a heartbeat is answered with a clock sample only when it asks, and its figures live
 * in memory until they are stored in a batch.
 */
describe("fleet at scale", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  const setup = (over: Record<string, unknown> = {}) => startedCoordinator(cleanups, over);
  const isDispatch = (m: DownMessage): m is Dispatch => m.type === "dispatch";
  const isTime = (m: DownMessage): m is Time => m.type === "time";

  it("sends the commands of one pass to an agent that reads batches as one message", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-b`, { batchBytes: 65_536 });
    cleanups.push(() => agent.close());
    const at = Date.now() + 60_000;
    const ids = await Promise.all(
      Array.from({ length: 20 }, () =>
        coordinator.sendCommand({ agentId: agent.agentId, handler: "echo", at }),
      ),
    );
    await waitFor("20 dispatches", () =>
      agent.received.filter(isDispatch).length >= 20 ? true : undefined,
    );
    const dispatched = agent.received.filter(isDispatch);
    expect(dispatched.map((d) => d.executionId).sort()).toEqual([...ids].sort());
    // Fewer messages than commands: at least one carried several (the welcome came alone).
    expect(agent.payloadSizes.length).toBeLessThan(21);
    expect(Math.max(...agent.payloadSizes)).toBeGreaterThan(1);
  });

  it("holds dispatches back while 1,000 await their answers, and sends more as answers come", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-w`, { batchBytes: 65_536 });
    cleanups.push(() => agent.close());
    const at = Date.now() + 600_000;
    const total = MAX_UNANSWERED_DISPATCHES + 50;
    await Promise.all(
      Array.from({ length: total }, () =>
        coordinator.sendCommand({ agentId: agent.agentId, handler: "echo", at }),
      ),
    );
    const dispatches = () => agent.received.filter(isDispatch);
    await waitFor("the first 1,000 dispatches", () =>
      dispatches().length >= MAX_UNANSWERED_DISPATCHES ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(dispatches()).toHaveLength(MAX_UNANSWERED_DISPATCHES);
    // Answering 100 of them lets the rest go, well before the unanswered stop counting (5 s).
    const answered = Date.now();
    for (const [i, d] of dispatches().slice(0, 100).entries()) {
      await agent.report({
        type: "accepted",
        executionId: d.executionId,
        round: d.round,
        seq: i + 1,
      });
    }
    await waitFor("the other 50", () => (dispatches().length >= total ? true : undefined));
    expect(Date.now() - answered).toBeLessThan(3_000);
    expect(new Set(dispatches().map((d) => d.executionId)).size).toBe(total);
  });

  it("keeps each batch within the agent's batchBytes", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-s`, { batchBytes: 1_024 });
    cleanups.push(() => agent.close());
    const at = Date.now() + 60_000;
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        coordinator.sendCommand({
          agentId: agent.agentId,
          handler: "echo",
          at,
          params: { pad: "x".repeat(200 + i) },
        }),
      ),
    );
    await waitFor("12 dispatches", () =>
      agent.received.filter(isDispatch).length >= 12 ? true : undefined,
    );
    // A dispatch with 200 bytes of params is about 450 bytes: two fit in 1,024, three do not.
    expect(Math.max(...agent.payloadSizes)).toBeLessThanOrEqual(2);
    expect(agent.payloadSizes.length).toBeGreaterThanOrEqual(7);
  });

  it("sends each command alone to an agent whose hello says nothing of batches", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-o`);
    cleanups.push(() => agent.close());
    const at = Date.now() + 60_000;
    await Promise.all(
      Array.from({ length: 10 }, () =>
        coordinator.sendCommand({ agentId: agent.agentId, handler: "echo", at }),
      ),
    );
    await waitFor("10 dispatches", () =>
      agent.received.filter(isDispatch).length >= 10 ? true : undefined,
    );
    expect(agent.payloadSizes.every((n) => n === 1)).toBe(true);
  });

  it("answers a heartbeat with a clock sample unless it says time: false", async () => {
    const { broker } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-t`);
    cleanups.push(() => agent.close());
    await agent.heartbeat(0, [], { time: false });
    await agent.heartbeat(0, [], { time: false });
    // Heartbeats are handled in order: once the third one's answer is here, the first two's
    // would have come before it.
    await agent.heartbeat(0, [], { time: true });
    await agent.waitFor("time", isTime);
    await agent.heartbeat();
    await waitFor("a second time", () =>
      agent.received.filter(isTime).length >= 2 ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(agent.received.filter(isTime)).toHaveLength(2);
  });

  it("keeps a heartbeat's figures in memory, and stores them at shutdown", async () => {
    const { broker, coordinator, start } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-m`);
    cleanups.push(() => agent.close());
    await agent.heartbeat(0, [], { load: 3.5, time: false });
    await waitFor("the heartbeat", () =>
      coordinator.fleet.get(agent.agentId)?.load === 3.5 ? true : undefined,
    );
    expect((await coordinator.store.getAgent(agent.agentId))?.load).toBe(0);
    await coordinator.close();
    const again = await start();
    cleanups.push(() => again.close());
    expect((await again.store.getAgent(agent.agentId))?.load).toBe(3.5);
  });
});
