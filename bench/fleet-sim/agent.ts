import { connect, type Socket } from "node:net";
import { heartbeatAfterWelcome } from "../../agent/heartbeat.js";
import {
  encodeAck,
  encodeConnect,
  encodePublish,
  encodeSubscribe,
  type IncomingPacket,
  PacketReader,
  PINGREQ_PACKET,
} from "../../agent/link/mqtt-codec.js";
import { ClockSync } from "../../shared/clock-sync.js";
import { type Dispatch, type DownMessage, decodeAll } from "../../shared/protocol/index.js";
import { MAX_SEAL_BYTES, seal, unseal, verifyTag } from "../../shared/protocol/mac.js";
import type { NativeTarget } from "../../shared/update.js";

/** What one simulated agent needs to know about itself: its id and its enrolled key. */
export interface SimAgentSpec {
  agentId: string;
  /** The 32-byte message key of its identity. */
  key: Buffer;
  generation: number;
  username?: string | undefined;
  password?: string | undefined;
  /** Its handler fails every command (a device a bad command breaks): rollouts' abort criteria. */
  fails?: boolean;
  /**
   * Its handler runs this long before it succeeds (instant by default); a cancel meanwhile
   * interrupts it, and it ends canceled.
   */
  runMs?: number;
  /** Its handlers, said in hello; each runs as the instant `echo` does. @default the simulator's */
  handlers?: readonly string[];
  /** The native target said in hello (`hello.target`); without it, none is said. */
  target?: NativeTarget;
  /** The bundle said in hello. @default { version: "0.1.0", sha256: "dev" } */
  bundle?: { version: string; sha256: string };
}

/** One command in an agent's in-memory journal. */
export interface SimCommand {
  executionId: string;
  round: number;
  fireAt: number;
  deadline: number;
  params: Record<string, unknown>;
  state: "scheduled" | "running" | "succeeded" | "failed" | "canceled" | "expired";
  /**
   * While scheduled, its entry in the simulator's start table (0: none, as after a cancel); while
   * running with a `runMs`, the wheel handle of its finish.
   */
  handle: number;
  startedAt?: number;
  /** The estimate's uncertainty when it started: the start waits this long past fireAt (rule 12). */
  uncertaintyAtStart?: number;
  /**
   * How far past fireAt the estimate less its uncertainty was when it started: the simulator's
   * own lateness (its timer and its loop), the rest of the skew being the uncertainty.
   */
  timerLateMs?: number;
  /**
   * How far past fireAt it started on the host's clock (`Date.now()`, whole ms), which the
   * coordinator stamps fireAt with: when the simulator really ran it, its own loop's lag
   * included, whatever the estimate said.
   */
  hostLateMs?: number;
  /** How many times its handler ran: the test checks it is 1. */
  runs: number;
}

/** A task on the simulator's one timing wheel. */
export type SimTask =
  | {
      kind: "heartbeat" | "hello" | "replay" | "connect" | "ping";
      agent: SimAgent;
      generation: number;
    }
  | { kind: "finish"; agent: SimAgent; command: SimCommand }
  | { kind: "starts" };

/** What the agents share: the simulator's clock, wheel, ids and counters. */
export interface SimContext {
  readonly host: string;
  readonly port: number;
  readonly prefix: string;
  readonly keepaliveS: number;
  /** Said in hello: the agent reads batches of commands up to this many bytes. */
  readonly batchBytes: number;
  readonly handlers: readonly string[];
  readonly tags: Record<string, string>;
  /** Wall-clock ms of this process, advancing monotonically (one anchor for every agent). */
  localNow(): number;
  /** localNow() − monoNow(), constant: one anchor for converting between the two timelines. */
  readonly localBase: number;
  monoNow(): number;
  schedule(dueMono: number, task: SimTask): number;
  cancel(handle: number): void;
  /**
   * Files a start for monotonic time `dueMono` in the simulator's start table; returns its token
   * (kept in `command.handle`). At that time, or just after, the simulator stamps it and calls
   * {@link SimAgent.startAt} with the stamp, unless `command.handle` no longer holds the token.
   */
  scheduleStart(dueMono: number, agent: SimAgent, command: SimCommand): number;
  msgId(): string;
  /** The connection got its CONNACK, or failed before it: the ramp may open another. */
  connectSettled(agent: SimAgent): void;
  welcomed(agent: SimAgent): void;
  /** A start was stamped: its reports are sent once every start due now has been stamped. */
  started(agent: SimAgent): void;
  readonly counters: SimCounters;
}

export interface SimCounters {
  connects: number;
  disconnects: number;
  refused: number;
  invalid: number;
  dispatches: number;
  duplicates: number;
  starts: number;
  replays: number;
  helloRetries: number;
}

/** How long without a welcome before hello is sent again (as the reference agent). */
const HELLO_RETRY_MS = 2_000;
/** The reference agent's floor between two replays on request. */
const REPLAY_GAP_MS = 500;
/** The coordinator's freshness window (security.freshnessMs default). */
const FRESHNESS_MS = 300_000;
/** Down tags remembered against replays (the reference agent keeps 4,096). */
const REMEMBERED_TAGS = 64;
const MAX_BATCH_ITEMS = 256;

/**
 * One simulated protocol-v1 agent on its own MQTT connection: the session, the clock exchange,
 * the outbox, and an in-memory journal whose only handler is an instant `echo`. It owns no timer:
 * everything timed is a task on the simulator's wheel, which calls {@link run}.
 */
export class SimAgent {
  readonly topicUp: string;
  readonly topicDown: string;
  readonly topicPresence: string;
  readonly instanceId: string;
  readonly journalId: string;
  /** Every command it was dispatched, by execution id. */
  readonly journal = new Map<string, SimCommand>();
  /** Starts stamped and not yet reported. */
  readonly startedUnreported: SimCommand[] = [];
  readonly clock = new ClockSync();
  private socket: Socket | undefined;
  private reader = new PacketReader(1024 * 1024);
  /** Bumped per connection, so a task of an old connection does nothing. */
  private generation = 0;
  private packetId = 0;
  connected = false;
  isWelcomed = false;
  private stopped = false;
  private seq = 0;
  private readonly outbox: { seq: number; body: string }[] = [];
  private pendingReports: string[] = [];
  private upBatchBytes = 0;
  private heartbeatMs = 5_000;
  private heartbeatHandle = 0;
  /** The welcome's idleHeartbeatMs (0: none), and whether the last heartbeat said idle. */
  private idleHeartbeatMs = 0;
  private idleSent = false;
  private pingHandle = 0;
  /** The next heartbeat is the one after a welcome's (agent/heartbeat.ts). */
  private spreadNext = false;
  private helloHandle = 0;
  private lastSignedAt = 0;
  private readonly seenTags = new Set<string>();
  private lastReplayAt = Number.NEGATIVE_INFINITY;
  private replayQueued = false;
  private lastWriteMono = 0;
  /** Oldest unacknowledged seq at the last heartbeat, and since when it has not moved. */
  private stallSeq: number | undefined;
  private stallSince = 0;

  constructor(
    readonly spec: SimAgentSpec,
    private readonly ctx: SimContext,
  ) {
    const base = `${ctx.prefix}/v1/agents/${spec.agentId}`;
    this.topicUp = `${base}/up`;
    this.topicDown = `${base}/down`;
    this.topicPresence = `${base}/presence`;
    this.instanceId = `i${ctx.msgId()}`;
    this.journalId = `j${ctx.msgId()}`;
  }

  /** Coordinator time as this agent estimates it (rule 4). */
  coordNow(): number {
    return this.ctx.localNow() + this.clock.offsetMs;
  }

  /** Opens the connection: CONNECT with the sealed offline presence as its will. */
  connect(): void {
    if (this.stopped || this.socket !== undefined) return;
    const generation = ++this.generation;
    this.reader = new PacketReader(1024 * 1024);
    const connAt = Math.floor(this.coordNow());
    // The will and the online presence are signed at the same time, the connection's opening, so
    // the coordinator accepts this connection's will and no older one.
    const presence = (status: "online" | "offline") =>
      seal(
        JSON.stringify({
          v: 1,
          type: "presence",
          msgId: this.ctx.msgId(),
          sentAt: connAt,
          status,
          instanceId: this.instanceId,
        }),
        this.topicPresence,
        this.spec.key,
        this.spec.generation,
        connAt,
      );
    const socket = connect({ host: this.ctx.host, port: this.ctx.port });
    this.socket = socket;
    socket.setNoDelay(true);
    let settled = false;
    const settle = () => {
      if (settled) return;
      settled = true;
      this.ctx.connectSettled(this);
    };
    socket.on("connect", () => {
      this.write(
        encodeConnect({
          clientId: this.spec.agentId,
          keepaliveS: this.ctx.keepaliveS,
          clean: true,
          will: { topic: this.topicPresence, payload: presence("offline"), qos: 1, retain: true },
          username: this.spec.username,
          password: this.spec.password,
        }),
      );
    });
    socket.on("data", (chunk: Buffer) => {
      const t3 = this.ctx.localNow();
      let packets: IncomingPacket[];
      try {
        packets = this.reader.push(chunk);
      } catch {
        socket.destroy();
        return;
      }
      for (const p of packets) {
        if (generation !== this.generation) return;
        if (p.type === "connack") {
          settle();
          if (p.returnCode !== 0) {
            socket.destroy();
            return;
          }
          this.ctx.counters.connects++;
          this.write(encodeSubscribe(this.nextPacketId(), this.topicDown, 1));
        } else if (p.type === "suback") {
          this.connected = true;
          // Retained online presence, then hello, after the subscription: no answer is missed.
          this.publish(this.topicPresence, presence("online"), true);
          this.sendHello();
        } else if (p.type === "publish") {
          if (p.qos > 0) this.write(encodeAck("puback", p.packetId));
          if (p.topic === this.topicDown) this.onDown(p.payload, t3);
        }
      }
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      settle();
      if (this.socket !== socket) return;
      this.socket = undefined;
      if (this.connected) this.ctx.counters.disconnects++;
      this.connected = false;
      this.isWelcomed = false;
      this.generation++;
      this.ctx.cancel(this.heartbeatHandle);
      this.ctx.cancel(this.helloHandle);
      if (!this.stopped) {
        // Back again after a second or two, spread so a broker restart is not met by all at once.
        this.ctx.schedule(this.ctx.monoNow() + 1_000 + Math.random() * 1_000, {
          kind: "connect",
          agent: this,
          generation: this.generation,
        });
      }
    });
  }

  /** Closes the connection without DISCONNECT (the broker publishes the will) and stays down. */
  stop(): void {
    this.stopped = true;
    this.socket?.destroy();
  }

  /** A wheel task of this agent is due. */
  run(task: SimTask): void {
    if (task.kind === "starts") return; // the simulator's own
    if (task.kind === "finish") {
      if (task.command.state === "running") this.finish(task.command, true);
      return;
    }
    if (task.generation !== this.generation) return;
    if (task.kind === "heartbeat") this.heartbeat();
    else if (task.kind === "ping") this.ping();
    else if (task.kind === "hello") {
      if (this.isWelcomed || !this.connected) return;
      this.ctx.counters.helloRetries++;
      this.sendHello();
    } else {
      this.replayQueued = false;
      this.replay();
    }
  }

  /** The reports of the starts stamped since the last call: started and finished, together. */
  reportStarted(): void {
    for (const c of this.startedUnreported.splice(0)) {
      const startedAt = c.startedAt as number;
      this.report({
        type: "started",
        executionId: c.executionId,
        round: c.round,
        startedAt,
        lateMs: Math.max(0, startedAt - c.fireAt),
      });
      const fails = this.spec.fails === true;
      const runMs = this.spec.runMs ?? 0;
      if (!fails && runMs > 0) {
        c.handle = this.ctx.schedule(this.ctx.monoNow() + runMs, {
          kind: "finish",
          agent: this,
          command: c,
        });
        continue;
      }
      this.finish(c, !fails, false);
    }
    this.flushReports();
  }

  /** Reports a started command's end: succeeded, or failed by a device that fails it. */
  private finish(c: SimCommand, succeeded: boolean, flush = true): void {
    c.state = succeeded ? "succeeded" : "failed";
    this.report({
      type: "finished",
      executionId: c.executionId,
      round: c.round,
      outcome: succeeded ? "succeeded" : "failed",
      retryable: false,
      message: succeeded ? "" : "this device fails the command",
      ...(succeeded ? { result: { echo: c.params } } : {}),
      startedAt: c.startedAt as number,
      finishedAt: Math.max(c.startedAt as number, this.coordNow()),
    });
    if (flush) this.flushReports();
  }

  // --- sending ------------------------------------------------------------------------------

  private nextPacketId(): number {
    this.packetId = (this.packetId % 0xffff) + 1;
    return this.packetId;
  }

  private write(bytes: Buffer): void {
    const socket = this.socket;
    if (socket === undefined || socket.destroyed) return;
    this.lastWriteMono = this.ctx.monoNow();
    socket.write(bytes);
  }

  private publish(topic: string, payload: Buffer, retain = false, qos: 0 | 1 = 1): void {
    this.write(
      qos === 0
        ? encodePublish({ topic, payload, qos, retain })
        : encodePublish({ topic, payload, qos, retain, packetId: this.nextPacketId() }),
    );
  }

  /** Seals a body for the up topic at a strictly rising time, and publishes it. */
  private publishUp(body: string, qos: 0 | 1 = 1): void {
    const at = Math.max(Math.floor(this.coordNow()), this.lastSignedAt + 1);
    this.lastSignedAt = at;
    const sealed = seal(body, this.topicUp, this.spec.key, this.spec.generation, at);
    this.publish(this.topicUp, sealed, false, qos);
  }

  private envelope(body: Record<string, unknown>, sentAt = this.coordNow()): string {
    return JSON.stringify({ v: 1, msgId: this.ctx.msgId(), sentAt, ...body });
  }

  private sendHello(): void {
    const sentAt = this.coordNow();
    this.clock.stamp(sentAt);
    this.publishUp(
      this.envelope(
        {
          type: "hello",
          agentId: this.spec.agentId,
          instanceId: this.instanceId,
          journalId: this.journalId,
          lastSeq: this.seq,
          profile: "fleet-sim",
          bundle: this.spec.bundle ?? { version: "0.1.0", sha256: "dev" },
          handlers: this.spec.handlers ?? this.ctx.handlers,
          capacity: { concurrency: 1, queue: 16 },
          tags: this.ctx.tags,
          batchBytes: this.ctx.batchBytes,
          ...(this.spec.target === undefined ? {} : { target: this.spec.target }),
        },
        sentAt,
      ),
    );
    this.helloHandle = this.ctx.schedule(this.ctx.monoNow() + HELLO_RETRY_MS, {
      kind: "hello",
      agent: this,
      generation: this.generation,
    });
  }

  private heartbeat(): void {
    if (!this.isWelcomed) return;
    const now = this.ctx.monoNow();
    let scheduled = 0;
    for (const c of this.journal.values()) if (c.state === "scheduled") scheduled++;
    // As the reference agent: idle (nothing held, nothing waiting for an ack), its next heartbeat
    // may be idleHeartbeatMs off.
    const idle =
      this.idleHeartbeatMs > this.heartbeatMs && scheduled === 0 && this.outbox.length === 0;
    this.idleSent = idle;
    const sentAt = this.coordNow();
    this.clock.stamp(sentAt);
    this.publishUp(
      this.envelope(
        {
          type: "heartbeat",
          instanceId: this.instanceId,
          running: [],
          queued: 0,
          scheduled,
          load: 0,
          clockOffset: {
            offsetMs: this.clock.offsetMs,
            uncertaintyMs: this.clock.uncertaintyAt(this.ctx.localNow()),
          },
          journal: { depth: scheduled, outboxDepth: this.outbox.length },
          time: this.clock.wantsSample(this.ctx.localNow(), scheduled > 0),
          ...(idle ? { idle: true } : {}),
        },
        sentAt,
      ),
      0, // as the reference agent: heartbeats at QoS 0
    );
    // As the reference agent: acknowledgements that stopped moving for three heartbeats (5 s at
    // least) mean a report was lost beyond a gap, or the coordinator restarted; re-send.
    const oldest = this.outbox[0]?.seq;
    if (oldest !== this.stallSeq) {
      this.stallSeq = oldest;
      this.stallSince = now;
    } else if (
      oldest !== undefined &&
      now - this.stallSince >= Math.max(3 * this.heartbeatMs, 5_000)
    ) {
      this.requestReplay();
      this.stallSince = now;
    }
    // Heartbeats are traffic enough for the keepalive unless they are further apart than half of it.
    if (now - this.lastWriteMono > (this.ctx.keepaliveS * 1000) / 2) this.write(PINGREQ_PACKET);
    // As the reference agent: the heartbeat after the welcome's at a random point of the period.
    const delay = this.spreadNext
      ? heartbeatAfterWelcome(this.heartbeatMs, Math.random())
      : this.heartbeatMs;
    this.spreadNext = false;
    this.scheduleHeartbeat(idle ? (delay * this.idleHeartbeatMs) / this.heartbeatMs : delay);
    // mqtt.js pings on its own timer in the reference agent; here, between idle heartbeats.
    if (idle) this.schedulePing(now);
  }

  private scheduleHeartbeat(delayMs: number): void {
    this.ctx.cancel(this.heartbeatHandle);
    this.heartbeatHandle = this.ctx.schedule(this.ctx.monoNow() + delayMs, {
      kind: "heartbeat",
      agent: this,
      generation: this.generation,
    });
  }

  private schedulePing(now: number): void {
    this.ctx.cancel(this.pingHandle);
    this.pingHandle = this.ctx.schedule(now + (this.ctx.keepaliveS * 1000) / 2, {
      kind: "ping",
      agent: this,
      generation: this.generation,
    });
  }

  /** The keepalive while heartbeats are far apart: a PINGREQ when nothing was written for half of it. */
  private ping(): void {
    if (!this.idleSent || !this.connected) return;
    const now = this.ctx.monoNow();
    if (now - this.lastWriteMono >= (this.ctx.keepaliveS * 1000) / 2 - 50)
      this.write(PINGREQ_PACKET);
    this.schedulePing(now);
  }

  /** Gives a report the next seq, keeps it in the outbox, and queues it for sending. */
  private report(body: Record<string, unknown>): void {
    const seq = ++this.seq;
    const text = this.envelope({ ...body, seq });
    this.outbox.push({ seq, body: text });
    this.pendingReports.push(text);
    // As the reference agent: no longer idle, the next heartbeat within heartbeatMs.
    if (this.idleSent) {
      this.idleSent = false;
      this.scheduleHeartbeat(heartbeatAfterWelcome(this.heartbeatMs, Math.random()));
    }
  }

  /** Sends the queued reports: as batches when the welcome carried batchBytes, else one by one. */
  private flushReports(): void {
    const reports = this.pendingReports;
    this.pendingReports = [];
    if (this.isWelcomed) this.sendReports(reports);
  }

  private sendReports(reports: readonly string[]): void {
    if (reports.length === 0 || !this.connected) return;
    if (this.upBatchBytes === 0) {
      for (const r of reports) this.publishUp(r);
      return;
    }
    const limit = this.upBatchBytes - MAX_SEAL_BYTES;
    let batch: string[] = [];
    let bytes = 2;
    for (const r of reports) {
      const size = Buffer.byteLength(r) + 1;
      if (batch.length > 0 && (bytes + size > limit || batch.length >= MAX_BATCH_ITEMS)) {
        this.publishUp(`[${batch.join(",")}]`);
        batch = [];
        bytes = 2;
      }
      batch.push(r);
      bytes += size;
    }
    if (batch.length > 0) this.publishUp(`[${batch.join(",")}]`);
  }

  /** Re-sends the outbox unchanged, in seq order (rule 1); each is sealed anew. */
  private replay(): void {
    this.lastReplayAt = this.ctx.monoNow();
    if (this.outbox.length === 0) return;
    this.ctx.counters.replays++;
    this.sendReports(this.outbox.map((r) => r.body));
  }

  /** An ack's replay: at once, or at the end of the 500 ms after the last one, merged. */
  private requestReplay(): void {
    const now = this.ctx.monoNow();
    if (now - this.lastReplayAt >= REPLAY_GAP_MS) {
      this.replay();
      return;
    }
    if (this.replayQueued) return;
    this.replayQueued = true;
    this.ctx.schedule(this.lastReplayAt + REPLAY_GAP_MS, {
      kind: "replay",
      agent: this,
      generation: this.generation,
    });
  }

  // --- receiving ----------------------------------------------------------------------------

  private onDown(payload: Buffer, t3: number): void {
    const s = unseal(payload);
    if (
      typeof s === "string" ||
      s.kid !== this.spec.generation ||
      !verifyTag(s, this.topicDown, this.spec.key) ||
      this.seenTags.has(s.tagText)
    ) {
      this.ctx.counters.refused++;
      return;
    }
    this.seenTags.add(s.tagText);
    if (this.seenTags.size > REMEMBERED_TAGS) {
      const oldest = this.seenTags.values().next().value;
      if (oldest !== undefined) this.seenTags.delete(oldest);
    }
    for (const r of decodeAll(this.topicDown, s.body, { prefix: this.ctx.prefix })) {
      if (!r.ok) {
        this.ctx.counters.invalid++;
        const { executionId, round, type } = r.error;
        if (type === "dispatch" && executionId !== undefined && round !== undefined) {
          this.report({
            type: "rejected",
            executionId,
            round,
            reason: "invalid_dispatch",
            message: r.error.message.slice(0, 1024),
          });
        }
        continue;
      }
      const m = r.value.message as DownMessage;
      if (
        m.type !== "welcome" &&
        m.type !== "time" &&
        this.clock.sampleCount > 0 &&
        Math.abs(this.coordNow() - s.at) > FRESHNESS_MS
      ) {
        this.ctx.counters.refused++;
        continue;
      }
      this.onMessage(m, t3);
    }
    this.flushReports();
  }

  /**
   * Takes a clock sample; if the estimate or its bound moved, files the starts it holds again for
   * the moment the new estimate gives (the start table reads only due times, not the estimate).
   */
  private addSample(m: { clock: Parameters<ClockSync["addSample"]>[0] }, t3: number): void {
    const offset = this.clock.offsetMs;
    const bound = this.clock.uncertaintyMs;
    this.clock.addSample(m.clock, t3);
    if (this.clock.offsetMs === offset && this.clock.uncertaintyMs === bound) return;
    for (const c of this.journal.values()) {
      if (c.state === "scheduled" && c.handle !== 0) this.scheduleFire(c);
    }
  }

  private onMessage(m: DownMessage, t3: number): void {
    switch (m.type) {
      case "welcome":
        if (m.instanceId !== this.instanceId) return;
        this.addSample(m, t3);
        this.heartbeatMs = m.heartbeatMs;
        this.upBatchBytes = m.batchBytes ?? 0;
        this.idleHeartbeatMs = m.idleHeartbeatMs ?? 0;
        this.idleSent = false;
        this.ctx.cancel(this.helloHandle);
        this.ctx.cancel(this.heartbeatHandle);
        this.isWelcomed = true;
        this.spreadNext = true;
        this.replay();
        this.heartbeatHandle = this.ctx.schedule(this.ctx.monoNow(), {
          kind: "heartbeat",
          agent: this,
          generation: this.generation,
        });
        this.ctx.welcomed(this);
        return;
      case "time":
        this.addSample(m, t3);
        return;
      case "ack": {
        if (m.journalId !== undefined && m.journalId !== this.journalId) return;
        let n = 0;
        while (n < this.outbox.length && (this.outbox[n] as { seq: number }).seq <= m.upTo) n++;
        if (n > 0) this.outbox.splice(0, n);
        if (m.replay === true) this.requestReplay();
        return;
      }
      case "dispatch":
        this.onDispatch(m);
        return;
      case "cancel": {
        const c = this.journal.get(m.executionId);
        if (c === undefined || c.round !== m.round) return;
        if (c.state === "scheduled" || c.state === "running") {
          // A scheduled one never runs (not simulated beyond this: reported and forgotten); a
          // handler that takes time is interrupted: it ran, and ends canceled.
          const ran = c.state === "running";
          // Running: its finish, if one is due, is a wheel task; scheduled: its start is dropped.
          if (ran) this.ctx.cancel(c.handle);
          c.handle = 0;
          c.state = ran ? "canceled" : "expired";
          const now = this.coordNow();
          this.report({
            type: "finished",
            executionId: c.executionId,
            round: c.round,
            outcome: "canceled",
            retryable: false,
            message: ran ? "canceled while running" : "canceled",
            ...(ran ? { startedAt: c.startedAt as number } : {}),
            finishedAt: ran ? Math.max(c.startedAt as number, now) : now,
          });
        } else {
          this.stateOf(c, "too_late");
        }
        return;
      }
      case "query": {
        const c = this.journal.get(m.executionId);
        if (c === undefined) {
          this.report({
            type: "state",
            executionId: m.executionId,
            round: m.round,
            localState: "unknown",
          });
        } else this.stateOf(c);
        return;
      }
    }
  }

  private stateOf(c: SimCommand, reason?: string): void {
    this.report({
      type: "state",
      executionId: c.executionId,
      round: c.round,
      localState: c.state,
      ...(reason === undefined ? {} : { reason }),
    });
  }

  private onDispatch(d: Dispatch): void {
    this.ctx.counters.dispatches++;
    const held = this.journal.get(d.executionId);
    // Rule 3: a duplicate is answered with what the agent knows; a higher round replaces a
    // command not started yet.
    if (held !== undefined && (held.round >= d.round || held.state !== "scheduled")) {
      this.ctx.counters.duplicates++;
      this.stateOf(held);
      return;
    }
    if (held !== undefined) held.handle = 0; // its start, if filed, is dropped
    if (!(this.spec.handlers ?? this.ctx.handlers).includes(d.handler)) {
      this.report({
        type: "rejected",
        executionId: d.executionId,
        round: d.round,
        reason: "unknown_handler",
      });
      return;
    }
    const c: SimCommand = {
      executionId: d.executionId,
      round: d.round,
      fireAt: d.fireAt,
      deadline: d.deadline,
      params: d.params,
      state: "scheduled",
      handle: 0,
      runs: 0,
    };
    this.journal.set(d.executionId, c);
    this.report({ type: "accepted", executionId: d.executionId, round: d.round });
    this.scheduleFire(c);
  }

  /**
   * Files the start for when the estimate less its uncertainty reaches fireAt (rule 12), with the
   * estimate as it is now; a sample that moves the estimate files it again ({@link addSample}).
   */
  private scheduleFire(c: SimCommand): void {
    // The uncertainty as it will have grown 100 ms after fireAt, as the reference agent waits it
    // out; the extra microsecond: float rounding between the two timelines never makes it early.
    const wait = this.clock.uncertaintyAt(c.fireAt + 100 - this.clock.offsetMs) + 0.001;
    const dueMono = c.fireAt - this.clock.offsetMs + wait - this.ctx.localBase;
    c.handle = this.ctx.scheduleStart(dueMono, this, c);
  }

  /**
   * Starts a command the simulator stamped at monotonic time `stampMono` (its start table's
   * token still in `c.handle`): on this agent's estimate of the coordinator's clock at that
   * moment, never early; an estimate that moved since the start was filed, so that it would be,
   * files it again.
   */
  startAt(c: SimCommand, stampMono: number): void {
    if (c.state !== "scheduled") return;
    const local = stampMono + this.ctx.localBase;
    const now = local + this.clock.offsetMs;
    const bound = this.clock.uncertaintyAt(local);
    if (now - bound < c.fireAt) {
      this.scheduleFire(c); // never early
      return;
    }
    c.handle = 0;
    if (now > c.deadline) {
      c.state = "expired";
      this.report({
        type: "finished",
        executionId: c.executionId,
        round: c.round,
        outcome: "expired",
        retryable: false,
        message: "deadline passed before it could start",
        finishedAt: now,
      });
      this.flushReports();
      return;
    }
    c.state = "running";
    c.startedAt = now;
    c.uncertaintyAtStart = bound;
    c.timerLateMs = now - bound - c.fireAt;
    c.hostLateMs = Date.now() - c.fireAt;
    c.runs++;
    this.ctx.counters.starts++;
    this.startedUnreported.push(c);
    this.ctx.started(this);
  }
}
