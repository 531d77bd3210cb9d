import type { Socket } from "node:net";
import {
  CONNACK_REFUSALS,
  DISCONNECT_PACKET,
  encodeAck,
  encodeConnect,
  encodePublish,
  encodeSubscribe,
  type IncomingPacket,
  MqttProtocolError,
  PacketReader,
  PINGREQ_PACKET,
  type QoS,
} from "./mqtt-codec.js";
import { brokerAddress, openTransport, TCP_ONLY, type Transports } from "./transport.js";

export interface MqttSessionOptions {
  /** `mqtt://host[:port]`, or `mqtts://` when `transports` has TLS. */
  url: string;
  clientId: string;
  keepaliveS: number;
  /** @default true */
  clean?: boolean;
  will?: { topic: string; payload: Buffer; qos: QoS; retain: boolean } | undefined;
  /** Override the URL's user name and password. */
  username?: string | undefined;
  password?: string | undefined;
  /** From opening the socket to CONNACK. */
  connectTimeoutMs: number;
  /** Packets longer than this end the connection. @default 1 MiB */
  maxPacketBytes?: number;
  /** @default plain TCP only */
  transports?: Transports | undefined;
}

export interface MqttSessionEvents {
  message?(topic: string, payload: Buffer): void;
  /** A PUBLISH longer than `maxPacketBytes`: skipped unread (and acknowledged); `bytes` its payload's. */
  tooLarge?(topic: string, bytes: number): void;
  /** Once, when the connection has ended; `error` says why unless `end()` or `destroy()` ended it. */
  close?(error: Error | undefined): void;
}

interface InFlight {
  resolve(granted?: number): void;
  reject(err: Error): void;
  /** What answers it: PUBACK (QoS 1), PUBREC then PUBCOMP (QoS 2), SUBACK. */
  awaiting: "puback" | "pubrec" | "pubcomp" | "suback";
}

/** How long end() waits for the broker to close the socket after DISCONNECT. */
const END_TIMEOUT_MS = 2_000;
const MAX_PACKET_ID = 0xffff;

/** The connection was lost or closed before the broker acknowledged a packet. */
export class MqttConnectionClosed extends Error {
  override name = "MqttConnectionClosed";
}

/**
 * One MQTT 3.1.1 connection: CONNECT, then publish and subscribe with QoS 0-2 until it ends. It
 * never reconnects (its owner decides when and how) and keeps nothing across connections: a
 * publish still awaiting its acknowledgement when the connection ends is rejected, and the owner
 * re-sends what it must (the agent's outbox does, rule 1).
 *
 * Keepalive [MQTT-3.1.2-23]: a PINGREQ every `keepaliveS`; a PINGREQ not answered by the next one
 * means the broker is gone, and the connection is dropped.
 */
export class MqttSession {
  private socket: Socket | undefined;
  private readonly reader: PacketReader;
  private readonly inFlight = new Map<number, InFlight>();
  /** Publishes waiting for a free packet id (all 65535 in use). */
  private readonly waitingForId: { entry: InFlight; packet: (id: number) => Buffer }[] = [];
  /** QoS 2 publishes received and answered PUBREC, not yet released (delivered once). */
  private readonly receivedQos2 = new Set<number>();
  private nextId = 1;
  private state: "new" | "connecting" | "connected" | "ended" = "new";
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  private pingOutstanding = false;
  private corked = false;
  private onConnack: ((packet: IncomingPacket & { type: "connack" }) => void) | undefined;
  /** Why the connection failed, when it did. */
  private closeError: Error | undefined;
  /** The owner ended it (end() or destroy() without an error). */
  private ending = false;
  private finished = false;
  private readonly closed: Promise<void>;
  private markClosed!: () => void;

  constructor(
    private readonly o: MqttSessionOptions,
    private readonly events: MqttSessionEvents = {},
  ) {
    this.reader = new PacketReader(o.maxPacketBytes ?? 1024 * 1024);
    this.closed = new Promise((resolve) => {
      this.markClosed = resolve;
    });
  }

  /** True between CONNACK and the end of the connection. */
  get connected(): boolean {
    return this.state === "connected";
  }

  /** Opens the socket and sends CONNECT; resolves on an accepting CONNACK. */
  connect(): Promise<{ sessionPresent: boolean }> {
    if (this.state !== "new") return Promise.reject(new Error("MqttSession connects only once"));
    this.state = "connecting";
    return new Promise((resolve, reject) => {
      let socket: Socket;
      let connectPacket: Buffer;
      try {
        const address = brokerAddress(this.o.url);
        connectPacket = encodeConnect({
          clientId: this.o.clientId,
          keepaliveS: this.o.keepaliveS,
          clean: this.o.clean ?? true,
          will: this.o.will,
          username: this.o.username ?? address.username,
          password: this.o.password ?? address.password,
        });
        socket = openTransport(address, this.o.transports ?? TCP_ONLY);
      } catch (err) {
        this.closeError = err as Error;
        this.finish();
        reject(err);
        return;
      }
      this.socket = socket;
      // Rule 10: without TCP_NODELAY back-to-back small publishes wait on delayed ACKs.
      socket.setNoDelay(true);
      const timer = setTimeout(
        () => this.destroy(new Error(`no CONNACK within ${this.o.connectTimeoutMs} ms`)),
        this.o.connectTimeoutMs,
      );
      const settle = (err: Error | undefined, sessionPresent = false) => {
        clearTimeout(timer);
        this.onConnack = undefined;
        connectFailed = undefined;
        if (err) reject(err);
        else resolve({ sessionPresent });
      };
      let connectFailed: ((err: Error) => void) | undefined = (err) => settle(err);
      this.onConnack = (p) => {
        if (p.returnCode !== 0) {
          const why = CONNACK_REFUSALS[p.returnCode] ?? `return code ${p.returnCode}`;
          const err = new Error(`connection refused: ${why}`);
          settle(err);
          this.destroy(err);
          return;
        }
        this.state = "connected";
        this.startKeepalive();
        settle(undefined, p.sessionPresent);
      };
      socket.on("data", (chunk: Buffer) => this.onData(chunk));
      socket.on("error", (err) => this.destroy(err));
      socket.on("close", () => {
        connectFailed?.(this.closeError ?? new MqttConnectionClosed("connection closed"));
        this.finish();
      });
      this.write(connectPacket);
    });
  }

  /** Subscribes to one filter; resolves with the granted QoS, rejects on a refusal (0x80). */
  subscribe(filter: string, qos: QoS): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const entry: InFlight = {
        awaiting: "suback",
        resolve: (granted) => {
          if (granted === undefined || granted > 2) {
            reject(new Error(`subscription to "${filter}" refused`));
          } else resolve(granted);
        },
        reject,
      };
      this.enqueue(entry, (id) => encodeSubscribe(id, filter, qos));
    });
  }

  /**
   * Publishes; resolves when QoS 0 is written, on PUBACK for QoS 1, on PUBCOMP for QoS 2.
   * Rejects with {@link MqttConnectionClosed} when the connection ends first.
   */
  publish(topic: string, payload: Buffer, options: { qos: QoS; retain?: boolean }): Promise<void> {
    const retain = options.retain ?? false;
    const qos = options.qos;
    if (qos === 0) {
      if (this.state !== "connected") {
        return Promise.reject(new MqttConnectionClosed("not connected"));
      }
      this.write(encodePublish({ topic, payload, qos: 0, retain }));
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const entry: InFlight = {
        awaiting: qos === 1 ? "puback" : "pubrec",
        resolve: () => resolve(),
        reject,
      };
      this.enqueue(entry, (packetId) => encodePublish({ topic, payload, qos, retain, packetId }));
    });
  }

  /**
   * Ends the connection cleanly: DISCONNECT (so the broker discards the Last Will,
   * [MQTT-3.14.4-3]) when connected, then waits for the socket to close. Publishes still awaiting
   * acknowledgement are rejected at once.
   */
  async end(): Promise<void> {
    const socket = this.socket;
    if (socket === undefined || this.state !== "connected") {
      this.destroy();
      return this.closed;
    }
    this.ending = true;
    this.failPending(new MqttConnectionClosed("connection closed by the client"));
    this.stopKeepalive();
    this.write(DISCONNECT_PACKET);
    this.state = "ended";
    socket.end();
    const fallback = setTimeout(() => socket.destroy(), END_TIMEOUT_MS);
    await this.closed;
    clearTimeout(fallback);
  }

  /**
   * Drops the connection at once (no DISCONNECT: the broker publishes the Last Will). With an
   * `error`, that is why the connection failed; without, the owner closed it.
   */
  destroy(error?: Error): void {
    if (error === undefined) this.ending = true;
    else this.closeError ??= error;
    if (this.socket === undefined) this.finish();
    else this.socket.destroy();
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.state = "ended";
    this.stopKeepalive();
    const error =
      this.closeError ??
      (this.ending ? undefined : new MqttConnectionClosed("connection closed by the broker"));
    this.failPending(error ?? new MqttConnectionClosed("connection closed"));
    this.markClosed();
    this.events.close?.(error);
  }

  private failPending(err: Error): void {
    const pending = [...this.inFlight.values(), ...this.waitingForId.map((w) => w.entry)];
    this.inFlight.clear();
    this.waitingForId.length = 0;
    for (const p of pending) p.reject(err);
  }

  /**
   * Gives `entry` a free packet id and writes `packet(id)` — at once, or, while all 65535 ids
   * are in flight, once one is released (in the order asked). The id is taken synchronously, so
   * publishes made in one tick never share one.
   */
  private enqueue(entry: InFlight, packet: (id: number) => Buffer): void {
    if (this.state !== "connected") {
      entry.reject(new MqttConnectionClosed("not connected"));
      return;
    }
    if (this.inFlight.size >= MAX_PACKET_ID || this.waitingForId.length > 0) {
      this.waitingForId.push({ entry, packet });
      return;
    }
    this.send(entry, packet);
  }

  private send(entry: InFlight, packet: (id: number) => Buffer): void {
    let id = this.nextId;
    while (this.inFlight.has(id)) id = id === MAX_PACKET_ID ? 1 : id + 1;
    let bytes: Buffer;
    try {
      bytes = packet(id); // a topic too long to encode fails this publish only
    } catch (err) {
      entry.reject(err as Error);
      return;
    }
    this.nextId = id === MAX_PACKET_ID ? 1 : id + 1;
    this.inFlight.set(id, entry);
    this.write(bytes);
  }

  private release(id: number): InFlight | undefined {
    const entry = this.inFlight.get(id);
    this.inFlight.delete(id);
    const next = this.waitingForId.shift();
    if (next) this.send(next.entry, next.packet);
    return entry;
  }

  /** Writes in one TCP segment what is written in one tick (a batch of reports, say). */
  private write(bytes: Buffer): void {
    const socket = this.socket;
    if (socket === undefined || socket.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      socket.cork();
      process.nextTick(() => {
        this.corked = false;
        socket.uncork();
      });
    }
    socket.write(bytes);
  }

  private onData(chunk: Buffer): void {
    let packets: IncomingPacket[];
    try {
      packets = this.reader.push(chunk);
    } catch (err) {
      this.destroy(err as Error);
      return;
    }
    this.pingOutstanding = false;
    for (const p of packets) {
      if (this.state === "ended") return;
      try {
        this.onPacket(p);
      } catch (err) {
        this.destroy(err as Error);
        return;
      }
    }
  }

  private onPacket(p: IncomingPacket): void {
    if (this.state === "connecting") {
      // [MQTT-3.2.0-1] the first packet from the server is CONNACK.
      if (p.type !== "connack") throw new MqttProtocolError(`${p.type} before CONNACK`);
      this.onConnack?.(p);
      return;
    }
    switch (p.type) {
      case "connack":
        throw new MqttProtocolError("a second CONNACK");
      case "publish":
        this.onPublish(p);
        return;
      case "puback":
      case "pubcomp":
        if (this.inFlight.get(p.packetId)?.awaiting === p.type) this.release(p.packetId)?.resolve();
        return;
      case "pubrec": {
        const entry = this.inFlight.get(p.packetId);
        // [MQTT-4.3.3-1] answer PUBREC with PUBREL, also for a duplicate PUBREC.
        if (entry?.awaiting === "pubrec") entry.awaiting = "pubcomp";
        this.write(encodeAck("pubrel", p.packetId));
        return;
      }
      case "pubrel":
        this.receivedQos2.delete(p.packetId);
        this.write(encodeAck("pubcomp", p.packetId)); // [MQTT-4.3.3-2]
        return;
      case "suback":
        if (this.inFlight.get(p.packetId)?.awaiting === "suback") {
          this.release(p.packetId)?.resolve(p.granted.length === 1 ? p.granted[0] : 0x80);
        }
        return;
      case "pingresp":
        return;
    }
  }

  private onPublish(p: IncomingPacket & { type: "publish" }): void {
    if (p.qos === 2) {
      // Method B of §4.3.3: deliver on the first PUBLISH, not again until PUBREL.
      const seen = this.receivedQos2.has(p.packetId);
      this.receivedQos2.add(p.packetId);
      if (!seen) this.deliver(p);
      this.write(encodeAck("pubrec", p.packetId));
      return;
    }
    this.deliver(p);
    if (p.qos === 1) this.write(encodeAck("puback", p.packetId));
  }

  private deliver(p: IncomingPacket & { type: "publish" }): void {
    if (p.tooLarge === undefined) this.events.message?.(p.topic, p.payload);
    else this.events.tooLarge?.(p.topic, p.tooLarge);
  }

  private startKeepalive(): void {
    if (this.o.keepaliveS === 0) return;
    this.pingTimer = setInterval(() => {
      if (this.pingOutstanding) {
        this.destroy(new Error(`no answer from the broker within ${this.o.keepaliveS} s`));
        return;
      }
      this.pingOutstanding = true;
      this.write(PINGREQ_PACKET);
    }, this.o.keepaliveS * 1000);
  }

  private stopKeepalive(): void {
    if (this.pingTimer !== undefined) clearInterval(this.pingTimer);
    this.pingTimer = undefined;
  }
}
