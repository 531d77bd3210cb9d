import { afterEach, describe, expect, it } from "vitest";
import type { DueOptions, Store } from "../../coordinator/store/port.js";
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
  /**
   * A coordinator with a 300 ms heartbeat (three missed, 900 ms, and an agent is offline) and a
   * fake agent `name` that said hello and then went silent, offline by now.
   */
  const withAgentOffline = async (name: string) => {
    const { broker, coordinator } = await startedCoordinator(cleanups, { heartbeatMs: 300 });
    const agent = await fakeAgent(broker, `${broker.prefix}-${name}`);
    cleanups.push(() => agent.close());
    await waitFor(
      `agent ${name} offline`,
      () => coordinator.fleet.get(agent.agentId)?.status === "offline" || undefined,
      5_000,
    );
    return { broker, coordinator, agent };
  };
  /** Every read of the store's due work from now on, and whether it asked for pending rows. */
  const dueReads = (store: Store) => {
    const reads: { at: number; pending: boolean }[] = [];
    const listDue = store.listDue.bind(store);
    store.listDue = (now: number, by: number, limit: number, options?: DueOptions) => {
      reads.push({ at: Date.now(), pending: options?.pendingLimit !== 0 });
      return listDue(now, by, limit, options);
    };
    return reads;
  };

  it("are read about once a second while none can move, and dispatched at once when their agent speaks again", async () => {
    const { coordinator, agent } = await withAgentOffline("w");

    const reads = dueReads(coordinator.store);

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

  it("are not read again for each burst of another agent's reports, which adds no pending work", async () => {
    const { broker, coordinator, agent: away } = await withAgentOffline("away");
    const now = Date.now();
    const waiting = await coordinator.sendCommand({
      agentId: away.agentId,
      handler: "echo",
      deadline: now + 60_000,
    });

    // A second agent runs a command and reports its progress twenty times a second.
    const busy = await fakeAgent(broker, `${broker.prefix}-busy`);
    cleanups.push(() => busy.close());
    const running = await coordinator.sendCommand({ agentId: busy.agentId, handler: "echo" });
    const d = await busy.waitFor("the running command's dispatch", isDispatch);
    const ref = { executionId: d.executionId, round: d.round };
    await busy.report({ type: "accepted", ...ref, seq: 1 });
    await busy.report({ type: "started", ...ref, seq: 2, startedAt: Date.now(), lateMs: 0 });
    await waitFor(
      "the command RUNNING",
      async () => (await coordinator.store.getExecution(running))?.state === "RUNNING" || undefined,
      5_000,
    );

    const reads = dueReads(coordinator.store);
    const started = Date.now();
    let seq = 3;
    while (Date.now() - started < 2_000) {
      await busy.report({ type: "progress", ...ref, seq: seq++, percent: 50 });
      if (seq % 4 === 0) await busy.heartbeat(0, [ref]);
      await new Promise((r) => setTimeout(r, 50));
    }
    await waitFor(
      "every progress report stored",
      () => (coordinator.fleet.get(busy.agentId)?.ackedSeq ?? 0) >= seq - 1 || undefined,
      5_000,
    );
    // About 35 bursts of reports, each running a pass; the pending rows (the waiting command)
    // are read about once a second all the same, not once a burst.
    expect(seq - 3).toBeGreaterThanOrEqual(20);
    expect(reads.filter((r) => r.pending).length).toBeLessThanOrEqual(6);
    expect((await coordinator.store.getExecution(waiting))?.state).toBe("PENDING");

    // Work a report makes PENDING again is read at once: the agent answers a new command busy,
    // and once its back-off has passed it is sent that command again, with no new work kicked.
    const next = await coordinator.sendCommand({ agentId: busy.agentId, handler: "echo" });
    const first = await busy.waitFor(
      "the next command's dispatch",
      (m): m is Dispatch => isDispatch(m) && m.executionId === next,
    );
    busy.received.length = 0;
    await busy.report({ type: "busy", executionId: next, round: first.round, seq: seq++ });
    // The agent stays alive meanwhile, as a real one does: silent for three heartbeats (900 ms
    // here), it would be offline before its back-off ended, and its command would wait for it.
    const alive = setInterval(() => void busy.heartbeat(0, [ref]).catch(() => {}), 150);
    cleanups.push(() => clearInterval(alive));
    await busy.heartbeat(0, [ref]);
    const again = await busy.waitFor(
      "the busy command dispatched again",
      (m): m is Dispatch => isDispatch(m) && m.executionId === next,
    );
    clearInterval(alive);
    expect(again.round).toBeGreaterThan(first.round);
  });
});
