import mqtt, { type MqttClient } from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { envelope } from "../../shared/message.js";
import { type Dispatch, decode, encode, topics } from "../../shared/protocol/index.js";
import {
  helloBody,
  idleHeartbeat,
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForAgentsOnline,
} from "../helpers/env.js";

/**
 * An agent that receives a dispatch but whose answer never arrives must not lead to the command
 * running on two agents: the next round goes to the same agent while it is live.
 */
describe("redispatch after a missing answer", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  const silent: { client: MqttClient; id: string; got: Dispatch[] }[] = [];

  /**
   * A live agent (hello, heartbeats) that takes dispatches and never answers them. Its heartbeats
   * say they were sent `lag.ms` ago: what a coordinator reading its inbound that far behind sees.
   */
  async function silentAgent(id: string, lag = { ms: 0 }): Promise<void> {
    const t = topics(broker.prefix);
    const client = await mqtt.connectAsync(broker.url, { clientId: id });
    const got: Dispatch[] = [];
    client.on("message", (topic, payload) => {
      const r = decode(topic, payload, { prefix: broker.prefix });
      if (r.ok && r.value.message.type === "dispatch") got.push(r.value.message);
    });
    await client.subscribeAsync(t.down(id), { qos: 1 });
    const hello = helloBody(id);
    await client.publishAsync(t.up(id), encode(envelope(hello, Date.now())), { qos: 1 });
    const beat = setInterval(() => {
      const hb = idleHeartbeat(`i-${id}`);
      client
        .publishAsync(t.up(id), encode(envelope(hb, Date.now() - lag.ms)), { qos: 1 })
        .catch(() => {});
    }, 300);
    client.on("end", () => clearInterval(beat));
    silent.push({ client, id, got });
  }

  const lagging = { ms: 60_000 };

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 500);
    await silentAgent(`${broker.prefix}-s1`);
    await silentAgent(`${broker.prefix}-s2`);
    await silentAgent(`${broker.prefix}-lag`, lagging);
    await waitForAgentsOnline(coordinator, 3);
  }, 30_000);

  afterAll(async () => {
    for (const s of silent) await s.client.endAsync();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("sends every round to the agent that got the first, until the attempt fails undeliverable", async () => {
    await coordinator.putJob({
      id: "quiet",
      handler: "echo",
      trigger: { type: "manual" },
      routing: {
        strategy: "TARGET",
        agents: [`${broker.prefix}-s1`, `${broker.prefix}-s2`],
      },
      dispatchTimeout: "600ms",
      maxDispatches: 3,
    });
    const id = await coordinator.triggerJob("quiet");
    const done = await waitFor(
      "the attempt to fail",
      async () => {
        const e = await coordinator.store.getExecution(id);
        return e?.state === "FAILED" ? e : undefined;
      },
      15_000,
    );
    expect(done.round).toBe(3);
    const holders = silent.filter((s) => s.got.some((d) => d.executionId === id));
    expect(holders).toHaveLength(1);
    expect(holders[0]?.got.filter((d) => d.executionId === id).map((d) => d.round)).toEqual([
      1, 2, 3,
    ]);
  }, 30_000);

  it("does not time a dispatch out before it has read what the agent sent after the timeout", async () => {
    const agentId = `${broker.prefix}-lag`;
    await coordinator.putJob({
      id: "behind",
      handler: "echo",
      trigger: { type: "manual" },
      routing: { strategy: "TARGET", agents: [agentId] },
      dispatchTimeout: "300ms",
      maxDispatches: 3,
    });
    const id = await coordinator.triggerJob("behind");
    const rounds = () =>
      silent.find((s) => s.id === agentId)?.got.filter((d) => d.executionId === id).length ?? 0;
    await waitFor("the first dispatch", () => (rounds() === 1 ? true : undefined));
    // Four timeouts long: the agent is online and heartbeating, but everything read from it was
    // sent long before the timeout, so its `accepted` could still be in the backlog.
    await new Promise((r) => setTimeout(r, 1_200));
    expect(rounds()).toBe(1);
    expect((await coordinator.store.getExecution(id))?.state).toBe("DISPATCHED");
    // Caught up: what it sends now is from after the timeout, so the missing answer counts.
    lagging.ms = 0;
    await waitFor("the next round", () => (rounds() >= 2 ? true : undefined), 5_000);
  }, 30_000);
});
