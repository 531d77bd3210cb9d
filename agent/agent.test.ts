import { join } from "node:path";
import mqtt from "mqtt";
import { afterEach, describe, expect, it } from "vitest";
import { decode, type Heartbeat } from "../shared/protocol/index.js";
import { CoordinatorPeer } from "../test/helpers/coordinator-peer.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../test/helpers/env.js";
import { Agent } from "./agent.js";
import { parseAgentConfig } from "./config.js";

/**
 * The agent in this process against a real broker and a stand-in coordinator: what it does with
 * the ack's journalId and replay, and the heartbeat that says it is shutting down.
 */

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Rig {
  broker: TestBroker;
  peer: CoordinatorPeer;
  agent: Agent;
  agentId: string;
  journalId: () => string;
  heartbeats: Heartbeat[];
}

async function rig(shutdownGraceMs = 5_000): Promise<Rig> {
  const broker = await testBroker();
  cleanups.push(() => broker.close());
  const tmp = tempDir();
  cleanups.push(() => tmp.cleanup());
  const peer = new CoordinatorPeer(broker.url, broker.prefix);
  await peer.start();
  cleanups.push(() => peer.close());
  const heartbeats: Heartbeat[] = [];
  const observer = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
  cleanups.push(() => observer.endAsync(true));
  await observer.subscribeAsync(peer.topics.allUp, { qos: 1 });
  observer.on("message", (topic, payload) => {
    const r = decode(topic, payload, { prefix: broker.prefix });
    if (r.ok && r.value.channel === "up" && r.value.message.type === "heartbeat") {
      heartbeats.push(r.value.message);
    }
  });
  const agentId = `${broker.prefix}-a`;
  const agent = new Agent(
    parseAgentConfig({
      agentId,
      heartbeatMs: 500,
      shutdownGraceMs,
      mqtt: { url: broker.url, prefix: broker.prefix, reconnect: { baseMs: 50, capMs: 200 } },
      journal: { path: join(tmp.dir, "journal.sqlite") },
    }),
  );
  agent.start();
  cleanups.push(() => agent.stop(0));
  await waitFor("the welcome", () => (agent.stats.welcomed ? true : undefined));
  const journalId = () => peer.hellos.at(-1)?.journalId ?? "?";
  return { broker, peer, agent, agentId, journalId, heartbeats };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe("agent: acks", () => {
  it("ignores an ack that names another journal, and prunes by one that names its own", async () => {
    const r = await rig();
    r.peer.ackReports = false;
    r.peer.dispatch(r.agentId, { executionId: "e-1" });
    await waitFor("finished", () => (r.peer.of(r.agentId, "finished").length ? true : undefined));
    await waitFor("3 reports outboxed", () => (r.agent.stats.outboxDepth === 3 ? true : undefined));
    r.peer.send(r.agentId, { type: "ack", upTo: 3, journalId: "j-another-journal" });
    await waitFor("the foreign ack", () => (r.agent.stats.foreignAcks === 1 ? true : undefined));
    await sleep(50);
    expect(r.agent.stats.outboxDepth).toBe(3);
    r.peer.send(r.agentId, { type: "ack", upTo: 2, journalId: r.journalId() });
    await waitFor("pruned", () => (r.agent.stats.outboxDepth === 1 ? true : undefined));
  });

  it("on replay re-sends every report above upTo at once, in seq order, unchanged; a flood costs one more replay", async () => {
    const r = await rig();
    r.peer.ackReports = false;
    for (const id of ["r-1", "r-2", "r-3"]) r.peer.dispatch(r.agentId, { executionId: id });
    await waitFor("9 reports", () => (r.agent.stats.outboxDepth === 9 ? true : undefined));
    await waitFor("9 received", () => (r.peer.received.length >= 9 ? true : undefined));
    const first = new Map(r.peer.received.map((m) => [m.seq, JSON.stringify(m)]));
    const before = r.peer.received.length;
    r.peer.send(r.agentId, { type: "ack", upTo: 3, journalId: r.journalId(), replay: true });
    await waitFor("the replay", () => (r.peer.received.length >= before + 6 ? true : undefined));
    const replayed = r.peer.received.slice(before);
    expect(replayed.map((m) => m.seq)).toEqual([4, 5, 6, 7, 8, 9]);
    for (const m of replayed) expect(JSON.stringify(m)).toBe(first.get(m.seq));
    expect(r.agent.stats.outboxDepth).toBe(6);

    // A flood of requests inside the window: one more replay, at the window's end, not fifty.
    const replaysBefore = r.agent.stats.replays;
    for (let i = 0; i < 50; i++) {
      r.peer.send(r.agentId, { type: "ack", upTo: 3, journalId: r.journalId(), replay: true });
    }
    await waitFor("the coalesced replay", () =>
      r.agent.stats.replays === replaysBefore + 1 ? true : undefined,
    );
    await sleep(1_200);
    expect(r.agent.stats.replays).toBeLessThanOrEqual(replaysBefore + 2);
    expect(r.peer.received.length).toBeLessThanOrEqual(before + 6 * 3);
  });
});

describe("agent: shutdown", () => {
  it("sends a heartbeat with shuttingDown at once on stop, and in every heartbeat of the grace period", async () => {
    const r = await rig(5_000);
    r.peer.dispatch(r.agentId, { executionId: "s-1", handler: "sleep", params: { ms: 1_500 } });
    await waitFor("started", () => (r.peer.of(r.agentId, "started").length ? true : undefined));
    await waitFor("a heartbeat", () => (r.heartbeats.length > 0 ? true : undefined));
    expect(r.heartbeats.every((h) => h.shuttingDown === undefined)).toBe(true);
    const before = r.heartbeats.length;
    const stopped = r.agent.stop();
    // Sooner than the 500 ms period: it is sent when the stop begins.
    await waitFor("the shutting-down heartbeat", () =>
      r.heartbeats.length > before ? true : undefined,
    );
    expect(r.heartbeats[before]?.shuttingDown).toBe(true);
    expect(r.heartbeats[before]?.running).toEqual([{ executionId: "s-1", round: 1 }]);
    await stopped;
    expect(r.peer.of(r.agentId, "finished", "s-1")[0]?.outcome).toBe("succeeded");
    const during = r.heartbeats.slice(before);
    expect(during.length).toBeGreaterThanOrEqual(2);
    expect(during.every((h) => h.shuttingDown === true)).toBe(true);
  });
});
