import { describe, expect, it } from "vitest";
import {
  encodeAck,
  encodeConnect,
  encodePublish,
  encodeSubscribe,
  MqttProtocolError,
  PacketReader,
} from "./mqtt-codec.js";

/** Bytes written out by hand from the MQTT 3.1.1 specification's packet layouts. */
const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ""), "hex");

describe("MQTT 3.1.1 encoding", () => {
  it("encodes CONNECT with clean session, keepalive, will, user name and password (§3.1)", () => {
    const bytes = encodeConnect({
      clientId: "a",
      keepaliveS: 10,
      clean: true,
      will: { topic: "w", payload: Buffer.from("x"), qos: 1, retain: true },
      username: "u",
      password: "p",
    });
    // flags: user 0x80 | password 0x40 | will retain 0x20 | will QoS 1 0x08 | will 0x04 | clean 0x02
    expect(bytes).toEqual(
      hex(`10 19  0004 4d515454 04 ee 000a  0001 61  0001 77  0001 78  0001 75  0001 70`),
    );
  });

  it("encodes CONNECT without will or credentials, and a password alone under an empty user name", () => {
    expect(encodeConnect({ clientId: "ab", keepaliveS: 60, clean: true })).toEqual(
      hex(`10 0e  0004 4d515454 04 02 003c  0002 6162`),
    );
    // [MQTT-3.1.2-22] no password flag without the user name flag.
    expect(encodeConnect({ clientId: "a", keepaliveS: 0, clean: false, password: "p" })).toEqual(
      hex(`10 12  0004 4d515454 04 c0 0000  0001 61  0000  0001 70`),
    );
  });

  it("encodes PUBLISH at QoS 0 (no packet id), 1 and 2, with retain and dup flags (§3.3)", () => {
    const payload = Buffer.from("hi");
    expect(encodePublish({ topic: "t", payload, qos: 0, retain: false })).toEqual(
      hex(`30 05 0001 74 6869`),
    );
    expect(encodePublish({ topic: "t", payload, qos: 1, retain: true, packetId: 7 })).toEqual(
      hex(`33 07 0001 74 0007 6869`),
    );
    expect(
      encodePublish({ topic: "t", payload, qos: 2, retain: false, dup: true, packetId: 0x1234 }),
    ).toEqual(hex(`3c 07 0001 74 1234 6869`));
  });

  it("encodes a Remaining Length over several bytes (§2.2.3)", () => {
    const payload = Buffer.alloc(200);
    const bytes = encodePublish({ topic: "t", payload, qos: 0, retain: false });
    // 203 = 0xcb → 0xcb 0x01 (continuation bit, then 1 × 128)
    expect(bytes.subarray(0, 3)).toEqual(hex("30 cb 01"));
    expect(bytes.length).toBe(3 + 203);
    const big = encodePublish({
      topic: "t",
      payload: Buffer.alloc(2_097_152),
      qos: 0,
      retain: false,
    });
    // 2,097,155 = 0x200003 → 0x83 0x80 0x80 0x01
    expect(big.subarray(0, 5)).toEqual(hex("30 83 80 80 01"));
  });

  it("encodes the acknowledgements with PUBREL's reserved flags (§3.4-3.7, [MQTT-3.6.1-1])", () => {
    expect(encodeAck("puback", 1)).toEqual(hex("40 02 0001"));
    expect(encodeAck("pubrec", 2)).toEqual(hex("50 02 0002"));
    expect(encodeAck("pubrel", 3)).toEqual(hex("62 02 0003"));
    expect(encodeAck("pubcomp", 0xffff)).toEqual(hex("70 02 ffff"));
  });

  it("encodes SUBSCRIBE with its reserved flags and one requested QoS byte (§3.8)", () => {
    expect(encodeSubscribe(10, "a/+", 1)).toEqual(hex("82 08 000a 0003 612f2b 01"));
  });

  it("refuses packet id 0 and strings longer than 65535 bytes", () => {
    expect(() => encodeAck("puback", 0)).toThrow("packet id must be 1-65535, got 0");
    expect(() =>
      encodePublish({ topic: "t", payload: Buffer.alloc(0), qos: 1, retain: false }),
    ).toThrow("packet id must be 1-65535");
    expect(() =>
      encodePublish({ topic: "x".repeat(65_536), payload: Buffer.alloc(0), qos: 0, retain: false }),
    ).toThrow("MQTT topic is longer than 65535 bytes");
  });
});

describe("PacketReader", () => {
  it("decodes every packet a broker sends", () => {
    const r = new PacketReader(1024);
    const packets = r.push(
      hex(`20 02 01 00   3d 08 0001 74 0009 6869 21   40 02 0001   50 02 0002
           62 02 0003   70 02 0004   90 04 0005 01 80   d0 00`),
    );
    expect(packets).toEqual([
      { type: "connack", sessionPresent: true, returnCode: 0 },
      {
        type: "publish",
        topic: "t",
        payload: Buffer.from("hi!"),
        qos: 2,
        retain: true,
        dup: true,
        packetId: 9,
      },
      { type: "puback", packetId: 1 },
      { type: "pubrec", packetId: 2 },
      { type: "pubrel", packetId: 3 },
      { type: "pubcomp", packetId: 4 },
      { type: "suback", packetId: 5, granted: [1, 0x80] },
      { type: "pingresp" },
    ]);
  });

  it("reassembles packets that arrive one byte at a time, and several in one chunk", () => {
    const stream = Buffer.concat([
      encodePublishFromBroker("a/b", Buffer.alloc(300, 7), 1, 42),
      hex("d0 00"),
      encodePublishFromBroker("c", Buffer.from("x"), 0, 0),
    ]);
    const r = new PacketReader(1024);
    const got = [];
    for (const byte of stream) got.push(...r.push(Buffer.from([byte])));
    expect(got.map((p) => p.type)).toEqual(["publish", "pingresp", "publish"]);
    expect(got[0]).toMatchObject({ topic: "a/b", qos: 1, packetId: 42 });
    expect((got[0] as { payload: Buffer }).payload).toEqual(Buffer.alloc(300, 7));
    expect(new PacketReader(1024).push(stream)).toHaveLength(3);
  });

  it("rejects malformed or forbidden packets with a protocol error naming the problem", () => {
    const bad = (bytes: string, message: string) =>
      expect(() => new PacketReader(1024).push(hex(bytes))).toThrow(new MqttProtocolError(message));
    bad("36 05 0001 74 0001", "PUBLISH has QoS 3"); // [MQTT-3.3.1-4]
    bad("32 05 0001 74 0000", "PUBLISH has packet id 0"); // [MQTT-2.3.1-1]
    bad("30 02 0009", "PUBLISH topic runs past the packet");
    bad("60 02 0001", "PUBREL has invalid header flags"); // [MQTT-3.6.1-1]
    bad("21 02 0000", "CONNACK has invalid header flags");
    bad("20 03 000000", "CONNACK must be 2 bytes long");
    bad("10 00", "a broker must not send packet type 1");
    bad("30 ff ff ff ff 01", "malformed Remaining Length");
    // Only a PUBLISH past the limit is skipped (below); any other packet that long is an error.
    bad("90 81 08", "packet of 1025 bytes is larger than the limit of 1024");
    bad("30 05 1001 74 0001", "PUBLISH topic of 4097 bytes is longer than the limit of 4096");
  });

  it("skips an oversize PUBLISH unread, handing on its topic, packet id and size (issue 15)", () => {
    const big = encodePublishFromBroker("ax/v1/agents/a1/down", Buffer.alloc(5000, 0x5b), 1, 7);
    const next = encodePublishFromBroker("ax/v1/agents/a1/down", Buffer.from("{}"), 1, 8);
    const expected = [
      {
        type: "publish",
        topic: "ax/v1/agents/a1/down",
        qos: 1,
        packetId: 7,
        tooLarge: 5000,
        payload: Buffer.alloc(0),
      },
      { type: "publish", packetId: 8, payload: Buffer.from("{}") },
    ];
    const stream = Buffer.concat([big, next]);
    // At once, one byte at a time, and in chunks that split the header and the payload.
    expect(new PacketReader(1024).push(stream)).toMatchObject(expected);
    for (const size of [1, 3, 700, 4999]) {
      const r = new PacketReader(1024);
      const got = [];
      for (let at = 0; at < stream.length; at += size) {
        got.push(...r.push(stream.subarray(at, at + size)));
      }
      expect(got, `chunks of ${size}`).toMatchObject(expected);
      expect(got[1]).not.toHaveProperty("tooLarge");
    }
  });

  it("never buffers an oversize PUBLISH's payload", () => {
    const r = new PacketReader(1024);
    const big = encodePublishFromBroker("t", Buffer.alloc(10 * 1024 * 1024), 1, 9);
    expect(r.push(big.subarray(0, 64))).toMatchObject([{ tooLarge: 10 * 1024 * 1024 }]);
    for (let at = 64; at < big.length; at += 65_536) {
      expect(r.push(big.subarray(at, at + 65_536))).toEqual([]);
      expect((r as unknown as { buffered: Buffer }).buffered.length).toBe(0);
    }
    expect(r.push(hex("d0 00"))).toEqual([{ type: "pingresp" }]);
  });
});

/** A PUBLISH as a broker would send it (same layout as the client's). */
function encodePublishFromBroker(topic: string, payload: Buffer, qos: 0 | 1, packetId: number) {
  return encodePublish({ topic, payload, qos, retain: false, ...(qos > 0 ? { packetId } : {}) });
}
