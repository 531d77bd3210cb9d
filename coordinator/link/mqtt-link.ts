import mqtt, { type MqttClient } from "mqtt";
import { AxError } from "../../shared/errors.js";
import {
  type Decoded,
  type DownMessage,
  decode,
  decodeAll,
  encode,
  type ProtocolError,
  parseTopic,
  type Topics,
  topics,
} from "../../shared/protocol/index.js";
import { MAX_SEAL_BYTES, type Sealed, unseal } from "../../shared/protocol/mac.js";
import type { LinkAuth, Refusal } from "./auth.js";
import { type BatchableSocket, batchReads } from "./batch-reads.js";
import { type CorkableStream, coalesceWrites } from "./coalesce.js";
import { COMPILED_SCHEMAS } from "./compiled-schemas.js";

export interface CoordinatorLinkOptions {
  url: string;
  /** @default "ax" */
  prefix?: string;
  /** @default 65536 */
  maxPayloadBytes?: number;
  /** When set, subscribe through `$share/<group>/…` so several coordinators split the load. */
  sharedGroup?: string;
  username?: string;
  password?: string;
  /** Publishes awaiting the broker's acknowledgement at which the link reports congestion. @default MAX_IN_FLIGHT */
  maxInFlight?: number;
  /** Fixed across restarts, so the broker keeps this coordinator's session. */
  clientId: string;
  /** `clean: false`: the broker queues what arrives for the coordinator while it is down. @default true */
  persistentSession?: boolean;
  /** Message authentication (docs/protocol.md, "Authenticated messages"). @default none */
  auth?: LinkAuth | undefined;
  /**
   * Start with an empty session: what the broker queued for this client id earlier is dropped
   * first. A coordinator taking over from another (several on one store) sets it: what was queued
   * for it during an earlier life was handled by the others since, and an old `hello` read now
   * would be news from the past. Reports are not lost by it: they wait in the agents' outboxes
   * until acknowledged, and the new active coordinator asks for them. @default false
   */
  freshSession?: boolean;
  /** Reads from the broker's connection at most once per this many ms (batch-reads.ts). @default 0 */
  readWindowMs?: number;
}

export interface LinkHandlers {
  message(decoded: Decoded, receivedAt: number): void;
  /**
   * A message that does not decode. `sender` is the agent of its `up` topic when the message
   * passed authentication: what it says, though unreadable, is that agent's, so a report whose
   * seq could be read may be acknowledged (inbound.ts). Never set when messages are not
   * authenticated: anyone on the broker could then cost an agent a report.
   */
  invalid(error: ProtocolError, topic: string, sender?: string): void;
  /**
   * A message that failed authentication: it changes nothing. With `body`, the message was
   * authentic but stale (decoded, so its sender can be sent a clock sample).
   */
  refused?(error: Refusal, topic: string, stale?: Decoded): void;
  /** The link (re)connected to the broker at `at` (wall ms); `sessionPresent` from its CONNACK. */
  up?(at: number, sessionPresent: boolean): void;
  /** The link lost the broker at `at` (wall ms); it reconnects by itself. */
  down?(at: number): void;
  /**
   * Messages handed over and not yet handled. While it is at `maxBacklog` or more the link stops
   * reading the socket (and so acknowledging), until {@link CoordinatorLink.resume} is called.
   */
  backlog?(): number;
  /**
   * Whether this coordinator handles the agent's messages (`cluster.dispatch` `shared`: each
   * coordinator reads every agent's and handles its own agents'). A message on another agent's
   * topic is passed over before anything else reads it: its MAC is checked by the coordinator
   * that handles it. Unset: every message is handled.
   */
  wants?(agentId: string): boolean;
}

/**
 * Messages received but not yet handled, beyond which the link stops reading: the broker (and
 * behind it the agents' journals) hold the rest, instead of this process's heap. An overloaded
 * coordinator falls behind instead of running out of memory.
 */
export const MAX_INBOUND_BACKLOG = 10_000;

/**
 * Publishes sent and not yet acknowledged by the broker, beyond which {@link
 * CoordinatorLink.congested} says to hold new dispatches back.
 */
export const MAX_IN_FLIGHT = 5_000;

/**
 * How long after the latest dispatched `fireAt` reads stay unbatched: the start has happened,
 * give or take the agent's lateness, and its report should not wait in a read window either.
 */
const PRECISE_AFTER_FIRE_MS = 1_000;

/** Down messages that may travel in a batch; `welcome`, `time` and `ack` always go alone. */
const BATCHABLE: ReadonlySet<string> = new Set(["dispatch", "cancel", "query"]);

const COMMA = Buffer.from(",");

/**
 * Commands per batch this coordinator sends, at most (the protocol allows 256). An agent journals
 * a batch's dispatches in one commit, which holds its event loop: 256 took 8–10 ms on a small
 * board's worth of CPU, 64 about 2–3 ms, short enough not to delay the starts it fires meanwhile.
 */
export const MAX_SENT_BATCH = 64;

/** A `time` answer waiting to leave with others (sendClocks), and its sender's promise. */
interface HeldClock {
  agentId: string;
  message: Extract<DownMessage, { type: "time" }>;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * The most `time` answers written in one system call: sealing one takes a few microseconds, so
 * the first of a run waits about a tenth of a millisecond for the last.
 */
const CLOCKS_PER_WRITE = 16;

/** A command waiting for the end of the loop turn, and its sender's promise. */
interface HeldCommand {
  payload: Buffer;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** The coordinator's MQTT connection: subscribes to every agent's up and presence topics. */
export class CoordinatorLink {
  readonly topics: Topics;
  private client: MqttClient | undefined;
  /** The callback that lets mqtt.js read on, held while the engine is behind. */
  private held: (() => void) | undefined;
  /** Publishes not yet acknowledged by the broker. */
  private inFlight = 0;
  /** Sends the writes held until the end of this turn of the loop now. */
  private flushWrites: () => void = () => {};
  /** Wall time the current connection came up; undefined while disconnected. */
  private upAt: number | undefined;
  /**
   * Until this wall time, reads are not batched (readWindowMs): a command dispatched ahead is due
   * by then, and its agent's clock samples meanwhile should not wait in a read window.
   */
  private preciseUntil = 0;
  /** When the connection's latest read came (see the `connect` handler); undefined before one. */
  private lastReadAt: number | undefined;
  /** Set by {@link close}: the coordinator is stopping, and sends nothing more. */
  private closed_ = false;

  constructor(
    private readonly options: CoordinatorLinkOptions,
    private readonly now: () => number,
  ) {
    this.topics = topics(options.prefix ?? "ax");
  }

  /** What every connection of this link is opened with: its client id and login. */
  private login(): {
    clientId: string;
    connectTimeout: number;
    username?: string;
    password?: string;
  } {
    return {
      clientId: this.options.clientId,
      connectTimeout: 10_000,
      ...(this.options.username === undefined ? {} : { username: this.options.username }),
      ...(this.options.password === undefined ? {} : { password: this.options.password }),
    };
  }

  /** Connects once with `clean: true` under the client id, which ends its stored session. */
  private async dropSession(): Promise<void> {
    const { url } = this.options;
    const client = mqtt.connect(url, { ...this.login(), clean: true, reconnectPeriod: 0 });
    try {
      await new Promise<void>((resolve, reject) => {
        client.once("connect", () => resolve());
        client.once("error", (err) =>
          reject(
            new AxError("AX_LINK_FAILED", `cannot connect to MQTT broker ${url}: ${err.message}`, {
              cause: err,
            }),
          ),
        );
      });
    } finally {
      await client.endAsync();
    }
  }

  /**
   * Connects to send only, subscribing to nothing and reading no agent: for a coordinator that
   * stands by, whose API's operations may still have something to tell an agent (a cancel), while
   * the active one reads the agents. Does not wait for the broker (the client connects, and
   * reconnects, by itself; what is sent meanwhile waits for it); `failed` hears why it cannot.
   * {@link start} ends this connection before its own.
   */
  startSending(failed: (err: Error) => void): void {
    if (this.client !== undefined || this.closed_) return;
    const client = mqtt.connect(this.options.url, {
      ...this.login(),
      clean: true,
      keepalive: 10,
      reconnectPeriod: 1000,
    });
    this.client = client;
    this.sendingOnly = client;
    client.on("connect", () => this.connected_(client));
    client.on("error", failed);
  }

  /** The connection {@link startSending} made, until {@link start} replaces it. */
  private sendingOnly: MqttClient | undefined;

  /** Sets up a connection that came up: Nagle off, one write per turn of the loop. */
  private connected_(client: MqttClient): void {
    // Rule 10: without TCP_NODELAY two small publishes in a row wait on the peer's delayed ACK.
    // Then one writev per turn of the loop instead of one per packet (coalesce.ts). Each
    // connection has a stream of its own.
    const stream = client.stream as Partial<CorkableStream> & {
      setNoDelay?: (on: boolean) => void;
    };
    stream.setNoDelay?.(true);
    this.flushWrites =
      typeof stream.cork === "function" ? coalesceWrites(stream as CorkableStream) : () => {};
  }

  async start(handlers: LinkHandlers): Promise<void> {
    const { url, sharedGroup } = this.options;
    const sending = this.sendingOnly;
    if (sending !== undefined) {
      // Its sends finish first (a cancel asked for through this coordinator's API still leaves).
      this.sendingOnly = undefined;
      if (this.client === sending) this.client = undefined;
      await sending.endAsync();
    }
    if (this.options.freshSession) await this.dropSession();
    const client = mqtt.connect(url, {
      // A fixed client id and `clean: false` keep the session (and its QoS 1 subscriptions) on the
      // broker across restarts: reports published while the coordinator is down are queued for it
      // instead of being dropped for want of a subscriber [MQTT-3.1.2-4].
      ...this.login(),
      clean: !(this.options.persistentSession ?? true),
      keepalive: 10,
      reconnectPeriod: 1000,
    });
    this.client = client;
    client.on("connect", (connack) => {
      this.upAt = this.now();
      handlers.up?.(this.upAt, connack.sessionPresent);
      this.connected_(client);
      // When the bytes of what is handled next were read: no later than the latest read. The
      // packets of one read are handled one per tick, after any backlog ahead of them, so the
      // time of handling can be well after it (a clock sample's t1 would take that as round
      // trip). Ahead of mqtt.js's own listener, so a read is stamped before its packets are
      // handled; until the first read of this connection, the time of handling.
      this.lastReadAt = undefined;
      const readable = client.stream as unknown as Partial<NodeJS.EventEmitter>;
      readable.prependListener?.("data", () => {
        this.lastReadAt = this.now();
      });
      const windowMs = this.options.readWindowMs ?? 0;
      if (windowMs > 0) {
        batchReads(
          client.stream as unknown as BatchableSocket,
          windowMs,
          () => this.now() < this.preciseUntil,
        );
      }
    });
    client.on("close", () => {
      if (this.upAt === undefined) return;
      this.upAt = undefined;
      handlers.down?.(this.now());
    });
    client.on("message", (topic, payload) => {
      if (handlers.wants !== undefined) {
        const parsed = parseTopic(topic, this.topics.prefix);
        if (parsed?.kind === "agent" && !handlers.wants(parsed.agentId)) return;
      }
      const receivedAt = this.lastReadAt ?? this.now();
      const maxBytes = this.options.maxPayloadBytes ?? 65_536;
      const options = { prefix: this.topics.prefix, maxBytes, schemas: COMPILED_SCHEMAS };
      const auth = this.options.auth;
      let body: Buffer = payload;
      let signedAt = receivedAt;
      // The limit is the sealed payload's, checked before anything reads it (protocol.md, "Size
      // limit"): neither the MAC check nor the copy of the body runs on an oversized payload.
      if (payload.byteLength > maxBytes) {
        handlers.invalid(
          {
            code: "AX_PROTO_TOO_LARGE",
            message: `payload is ${payload.byteLength} bytes, more than the limit of ${maxBytes}`,
          },
          topic,
        );
        return;
      }
      if (auth !== undefined) {
        const opened = auth.open(topic, payload, receivedAt, maxBytes);
        if (!opened.ok) {
          const e = opened.error;
          // An event is decoded before its MAC is checked (its sender is named in it): one that
          // does not decode is invalid, counted as such, not a refused forgery.
          if (e.code.startsWith("AX_PROTO_")) {
            handlers.invalid(e, topic);
            return;
          }
          let stale: Decoded | undefined;
          if (e.resync !== undefined) {
            const d = decode(topic, (unseal(payload) as Sealed).body, options);
            if (d.ok) stale = d.value;
          }
          handlers.refused?.(e, topic, stale);
          return;
        }
        if (opened.event !== undefined) {
          handlers.message(opened.event, receivedAt);
          return;
        }
        body = opened.body;
        signedAt = opened.at;
      }
      // A batch of an agent's reports is one MQTT message; each report is handled on its own.
      // Without authentication an unreadable message could be anyone's: it is nobody's.
      let sender: string | undefined | null = auth === undefined ? undefined : null;
      for (const result of decodeAll(topic, body, options)) {
        if (!result.ok) {
          if (sender === null) {
            const parsed = parseTopic(topic, this.topics.prefix);
            sender =
              parsed?.kind === "agent" && parsed.channel === "up" ? parsed.agentId : undefined;
          }
          handlers.invalid(result.error, topic, sender);
          continue;
        }
        const replay = auth?.admit(result.value, signedAt, receivedAt);
        if (replay !== undefined) handlers.refused?.(replay, topic);
        else handlers.message(result.value, receivedAt);
      }
    });
    // mqtt.js handles one packet at a time and reads the next only once this calls back: holding
    // the callback is how the link stops reading (and acknowledging) while the engine is behind.
    client.handleMessage = (_packet, callback) => {
      if ((handlers.backlog?.() ?? 0) < MAX_INBOUND_BACKLOG) callback();
      else this.held = () => callback();
    };
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        client.removeListener("connect", onConnect);
        // A start that fails leaves no client behind reconnecting under this coordinator's id
        // (it would take the id over from the next start's, on a broker that came back).
        if (this.client === client) this.client = undefined;
        client.end(true);
        reject(
          new AxError("AX_LINK_FAILED", `cannot connect to MQTT broker ${url}: ${err.message}`, {
            cause: err,
          }),
        );
      };
      const onConnect = () => {
        client.removeListener("error", onError);
        resolve();
      };
      client.once("connect", onConnect);
      client.once("error", onError);
    });
    const share = (t: string) => (sharedGroup ? `$share/${sharedGroup}/${t}` : t);
    await client.subscribeAsync(
      [this.topics.allUp, this.topics.allPresence, this.topics.allEvents].map(share),
      { qos: 1 },
    );
  }

  /** True while the client is connected to the broker (it reconnects by itself when not). */
  get connected(): boolean {
    return this.client?.connected === true;
  }

  /** Wall time the current connection came up; undefined while the broker is out of reach. */
  get upSince(): number | undefined {
    return this.connected ? this.upAt : undefined;
  }

  /** Reads on once the engine has caught up (a no-op when reading was not held). */
  resume(): void {
    const held = this.held;
    this.held = undefined;
    held?.();
  }

  /** True while reading is held back because the engine is behind. */
  get paused(): boolean {
    return this.held !== undefined;
  }

  /** True while so many publishes await the broker's acknowledgement that new work should wait. */
  get congested(): boolean {
    return this.inFlight >= (this.options.maxInFlight ?? MAX_IN_FLIGHT);
  }

  /**
   * The largest batch of commands an agent reads on its down topic (its hello's `batchBytes`), or
   * undefined when it reads none: then each command is a message of its own.
   */
  batchBytesOf: (agentId: string) => number | undefined = () => undefined;

  /** Commands held until the end of this turn of the loop, per agent, to leave as batches. */
  private batches = new Map<string, HeldCommand[]>();

  /** `time` answers held to leave together (sendClocks), and the timer that sends them. */
  private clocks: HeldClock[] = [];
  private clockTimer: ReturnType<typeof setImmediate> | undefined;

  /**
   * Publishes a message on an agent's down topic, QoS 1; resolves once the broker has it. A
   * command (dispatch, cancel, query) to an agent that reads batches waits for the end of this
   * turn of the event loop and leaves with the others sent it in the same turn, as one message
   * (docs/protocol.md, "Batches of commands"); it resolves when that message is acknowledged.
   */
  async send(agentId: string, message: DownMessage): Promise<void> {
    if (!this.client) throw this.notOpen();
    if (message.type === "time") {
      // Stamped and sent with the others made in this turn of the loop, at its end (sendClocks).
      await new Promise<void>((resolve, reject) => {
        this.clocks.push({ agentId, message, resolve, reject });
        if (this.clocks.length === 1) {
          this.clockTimer = setImmediate(() => this.sendClocks());
        }
      });
      return;
    }
    if (message.type === "dispatch") {
      // The agent asks for a clock sample when its bound needs one before a start it holds
      // (docs/protocol.md, "How often a sample"): read its heartbeats as they come until then.
      const until = message.fireAt + PRECISE_AFTER_FIRE_MS;
      if (until > this.preciseUntil) this.preciseUntil = until;
    }
    const batchBytes = BATCHABLE.has(message.type) ? this.batchBytesOf(agentId) : undefined;
    if (batchBytes === undefined) {
      await this.publishOne(agentId, encode(message), message.type === "welcome");
      return;
    }
    // Counted as in flight once published (below), not while held for the rest of this turn.
    await new Promise<void>((resolve, reject) => {
      let held = this.batches.get(agentId);
      if (held === undefined) {
        held = [];
        this.batches.set(agentId, held);
        if (this.batches.size === 1) setImmediate(() => this.sendBatches());
      }
      held.push({ payload: encode(message), resolve, reject });
    });
  }

  /**
   * Sends the `time` answers made in this turn of the event loop, each stamped `t2` as it leaves
   * (docs/protocol.md, "Clock exchange": t2 is when the coordinator sent the answer), then writes
   * them in one system call: the answers to a burst of heartbeats read together share a write. A
   * run is written every {@link CLOCKS_PER_WRITE} answers, so that the first stamps of a run do
   * not age while the rest are sealed.
   *
   * They are not held longer. A hold of 20 ms (to share writes across turns) lay between t1 and
   * t2, so it was not counted as round trip, yet it made samples worse: by the time an answer
   * came, the agent had gone idle, and waking it counted. At 10,000 simulated agents on 2 cores
   * the agents' bound p99 was 5.4–8.5 ms with the hold and 2.9–4.2 ms without it, and the
   * coordinator's idle CPU did not measurably change (docs/benchmarks.md, "Fleet at scale").
   *
   * A `welcome` is not held: the `ack` sent after it must not overtake it.
   */
  private sendClocks(): void {
    const held = this.clocks;
    this.clocks = [];
    this.clockTimer = undefined;
    for (let i = 0; i < held.length; i++) {
      const c = held[i] as HeldClock;
      const m = c.message;
      const stamped = { ...m, clock: { ...m.clock, t2: this.now() } };
      // A `time` may be lost: the agent asks again in its next heartbeat (it matches answers by
      // t0). QoS 0 spares the broker and this process a PUBACK to track for each.
      try {
        this.publishQos0(c.agentId, encode(stamped));
        c.resolve();
      } catch (err) {
        c.reject(err);
      }
      if ((i + 1) % CLOCKS_PER_WRITE === 0) this.flushWrites();
    }
    this.flushWrites();
  }

  /** Sends the commands held this turn: per agent, as few messages as its batch size allows. */
  private sendBatches(): void {
    const batches = this.batches;
    this.batches = new Map();
    for (const [agentId, held] of batches) {
      // Room for the brackets and commas, and for the seal the auth member adds.
      const limit = Math.min(
        this.batchBytesOf(agentId) ?? 0,
        this.options.maxPayloadBytes ?? 65_536,
      );
      const room = limit - MAX_SEAL_BYTES - 2;
      let start = 0;
      while (start < held.length) {
        let end = start;
        let bytes = 0;
        while (
          end < held.length &&
          end - start < MAX_SENT_BATCH &&
          (end === start || bytes + (held[end] as HeldCommand).payload.length + 1 <= room)
        ) {
          bytes += (held[end] as HeldCommand).payload.length + 1;
          end++;
        }
        const part = held.slice(start, end);
        start = end;
        // One command alone is sent as itself; several as a JSON array of them.
        const payload =
          part.length === 1
            ? (part[0] as HeldCommand).payload
            : Buffer.concat([
                Buffer.from("["),
                ...part.flatMap((c, i) => (i === 0 ? [c.payload] : [COMMA, c.payload])),
                Buffer.from("]"),
              ]);
        this.publishOne(agentId, payload).then(
          () => {
            for (const c of part) c.resolve();
          },
          (err: unknown) => {
            for (const c of part) c.reject(err);
          },
        );
      }
    }
  }

  /** Seals (when messages are authenticated) and publishes one payload on an agent's down topic. */
  private async publishOne(agentId: string, body: Buffer, clock = false): Promise<void> {
    const client = this.client;
    if (!client) throw this.notOpen();
    this.inFlight++;
    try {
      const topic = this.topics.down(agentId);
      const payload = this.sealFor(agentId, topic, body);
      if (payload === undefined) return;
      const published = client.publishAsync(topic, payload, { qos: 1 });
      // A clock sample (welcome, time) is stamped as it is sent: whatever holds it back is
      // counted as round trip, which the agent waits out before every start.
      if (clock) this.flushWrites();
      await published;
    } finally {
      this.inFlight--;
    }
  }

  /**
   * Seals and hands a message to the client at QoS 0, without waiting for it to be written: there
   * is nothing to wait for (no PUBACK), and a callback is what costs. mqtt.js parks the callback
   * of a write made while its socket's buffer is over the high-water mark on a `drain` listener of
   * its own; the answers to a fleet's burst of heartbeats piled up thousands of them, and each
   * removed itself from the list in turn (8 % of the busiest second at 10,000 agents). While the
   * broker is out of reach nothing is queued for later: what it would carry is stale by then.
   */
  private publishQos0(agentId: string, body: Buffer): void {
    const client = this.client;
    if (!client || client.disconnecting) throw this.notOpen();
    if (!client.connected) return;
    const topic = this.topics.down(agentId);
    const payload = this.sealFor(agentId, topic, body);
    if (payload !== undefined) client.publish(topic, payload, { qos: 0 });
  }

  /**
   * The payload as it goes on the wire: sealed for the agent when messages are authenticated.
   * Undefined for an agent not enrolled (or revoked): it could not check the message, and must
   * not be told anything.
   */
  private sealFor(agentId: string, topic: string, body: Buffer): Buffer | undefined {
    const auth = this.options.auth;
    return auth === undefined ? body : auth.seal(agentId, topic, body, this.now());
  }

  /** True once the link was closed: the coordinator is stopping. */
  get closed(): boolean {
    return this.closed_;
  }

  private notOpen(): AxError {
    return new AxError("AX_LINK_FAILED", this.closed_ ? "link closed" : "link not started");
  }

  async close(): Promise<void> {
    this.closed_ = true;
    if (this.clockTimer !== undefined) clearImmediate(this.clockTimer);
    this.clockTimer = undefined;
    for (const c of this.clocks.splice(0)) c.reject(this.notOpen());
    const client = this.client;
    this.client = undefined;
    this.sendingOnly = undefined;
    if (client) await client.endAsync();
  }
}
