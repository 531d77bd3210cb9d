import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { Ack, DownMessage } from "../../shared/protocol/index.js";
import { tempDir, testBroker, waitFor } from "../helpers/env.js";
import { fakeAgent } from "../helpers/fake-agent.js";

/**
 * Nothing an agent reports is thrown away (issue 15, item 1): reports beyond a gap wait for it,
 * the agent is asked to re-send from the gap, and what is published while the coordinator is down
 * is queued by the broker for its persistent session.
 */
describe("report delivery", () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function setup() {
    const broker = await testBroker();
    cleanups.push(() => broker.close());
    const tmp = tempDir();
    cleanups.push(() => tmp.cleanup());
    const config = parseCoordinatorConfig({
      store: { path: join(tmp.dir, "ax.sqlite") },
      mqtt: { url: broker.url, prefix: broker.prefix },
      heartbeat: 500,
    });
    const start = async () => {
      const c = new Coordinator(config);
      await c.start();
      return c;
    };
    return { broker, start };
  }

  const isAck = (m: DownMessage): m is Ack => m.type === "ack";

  it("holds a report that arrives beyond a gap, asks for a replay, and applies both in order", async () => {
    const { broker, start } = await setup();
    const coordinator = await start();
    cleanups.push(() => coordinator.close());
    const agent = await fakeAgent(broker, `${broker.prefix}-a`);
    cleanups.push(() => agent.close());
    const id = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo" });
    await agent.waitFor("dispatch", (m): m is DownMessage => m.type === "dispatch");
    const at = Date.now();
    // seq 2 first: seq 1 was "lost" on the way.
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
    const replay = await agent.waitFor(
      "a replay request",
      (m): m is Ack => isAck(m) && m.replay === true,
    );
    expect(replay.upTo).toBe(0);
    expect(replay.journalId).toBe(agent.journalId);
    expect((await coordinator.store.getExecution(id))?.state).toBe("DISPATCHED");
    // The replay brings seq 1, and then 2 again.
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
    await waitFor("running", async () =>
      (await coordinator.store.getExecution(id))?.state === "RUNNING" ? true : undefined,
    );
    await agent.waitFor("ack of 2", (m): m is Ack => isAck(m) && m.upTo === 2);
    const events = (await coordinator.store.getTimeline(id)).map((e) => e.event);
    expect(events).toEqual(["created", "dispatch", "accepted", "started"]);
    expect((await coordinator.store.counters()).out_of_order_reports).toBe(1);
    // No ack ever covered a report before it was applied.
    const acks = agent.received.filter(isAck).map((a) => a.upTo);
    expect(Math.max(...acks.slice(0, acks.indexOf(2)))).toBeLessThan(2);
  });

  it("applies what an agent reported while the coordinator was down, from the broker's queue", async () => {
    const { broker, start } = await setup();
    const first = await start();
    const agent = await fakeAgent(broker, `${broker.prefix}-b`);
    cleanups.push(() => agent.close());
    const id = await first.sendCommand({ agentId: agent.agentId, handler: "echo" });
    await agent.waitFor("dispatch", (m): m is DownMessage => m.type === "dispatch");
    const at = Date.now();
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.waitFor("ack of 1", (m): m is Ack => isAck(m) && m.upTo === 1);
    await first.close();
    // Published with no coordinator connected, and never re-sent.
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
    await agent.report({
      type: "finished",
      executionId: id,
      round: 1,
      seq: 3,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      startedAt: at,
      finishedAt: at + 1,
    });
    const second = await start();
    cleanups.push(() => second.close());
    const done = await waitFor("succeeded", async () => {
      const e = await second.store.getExecution(id);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.finishedAt).toBe(at + 1);
    await agent.waitFor("ack of 3", (m): m is Ack => isAck(m) && m.upTo === 3);
  });
});
