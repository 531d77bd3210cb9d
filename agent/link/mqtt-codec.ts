/**
 * The MQTT 3.1.1 packets a client sends and receives (OASIS mqtt-v3.1.1, "§" below), encoded and
 * decoded. Only the client's side: CONNECT, PUBLISH and its acknowledgements, SUBSCRIBE, PINGREQ
 * and DISCONNECT out; CONNACK, PUBLISH and its acknowledgements, SUBACK and PINGRESP in.
 *
 * Why not mqtt.js: the agent needs a few hundred lines of it, and the package with its stream
 * and transport dependencies is most of a device bundle (docs/bundles.md has the figures).
 */

/** Packet types, the high nibble of the first byte (§2.2.1). */
const CONNECT = 1;
const CONNACK = 2;
const PUBLISH = 3;
const PUBACK = 4;
const PUBREC = 5;
const PUBREL = 6;
const PUBCOMP = 7;
const SUBSCRIBE = 8;
const SUBACK = 9;
const PINGREQ = 12;
const PINGRESP = 13;
const DISCONNECT = 14;

/** The largest Remaining Length four bytes can encode (§2.2.3). */
const MAX_REMAINING_LENGTH = 268_435_455;

/**
 * The longest topic name read from a PUBLISH, in bytes. A broker delivers only topics matching
 * the client's subscriptions, and the agent subscribes to one exact topic of ~150 bytes, so a
 * longer one can only come from a broken broker; MQTT itself allows 65,535.
 */
export const MAX_TOPIC_BYTES = 4096;

export type QoS = 0 | 1 | 2;

/** A packet a broker sends to a client. */
export type IncomingPacket =
  | { type: "connack"; sessionPresent: boolean; returnCode: number }
  | {
      type: "publish";
      topic: string;
      payload: Buffer;
      qos: QoS;
      retain: boolean;
      dup: boolean;
      /** 0 for QoS 0. */
      packetId: number;
      /**
       * Set when the packet was longer than the reader's limit: its payload was skipped unread
       * (`payload` is empty) and this is the payload's length. The packet is still acknowledged,
       * so it costs only itself, not the connection.
       */
      tooLarge?: number;
    }
  | { type: "puback" | "pubrec" | "pubrel" | "pubcomp"; packetId: number }
  | { type: "suback"; packetId: number; granted: number[] }
  | { type: "pingresp" };

/** A broker broke the protocol; the connection must be closed [MQTT-4.8.0-1]. */
export class MqttProtocolError extends Error {
  override name = "MqttProtocolError";
}

/** CONNACK return codes 1-5 (§3.2.2.3), for error messages. */
export const CONNACK_REFUSALS: Record<number, string> = {
  1: "unacceptable protocol version",
  2: "client identifier rejected",
  3: "server unavailable",
  4: "bad user name or password",
  5: "not authorized",
};

export interface ConnectOptions {
  clientId: string;
  keepaliveS: number;
  clean: boolean;
  will?: { topic: string; payload: Buffer; qos: QoS; retain: boolean } | undefined;
  username?: string | undefined;
  password?: string | undefined;
}

/** A UTF-8 string with its two-byte length (§1.5.3). */
function utf8(value: string, what: string): Buffer {
  const bytes = Buffer.from(value, "utf8");
  if (bytes.length > 0xffff) throw new RangeError(`MQTT ${what} is longer than 65535 bytes`);
  const out = Buffer.allocUnsafe(2 + bytes.length);
  out.writeUInt16BE(bytes.length, 0);
  bytes.copy(out, 2);
  return out;
}

/** Binary data with its two-byte length (§1.5.3, used for the will message and password). */
function binary(value: Buffer, what: string): Buffer {
  if (value.length > 0xffff) throw new RangeError(`MQTT ${what} is longer than 65535 bytes`);
  const out = Buffer.allocUnsafe(2 + value.length);
  out.writeUInt16BE(value.length, 0);
  value.copy(out, 2);
  return out;
}

function u16(n: number): Buffer {
  const out = Buffer.allocUnsafe(2);
  out.writeUInt16BE(n, 0);
  return out;
}

/** Fixed header plus body (§2.2). */
function packet(firstByte: number, parts: Buffer[]): Buffer {
  let length = 0;
  for (const p of parts) length += p.length;
  if (length > MAX_REMAINING_LENGTH) throw new RangeError("MQTT packet too large");
  const header = [firstByte];
  let n = length;
  do {
    let digit = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) digit |= 0x80;
    header.push(digit);
  } while (n > 0);
  return Buffer.concat([Buffer.from(header), ...parts], header.length + length);
}

function checkPacketId(id: number): void {
  // [MQTT-2.3.1-1] a packet identifier is non-zero.
  if (!Number.isInteger(id) || id < 1 || id > 0xffff) {
    throw new RangeError(`MQTT packet id must be 1-65535, got ${id}`);
  }
}

export function encodeConnect(o: ConnectOptions): Buffer {
  let flags = o.clean ? 0x02 : 0;
  const payload = [utf8(o.clientId, "client id")];
  if (o.will) {
    // [MQTT-3.1.2-9..15] will flag, QoS and retain.
    flags |= 0x04 | (o.will.qos << 3) | (o.will.retain ? 0x20 : 0);
    payload.push(utf8(o.will.topic, "will topic"), binary(o.will.payload, "will message"));
  }
  // [MQTT-3.1.2-22] a password needs a user name; an empty one stands in.
  const username = o.username ?? (o.password === undefined ? undefined : "");
  if (username !== undefined) {
    flags |= 0x80;
    payload.push(utf8(username, "user name"));
  }
  if (o.password !== undefined) {
    flags |= 0x40;
    payload.push(binary(Buffer.from(o.password, "utf8"), "password"));
  }
  if (!Number.isInteger(o.keepaliveS) || o.keepaliveS < 0 || o.keepaliveS > 0xffff) {
    throw new RangeError(`MQTT keepalive must be 0-65535 s, got ${o.keepaliveS}`);
  }
  // §3.1.2.1-2: protocol name "MQTT", level 4.
  const variable = Buffer.from([0, 4, 0x4d, 0x51, 0x54, 0x54, 4, flags, 0, 0]);
  variable.writeUInt16BE(o.keepaliveS, 8);
  return packet(CONNECT << 4, [variable, ...payload]);
}

export function encodePublish(p: {
  topic: string;
  payload: Buffer;
  qos: QoS;
  retain: boolean;
  dup?: boolean;
  packetId?: number;
}): Buffer {
  const parts = [utf8(p.topic, "topic")];
  if (p.qos > 0) {
    checkPacketId(p.packetId ?? 0);
    parts.push(u16(p.packetId ?? 0));
  }
  parts.push(p.payload);
  const first = (PUBLISH << 4) | (p.dup ? 0x08 : 0) | (p.qos << 1) | (p.retain ? 1 : 0);
  return packet(first, parts);
}

/** PUBACK, PUBREC, PUBREL or PUBCOMP. PUBREL carries flags 0010 [MQTT-3.6.1-1]. */
export function encodeAck(type: "puback" | "pubrec" | "pubrel" | "pubcomp", packetId: number) {
  checkPacketId(packetId);
  const first = {
    puback: PUBACK << 4,
    pubrec: PUBREC << 4,
    pubrel: (PUBREL << 4) | 0x02,
    pubcomp: PUBCOMP << 4,
  }[type];
  return packet(first, [u16(packetId)]);
}

/** SUBSCRIBE for one topic filter; its fixed-header flags are 0010 [MQTT-3.8.1-1]. */
export function encodeSubscribe(packetId: number, filter: string, qos: QoS): Buffer {
  checkPacketId(packetId);
  return packet((SUBSCRIBE << 4) | 0x02, [
    u16(packetId),
    utf8(filter, "topic filter"),
    Buffer.from([qos]),
  ]);
}

export const PINGREQ_PACKET: Buffer = Buffer.from([PINGREQ << 4, 0]);
export const DISCONNECT_PACKET: Buffer = Buffer.from([DISCONNECT << 4, 0]);

/**
 * Splits a byte stream into packets. Bytes may arrive in any pieces; a packet is decoded once
 * all of it is there. A PUBLISH longer than `maxPacketBytes` is not buffered: its topic and
 * packet id are read, it is handed on with `tooLarge` set, and the rest of its bytes are skipped
 * as they arrive. Any other packet past the limit, a topic longer than {@link MAX_TOPIC_BYTES},
 * or a packet a broker must never send, is a protocol error.
 */
export class PacketReader {
  private buffered: Buffer = Buffer.alloc(0);
  /** Bytes of an oversize PUBLISH still to be skipped. */
  private skipping = 0;

  constructor(private readonly maxPacketBytes: number) {}

  /** Adds bytes read from the socket; returns the packets they complete, in order. */
  push(chunk: Buffer): IncomingPacket[] {
    if (this.skipping > 0) {
      const n = Math.min(this.skipping, chunk.length);
      this.skipping -= n;
      if (n === chunk.length) return [];
      chunk = chunk.subarray(n);
    }
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    const out: IncomingPacket[] = [];
    let offset = 0;
    for (;;) {
      const header = this.header(offset);
      if (header === undefined) break;
      const first = this.buffered[offset] as number;
      const end = header.bodyStart + header.length;
      if (header.length > this.maxPacketBytes) {
        if (first >> 4 !== PUBLISH) {
          throw new MqttProtocolError(
            `packet of ${header.length} bytes is larger than the limit of ${this.maxPacketBytes}`,
          );
        }
        const head = this.publishHead(first, header.bodyStart, header.length);
        if (head === undefined) break; // its topic and packet id are not all here yet
        out.push(head);
        if (end > this.buffered.length) {
          this.skipping = end - this.buffered.length;
          offset = this.buffered.length;
          break;
        }
        offset = end;
        continue;
      }
      if (end > this.buffered.length) break;
      out.push(decodePacket(first, this.buffered.subarray(header.bodyStart, end)));
      offset = end;
    }
    this.buffered = offset === 0 ? this.buffered : this.buffered.subarray(offset);
    // Hold no reference to a large chunk once only a small tail of it is left.
    if (this.buffered.length > 0 && this.buffered.length < 4096 && offset > 0) {
      this.buffered = Buffer.from(this.buffered);
    }
    return out;
  }

  /** The Remaining Length at `offset` (§2.2.3), or undefined while it is incomplete. */
  private header(offset: number): { bodyStart: number; length: number } | undefined {
    let length = 0;
    let multiplier = 1;
    for (let i = 1; i <= 4; i++) {
      const at = offset + i;
      if (at >= this.buffered.length) return undefined;
      const byte = this.buffered[at] as number;
      length += (byte & 0x7f) * multiplier;
      if ((byte & 0x80) === 0) return { bodyStart: at + 1, length };
      multiplier *= 128;
    }
    throw new MqttProtocolError("malformed Remaining Length");
  }

  /** An oversize PUBLISH's variable header (§3.3.2), once buffered, with its payload skipped. */
  private publishHead(
    first: number,
    bodyStart: number,
    length: number,
  ): IncomingPacket | undefined {
    const qos = (first >> 1) & 0x03;
    if (qos === 3) throw new MqttProtocolError("PUBLISH has QoS 3");
    if (bodyStart + 2 > this.buffered.length) return undefined;
    const topicLength = this.buffered.readUInt16BE(bodyStart);
    if (topicLength > MAX_TOPIC_BYTES) throw topicTooLong(topicLength);
    const headLength = 2 + topicLength + (qos > 0 ? 2 : 0);
    if (bodyStart + headLength > this.buffered.length) return undefined;
    const head = this.buffered.subarray(bodyStart, bodyStart + headLength);
    return {
      type: "publish",
      topic: head.toString("utf8", 2, 2 + topicLength),
      payload: Buffer.alloc(0),
      qos: qos as QoS,
      retain: (first & 0x01) === 1,
      dup: (first & 0x08) !== 0,
      packetId: qos > 0 ? readPacketId(head, 2 + topicLength, "PUBLISH") : 0,
      tooLarge: length - headLength,
    };
  }
}

function topicTooLong(bytes: number): MqttProtocolError {
  return new MqttProtocolError(
    `PUBLISH topic of ${bytes} bytes is longer than the limit of ${MAX_TOPIC_BYTES}`,
  );
}

function readPacketId(body: Buffer, at: number, what: string): number {
  if (body.length < at + 2) throw new MqttProtocolError(`${what} is too short`);
  const id = body.readUInt16BE(at);
  if (id === 0) throw new MqttProtocolError(`${what} has packet id 0`); // [MQTT-2.3.1-1]
  return id;
}

function expectFlags(first: number, flags: number, what: string): void {
  // [MQTT-2.2.2-2] reserved flags must be as specified.
  if ((first & 0x0f) !== flags) throw new MqttProtocolError(`${what} has invalid header flags`);
}

function decodePacket(first: number, body: Buffer): IncomingPacket {
  const type = first >> 4;
  switch (type) {
    case CONNACK: {
      expectFlags(first, 0, "CONNACK");
      if (body.length !== 2) throw new MqttProtocolError("CONNACK must be 2 bytes long");
      return {
        type: "connack",
        sessionPresent: ((body[0] as number) & 0x01) === 1,
        returnCode: body[1] as number,
      };
    }
    case PUBLISH: {
      const qos = (first >> 1) & 0x03;
      // [MQTT-3.3.1-4] both QoS bits set is malformed.
      if (qos === 3) throw new MqttProtocolError("PUBLISH has QoS 3");
      if (body.length < 2) throw new MqttProtocolError("PUBLISH is too short");
      const topicLength = body.readUInt16BE(0);
      if (topicLength > MAX_TOPIC_BYTES) throw topicTooLong(topicLength);
      let at = 2 + topicLength;
      if (body.length < at) throw new MqttProtocolError("PUBLISH topic runs past the packet");
      const topic = body.toString("utf8", 2, at);
      let packetId = 0;
      if (qos > 0) {
        packetId = readPacketId(body, at, "PUBLISH");
        at += 2;
      }
      return {
        type: "publish",
        topic,
        payload: body.subarray(at),
        qos: qos as QoS,
        retain: (first & 0x01) === 1,
        dup: (first & 0x08) !== 0,
        packetId,
      };
    }
    case PUBACK:
    case PUBREC:
    case PUBREL:
    case PUBCOMP: {
      const name = (["puback", "pubrec", "pubrel", "pubcomp"] as const)[type - PUBACK] as
        | "puback"
        | "pubrec"
        | "pubrel"
        | "pubcomp";
      expectFlags(first, type === PUBREL ? 0x02 : 0, name.toUpperCase());
      if (body.length !== 2) throw new MqttProtocolError(`${name.toUpperCase()} must be 2 bytes`);
      return { type: name, packetId: readPacketId(body, 0, name.toUpperCase()) };
    }
    case SUBACK: {
      expectFlags(first, 0, "SUBACK");
      const packetId = readPacketId(body, 0, "SUBACK");
      const granted = [...body.subarray(2)];
      if (granted.length === 0) throw new MqttProtocolError("SUBACK grants nothing");
      return { type: "suback", packetId, granted };
    }
    case PINGRESP:
      expectFlags(first, 0, "PINGRESP");
      if (body.length !== 0) throw new MqttProtocolError("PINGRESP must be empty");
      return { type: "pingresp" };
    default:
      throw new MqttProtocolError(`a broker must not send packet type ${type}`);
  }
}
