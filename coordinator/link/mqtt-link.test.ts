import mqtt from "mqtt";
import { afterEach, describe, expect, it } from "vitest";
import { envelope } from "../../shared/message.js";
import { encode, topics } from "../../shared/protocol/index.js";
import { idleHeartbeat, type TestBroker, testBroker, waitFor } from "../../test/helpers/env.js";
import { CoordinatorLink, MAX_INBOUND_BACKLOG } from "./mqtt-link.js";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(maxInFlight?: number) {
  const broker: TestBroker = await testBroker();
  cleanups.push(() => broker.close());
  const link = new CoordinatorLink(
    {
      url: broker.url,
      prefix: broker.prefix,
      clientId: `ax-c-${broker.prefix}`,
      ...(maxInFlight ? { maxInFlight } : {}),
    },
    Date.now,
  );
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
