import { afterEach, describe, expect, it } from "vitest";
import type { Dispatch, DownMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import { type Cleanups, fakeAgent, startedCoordinator } from "../helpers/fake-agent.js";

/**
 * Dispatch early, hold locally (issue 15, item 3): a device command reaches its agent as soon as it
 * is known, and "not now" answers (`shutting_down`) leave it waiting instead of failing it.
 */
describe("early dispatch", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  const setup = (over: Record<string, unknown> = {}) => startedCoordinator(cleanups, over);
  const isDispatch = (m: DownMessage): m is Dispatch => m.type === "dispatch";

  it("dispatches a command an hour ahead at once, to an agent that is online", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-a`);
    cleanups.push(() => agent.close());
    const at = Date.now() + 3_600_000;
    const id = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo", at });
    const d = await agent.waitFor("dispatch", isDispatch);
    expect(d.executionId).toBe(id);
    expect(d.fireAt).toBe(at);
  });

  it("keeps a command beyond the horizon until it comes within it", async () => {
    const { broker, coordinator } = await setup({ commandHorizonMs: 60_000 });
    const agent = await fakeAgent(broker, `${broker.prefix}-h`);
    cleanups.push(() => agent.close());
    const id = await coordinator.sendCommand({
      agentId: agent.agentId,
      handler: "echo",
      at: Date.now() + 3_600_000,
    });
    await new Promise((r) => setTimeout(r, 600));
    expect(agent.received.some(isDispatch)).toBe(false);
    expect((await coordinator.store.getExecution(id))?.state).toBe("PENDING");
  });

  it("dispatches a job's fire its own dispatchLead ahead, and others at the coordinator's", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-j`);
    cleanups.push(() => agent.close());
    const at = Date.now() + 8_000;
    await coordinator.putJob({
      id: "ahead",
      handler: "echo",
      trigger: { type: "at", at: new Date(at).toISOString() },
      dispatchLead: "20s",
    });
    await coordinator.putJob({
      id: "plain",
      handler: "echo",
      trigger: { type: "at", at: new Date(at).toISOString() },
    });
    const d = await agent.waitFor("the early job's dispatch", isDispatch);
    // Sent right away (20 s of lead covers the 8 s to go), the other one not yet.
    expect(d.fireAt).toBe(at);
    expect(Date.now()).toBeLessThan(at - 2_000);
    expect(agent.received.filter(isDispatch)).toHaveLength(1);
    const [exec] = await coordinator.store.listExecutions({ jobId: "ahead" });
    expect(exec?.id).toBe(d.executionId);
    expect(await coordinator.store.listExecutions({ jobId: "plain" })).toHaveLength(0);
  });

  it("refuses a dispatchLead over 24h, naming the field", async () => {
    const { coordinator } = await setup();
    await expect(
      coordinator.putJob({
        id: "far",
        handler: "echo",
        trigger: { type: "manual" },
        dispatchLead: "25h",
      }),
    ).rejects.toMatchObject({
      code: "AX_JOB_INVALID",
      message: expect.stringContaining("dispatchLead: must be at most 24h"),
    });
  });

  it("takes shutting_down as 'not now': the command waits for the agent's next instance", async () => {
    const { broker, coordinator } = await setup();
    const agentId = `${broker.prefix}-s`;
    const stopping = await fakeAgent(broker, agentId);
    const id = await coordinator.sendCommand({
      agentId,
      handler: "echo",
      at: Date.now() + 20_000,
      deadline: Date.now() + 60_000,
    });
    const d = await stopping.waitFor("dispatch", isDispatch);
    await stopping.report({
      type: "rejected",
      executionId: id,
      round: d.round,
      seq: 1,
      reason: "shutting_down",
    });
    await waitFor("pending again", async () =>
      (await coordinator.store.getExecution(id))?.state === "PENDING" ? true : undefined,
    );
    expect(coordinator.fleet.isDraining(agentId)).toBe(true);
    // Nothing more goes to the stopping instance.
    await new Promise((r) => setTimeout(r, 500));
    expect(stopping.received.filter(isDispatch)).toHaveLength(1);
    await stopping.close();
    const restarted = await fakeAgent(broker, agentId);
    cleanups.push(() => restarted.close());
    const again = await restarted.waitFor("dispatch after the restart", isDispatch);
    expect(again.executionId).toBe(id);
    expect(again.round).toBe(d.round + 1);
    const exec = await coordinator.store.getExecution(id);
    expect(exec?.state).toBe("DISPATCHED");
  });
});
