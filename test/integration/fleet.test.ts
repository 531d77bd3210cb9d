import mqtt from "mqtt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { EngineEvents } from "../../coordinator/engine/events.js";
import { envelope } from "../../shared/message.js";
import { topics } from "../../shared/protocol/topics.js";
import {
  idleHeartbeat,
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForEnd,
} from "../helpers/env.js";

/** The fleet as the coordinator sees it: liveness, superseded instances, busy agents. */
describe("fleet: agents and liveness", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  const agents: AgentProcess[] = [];
  const agentEvents: EngineEvents["agent"][] = [];

  const start = (
    agentId: string,
    opts: { keepaliveS?: number; heartbeatMs?: number; concurrency?: number; queue?: number } = {},
  ) => {
    const a = spawnAgentProcess(tmp.dir, {
      agentId,
      mqtt: {
        url: broker.url,
        prefix: broker.prefix,
        keepaliveS: opts.keepaliveS ?? 10,
        reconnect: { baseMs: 100, capMs: 1000 },
      },
      heartbeatMs: opts.heartbeatMs ?? 500,
      capacity: { concurrency: opts.concurrency ?? 4, queue: opts.queue ?? 64 },
    });
    agents.push(a);
    return a;
  };
  const online = (agentId: string, notInstance?: string) =>
    waitFor(`${agentId} online`, () => {
      const a = coordinator.fleet.get(agentId);
      return a?.status === "online" && a.instanceId !== notInstance ? a : undefined;
    });
  const ended = (id: string, timeoutMs = 20_000) => waitForEnd(coordinator, id, timeoutMs);

  beforeEach(async () => {
    broker = await testBroker();
    tmp = tempDir();
    // Heartbeats every 10 s on the coordinator's side: 3 missed take 30 s, so an agent taken
    // offline within seconds went by its will, not by the heartbeat rule.
    coordinator = await startTestCoordinator(broker, tmp.dir, 10_000);
    agentEvents.length = 0;
    coordinator.events.on("agent", (e) => {
      agentEvents.push(e);
    });
  });

  afterEach(async () => {
    for (const a of agents.splice(0)) await a.kill();
    await coordinator.close();
    await broker.close();
    tmp.cleanup();
  });

  it("takes an agent killed with kill -9 offline within its keepalive window, by its will", async () => {
    const agentId = `${broker.prefix}-k`;
    const a = start(agentId, { keepaliveS: 2, heartbeatMs: 10_000 });
    await online(agentId);
    const killedAt = Date.now();
    await a.kill();
    const offline = await waitFor(
      "offline",
      () => agentEvents.find((e) => e.agentId === agentId && e.status === "offline"),
      10_000,
    );
    const tookMs = offline.at - killedAt;
    // The broker gives up on a silent client after 1.5 keepalives (3 s) and publishes its will.
    expect(offline.reason).toBe("presence");
    expect(tookMs).toBeLessThan(2_000 * 1.5 + 1_500);
    expect(coordinator.fleet.get(agentId)?.status).toBe("offline");
  });

  it("takes an agent offline after 3 missed heartbeats when no will comes, and back online when it speaks again", async () => {
    await coordinator.close();
    // Every heartbeat 300 ms apart, idle or not: an idle agent frozen after its first heartbeat
    // would otherwise be held to three idle periods (a minute each), not three heartbeats.
    coordinator = await startTestCoordinator(broker, tmp.dir, 300, { idleHeartbeatMs: 0 });
    coordinator.events.on("agent", (e) => {
      agentEvents.push(e);
    });
    const agentId = `${broker.prefix}-s`;
    // A long keepalive: the broker keeps the frozen agent's connection, so no will is sent.
    const a = start(agentId, { keepaliveS: 120, heartbeatMs: 300 });
    await online(agentId);
    a.child.kill("SIGSTOP");
    try {
      const offline = await waitFor(
        "offline",
        () => agentEvents.find((e) => e.agentId === agentId && e.status === "offline"),
        10_000,
      );
      expect(offline.reason).toBe("3 heartbeats missed");
      // No new work goes to it: a command for it waits in PENDING.
      const id = await coordinator.sendCommand({ agentId, handler: "echo" });
      await new Promise((r) => setTimeout(r, 500));
      expect((await coordinator.store.getExecution(id))?.state).toBe("PENDING");
    } finally {
      a.child.kill("SIGCONT");
    }
    await online(agentId);
  });

  it("uses a restarted agent under its new instance, and drops and counts what its old instance sends", async () => {
    const agentId = `${broker.prefix}-r`;
    const first = start(agentId, { keepaliveS: 2 });
    const before = await online(agentId);
    await first.kill();
    start(agentId, { keepaliveS: 2 });
    const after = await online(agentId, before.instanceId);
    expect(after.instanceId).not.toBe(before.instanceId);
    // The old instance's will may land after the new hello: it must not take the agent offline.
    await new Promise((r) => setTimeout(r, 3_500));
    expect(coordinator.fleet.get(agentId)?.status).toBe("online");
    expect(coordinator.fleet.get(agentId)?.instanceId).toBe(after.instanceId);

    // A heartbeat in the old instance's name (a zombie process) changes nothing and is counted.
    const counted = (await coordinator.store.counters()).superseded_messages ?? 0;
    const zombie = await mqtt.connectAsync(broker.url, { clientId: `${agentId}-zombie` });
    const seenBefore = coordinator.fleet.get(agentId)?.lastSeenAt;
    await zombie.publishAsync(
      topics(broker.prefix).up(agentId),
      JSON.stringify(envelope(idleHeartbeat(before.instanceId ?? "", 0.99), Date.now())),
      { qos: 1 },
    );
    await zombie.endAsync();
    await waitFor("superseded heartbeat counted", async () =>
      ((await coordinator.store.counters()).superseded_messages ?? 0) > counted ? true : undefined,
    );
    expect(coordinator.fleet.get(agentId)?.load).not.toBe(0.99);
    expect(coordinator.fleet.get(agentId)?.lastSeenAt).toBeGreaterThanOrEqual(seenBefore ?? 0);

    // Work goes to the new instance and succeeds.
    const id = await coordinator.sendCommand({ agentId, handler: "echo", params: { n: 1 } });
    expect((await ended(id)).state).toBe("SUCCEEDED");
  });

  it("passes over an agent that answers busy, and runs the waiting command once it has room", async () => {
    const agentId = `${broker.prefix}-b`;
    // One slot, no queue: a second command while the first runs is answered busy.
    start(agentId, { concurrency: 1, queue: 0 });
    await online(agentId);
    const long = await coordinator.sendCommand({
      agentId,
      handler: "sleep",
      params: { ms: 1_500 },
    });
    await waitFor("first running", async () =>
      (await coordinator.store.getExecution(long))?.state === "RUNNING" ? true : undefined,
    );
    // Due already (an agent answers busy only for work due now: one due later it keeps).
    const second = await coordinator.sendCommand({
      agentId,
      handler: "echo",
      at: Date.now() - 1_000,
      deadline: Date.now() + 20_000,
    });
    await waitFor("busy answered", async () =>
      (await coordinator.store.getTimeline(second)).some((t) => t.event === "busy")
        ? true
        : undefined,
    );
    expect(coordinator.fleet.isLive(agentId, Date.now())).toBe(false);
    expect((await ended(long)).state).toBe("SUCCEEDED");
    const done = await ended(second);
    expect(done.state).toBe("SUCCEEDED");
    const events = (await coordinator.store.getTimeline(second)).map((t) => t.event);
    expect(events.filter((e) => e === "busy").length).toBeGreaterThanOrEqual(1);
    expect(events.at(-1)).toBe("finished");
  });
});
