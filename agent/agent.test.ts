import { randomBytes } from "node:crypto";
import { join } from "node:path";
import Database from "better-sqlite3";
import mqtt from "mqtt";
import { afterEach, describe, expect, it } from "vitest";
import type { ClockSyncOptions } from "../shared/clock-sync.js";
import { decode, type Heartbeat, type UpMessage } from "../shared/protocol/index.js";
import { seal } from "../shared/protocol/mac.js";
import { CoordinatorPeer } from "../test/helpers/coordinator-peer.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../test/helpers/env.js";
import { Agent } from "./agent.js";
import { parseAgentConfig } from "./config.js";
import { heartbeatAfterWelcome } from "./heartbeat.js";

/**
 * The agent in this process against a real broker and a stand-in coordinator: what it does with
 * the ack's journalId and replay, batches of commands, the heartbeat's ask for a clock sample,
 * and the heartbeat that says it is shutting down.
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
  /** When the observer received each heartbeat (wall ms), in the order of `heartbeats`. */
  heartbeatAt: number[];
  /** The QoS each up message reached a QoS 1 subscriber with, by message type. */
  upQos: { type: string; qos: number }[];
  /** What the agent logged at warn and above. */
  warnings: string[];
  /** The folder of the agent's journal file, journal.sqlite. */
  journalDir: string;
}

interface RigOptions {
  shutdownGraceMs?: number;
  clockSync?: ClockSyncOptions;
  /** Give the agent an identity: every message is sealed with its key, both ways. */
  sealed?: boolean;
  /** What the peer's welcome offers as idleHeartbeatMs (none by default). */
  idleHeartbeatMs?: number;
}

async function rig(options: RigOptions = {}): Promise<Rig> {
  const broker = await testBroker();
  cleanups.push(() => broker.close());
  const tmp = tempDir();
  cleanups.push(() => tmp.cleanup());
  const peer = new CoordinatorPeer(broker.url, broker.prefix);
  peer.idleHeartbeatMs = options.idleHeartbeatMs;
  await peer.start();
  cleanups.push(() => peer.close());
  const heartbeats: Heartbeat[] = [];
  const heartbeatAt: number[] = [];
  const upQos: { type: string; qos: number }[] = [];
  const observer = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
  cleanups.push(() => observer.endAsync(true));
  await observer.subscribeAsync(peer.topics.allUp, { qos: 1 });
  observer.on("message", (topic, payload, packet) => {
    const r = decode(topic, payload, { prefix: broker.prefix });
    if (r.ok && r.value.channel === "up") {
      upQos.push({ type: r.value.message.type, qos: packet.qos });
      if (r.value.message.type === "heartbeat") {
        heartbeats.push(r.value.message);
        heartbeatAt.push(Date.now());
      }
    }
  });
  const agentId = `${broker.prefix}-a`;
  const key = randomBytes(32);
  if (options.sealed) peer.keys.set(agentId, { key, generation: 1 });
  const warnings: string[] = [];
  const agent = new Agent(
    parseAgentConfig({
      agentId,
      heartbeatMs: 500,
      shutdownGraceMs: options.shutdownGraceMs ?? 5_000,
      mqtt: { url: broker.url, prefix: broker.prefix, reconnect: { baseMs: 50, capMs: 200 } },
      journal: { path: join(tmp.dir, "journal.sqlite") },
      ...(options.sealed
        ? {
            identity: {
              ax: "agent-identity/1",
              agentId,
              generation: 1,
              key: key.toString("base64url"),
              mqtt: { username: agentId, password: "a-test-password-0123" },
            },
          }
        : {}),
    }),
    {
      log: (level, msg) => {
        if (level === "warn" || level === "error") warnings.push(msg);
      },
      ...(options.clockSync ? { clockSync: options.clockSync } : {}),
    },
  );
  agent.start();
  cleanups.push(() => agent.stop(0));
  await waitFor("the welcome", () => (agent.stats.welcomed ? true : undefined));
  const journalId = () => peer.hellos.at(-1)?.journalId ?? "?";
  return {
    broker,
    peer,
    agent,
    agentId,
    journalId,
    heartbeats,
    heartbeatAt,
    upQos,
    warnings,
    journalDir: tmp.dir,
  };
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

describe("agent: heartbeat phase", () => {
  it("puts the heartbeat after the welcome's at a random point of the period: a tenth of it to all of it", () => {
    expect(heartbeatAfterWelcome(5_000, 0)).toBe(500);
    expect(heartbeatAfterWelcome(5_000, 0.5)).toBe(2_750);
    expect(heartbeatAfterWelcome(5_000, 0.999_999)).toBeLessThan(5_000);
    expect(heartbeatAfterWelcome(5_000, 0.999_999)).toBeGreaterThan(4_999);
  });

  it("after each welcome sends one heartbeat at once, the next at a random point of the period, then one every period", async () => {
    const r = await rig();
    const instanceId = r.peer.hellos.at(-1)?.instanceId ?? "?";
    const heartbeatMs = 1_000;
    const gaps: number[] = [];
    for (let k = 0; k < 8; k++) {
      // Right after a heartbeat, so that none of the old schedule crosses the welcome.
      const seen = r.heartbeatAt.length;
      await waitFor("a heartbeat", () => (r.heartbeatAt.length > seen ? true : undefined));
      const at = r.heartbeatAt.length;
      const now = Date.now();
      r.peer.send(r.agentId, {
        type: "welcome",
        instanceId,
        heartbeatMs,
        clock: { t0: now, t1: now, t2: now },
      });
      await waitFor("two heartbeats after the welcome", () =>
        r.heartbeatAt.length >= at + 2 ? true : undefined,
      );
      gaps.push((r.heartbeatAt[at + 1] as number) - (r.heartbeatAt[at] as number));
    }
    // Between a tenth of the period and the whole of it (timers and the broker add a little)...
    for (const g of gaps) {
      expect(g).toBeGreaterThan(heartbeatMs / 10 - 20);
      expect(g).toBeLessThan(heartbeatMs + 100);
    }
    // ...drawn anew at each welcome: eight draws within 150 ms of each other is a 1-in-40,000 chance.
    expect(Math.max(...gaps) - Math.min(...gaps)).toBeGreaterThan(150);
    // After the drawn one, a whole period.
    const at = r.heartbeatAt.length;
    await waitFor("two more heartbeats", () => (r.heartbeatAt.length >= at + 2 ? true : undefined));
    const steady = (r.heartbeatAt[at + 1] as number) - (r.heartbeatAt[at] as number);
    expect(steady).toBeGreaterThan(heartbeatMs - 100);
  }, 30_000);
});

describe("agent: idle heartbeats", () => {
  it("heartbeats idleHeartbeatMs apart while idle, and within heartbeatMs once it has work", async () => {
    // Welcomed without idleHeartbeatMs: every heartbeat 500 ms apart, none idle.
    const plain = await rig();
    await waitFor("three heartbeats", () => (plain.heartbeats.length >= 3 ? true : undefined));
    expect(plain.heartbeats.some((h) => h.idle !== undefined)).toBe(false);
    // Welcomed by a coordinator that offers 3 s while idle.
    const r = await rig({ idleHeartbeatMs: 3_000 });
    await waitFor("an idle heartbeat", () =>
      r.heartbeats.at(-1)?.idle === true ? true : undefined,
    );
    const idleFrom = r.heartbeats.length;
    await new Promise((res) => setTimeout(res, 4_000));
    // At 500 ms, eight in 4 s; idle, at most two: one at a random point of the first 3 s
    // (rule 12, as after any welcome), then one 3 s after it.
    expect(r.heartbeats.length - idleFrom).toBeLessThanOrEqual(2);
    const gaps = r.heartbeatAt
      .slice(idleFrom)
      .map((t, i) => t - (r.heartbeatAt[idleFrom + i - 1] ?? t));
    expect(gaps.every((g) => g > 250)).toBe(true);
    expect(r.heartbeats.slice(idleFrom).every((h) => h.idle === true)).toBe(true);
    // A command held for 3 s: no longer idle, and the next heartbeat within heartbeatMs of it.
    const before = r.heartbeats.length;
    const sentAt = Date.now();
    r.peer.dispatch(r.agentId, {
      executionId: "idle-1",
      handler: "echo",
      params: {},
      fireAt: Date.now() + 3_000,
    });
    await waitFor("a heartbeat after the dispatch", () =>
      r.heartbeats.length > before ? true : undefined,
    );
    expect((r.heartbeatAt[before] as number) - sentAt).toBeLessThan(500 + 250);
    expect(r.heartbeats[before]?.idle).toBeUndefined();
    expect(r.heartbeats[before]?.scheduled).toBe(1);
    // Once it has run and its reports are acknowledged, idle again.
    await waitFor("finished", () =>
      r.peer.of(r.agentId, "finished", "idle-1").length ? true : undefined,
    );
    const after = r.heartbeats.length;
    await waitFor("idle again", () =>
      r.heartbeats.slice(after).some((h) => h.idle === true) ? true : undefined,
    );
  }, 20_000);
});

describe("agent: retention", () => {
  it("purges a backlog of finished commands past retention at once, not 200 a heartbeat", async () => {
    const r = await rig();
    const file = join(r.journalDir, "journal.sqlite");
    // 1,000 commands that finished two days ago (as after a busy spell), written beside the agent.
    const db = new Database(file);
    const old = Date.now() - 2 * 86_400_000;
    const insert = db.prepare(
      `INSERT INTO commands (execution_id, round, attempt, state, dispatch, fire_at, deadline,
         priority, received_at, started_at, finished_at)
       VALUES (?, 1, 1, 'succeeded', '{}', ?, ?, 0, ?, ?, ?)`,
    );
    db.transaction(() => {
      for (let i = 0; i < 1_000; i++) insert.run(`old-${i}`, old, old, old, old, old);
    })();
    const count = () => (db.prepare("SELECT count(*) AS n FROM commands").get() as { n: number }).n;
    expect(count()).toBe(1_000);
    // One heartbeat (every 500 ms) purged 200: five were needed. Now the first clears them all.
    const from = r.heartbeats.length;
    await waitFor("two heartbeats", () => (r.heartbeats.length >= from + 2 ? true : undefined));
    expect(count()).toBe(0);
    db.close();
  });
});

describe("agent: QoS", () => {
  it("publishes heartbeats with QoS 0 and every other up message with QoS 1 (protocol.md, Transport)", async () => {
    const r = await rig();
    r.peer.dispatch(r.agentId, { executionId: "q-1", handler: "echo", params: {} });
    await waitFor("finished", () =>
      r.peer.of(r.agentId, "finished", "q-1").length ? true : undefined,
    );
    await waitFor("two heartbeats", () => (r.heartbeats.length >= 2 ? true : undefined));
    const byType = new Map<string, Set<number>>();
    for (const { type, qos } of r.upQos) byType.set(type, (byType.get(type) ?? new Set()).add(qos));
    expect([...(byType.get("heartbeat") ?? [])]).toEqual([0]);
    for (const type of ["hello", "accepted", "started", "finished"]) {
      expect([type, [...(byType.get(type) ?? [])]]).toEqual([type, [1]]);
    }
  });
});

describe("agent: shutdown", () => {
  it("sends a heartbeat with shuttingDown at once on stop, and in every heartbeat of the grace period", async () => {
    const r = await rig({ shutdownGraceMs: 5_000 });
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

  it("sends the shutting-down heartbeat with nothing running too, before it goes offline", async () => {
    const r = await rig({ shutdownGraceMs: 5_000 });
    await waitFor("a heartbeat", () => (r.heartbeats.length > 0 ? true : undefined));
    const before = r.heartbeats.length;
    await r.agent.stop();
    await waitFor("the shutting-down heartbeat", () =>
      r.heartbeats.length > before ? true : undefined,
    );
    expect(r.heartbeats.slice(before).map((h) => h.shuttingDown)).toEqual([true]);
  });
});

/** What each up payload carried, as `type executionId` per message ("hello", "heartbeat" alone). */
function upShapes(r: Rig): string[][] {
  return r.peer.upBodies.map((ms) =>
    ms.map((m: UpMessage) => ("executionId" in m ? `${m.type} ${m.executionId}` : m.type)),
  );
}

describe("agent: batches of commands", () => {
  it("offers batchBytes in its hello: the largest down payload it reads", async () => {
    const r = await rig();
    expect(r.peer.hellos.at(-1)?.batchBytes).toBe(65_536);
  });

  it("answers a batch of dispatches with one batch of accepted, rejects only the invalid one, and runs the rest", async () => {
    const r = await rig();
    const ids = ["b-0", "b-1", "b-3", "b-4"];
    r.peer.sendBatch(r.agentId, [
      r.peer.dispatchBody({ executionId: "b-0" }),
      r.peer.dispatchBody({ executionId: "b-1" }),
      // Invalid, but its id and round can be read: answered `rejected` (rule 6), alone.
      { ...r.peer.dispatchBody({ executionId: "b-2" }), priority: "high" } as never,
      r.peer.dispatchBody({ executionId: "b-3" }),
      r.peer.dispatchBody({ executionId: "b-4" }),
    ]);
    await waitFor("4 finished", () =>
      r.peer.of(r.agentId, "finished").length === 4 ? true : undefined,
    );
    await waitFor("the rejection", () =>
      r.peer.of(r.agentId, "rejected").length === 1 ? true : undefined,
    );
    const rejected = r.peer.of(r.agentId, "rejected")[0];
    expect(rejected?.executionId).toBe("b-2");
    expect(rejected?.round).toBe(1);
    expect(rejected?.reason).toBe("invalid_dispatch");
    expect(rejected?.message).toMatch(
      /^batch item 2: dispatch message: field priority: expected number, got string/,
    );
    expect(
      r.peer
        .of(r.agentId, "finished")
        .map((f) => [f.executionId, f.outcome])
        .sort(),
    ).toEqual(ids.map((id) => [id, "succeeded"]));
    // One journal commit, one message on up, in the batch's order.
    const withAccepted = upShapes(r).filter((p) => p.some((m) => m.startsWith("accepted")));
    expect(withAccepted).toEqual([
      ["accepted b-0", "accepted b-1", "rejected b-2", "accepted b-3", "accepted b-4"],
    ]);
    expect(r.agent.stats.invalidMessages).toBe(1);
    expect(r.agent.stats.dispatches).toBe(4);
    expect(r.peer.invalid).toEqual([]);
  });

  it("journals the largest batch, 256 dispatches, in one commit answered by one message", async () => {
    const r = await rig();
    const fireAt = Date.now() + 60_000;
    r.peer.sendBatch(
      r.agentId,
      Array.from({ length: 256 }, (_, i) =>
        r.peer.dispatchBody({ executionId: `w-${i}`, fireAt, deadline: fireAt + 30_000 }),
      ),
    );
    await waitFor("256 accepted", () =>
      r.peer.of(r.agentId, "accepted").length === 256 ? true : undefined,
    );
    // Dispatches sent alone are journaled 16 to a commit; a batch is never split.
    const batches = upShapes(r).filter((p) => p.some((m) => m.startsWith("accepted")));
    expect(batches.map((b) => b.length)).toEqual([256]);
    expect(r.peer.largestUpPayload).toBeLessThanOrEqual(60_000);
  });

  it("refuses only the welcome and ack items of a batch, and handles the rest in order", async () => {
    const r = await rig();
    r.peer.sendBatch(r.agentId, [
      r.peer.dispatchBody({ executionId: "c-0", fireAt: Date.now() + 60_000 }),
      { type: "ack", upTo: 0 },
      { type: "cancel", executionId: "c-0", round: 1 },
      {
        type: "welcome",
        instanceId: r.agent.instanceId,
        heartbeatMs: 100,
        clock: { t0: 1, t1: 1, t2: 1 },
      },
      { type: "query", executionId: "c-0", round: 1 },
    ]);
    await waitFor("the query's answer", () =>
      r.peer.of(r.agentId, "state", "c-0").length ? true : undefined,
    );
    expect(r.agent.stats.invalidMessages).toBe(2);
    expect(r.warnings.filter((w) => w.startsWith("rejected message"))).toEqual([
      "rejected message: AX_PROTO_BAD_BATCH: batch item 1: a ack message is never batched",
      "rejected message: AX_PROTO_BAD_BATCH: batch item 3: a welcome message is never batched",
    ]);
    // In order: the cancel found the dispatch before it journaled, and the query its end.
    const c0 = r.peer.of(r.agentId).filter((m) => "executionId" in m && m.executionId === "c-0");
    expect(c0.map((m) => m.type)).toEqual(["accepted", "finished", "state"]);
    expect(r.peer.of(r.agentId, "finished", "c-0")[0]?.outcome).toBe("canceled");
    expect(r.peer.of(r.agentId, "state", "c-0")[0]?.localState).toBe("canceled");
  });

  it("reads a sealed batch, refuses the same payload again, and seals its answers", async () => {
    const r = await rig({ sealed: true });
    const payload = r.peer.sendBatch(r.agentId, [
      r.peer.dispatchBody({ executionId: "s-0" }),
      r.peer.dispatchBody({ executionId: "s-1" }),
    ]);
    expect(payload.subarray(0, 9).toString()).toBe('[{"mac":"');
    await waitFor("2 finished", () =>
      r.peer.of(r.agentId, "finished").length === 2 ? true : undefined,
    );
    await r.peer.sendRaw(r.agentId, payload);
    await waitFor("the replay refused", () => (r.agent.stats.authRefused === 1 ? true : undefined));
    expect(r.warnings.some((w) => w.startsWith("refused message: AX_AUTH_STALE: replayed"))).toBe(
      true,
    );
    expect(r.peer.of(r.agentId, "accepted").map((a) => a.executionId)).toEqual(["s-0", "s-1"]);
    expect(r.agent.stats.dispatches).toBe(2);
    expect(r.peer.unverified).toEqual([]);
  });
});

describe("agent: the size limit", () => {
  it("refuses a sealed payload over the limit by its size, before its MAC", async () => {
    const r = await rig({ sealed: true });
    const k = r.peer.keys.get(r.agentId) as { key: Buffer; generation: number };
    const dispatch = (pad: number) =>
      JSON.stringify({
        v: 1,
        msgId: "big-1",
        sentAt: Date.now(),
        ...r.peer.dispatchBody({ executionId: "big-0" }),
        pad: "x".repeat(pad),
      });
    // The body alone is within the 65,536 bytes; sealed, the payload is not.
    const body = dispatch(65_536 - Buffer.byteLength(dispatch(0)) - 10);
    const topic = r.peer.topics.down(r.agentId);
    const payload = seal(body, topic, k.key, k.generation, Date.now());
    expect(Buffer.byteLength(payload)).toBeGreaterThan(65_536);
    await r.peer.sendRaw(r.agentId, payload);
    await waitFor("refused", () => (r.agent.stats.invalidMessages === 1 ? true : undefined));
    expect(r.warnings).toContain(
      `rejected message: AX_PROTO_TOO_LARGE: payload is ${Buffer.byteLength(payload)} bytes, more than the limit of 65536`,
    );
    expect(r.agent.stats.authRefused).toBe(0);
    expect(r.agent.stats.dispatches).toBe(0);
  });
});

describe("agent: clock samples", () => {
  it("asks for a sample in every heartbeat until it holds 4, then only once the estimate's sample is old", async () => {
    // resampleAfterMs stands in for the 20 s of the default, at heartbeats every 500 ms. A window
    // of 4 (8 by default) ends the learning asks after 4 samples even when a loaded machine's round
    // trips stay over 1 ms, which would otherwise ask until 8 were held.
    const r = await rig({ clockSync: { resampleAfterMs: 2_000, windowSize: 4 } });
    const asks = () => r.heartbeats.map((h) => h.time);
    await waitFor(
      "an ask after a heartbeat that asked for nothing",
      () => {
        const a = asks();
        const quiet = a.indexOf(false);
        return quiet >= 0 && a.indexOf(true, quiet) > quiet ? true : undefined;
      },
      20_000,
    );
    const a = asks();
    expect(a.every((t) => typeof t === "boolean")).toBe(true);
    // The welcome was one sample; the first three heartbeats' answers make four.
    expect(a.slice(0, 3)).toEqual([true, true, true]);
    // No answer to a heartbeat that said time: false.
    const seen = r.peer.heartbeats;
    expect(r.peer.timeAnswers).toBe(seen.filter((h) => h.time !== false).length);
    expect(r.peer.timeAnswers).toBeLessThan(seen.length);
  }, 30_000);
});
