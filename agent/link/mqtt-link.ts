import { backoffMs } from "../../shared/backoff.js";
import { encode, type Topics } from "../../shared/protocol/index.js";
import { MqttSession } from "./mqtt-session.js";
import type { Transports } from "./transport.js";

/** Delays between reconnect attempts: exponential backoff with full jitter (shared/backoff.ts). */
export interface ReconnectPolicy {
  /** Ceiling of the first delay; doubles per failed attempt. @default 500 */
  baseMs?: number;
  /**
   * Largest ceiling. Seconds, not tens: a broker restart should cost an agent a few seconds
   * (issue 15 measured 14 s and 23 s with a 30 s cap, and commands expired meanwhile); the full
   * jitter below it is what spreads a fleet's reconnects. @default 5000
   */
  capMs?: number;
  /** Source of jitter in [0, 1]. Default Math.random. */
  random?: () => number;
}

export interface AgentLinkOptions {
  url: string;
  agentId: string;
  topics: Topics;
  keepaliveS: number;
  username?: string | undefined;
  password?: string | undefined;
  /**
   * The retained `offline` presence the broker publishes if a connection dies: made anew for
   * each connection, so that each will has its own msgId and sentAt.
   */
  will: () => Buffer;
  /** Reconnect backoff; see {@link ReconnectPolicy} for the defaults. */
  reconnect?: ReconnectPolicy | undefined;
  /** How to reach the broker by URL protocol. @default plain TCP only */
  transports?: Transports | undefined;
  /**
   * Seals every payload published (docs/protocol.md, "Authenticated messages"): `at` given for
   * presence (the Last Will and the presence of one connection share their signing time).
   * @default payloads sent as they are
   */
  seal?: ((topic: string, body: Buffer, at?: number) => Buffer) | undefined;
  /** The coordinator's time as the agent knows it: presence is signed at connect time. */
  now?: (() => number) | undefined;
}

export interface AgentLinkEvents {
  /** Connected and subscribed to the down topic: safe to say hello. */
  ready(): void;
  message(topic: string, payload: Buffer): void;
  /** A message too large to read (over the packet limit) was skipped; `bytes` is its payload's. */
  tooLarge?(topic: string, bytes: number): void;
  /** A connection that had been ready was lost (once per ready; reconnecting is automatic). */
  down(): void;
  /** An attempt to connect failed (refused login, TLS, unreachable); it is retried. */
  failed?(err: Error): void;
}

/** Default of {@link ReconnectPolicy.baseMs}. */
export const DEFAULT_RECONNECT_BASE_MS = 500;
/** Default of {@link ReconnectPolicy.capMs}. */
export const DEFAULT_RECONNECT_CAP_MS = 5_000;

/** The delay before reconnect attempt `failures` (1 for the first): full jitter under the cap. */
export function reconnectDelayMs(failures: number, policy: ReconnectPolicy = {}): number {
  return backoffMs(
    failures,
    {
      baseMs: policy.baseMs ?? DEFAULT_RECONNECT_BASE_MS,
      capMs: policy.capMs ?? DEFAULT_RECONNECT_CAP_MS,
    },
    policy.random,
  );
}
/** How long a CONNACK may take; then the attempt counts as failed. */
const CONNECT_TIMEOUT_MS = 10_000;
/** How long a SUBACK may take; then the connection is dropped and retried. */
const SUBSCRIBE_TIMEOUT_MS = 10_000;

type Timer = ReturnType<typeof setTimeout>;

/**
 * The agent's MQTT connection. Its client id is the agentId so a broker ACL can pin it to its own
 * topics. On every (re)connect it subscribes before reporting ready, so a hello is never sent by
 * a connection that cannot hear the answer; a refused or failed subscribe drops the connection.
 *
 * Each connection is one {@link MqttSession}; when it ends, the next one is opened after a
 * full-jitter exponential delay, and the attempt count restarts once a connection becomes ready.
 */
export class AgentLink {
  private session: MqttSession | undefined;
  private started = false;
  /** Connected and subscribed on the current connection. */
  private ready = false;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Failed or lost connections since the last ready one. */
  private failures = 0;
  private reconnectTimer: Timer | undefined;
  private subscribeTimer: Timer | undefined;
  private events: AgentLinkEvents | undefined;
  /** When the current connection was opened (coordinator time): its presence's signing time. */
  private connectionAt = 0;

  constructor(private readonly options: AgentLinkOptions) {}

  private sealed(topic: string, payload: Buffer, at?: number): Buffer {
    const seal = this.options.seal;
    return seal === undefined ? payload : seal(topic, payload, at);
  }

  start(events: AgentLinkEvents): void {
    if (this.started || this.closed) throw new Error("AgentLink can start only once");
    this.started = true;
    this.events = events;
    this.open();
  }

  /** True while connected and subscribed to the down topic. */
  get connected(): boolean {
    return this.ready;
  }

  /**
   * Publishes QoS 1 on the up topic; resolves on PUBACK (which is not delivery, see rule 1).
   * Does nothing while not ready; rejects when the connection ends before the PUBACK. `json`,
   * when given, is `message` already serialised (the text the journal wrote it as).
   */
  async publishUp(message: { type: string }, json?: string, qos: 0 | 1 = 1): Promise<void> {
    const session = this.session;
    if (!session || !this.ready) return;
    const topic = this.options.topics.up(this.options.agentId);
    const payload = json === undefined ? encode(message) : Buffer.from(json);
    await session.publish(topic, this.sealed(topic, payload), { qos });
  }

  /**
   * Publishes several reports as one message on the up topic: a JSON array of their JSON texts
   * (the batch of protocol.md), QoS 1. Only to a coordinator whose welcome said `batches`.
   */
  async publishUpBatch(jsons: readonly string[]): Promise<void> {
    const session = this.session;
    if (!session || !this.ready) return;
    const topic = this.options.topics.up(this.options.agentId);
    await session.publish(topic, this.sealed(topic, Buffer.from(`[${jsons.join(",")}]`)), {
      qos: 1,
    });
  }

  async publishPresence(payload: Buffer): Promise<void> {
    const session = this.session;
    if (!session || !this.ready) return;
    const topic = this.options.topics.presence(this.options.agentId);
    await session.publish(topic, this.sealed(topic, payload, this.connectionAt), {
      qos: 1,
      retain: true,
    });
  }

  /**
   * Stops reconnecting and disconnects: cleanly (DISCONNECT, so no Last Will) when connected,
   * otherwise by dropping the socket. Publishes still awaiting PUBACK are rejected.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.closed = true;
    this.clearTimers();
    const session = this.session;
    this.session = undefined;
    this.ready = false;
    if (session) await session.end();
  }

  private open(): void {
    if (this.closed) return;
    const o = this.options;
    this.connectionAt = Math.floor(o.now?.() ?? Date.now());
    const willTopic = o.topics.presence(o.agentId);
    const session = new MqttSession(
      {
        url: o.url,
        clientId: o.agentId,
        clean: true,
        keepaliveS: o.keepaliveS,
        connectTimeoutMs: CONNECT_TIMEOUT_MS,
        will: {
          topic: willTopic,
          payload: this.sealed(willTopic, o.will(), this.connectionAt),
          qos: 1,
          retain: true,
        },
        username: o.username,
        password: o.password,
        transports: o.transports,
      },
      {
        message: (topic, payload) => {
          if (this.session === session) this.events?.message(topic, payload);
        },
        tooLarge: (topic, bytes) => {
          if (this.session === session) this.events?.tooLarge?.(topic, bytes);
        },
        close: () => this.onClose(session),
      },
    );
    this.session = session;
    session.connect().then(
      () => this.onConnect(session),
      // The session's close event follows and schedules the next attempt.
      (err: Error) => this.events?.failed?.(err),
    );
  }

  private onConnect(session: MqttSession): void {
    if (this.closed || this.session !== session) return;
    const fail = () => {
      if (this.session === session) session.destroy(new Error("subscribe failed"));
    };
    this.clearSubscribeTimer();
    this.subscribeTimer = setTimeout(() => {
      this.subscribeTimer = undefined;
      fail();
    }, SUBSCRIBE_TIMEOUT_MS);
    session.subscribe(this.options.topics.down(this.options.agentId), 1).then(
      () => {
        if (this.closed || this.session !== session || !session.connected) return;
        this.clearSubscribeTimer();
        this.ready = true;
        this.failures = 0;
        this.events?.ready();
      },
      () => fail(),
    );
  }

  private onClose(session: MqttSession): void {
    if (this.session !== session) return;
    this.clearSubscribeTimer();
    const wasReady = this.ready;
    this.ready = false;
    if (wasReady) this.events?.down();
    if (this.closed || this.reconnectTimer !== undefined) return;
    this.failures += 1;
    const delay = reconnectDelayMs(this.failures, this.options.reconnect);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.open();
    }, delay);
  }

  private clearSubscribeTimer(): void {
    if (this.subscribeTimer !== undefined) clearTimeout(this.subscribeTimer);
    this.subscribeTimer = undefined;
  }

  private clearTimers(): void {
    this.clearSubscribeTimer();
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
  }
}
