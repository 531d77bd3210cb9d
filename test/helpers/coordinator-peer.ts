import mqtt, { type MqttClient } from "mqtt";
import { newId } from "../../shared/ids.js";
import { type BodyOf, envelope } from "../../shared/message.js";
import {
  type Decoded,
  type Dispatch,
  type DownMessage,
  decodeAll,
  encode,
  type Heartbeat,
  type Hello,
  parseTopic,
  type Report,
  type Topics,
  topics,
  type UpMessage,
} from "../../shared/protocol/index.js";
import { seal, unseal, verifyTag } from "../../shared/protocol/mac.js";

/**
 * A stand-in for the coordinator in agent tests: a real MQTT client that speaks protocol v1 —
 * welcomes agents, answers heartbeats, applies reports once by seq and acknowledges them — and
 * lets a test send any dispatch, duplicate or malformed message it likes.
 */
export class CoordinatorPeer {
  readonly topics: Topics;
  private client: MqttClient | undefined;
  /** Reports stored once each, in seq order, per agent. */
  readonly reports = new Map<string, Report[]>();
  /** Every report received, duplicates included. */
  readonly received: Report[] = [];
  readonly hellos: Hello[] = [];
  readonly invalid: string[] = [];
  readonly presences: { agentId: string; status: string; instanceId: string }[] = [];
  private readonly acked = new Map<string, { journalId: string; upTo: number }>();
  /** When false, reports are recorded but not acknowledged (to test outbox replay). */
  ackReports = true;
  /** The welcome's batchBytes; undefined: a coordinator that reads no batches. */
  batchBytes: number | undefined = 65_536;
  /** The welcome's idleHeartbeatMs; undefined (the default here): none offered. */
  idleHeartbeatMs: number | undefined;
  /** MQTT messages received on up topics: one report or session message each, or a batch. */
  readonly upPayloads = { single: 0, batch: 0 };
  /** The largest batch payload received, in bytes. */
  largestUpPayload = 0;
  /** The messages of each up payload, in the order the payloads came (a batch: several). */
  readonly upBodies: UpMessage[][] = [];
  readonly heartbeats: Heartbeat[] = [];
  /** `time` answers sent (a heartbeat that says `time: false` gets none). */
  timeAnswers = 0;
  /**
   * Agents' message keys (docs/protocol.md, "Authenticated messages"): what is sent to an agent
   * named here is sealed with its key, and what it sends must verify under it, as a coordinator
   * with `security.messages: "required"` does. Agents not named speak unsigned.
   */
  readonly keys = new Map<string, { key: Buffer; generation: number }>();
  /** Payloads from a keyed agent that did not verify (dropped): topic and why. */
  readonly unverified: string[] = [];
  /** How far this stand-in coordinator's clock is ahead of the host's, in its clock samples. */
  clockAheadMs = 0;
  /** Hellos that arrive before this wall time are noted and not answered (a slow coordinator). */
  holdWelcomesUntil = 0;

  constructor(
    private readonly url: string,
    prefix: string,
  ) {
    this.topics = topics(prefix);
  }

  async start(): Promise<void> {
    const client = await mqtt.connectAsync(this.url, {
      clientId: `peer-${newId().slice(-12)}`,
      reconnectPeriod: 200,
      clean: true,
    });
    this.client = client;
    const subscribe = () =>
      client
        .subscribeAsync([this.topics.allUp, this.topics.allPresence], { qos: 1 })
        .catch(() => {});
    client.on("connect", () => void subscribe());
    client.on("message", (topic, payload) => {
      if (topic.endsWith("/up")) {
        if (payload[0] === 0x5b /* [ */) {
          this.upPayloads.batch++;
          this.largestUpPayload = Math.max(this.largestUpPayload, payload.byteLength);
        } else this.upPayloads.single++;
      }
      const body = this.open(topic, payload);
      if (body === undefined) return;
      const results = decodeAll(topic, body, { prefix: this.topics.prefix });
      const ups: UpMessage[] = [];
      for (const r of results) if (r.ok && r.value.channel === "up") ups.push(r.value.message);
      if (ups.length > 0) this.upBodies.push(ups);
      for (const r of results) {
        if (r.ok) this.onMessage(r.value);
        else this.invalid.push(`${r.error.code}: ${r.error.message}`);
      }
    });
    await subscribe();
  }

  /** The payload's body, its MAC checked when its agent has a key; undefined when it fails. */
  private open(topic: string, payload: Buffer): Uint8Array | undefined {
    if (this.keys.size === 0) return payload;
    const t = parseTopic(topic, this.topics.prefix);
    const k = t?.kind === "agent" ? this.keys.get(t.agentId) : undefined;
    if (k === undefined) return payload;
    const s = unseal(payload);
    if (typeof s === "string") {
      this.unverified.push(`${topic}: ${s}`);
      return undefined;
    }
    if (s.kid !== k.generation || !verifyTag(s, topic, k.key)) {
      this.unverified.push(`${topic}: mac does not verify`);
      return undefined;
    }
    return s.body;
  }

  private onMessage(d: Decoded): void {
    if (d.channel === "presence") {
      this.presences.push({
        agentId: d.agentId,
        status: d.message.status,
        instanceId: d.message.instanceId,
      });
      return;
    }
    if (d.channel !== "up") return;
    const m = d.message;
    const now = Date.now();
    if (m.type === "hello") {
      this.hellos.push(m);
      if (now < this.holdWelcomesUntil) return;
      const prev = this.acked.get(m.agentId);
      if (!prev || prev.journalId !== m.journalId)
        this.acked.set(m.agentId, { journalId: m.journalId, upTo: 0 });
      this.send(m.agentId, {
        type: "welcome",
        instanceId: m.instanceId,
        heartbeatMs: 500,
        clock: { t0: m.sentAt, t1: now + this.clockAheadMs, t2: Date.now() + this.clockAheadMs },
        ...(this.batchBytes === undefined ? {} : { batchBytes: this.batchBytes }),
        ...(this.idleHeartbeatMs === undefined ? {} : { idleHeartbeatMs: this.idleHeartbeatMs }),
      });
      this.send(m.agentId, { type: "ack", upTo: this.acked.get(m.agentId)?.upTo ?? 0 });
      return;
    }
    if (m.type === "heartbeat") {
      this.heartbeats.push(m);
      if (m.time === false) return;
      this.timeAnswers++;
      this.send(d.agentId, {
        type: "time",
        clock: { t0: m.sentAt, t1: now + this.clockAheadMs, t2: Date.now() + this.clockAheadMs },
      });
      return;
    }
    this.received.push(m);
    const state = this.acked.get(d.agentId) ?? { journalId: "?", upTo: 0 };
    if (m.seq === state.upTo + 1) {
      const list = this.reports.get(d.agentId) ?? [];
      list.push(m);
      this.reports.set(d.agentId, list);
      state.upTo = m.seq;
      this.acked.set(d.agentId, state);
    }
    if (this.ackReports) this.send(d.agentId, { type: "ack", upTo: state.upTo });
  }

  /** Sends a message body (the envelope is added). */
  send(agentId: string, body: BodyOf<DownMessage>): void {
    const topic = this.topics.down(agentId);
    const now = Date.now();
    const text = encode(envelope(body, now));
    const k = this.keys.get(agentId);
    this.client
      ?.publishAsync(topic, k ? seal(text, topic, k.key, k.generation, now) : text, { qos: 1 })
      .catch(() => {});
  }

  /**
   * Sends message bodies as one batch of commands (each with its envelope), sealed as one payload
   * when the agent has a key. Items given as strings are sent as they are (a malformed one).
   */
  sendBatch(agentId: string, items: readonly (BodyOf<DownMessage> | string)[]): Buffer {
    const topic = this.topics.down(agentId);
    const now = Date.now();
    const text = `[${items.map((b) => (typeof b === "string" ? b : JSON.stringify(envelope(b, now)))).join(",")}]`;
    const k = this.keys.get(agentId);
    const payload = k ? seal(text, topic, k.key, k.generation, now) : Buffer.from(text);
    this.client?.publishAsync(topic, payload, { qos: 1 }).catch(() => {});
    return payload;
  }

  /** A dispatch body with sensible defaults (echo, now, 30 s deadline). */
  dispatchBody(d: Partial<Dispatch> & { executionId: string }): BodyOf<Dispatch> {
    const now = Date.now();
    return {
      type: "dispatch",
      round: 1,
      attempt: 1,
      handler: "echo",
      params: {},
      fireAt: now,
      deadline: now + 30_000,
      timeoutMs: 30_000,
      priority: 0,
      ...d,
    };
  }

  /** Sends raw bytes on the agent's down topic. */
  async sendRaw(agentId: string, payload: string | Buffer): Promise<void> {
    await this.client?.publishAsync(this.topics.down(agentId), payload, { qos: 1 });
  }

  /** Sends a dispatch with sensible defaults (echo, now, 30 s deadline). */
  dispatch(agentId: string, d: Partial<Dispatch> & { executionId: string }): Dispatch {
    const sentAt = Date.now();
    const body = this.dispatchBody(d);
    this.send(agentId, body);
    return { v: 1, msgId: "-", sentAt, ...body };
  }

  /** Stored reports of one agent, optionally of one type and execution. */
  of<T extends Report["type"]>(
    agentId: string,
    type?: T,
    executionId?: string,
  ): Extract<Report, { type: T }>[] {
    return (this.reports.get(agentId) ?? []).filter(
      (r): r is Extract<Report, { type: T }> =>
        (type === undefined || r.type === type) &&
        (executionId === undefined || r.executionId === executionId),
    );
  }

  welcomed(agentId: string): boolean {
    return this.hellos.some((h) => h.agentId === agentId);
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    await c?.endAsync();
  }
}
