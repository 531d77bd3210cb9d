import mqtt, { type MqttClient } from "mqtt";
import { afterEach, describe, expect, it } from "vitest";
import { type EmbeddedBroker, startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { type Topics, topics } from "../../shared/protocol/index.js";
import {
  AgentLink,
  type AgentLinkOptions,
  DEFAULT_RECONNECT_CAP_MS,
  reconnectDelayMs,
} from "./mqtt-link.js";

/**
 * AgentLink against a real broker (embedded aedes) and real sockets: subscribe-before-ready on
 * every connection, jittered exponential reconnect, Last Will, and a close() that really stops.
 */

const AGENT = "dev-1";
const WILL = Buffer.from('{"type":"presence","status":"offline"}');

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitFor(what: string, check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

async function broker(port = 0): Promise<EmbeddedBroker> {
  const b = await startEmbeddedBroker(port);
  let closed = false;
  const close = b.close;
  b.close = async () => {
    if (closed) return;
    closed = true;
    await close();
  };
  cleanups.push(() => b.close());
  return b;
}

interface Harness {
  link: AgentLink;
  t: Topics;
  ready: number;
  down: number;
  messages: { topic: string; payload: string }[];
  /** Why each failed attempt failed. */
  failures: string[];
}

function startLink(url: string, options: Partial<AgentLinkOptions> = {}): Harness {
  const t = topics(`axt${Math.random().toString(36).slice(2, 10)}`);
  const link = new AgentLink({
    url,
    agentId: AGENT,
    topics: t,
    keepaliveS: 30,
    will: () => WILL,
    ...options,
  });
  const h: Harness = { link, t, ready: 0, down: 0, messages: [], failures: [] };
  link.start({
    ready: () => {
      h.ready += 1;
    },
    down: () => {
      h.down += 1;
    },
    message: (topic, payload) => {
      h.messages.push({ topic, payload: payload.toString() });
    },
    failed: (err) => {
      h.failures.push(err.message);
    },
  });
  cleanups.push(() => link.close());
  return h;
}

/** A second, plain client on the broker: a stand-in for the coordinator or an observer. */
async function peer(
  url: string,
  subscribe?: string,
): Promise<{ client: MqttClient; got: mqtt.IPublishPacket[] }> {
  const client = await mqtt.connectAsync(url, {
    reconnectPeriod: 0,
    clientId: `peer-${Math.random()}`,
  });
  cleanups.push(() => client.endAsync(true));
  const got: mqtt.IPublishPacket[] = [];
  client.on("message", (_topic, _payload, packet) => got.push(packet));
  if (subscribe) await client.subscribeAsync(subscribe, { qos: 1 });
  return { client, got };
}

/** Server-side connections of the agent, newest last (aedes "client" fires after CONNACK). */
function agentConnections(b: EmbeddedBroker) {
  const seen: ReturnType<EmbeddedBroker["broker"]["handle"]>[] = [];
  b.broker.on("client", (c) => {
    if (c.id === AGENT) seen.push(c);
  });
  return seen;
}

const fast = { baseMs: 20, capMs: 200, random: () => 1 };

describe("AgentLink", () => {
  it("reports ready after subscribing and receives down messages; client id = agentId, clean session", async () => {
    const b = await broker();
    const conns = agentConnections(b);
    const h = startLink(b.url);
    await waitFor("ready", () => h.ready === 1);
    expect(h.link.connected).toBe(true);
    expect(conns).toHaveLength(1);
    expect(conns[0]?.id).toBe(AGENT);
    expect(conns[0]?.clean).toBe(true);

    const coord = await peer(b.url);
    await coord.client.publishAsync(h.t.down(AGENT), '{"type":"welcome"}', { qos: 1 });
    await waitFor("down message", () => h.messages.length === 1);
    expect(h.messages[0]).toEqual({ topic: h.t.down(AGENT), payload: '{"type":"welcome"}' });

    const up = await peer(b.url, h.t.up(AGENT));
    await h.link.publishUp({ type: "hello" });
    await waitFor("up message", () => up.got.length === 1);
    expect(JSON.parse(up.got[0]?.payload.toString() ?? "")).toEqual({ type: "hello" });
  });

  it("reconnects to a restarted broker, subscribes again before ready, and drops publishes made while down", async () => {
    const first = await broker();
    const port = first.port;
    // Each connection's will is made anew (its own msgId and sentAt), not the first one's again.
    let wills = 0;
    const h = startLink(first.url, {
      reconnect: { baseMs: 100, capMs: 400, random: () => 1 },
      will: () => Buffer.from(`will ${++wills}`),
    });
    await waitFor("ready", () => h.ready === 1);
    expect(wills).toBe(1);

    await first.close();
    await waitFor("down", () => h.down === 1);
    expect(h.link.connected).toBe(false);
    await expect(h.link.publishUp({ type: "lost" })).resolves.toBeUndefined();
    await expect(h.link.publishPresence(Buffer.from("lost"))).resolves.toBeUndefined();
    await sleep(250); // at least one refused attempt while nothing listens

    const second = await broker(port);
    expect(second.port).toBe(port);
    const up = await peer(second.url, h.t.up(AGENT));
    await waitFor("ready again", () => h.ready === 2, 5_000);
    expect(h.link.connected).toBe(true);
    expect(wills).toBeGreaterThanOrEqual(2);

    // A message to the down topic arrives only if the new session subscribed again.
    const coord = await peer(second.url);
    await coord.client.publishAsync(h.t.down(AGENT), "after-restart", { qos: 1 });
    await waitFor("down message after reconnect", () => h.messages.length === 1);
    expect(h.messages[0]?.payload).toBe("after-restart");

    await h.link.publishUp({ type: "back" });
    await waitFor("up after reconnect", () => up.got.length === 1);
    await sleep(50);
    expect(up.got.map((p) => JSON.parse(p.payload.toString()).type)).toEqual(["back"]);
  });

  it("waits longer between failed attempts and starts over after a connection became ready", async () => {
    const b = await broker();
    const conns = agentConnections(b);
    const attempts: number[] = [];
    let refuse = 5;
    b.broker.authenticate = (_client, _user, _pass, done) => {
      attempts.push(performance.now());
      if (refuse > 0) {
        refuse -= 1;
        done(null, false);
      } else done(null, true);
    };
    const h = startLink(b.url, { reconnect: { baseMs: 50, capMs: 10_000, random: () => 1 } });
    await waitFor("ready after refusals", () => h.ready === 1, 10_000);
    expect(attempts).toHaveLength(6);
    const gaps = attempts.slice(1).map((at, i) => at - (attempts[i] ?? 0));
    [50, 100, 200, 400, 800].forEach((expected, i) => {
      expect(gaps[i]).toBeGreaterThanOrEqual(expected - 5);
      expect(gaps[i]).toBeLessThan(expected + 150);
    });

    // A ready connection resets the count: the next drop waits the base delay again.
    refuse = 1;
    const dropAt = performance.now();
    conns.at(-1)?.conn.destroy();
    await waitFor("ready after the drop", () => h.ready === 2, 10_000);
    expect(h.down).toBe(1);
    expect(attempts).toHaveLength(8);
    const afterDrop = [(attempts[6] ?? 0) - dropAt, (attempts[7] ?? 0) - (attempts[6] ?? 0)];
    expect(afterDrop[0]).toBeGreaterThanOrEqual(45);
    expect(afterDrop[0]).toBeLessThan(50 + 150);
    expect(afterDrop[1]).toBeGreaterThanOrEqual(95);
    expect(afterDrop[1]).toBeLessThan(100 + 150);
  });

  it("never reports ready on a connection whose subscribe was refused (SUBACK 128)", async () => {
    const b = await broker();
    const conns = agentConnections(b);
    let refusals = 2;
    b.broker.authorizeSubscribe = (_client, sub, done) => {
      if (refusals > 0) {
        refusals -= 1;
        done(null, null);
      } else done(null, sub);
    };
    const h = startLink(b.url, { reconnect: fast });
    await waitFor("ready", () => h.ready === 1);
    expect(conns).toHaveLength(3); // two refused sessions ended, the third one subscribed
    expect(h.down).toBe(0);

    const coord = await peer(b.url);
    await coord.client.publishAsync(h.t.down(AGENT), "hear-me", { qos: 1 });
    await waitFor("down message", () => h.messages.length === 1);
  });

  it("has the broker publish the retained offline Last Will when the connection dies uncleanly", async () => {
    const b = await broker();
    const conns = agentConnections(b);
    const h = startLink(b.url, { reconnect: { baseMs: 1_000, capMs: 1_000, random: () => 1 } });
    const watcher = await peer(b.url, h.t.presence(AGENT));
    await waitFor("ready", () => h.ready === 1);
    expect(watcher.got).toHaveLength(0);

    conns[0]?.conn.destroy();
    await waitFor("will", () => watcher.got.length === 1);
    expect(watcher.got[0]?.topic).toBe(h.t.presence(AGENT));
    expect(watcher.got[0]?.payload.toString()).toBe(WILL.toString());

    // Retained: a subscriber arriving later still gets it.
    const late = await peer(b.url, h.t.presence(AGENT));
    await waitFor("retained will", () => late.got.length === 1);
    expect(late.got[0]?.retain).toBe(true);
    expect(late.got[0]?.payload.toString()).toBe(WILL.toString());
  });

  it("disconnects cleanly on close(): no Last Will", async () => {
    const b = await broker();
    const h = startLink(b.url);
    const watcher = await peer(b.url, h.t.presence(AGENT));
    await waitFor("ready", () => h.ready === 1);
    await h.link.close();
    expect(h.link.connected).toBe(false);
    await sleep(100);
    expect(watcher.got).toHaveLength(0);
  });

  it("rejects, rather than strands, a publish whose PUBACK never came before the connection died", async () => {
    const b = await broker();
    const conns = agentConnections(b);
    b.broker.authorizePublish = (_client, packet, done) => {
      if (!packet.topic.endsWith("/up")) done(null); // up publishes are never acknowledged
    };
    const h = startLink(b.url, { reconnect: { baseMs: 1_000, capMs: 1_000, random: () => 1 } });
    await waitFor("ready", () => h.ready === 1);
    const pending = h.link.publishUp({ type: "hello" });
    await sleep(50);
    conns[0]?.conn.destroy();
    await expect(pending).rejects.toThrow();
  });

  it("stops every further attempt when closed during backoff", async () => {
    const b = await broker();
    let attempts = 0;
    b.broker.authenticate = (_client, _user, _pass, done) => {
      attempts += 1;
      done(null, false);
    };
    const h = startLink(b.url, { reconnect: { baseMs: 100, capMs: 100, random: () => 1 } });
    await waitFor("two attempts", () => attempts === 2, 5_000);
    await sleep(20); // the refusal has closed the socket: the link now waits in backoff
    const timersBefore = process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    await h.link.close();
    const timersAfter = process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    expect(timersAfter).toBeLessThan(timersBefore); // the pending reconnect timer is gone
    await sleep(500); // five backoff periods
    expect(attempts).toBe(2);
    expect(h.ready).toBe(0);
    await expect(h.link.close()).resolves.toBeUndefined(); // idempotent
  });

  it("says why each attempt failed, so that the agent can log it", async () => {
    const b = await broker();
    const port = b.port;
    await b.close();
    const h = startLink(`mqtt://127.0.0.1:${port}`, { reconnect: fast });
    await waitFor("two failed attempts", () => h.failures.length >= 2);
    expect(h.failures[0]).toContain("ECONNREFUSED");
    expect(h.ready).toBe(0);
  });

  it("stops when closed while the broker is unreachable", async () => {
    const b = await broker();
    const port = b.port;
    await b.close();
    const h = startLink(`mqtt://127.0.0.1:${port}`, { reconnect: fast });
    await sleep(100); // a few refused attempts
    await h.link.close();
    const again = await broker(port);
    const conns = agentConnections(again);
    await sleep(400);
    expect(conns).toHaveLength(0);
    expect(h.ready).toBe(0);
  });

  it("caps the default reconnect delay at 5 s, with full jitter below it", () => {
    expect(DEFAULT_RECONNECT_CAP_MS).toBe(5_000);
    // The ceiling doubles from 500 ms and stops at the cap however long the outage lasts.
    const ceilings = [1, 2, 3, 4, 5, 10, 50].map((n) => reconnectDelayMs(n, { random: () => 1 }));
    expect(ceilings).toEqual([500, 1000, 2000, 4000, 5000, 5000, 5000]);
    // Full jitter: anywhere from 0 to the ceiling, as the random source says.
    expect(reconnectDelayMs(50, { random: () => 0 })).toBe(0);
    expect(reconnectDelayMs(50, { random: () => 0.5 })).toBe(2500);
    expect(reconnectDelayMs(3, { baseMs: 100, capMs: 250, random: () => 1 })).toBe(250);
  });

  it("keeps trying a closed port at the capped pace, never slower", async () => {
    const b = await broker();
    const port = b.port;
    await b.close();
    // With a cap of 100 ms the attempts keep coming at least every 100 ms (plus a refused
    // connect's own time); without a cap the sixth wait alone would be 1.6 s.
    let attempts = 0;
    const h = startLink(`mqtt://127.0.0.1:${port}`, {
      reconnect: {
        baseMs: 50,
        capMs: 100,
        random: () => {
          attempts += 1;
          return 1;
        },
      },
    });
    await sleep(1_500);
    await h.link.close();
    expect(attempts).toBeGreaterThanOrEqual(8);
    expect(h.ready).toBe(0);
  });
});
