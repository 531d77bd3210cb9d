import { createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type TestBroker, testBroker, waitFor } from "../../test/helpers/env.js";
import { encodePublish } from "./mqtt-codec.js";
import { MqttConnectionClosed, MqttSession, type MqttSessionOptions } from "./mqtt-session.js";

/**
 * MqttSession against a real broker (the embedded aedes broker, or Mosquitto with
 * AX_TEST_MQTT_URL), and against a scripted TCP peer for what no well-behaved broker does.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function broker(): Promise<TestBroker> {
  const b = await testBroker();
  cleanups.push(() => b.close());
  return b;
}

let clients = 0;
function session(
  url: string,
  options: Partial<MqttSessionOptions> = {},
): {
  s: MqttSession;
  messages: { topic: string; payload: string }[];
  closes: (Error | undefined)[];
} {
  const messages: { topic: string; payload: string }[] = [];
  const closes: (Error | undefined)[] = [];
  const s = new MqttSession(
    {
      url,
      clientId: `axs-${process.pid}-${++clients}-${Date.now()}`,
      keepaliveS: 30,
      connectTimeoutMs: 5_000,
      ...options,
    },
    {
      message: (topic, payload) => messages.push({ topic, payload: payload.toString() }),
      close: (err) => closes.push(err),
    },
  );
  cleanups.push(() => s.end());
  return { s, messages, closes };
}

/** A TCP peer that records what the client sends and answers as `script` says. */
async function scriptedPeer(
  script: (socket: Socket, packetTypes: number[]) => void,
): Promise<{ url: string; received: number[]; sockets: Socket[] }> {
  const received: number[] = [];
  const sockets: Socket[] = [];
  const server: Server = createServer((socket) => {
    sockets.push(socket);
    const reader = new RawReader();
    socket.on("data", (chunk) => {
      for (const type of reader.push(chunk)) received.push(type);
      script(socket, received);
    });
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { url: `mqtt://127.0.0.1:${port}`, received, sockets };
}

/** Packet types (high nibble) of a client's byte stream; only lengths matter here. */
class RawReader {
  private buf = Buffer.alloc(0);
  push(chunk: Buffer): number[] {
    this.buf = Buffer.concat([this.buf, chunk]);
    const out: number[] = [];
    for (;;) {
      if (this.buf.length < 2) return out;
      let len = 0;
      let mul = 1;
      let i = 1;
      for (; i < this.buf.length; i++) {
        const b = this.buf[i] as number;
        len += (b & 0x7f) * mul;
        mul *= 128;
        if ((b & 0x80) === 0) break;
      }
      if (i >= this.buf.length || this.buf.length < i + 1 + len) return out;
      out.push((this.buf[0] as number) >> 4);
      this.buf = this.buf.subarray(i + 1 + len);
    }
  }
}

const CONNACK_OK = Buffer.from([0x20, 2, 0, 0]);

describe("MqttSession on a real broker", () => {
  it("publishes and receives at QoS 0, 1 and 2, each message once, retained flag kept", async () => {
    const b = await broker();
    const { s, messages } = session(b.url);
    await s.connect();
    expect(s.connected).toBe(true);
    const topic = `${b.prefix}/t`;
    expect(await s.subscribe(`${topic}/#`, 2)).toBe(2);
    const big = "x".repeat(60_000);
    await s.publish(`${topic}/0`, Buffer.from("zero"), { qos: 0 });
    await s.publish(`${topic}/1`, Buffer.from("one"), { qos: 1 });
    await s.publish(`${topic}/2`, Buffer.from("two"), { qos: 2 });
    await s.publish(`${topic}/big`, Buffer.from(big), { qos: 1 });
    await waitFor("4 messages", () => (messages.length >= 4 ? true : undefined));
    await new Promise((r) => setTimeout(r, 100));
    expect(messages.map((m) => m.topic).sort()).toEqual(
      [`${topic}/0`, `${topic}/1`, `${topic}/2`, `${topic}/big`].sort(),
    );
    expect(messages.find((m) => m.topic.endsWith("/big"))?.payload).toBe(big);

    // A retained message reaches a later subscriber.
    await s.publish(`${topic}/r`, Buffer.from("kept"), { qos: 1, retain: true });
    const late = session(b.url);
    await late.s.connect();
    await late.s.subscribe(`${topic}/r`, 1);
    await waitFor("retained", () => (late.messages.length === 1 ? true : undefined));
    expect(late.messages[0]?.payload).toBe("kept");
    await s.publish(`${topic}/r`, Buffer.alloc(0), { qos: 1, retain: true }); // clear it
  });

  it("ends cleanly: the close event carries no error, and later publishes are refused", async () => {
    const b = await broker();
    const { s, closes } = session(b.url);
    await s.connect();
    await s.end();
    expect(s.connected).toBe(false);
    expect(closes).toEqual([undefined]);
    await expect(s.publish("t", Buffer.from("x"), { qos: 1 })).rejects.toThrow(
      MqttConnectionClosed,
    );
    await expect(s.publish("t", Buffer.from("x"), { qos: 0 })).rejects.toThrow("not connected");
  });
});

describe("MqttSession against a scripted peer", () => {
  it("rejects a refused CONNACK with the reason from the specification", async () => {
    const peer = await scriptedPeer((socket) => socket.write(Buffer.from([0x20, 2, 0, 4])));
    const { s, closes } = session(peer.url);
    await expect(s.connect()).rejects.toThrow("connection refused: bad user name or password");
    await waitFor("close", () => (closes.length === 1 ? true : undefined));
  });

  it("gives up on a peer that never answers CONNECT", async () => {
    const peer = await scriptedPeer(() => {});
    const { s } = session(peer.url, { connectTimeoutMs: 200 });
    await expect(s.connect()).rejects.toThrow("no CONNACK within 200 ms");
    expect(peer.received).toEqual([1]);
  });

  it("sends PINGREQ every keepalive and drops a connection whose PINGREQ went unanswered", async () => {
    const peer = await scriptedPeer((socket, types) => {
      if (types.length === 1) socket.write(CONNACK_OK);
    });
    const { s, closes } = session(peer.url, { keepaliveS: 1 });
    const t0 = Date.now();
    await s.connect();
    await waitFor("close", () => (closes.length === 1 ? true : undefined), 10_000);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1_900);
    expect(closes[0]?.message).toBe("no answer from the broker within 1 s");
    expect(peer.received).toEqual([1, 12]); // CONNECT, PINGREQ
  });

  it("drops the connection on a packet a broker must never send", async () => {
    const peer = await scriptedPeer((socket, types) => {
      if (types.length === 1) socket.write(Buffer.concat([CONNACK_OK, Buffer.from([0x36, 0])]));
    });
    const { s, closes } = session(peer.url);
    await s.connect().catch(() => {});
    await waitFor("close", () => (closes.length === 1 ? true : undefined));
    expect(closes[0]?.name).toBe("MqttProtocolError");
  });

  it("rejects a publish whose PUBACK never came when the connection dies", async () => {
    const peer = await scriptedPeer((socket, types) => {
      if (types.length === 1) socket.write(CONNACK_OK);
      if (types.at(-1) === 3) socket.destroy();
    });
    const { s, closes } = session(peer.url);
    await s.connect();
    await expect(s.publish("t", Buffer.from("x"), { qos: 1 })).rejects.toThrow(
      "connection closed by the broker",
    );
    expect(closes[0]).toBeInstanceOf(MqttConnectionClosed);
  });

  it("delivers a redelivered QoS 2 message once, and completes the QoS 2 handshake", async () => {
    const q2 = encodePublish({
      topic: "t",
      payload: Buffer.from("once"),
      qos: 2,
      retain: false,
      packetId: 9,
    });
    const dup = Buffer.from(q2);
    dup[0] = (dup[0] as number) | 0x08;
    const peer = await scriptedPeer((socket, types) => {
      if (types.length === 1) socket.write(Buffer.concat([CONNACK_OK, q2, dup]));
      // Two PUBRECs answered: release the message.
      if (types.filter((t) => t === 5).length === 2 && types.at(-1) === 5) {
        socket.write(Buffer.from([0x62, 2, 0, 9]));
      }
    });
    const { s, messages } = session(peer.url);
    await s.connect();
    await waitFor("PUBCOMP", () => (peer.received.includes(7) ? true : undefined));
    expect(messages).toEqual([{ topic: "t", payload: "once" }]);
    expect(peer.received).toEqual([1, 5, 5, 7]); // CONNECT, PUBREC ×2, PUBCOMP
  });

  it("holds publishes while all 65535 packet ids are in flight and reuses a freed id", async () => {
    let socketRef: Socket | undefined;
    const peer = await scriptedPeer((socket, types) => {
      socketRef = socket;
      if (types.length === 1) socket.write(CONNACK_OK);
    });
    const { s } = session(peer.url);
    await s.connect();
    const settled: number[] = [];
    const publishes = Array.from({ length: 65_536 }, (_, i) =>
      s.publish("t", Buffer.from([1]), { qos: 1 }).then(
        () => settled.push(i),
        () => {},
      ),
    );
    await waitFor("65535 publishes sent", () =>
      peer.received.filter((t) => t === 3).length === 65_535 ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 50));
    expect(peer.received.filter((t) => t === 3)).toHaveLength(65_535); // the last one waits
    socketRef?.write(Buffer.from([0x40, 2, 0, 1])); // PUBACK for id 1
    await waitFor("the held publish sent", () =>
      peer.received.filter((t) => t === 3).length === 65_536 ? true : undefined,
    );
    expect(settled).toEqual([0]);
    await s.end();
    await Promise.all(publishes);
  });
});
