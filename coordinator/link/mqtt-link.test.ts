import mqtt from "mqtt";
import { afterEach, describe, expect, it } from "vitest";
import { envelope } from "../../shared/message.js";
import { decodeAll, encode, topics } from "../../shared/protocol/index.js";
import { testDispatch } from "../../test/helpers/dispatch.js";
import { idleHeartbeat, type TestBroker, testBroker, waitFor } from "../../test/helpers/env.js";
import { CoordinatorLink, type CoordinatorLinkOptions, MAX_INBOUND_BACKLOG } from "./mqtt-link.js";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A test broker of its own, and a link to it with `options` and the clock `now`. */
async function linkTo(
  options: Partial<CoordinatorLinkOptions> = {},
  now: () => number = Date.now,
): Promise<{ broker: TestBroker; link: CoordinatorLink }> {
  const broker: TestBroker = await testBroker();
  cleanups.push(() => broker.close());
  const link = new CoordinatorLink(
    { url: broker.url, prefix: broker.prefix, clientId: `ax-c-${broker.prefix}`, ...options },
    now,
  );
  return { broker, link };
}

async function setup(maxInFlight?: number) {
  const { broker, link } = await linkTo(maxInFlight ? { maxInFlight } : {});
  const got: string[] = [];
  const state = { backlog: 0 };
  await link.start({
    message: (d) => {
      if (d.channel === "up") got.push(d.message.msgId);
    },
    invalid: () => {},
    backlog: () => state.backlog,
  });
  cleanups.push(() => link.close());
  const agent = await mqtt.connectAsync(broker.url);
  cleanups.push(() => agent.endAsync(true));
  const up = topics(broker.prefix).up("a1");
  const send = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const hb = envelope(idleHeartbeat("i1"), Date.now());
      await agent.publishAsync(up, encode(hb), { qos: 1 });
    }
  };
  return { link, got, state, send };
}

describe("CoordinatorLink: backpressure", () => {
  it("stops reading while the engine's backlog is at its limit, and reads on when resumed", async () => {
    const { link, got, state, send } = await setup();
    await send(2);
    await waitFor("the first two", () => (got.length === 2 ? true : undefined));
    expect(link.paused).toBe(false);

    state.backlog = MAX_INBOUND_BACKLOG;
    // The broker takes all five (QoS 1 from the agent's side), but the link hands over only the
    // one it was reading when the backlog was found full, then reads nothing more.
    const sending = send(5);
    await waitFor("the link to hold", () => (link.paused ? true : undefined));
    await new Promise((r) => setTimeout(r, 300));
    expect(got).toHaveLength(3);

    state.backlog = 0;
    link.resume();
    await sending;
    await waitFor("the rest", () => (got.length === 7 ? true : undefined));
    expect(link.paused).toBe(false);
  });

  it("is congested while its limit of publishes awaits the broker's acknowledgement", async () => {
    const { link } = await setup(2);
    const ack = (upTo: number) => link.send("a1", envelope({ type: "ack", upTo }, Date.now()));
    const first = ack(1);
    expect(link.congested).toBe(false);
    const second = ack(2);
    expect(link.congested).toBe(true);
    await Promise.all([first, second]);
    expect(link.congested).toBe(false);
  });
});

describe("CoordinatorLink: time answers", () => {
  it("stamps t2 as each leaves, and writes those held together in one system call", async () => {
    let now = 1_000;
    const { broker, link } = await linkTo({}, () => now);
    await link.start({ message: () => {}, invalid: () => {}, backlog: () => 0 });
    cleanups.push(() => link.close());
    const agents = await mqtt.connectAsync(broker.url);
    cleanups.push(() => agents.endAsync(true));
    const t = topics(broker.prefix);
    const got: { agentId: string; t1: number; t2: number }[] = [];
    agents.on("message", (topic, payload) => {
      for (const d of decodeAll(topic, payload, { prefix: broker.prefix })) {
        if (!d.ok || d.value.channel !== "down" || d.value.message.type !== "time") continue;
        const { t1, t2 } = d.value.message.clock;
        got.push({ agentId: d.value.agentId, t1, t2 });
      }
    });
    await agents.subscribeAsync(t.down("+"), { qos: 1 });
    // Past the connection's first turns, where mqtt.js may still hold what is published.
    await new Promise((r) => setTimeout(r, 100));

    // Count the system calls that write the link's socket.
    let calls = 0;
    const stream = (link as unknown as { client: { stream: { _handle: Record<string, unknown> } } })
      .client.stream;
    for (const name of ["writev", "writeBuffer", "writeUtf8String", "writeLatin1String"]) {
      const original = stream._handle[name] as ((...a: unknown[]) => unknown) | undefined;
      if (!original) continue;
      stream._handle[name] = function (this: unknown, ...a: unknown[]) {
        calls++;
        return original.apply(this, a);
      };
    }

    // Ten answers made in one turn of the loop, each in a tick of its own, as the engine answers
    // heartbeats that mqtt.js hands over one per tick. The clock moves on before they leave, and
    // t2 says when they did.
    const sends: Promise<void>[] = [];
    await new Promise<void>((resolve) => {
      const next = (i: number) => {
        if (i === 10) return resolve();
        const time = { type: "time" as const, clock: { t0: 1, t1: 2, t2: 3 } };
        sends.push(link.send(`a${i}`, envelope(time, 3)));
        process.nextTick(() => next(i + 1));
      };
      next(0);
    });
    now = 5_000;
    await Promise.all(sends);
    expect(calls).toBe(1);
    await waitFor("the ten answers", () => (got.length === 10 ? true : undefined));
    expect(new Set(got.map((g) => g.agentId)).size).toBe(10);
    for (const g of got) expect(g).toMatchObject({ t1: 2, t2: 5_000 });

    // Answers made in turns of their own, as heartbeats spread over time are answered, are not
    // held for later ones: each leaves at the end of its own turn, stamped then.
    calls = 0;
    const later: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) {
      const time = { type: "time" as const, clock: { t0: 1, t1: 2, t2: 3 } };
      now = 6_000 + i;
      later.push(link.send(`b${i}`, envelope(time, 3)));
      await new Promise((r) => setImmediate(r));
      expect(calls).toBe(i + 1);
    }
    await Promise.all(later);
    await waitFor("the five answers", () => (got.length === 15 ? true : undefined));
    for (let i = 0; i < 5; i++) {
      expect(got.find((g) => g.agentId === `b${i}`)).toMatchObject({ t1: 2, t2: 6_000 + i });
    }
  });
});

describe("CoordinatorLink: when a message was received", () => {
  /** A link whose handler takes `busyMs` of CPU per message, noting when each came and was read. */
  async function timed(busyMs: number, readWindowMs?: number) {
    const { broker, link } = await linkTo(
      readWindowMs === undefined ? {} : { readWindowMs },
      () => performance.timeOrigin + performance.now(),
    );
    const got: { receivedAt: number; handledAt: number }[] = [];
    await link.start({
      message: (d, receivedAt) => {
        if (d.channel !== "up") return;
        const handledAt = performance.timeOrigin + performance.now();
        got.push({ receivedAt, handledAt });
        while (performance.timeOrigin + performance.now() < handledAt + busyMs);
      },
      invalid: () => {},
    });
    cleanups.push(() => link.close());
    const agent = await mqtt.connectAsync(broker.url);
    cleanups.push(() => agent.endAsync(true));
    const up = topics(broker.prefix).up("a1");
    const heartbeat = () =>
      agent.publish(up, encode(envelope(idleHeartbeat("i1"), Date.now())), { qos: 0 });
    return { link, got, heartbeat };
  }

  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("is when the read that brought it came, not when a backlog let it be handled", async () => {
    const { got, heartbeat } = await timed(20);
    const before = performance.timeOrigin + performance.now();
    for (let i = 0; i < 10; i++) heartbeat();
    await waitFor("all ten", () => (got.length === 10 ? true : undefined));
    for (const g of got) {
      // Never before it could have arrived, never after it was handled: a clock sample's t1 is
      // still a bound.
      expect(g.receivedAt).toBeGreaterThanOrEqual(before);
      expect(g.receivedAt).toBeLessThanOrEqual(g.handledAt);
    }
    // The first is handled for 20 ms while the rest arrive, are read together, and wait their
    // turn: the last one was read some 160 ms before it was handled, and says so.
    const waited = Math.max(...got.map((g) => g.handledAt - g.receivedAt));
    expect(waited).toBeGreaterThanOrEqual(100);
  });

  it("with readWindowMs, reads a trickle a window at a time, and every message while a dispatched start is due", async () => {
    const { link, got, heartbeat } = await timed(0, 100);
    const reads = (from: number) => new Set(got.slice(from).map((g) => g.receivedAt)).size;
    for (let i = 0; i < 30; i++) {
      heartbeat();
      await sleep(10);
    }
    await waitFor("the trickle", () => (got.length === 30 ? true : undefined));
    // 30 messages over 300 ms, read in about 4 windows (one read each) instead of 30 reads.
    expect(reads(0)).toBeLessThanOrEqual(8);
    for (const g of got) expect(g.handledAt - g.receivedAt).toBeLessThan(50);

    const now = Date.now();
    await link.send("a1", testDispatch("e1", now, "echo", { fireAt: now + 3_000 }));
    for (let i = 0; i < 30; i++) {
      heartbeat();
      await sleep(10);
    }
    await waitFor("the second trickle", () => (got.length === 60 ? true : undefined));
    // Until a second after that fireAt, each is read as it comes: agents holding the start get
    // clock samples that did not wait in a window.
    expect(reads(30)).toBeGreaterThanOrEqual(20);
  });
});
