import mqtt, { type MqttClient } from "mqtt";
import { backoffMs } from "../../shared/backoff.js";
import { encode, type Topics } from "../../shared/protocol/index.js";

/** Delays between reconnect attempts: exponential backoff with full jitter (shared/backoff.ts). */
export interface ReconnectPolicy {
  /** Ceiling of the first delay; doubles per failed attempt. Default 500 ms. */
  baseMs?: number;
  /** Largest ceiling. Default 30 s. */
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
  /** The retained `offline` presence the broker publishes if this connection dies. */
  will: Buffer;
  /** Reconnect backoff; see {@link ReconnectPolicy} for the defaults. */
  reconnect?: ReconnectPolicy | undefined;
}

export interface AgentLinkEvents {
  /** Connected and subscribed to the down topic: safe to say hello. */
  ready(): void;
  message(topic: string, payload: Buffer): void;
  /** A connection that had been ready was lost (once per ready; reconnecting is automatic). */
  down(): void;
}

const DEFAULT_BASE_MS = 500;
const DEFAULT_CAP_MS = 30_000;
/** How long a CONNACK may take; then the attempt counts as failed. */
const CONNECT_TIMEOUT_MS = 10_000;
/** How long a SUBACK may take; then the connection is dropped and retried. */
const SUBSCRIBE_TIMEOUT_MS = 10_000;
/** How long close() waits for the broker to end the socket after DISCONNECT. */
const CLOSE_TIMEOUT_MS = 2_000;

type Timer = ReturnType<typeof setTimeout>;

/**
 * The agent's MQTT connection. Its client id is the agentId so a broker ACL can pin it to its own
 * topics. On every (re)connect it subscribes before reporting ready, so a hello is never sent by
 * a connection that cannot hear the answer; a refused or failed subscribe drops the connection.
 *
 * Reconnecting is driven here, not by mqtt.js (`reconnectPeriod: 0`): each lost or failed
 * connection waits a full-jitter exponential delay before `client.reconnect()`, and the attempt
 * count restarts once a connection becomes ready.
 */
export class AgentLink {
  private client: MqttClient | undefined;
  /** Connected and subscribed on the current connection. */
  private ready = false;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Failed or lost connections since the last ready one. */
  private failures = 0;
  private reconnectTimer: Timer | undefined;
  private subscribeTimer: Timer | undefined;

  constructor(private readonly options: AgentLinkOptions) {}

  start(events: AgentLinkEvents): void {
    if (this.client !== undefined || this.closed) throw new Error("AgentLink can start only once");
    const o = this.options;
    const client = mqtt.connect(o.url, {
      clientId: o.agentId,
      clean: true,
      keepalive: o.keepaliveS,
      reconnectPeriod: 0,
      connectTimeout: CONNECT_TIMEOUT_MS,
      resubscribe: false,
      will: { topic: o.topics.presence(o.agentId), payload: o.will, qos: 1, retain: true },
      ...(o.username === undefined ? {} : { username: o.username }),
      ...(o.password === undefined ? {} : { password: o.password }),
    });
    this.client = client;
    client.on("connect", () => this.onConnect(client, events));
    client.on("message", (topic, payload) => events.message(topic, payload));
    client.on("close", () => this.onClose(client, events));
    // Connection errors always end in "close", which schedules the next attempt.
    client.on("error", () => {});
  }

  /** True while connected and subscribed to the down topic. */
  get connected(): boolean {
    return this.ready;
  }

  /** Publishes QoS 1 on the up topic; resolves on PUBACK (which is not delivery, see rule 1). */
  async publishUp(message: { type: string }): Promise<void> {
    const client = this.client;
    if (!client || !this.ready) return;
    await client.publishAsync(this.options.topics.up(this.options.agentId), encode(message), {
      qos: 1,
    });
  }

  async publishPresence(payload: Buffer): Promise<void> {
    const client = this.client;
    if (!client || !this.ready) return;
    await client.publishAsync(this.options.topics.presence(this.options.agentId), payload, {
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
    const client = this.client;
    if (!client) return;
    // mqtt.js's graceful end waits for every in-flight publish to be acknowledged, forever if
    // the connection drops meanwhile; the outbox re-sends them anyway, so fail them now.
    failInFlight(client);
    const graceful = client.connected;
    const fallback = setTimeout(() => client.stream.destroy(), CLOSE_TIMEOUT_MS);
    try {
      await client.endAsync(!graceful);
    } finally {
      clearTimeout(fallback);
      this.client = undefined;
    }
  }

  private onConnect(client: MqttClient, events: AgentLinkEvents): void {
    if (this.closed) return;
    const stream = client.stream;
    // Rule 10: TCP_NODELAY, or back-to-back small publishes wait on delayed ACKs.
    (stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
    const current = () => !this.closed && client.connected && client.stream === stream;
    const fail = () => {
      if (current()) stream.destroy(); // "close" follows and schedules the next attempt
    };
    this.clearSubscribeTimer();
    this.subscribeTimer = setTimeout(() => {
      this.subscribeTimer = undefined;
      fail();
    }, SUBSCRIBE_TIMEOUT_MS);
    client
      .subscribeAsync(this.options.topics.down(this.options.agentId), { qos: 1 })
      .then(
        (granted) => {
          if (!current()) return;
          this.clearSubscribeTimer();
          // mqtt.js already rejects a SUBACK of 128; this also catches a malformed grant list.
          if (granted.length !== 1 || granted.some((g) => g.qos > 2)) {
            fail();
            return;
          }
          this.ready = true;
          this.failures = 0;
          events.ready();
        },
        () => fail(),
      )
      .catch(() => fail());
  }

  private onClose(client: MqttClient, events: AgentLinkEvents): void {
    this.clearSubscribeTimer();
    failInFlight(client);
    const wasReady = this.ready;
    this.ready = false;
    if (wasReady) events.down();
    if (this.closed || this.reconnectTimer !== undefined) return;
    this.failures += 1;
    const r = this.options.reconnect;
    const delay = backoffMs(
      this.failures,
      { baseMs: r?.baseMs ?? DEFAULT_BASE_MS, capMs: r?.capMs ?? DEFAULT_CAP_MS },
      r?.random,
    );
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (!this.closed) client.reconnect();
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

/**
 * Rejects the publishes still waiting for PUBACK. With `reconnectPeriod: 0` mqtt.js keeps them
 * across a dropped socket, and `reconnect()` replaces the store they would be re-sent from, so
 * their promises would otherwise never settle.
 */
function failInFlight(client: MqttClient): void {
  for (const id of Object.keys(client.outgoing)) client.removeOutgoingMessage(Number(id));
}
