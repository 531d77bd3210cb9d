import { afterEach, describe, expect, it } from "vitest";
import type { DueOptions } from "../../coordinator/store/port.js";
import type { Dispatch, DownMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

/**
 * Commands that wait for agents out of reach: the dispatcher does not read past them ten times a
 * second for nothing, and they still go the moment their agent is back, or expire at their
 * deadline when it is not.
 */
describe("commands waiting for an agent out of reach", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  const isDispatch = (m: DownMessage): m is Dispatch => m.type === "dispatch";

  it("are read about once a second while none can move, and dispatched at once when their agent speaks again", async () => {
    // A 300 ms heartbeat: three missed (900 ms) and the agent is offline.
    const { broker, coordinator } = await startedCoordinator(cleanups, { heartbeatMs: 300 });
    const agent = await fakeAgent(broker, `${broker.prefix}-w`);
    cleanups.push(() => agent.close());
    await waitFor(
      "the agent offline",
      () => coordinator.fleet.get(agent.agentId)?.status === "offline" || undefined,
      5_000,
    );

    // Every read of the store's due work, and whether it asked for pending rows.
    const reads: { at: number; pending: boolean }[] = [];
    const store = coordinator.store;
    const listDue = store.listDue.bind(store);
    store.listDue = (now: number, by: number, limit: number, options?: DueOptions) => {
      reads.push({ at: Date.now(), pending: options?.pendingLimit !== 0 });
      return listDue(now, by, limit, options);
    };

    const now = Date.now();
    const soon = await coordinator.sendCommand({
      agentId: agent.agentId,
      handler: "echo",
      deadline: now + 1_200,
    });
    const later = await coordinator.sendCommand({
      agentId: agent.agentId,
      handler: "echo",
      deadline: now + 60_000,
    });
    await new Promise((r) => setTimeout(r, 2_500));
    const window = reads.filter((r) => r.at - now >= 500);
    // Passes still run every poll (100 ms) for retries and dispatch timeouts...
    expect(window.length).toBeGreaterThanOrEqual(10);
    // ...but read the pending rows about once a second (and again after the expiry below moved
    // one), not at each of them.
    expect(window.filter((r) => r.pending).length).toBeLessThanOrEqual(6);
    // The clock's part is not forgotten: the first command expired at its deadline, about that
    // second late at most.
    const expired = await coordinator.store.getExecution(soon);
    expect(expired?.state).toBe("EXPIRED");
    expect(expired?.updatedAt).toBeLessThanOrEqual(now + 1_200 + 1_500);
    expect(agent.received.some(isDispatch)).toBe(false);

    // A heartbeat after the silence brings the agent back (no hello): its command goes at once,
    // not at the next quiet read.
    const back = Date.now();
    await agent.heartbeat();
    const d = await agent.waitFor("the waiting command's dispatch", isDispatch);
    expect(d.executionId).toBe(later);
    expect(Date.now() - back).toBeLessThan(400);
    expect((await coordinator.store.getExecution(later))?.state).toBe("DISPATCHED");
  });
});
