import { join } from "node:path";
import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { EngineEvents } from "../../coordinator/engine/events.js";
import { decode, type Heartbeat } from "../../shared/protocol/index.js";
import { type TestBroker, tempDir, testBroker, waitFor, waitForEnd } from "../helpers/env.js";

/**
 * Idle heartbeats (docs/protocol.md, "Idle heartbeats") between a real coordinator and a real agent
 * process: an idle agent heartbeats idleHeartbeatMs apart and stays online through silences
 * longer than three heartbeats; one with work heartbeats every heartbeatMs, so the lease of what
 * it runs is renewed.
 */
describe("idle heartbeats", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let agent: AgentProcess;
  let observer: mqtt.MqttClient;
  let agentId: string;
  const heartbeats: { at: number; hb: Heartbeat }[] = [];
  const agentEvents: EngineEvents["agent"][] = [];
  const HEARTBEAT_MS = 300;
  const IDLE_MS = 2_000;

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    agentId = `${broker.prefix}-idle`;
    coordinator = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.sqlite") },
        mqtt: { url: broker.url, prefix: broker.prefix },
        security: { messages: "off" },
        heartbeatMs: HEARTBEAT_MS,
        idleHeartbeatMs: IDLE_MS,
      }),
    );
    await coordinator.start();
    coordinator.events.on("agent", (e) => {
      agentEvents.push(e);
    });
    observer = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
    await observer.subscribeAsync(`${broker.prefix}/v1/agents/+/up`, { qos: 1 });
    observer.on("message", (topic, payload) => {
      const r = decode(topic, payload, { prefix: broker.prefix });
      if (r.ok && r.value.channel === "up" && r.value.message.type === "heartbeat") {
        heartbeats.push({ at: Date.now(), hb: r.value.message });
      }
    });
    agent = spawnAgentProcess(tmp.dir, {
      agentId,
      mqtt: {
        url: broker.url,
        prefix: broker.prefix,
        keepaliveS: 10,
        reconnect: { baseMs: 100, capMs: 1000 },
      },
      heartbeatMs: HEARTBEAT_MS,
    });
    await waitFor("agent online", () =>
      coordinator.fleet.get(agentId)?.status === "online" ? true : undefined,
    );
  }, 60_000);

  afterAll(async () => {
    await agent?.stop(3000);
    await observer?.endAsync(true);
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("keeps an idle agent online through silences of several heartbeats, and renews the lease of what it runs", async () => {
    // Idle: after the welcome's heartbeat, one at a random point of the first 2 s, then 2 s apart.
    await waitFor("an idle heartbeat", () => (heartbeats.at(-1)?.hb.idle ? true : undefined));
    const from = heartbeats.length;
    await new Promise((r) => setTimeout(r, 4_500));
    const idle = heartbeats.slice(from);
    expect(idle.length).toBeGreaterThanOrEqual(1);
    expect(idle.length).toBeLessThanOrEqual(3); // at 300 ms, 15
    expect(idle.every((h) => h.hb.idle === true)).toBe(true);
    const gaps = idle.slice(1).map((h, i) => h.at - (idle[i] as { at: number }).at);
    for (const g of gaps) expect(g).toBeGreaterThan(IDLE_MS - 300);
    // Silent for up to 2 s, more than three heartbeats (900 ms): still online, never offline.
    expect(coordinator.fleet.get(agentId)?.status).toBe("online");
    expect(agentEvents.filter((e) => e.agentId === agentId && e.status === "offline")).toEqual([]);

    // A 2.5 s run: its lease (three heartbeats, 900 ms) holds only if the agent heartbeats every
    // 300 ms again once it has work.
    const before = heartbeats.length;
    const id = await coordinator.sendCommand({ agentId, handler: "sleep", params: { ms: 2_500 } });
    const done = await waitForEnd(coordinator, id, 15_000);
    expect(done.state).toBe("SUCCEEDED");
    expect(done.attempt).toBe(1);
    const timeline = (await coordinator.store.getTimeline(id)).map((t) => t.toState);
    expect(timeline).not.toContain("LOST");
    const busy = heartbeats.slice(before).filter((h) => h.hb.running.length > 0);
    expect(busy.length).toBeGreaterThanOrEqual(5);
    expect(busy.every((h) => h.hb.idle === undefined)).toBe(true);
    // Idle again once its reports are acknowledged.
    const after = heartbeats.length;
    await waitFor("idle again", () =>
      heartbeats.slice(after).some((h) => h.hb.idle === true) ? true : undefined,
    );
    expect(coordinator.fleet.get(agentId)?.status).toBe("online");
    expect(agentEvents.filter((e) => e.agentId === agentId && e.status === "offline")).toEqual([]);
  }, 40_000);
});
