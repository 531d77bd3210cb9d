import { existsSync } from "node:fs";
import { type Clock, systemClock, type TimerHandle } from "../shared/clock.js";
import { ClockSync, type ClockSyncOptions } from "../shared/clock-sync.js";
import { newId } from "../shared/ids.js";
import { envelope } from "../shared/message.js";
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  type Dispatch,
  type DownMessage,
  decodeAll,
  encode,
  MAX_BATCH_REPORTS,
  type ProtocolError,
  type Report,
  type Topics,
  topics,
} from "../shared/protocol/index.js";
import { MAX_SEAL_BYTES } from "../shared/protocol/mac.js";
import { type AgentConfig, journalPath, LEGACY_JOURNAL_PATH } from "./config.js";
import { type Handler, HandlerRegistry } from "./handlers/registry.js";
import { buildHandlers, type OfferedHandlers } from "./handlers/set.js";
import { heartbeatAfterWelcome } from "./heartbeat.js";
import { Journal, type ReportBody } from "./journal/journal.js";
import { AgentAuth, type AuthRefusal } from "./link/auth.js";
import { AgentLink } from "./link/mqtt-link.js";
import { transportsFor } from "./link/transport.js";
import { nativeTarget } from "./native-target.js";
import { PARTS } from "./parts/included.js";
import type { AgentParts } from "./parts/types.js";
import { ReplayGate } from "./replay-gate.js";
import { Executor } from "./runner/executor.js";
import { AgentTime } from "./time.js";
import { outcomeReport, Updater } from "./update/updater.js";

export type AgentLogger = (
  level: "debug" | "info" | "warn" | "error",
  msg: string,
  fields?: Record<string, unknown>,
) => void;

export interface AgentDeps {
  clock?: Clock;
  log?: AgentLogger;
  /** Offer exactly these handlers instead of those the config turns on (tests). */
  handlers?: readonly Handler<unknown>[];
  /** Bundle identity reported in hello. @default { version: "dev", sha256: "dev" } */
  bundle?: { version: string; sha256: string };
  /** The handlers and features built in. @default this agent's (agent/parts/included.ts) */
  parts?: AgentParts;
  /** The better-sqlite3 native binding's path, in a bundle (it has no node_modules). */
  nativeBinding?: string | undefined;
  /** Where the journal's checkpoint thread imports better-sqlite3 from (a bundle: itself). */
  sqliteModule?: string | undefined;
  /** Options of the clock estimate (tests: a shorter resampleAfterMs). */
  clockSync?: ClockSyncOptions;
  /**
   * Set when the A/B launcher started this agent (docs/rollouts.md, "Agent updates"): the
   * install root and this agent's file. The agent then offers `agent.update`.
   */
  update?:
    | {
        root: string;
        self: string;
        installer: () => Promise<typeof import("./update/installer.js")>;
      }
    | undefined;
  /** Ends the process for a restart into an update. @default process.exit */
  exit?: (code: number) => void;
}

/** Exit status asking systemd for a restart (EX_TEMPFAIL), after switching to an update. */
export const RESTART_EXIT = 75;

/** How often hello is repeated until a welcome arrives (the coordinator may start later). */
const HELLO_RETRY_MS = 2_000;

/**
 * Dispatches journaled per commit (per turn of the event loop) when they come as messages of
 * their own. A coordinator sends a poll's worth at once (about 100 per agent at 2,000 fires/s);
 * journaling 64 of them held the loop about 8 ms, long enough to make the wheel's starts due
 * meanwhile late. Batches of 16 hold it about 2 ms and cost a few more commits. A batch of
 * commands is never split (docs/protocol.md, "Batches of commands"): its dispatches are one
 * commit, answered by one batch of `accepted`, and the coordinator chose its size.
 */
const DISPATCH_BATCH = 16;

/**
 * The largest down payload this agent reads, in bytes, offered in its hello as `batchBytes`: the
 * protocol's payload limit, which is what the decoder enforces (the link reads packets up to
 * 1 MiB only so that a larger one is skipped and counted rather than ending the connection).
 */
const MAX_DOWN_BYTES = DEFAULT_MAX_PAYLOAD_BYTES;

/** A batch of reports stays under this many bytes whatever the coordinator would read. */
const MAX_BATCH_BYTES = 60_000;

/** What publishUp is told a report's JSON text is (only its text is sent). */
const REPORT = { type: "report" } as const;

/**
 * The edge agent: registers, receives dispatches, fires them from its own wheel, runs handlers
 * and reports through the journal's outbox, re-sent until the coordinator acknowledges. Commands
 * and reports survive a restart.
 */
export class Agent {
  readonly instanceId = newId("i");
  private readonly clock: Clock;
  private readonly log: AgentLogger;
  private readonly topics: Topics;
  private readonly sync: ClockSync;
  private readonly journal: Journal;
  private readonly link: AgentLink;
  private readonly executor: Executor;
  private readonly handlers: HandlerRegistry;
  private readonly device: OfferedHandlers;
  private readonly time: AgentTime;
  private welcomed = false;
  /** The largest batch of reports the coordinator reads, in bytes (its welcome); 0: none. */
  private batchBytes = 0;
  private heartbeatMs: number;
  /** How far apart heartbeats may be while idle (the welcome's `idleHeartbeatMs`; 0: never). */
  private idleHeartbeatMs = 0;
  /** The last heartbeat sent said `idle`, so the next may be `idleHeartbeatMs` off. */
  private idleSent = false;
  private helloTimer: TimerHandle | undefined;
  private heartbeatTimer: TimerHandle | undefined;
  private stopped = false;
  /** See {@link arrivedAt}. */
  private turnArrivedAt: number | undefined;
  /**
   * Dispatches (and the rejections of invalid ones) received since the last batch, one group
   * per down payload, and the highest ack (see flushBatch).
   */
  private pendingDispatches: (Dispatch | ReportBody)[][] = [];
  private pendingAck = 0;
  /** An ack since the last batch asked for a replay (applied after the ack prunes the outbox). */
  private pendingReplay = false;
  private batchScheduled = false;
  /** Re-sends of the outbox, at most one per window however often they are asked for. */
  private readonly replays: ReplayGate;
  /** Set on SIGTERM: every heartbeat from then on says so (the coordinator routes nothing here). */
  private shuttingDown = false;
  private stopping: Promise<void> | undefined;
  /** Seq of the oldest unacknowledged report at the previous heartbeat. */
  private lastOldestSeq: number | undefined;
  private ackStallSince = 0;
  private readonly counters = {
    invalidMessages: 0,
    dispatches: 0,
    foreignAcks: 0,
    authRefused: 0,
  };
  /** Message authentication, when the agent holds an identity. */
  private readonly auth: AgentAuth | undefined;
  /** `agent.update` and what outlives its restart, in an A/B install. */
  private readonly updater: Updater | undefined;
  private readonly target = nativeTarget();
  private readonly exit: (code: number) => void;
  /** When each kind of refusal was last logged: at most one line per kind and minute. */
  private readonly refusalLogged = new Map<string, number>();

  constructor(
    private readonly config: AgentConfig,
    deps: AgentDeps = {},
  ) {
    this.clock = deps.clock ?? systemClock;
    this.log = deps.log ?? (() => {});
    this.topics = topics(config.mqtt.prefix);
    this.heartbeatMs = config.heartbeatMs;
    this.sync = new ClockSync(deps.clockSync);
    this.time = new AgentTime(this.clock, this.sync);
    const parts = deps.parts ?? PARTS;
    this.device = buildHandlers(parts.handlers, config.handlers, parts.features);
    this.handlers = new HandlerRegistry(deps.handlers ?? this.device.handlers);
    const path = journalPath(config);
    if (config.journal.path === undefined && !existsSync(path) && existsSync(LEGACY_JOURNAL_PATH)) {
      // Not taken over silently: it may be another agent's (that is how two agents came to share
      // one). Said once, where an operator upgrading a device will look.
      this.log(
        "warn",
        `found ${LEGACY_JOURNAL_PATH} (the journal's default name before it named the agent); starting a new journal ${path}. Set journal.path to ${LEGACY_JOURNAL_PATH} to keep using the old one`,
      );
    }
    this.journal = new Journal({
      path,
      agentId: config.agentId,
      nativeBinding: deps.nativeBinding,
      synchronous: config.journal.synchronous,
      syncStart: config.journal.syncStart,
      checkpoint: config.journal.checkpoint,
      sqliteModule: deps.sqliteModule,
      log: (level, message) => this.log(level, message),
      maxOpen: config.capacity.maxPending,
      maxOutbox: config.journal.maxOutbox,
      retainMs: config.journal.retainMs,
      now: () => this.coordNow(),
    });
    this.replays = new ReplayGate(this.clock, () => this.replayOutbox());
    const bundle = deps.bundle ?? { version: "dev", sha256: "dev" };
    this.bundle = bundle;
    const identity = config.identity;
    if (identity !== undefined) {
      this.auth = new AgentAuth(
        { generation: identity.generation, key: Buffer.from(identity.key, "base64url") },
        config.security.freshnessMs,
      );
    }
    this.exit = deps.exit ?? ((code) => process.exit(code));
    if (deps.update && identity?.bundlePublicKey) {
      this.updater = new Updater({
        ...deps.update,
        agentId: config.agentId,
        key: Buffer.from(identity.key, "base64url"),
        generation: identity.generation,
        bundlePublicKey: identity.bundlePublicKey,
        version: bundle.version,
        target: this.target,
        coordNow: () => this.coordNow(),
        restart: (executionId) => this.restartForUpdate(executionId),
        log: this.log,
      });
      this.handlers.add(this.updater.handler as Handler<unknown>);
    } else if (deps.update) {
      this.log(
        "warn",
        "agent.update is not offered: the identity file has no bundlePublicKey to check bundles with",
      );
    }
    const auth = this.auth;
    this.link = new AgentLink({
      url: config.mqtt.url,
      agentId: config.agentId,
      topics: this.topics,
      keepaliveS: config.mqtt.keepaliveS,
      username: config.mqtt.username ?? identity?.mqtt.username,
      password: config.mqtt.password ?? identity?.mqtt.password,
      ...(auth === undefined
        ? {}
        : {
            seal: (topic: string, body: Buffer, at?: number) =>
              auth.seal(topic, body, this.coordNow(), at),
            now: () => this.coordNow(),
          }),
      reconnect: config.mqtt.reconnect,
      will: () => this.presence("offline"),
      transports: transportsFor(parts.features),
    });
    this.executor = new Executor({
      clock: this.clock,
      handlers: this.handlers,
      coordNow: () => this.coordNow(),
      toMono: (t) => this.time.toMono(t),
      uncertaintyMs: (at) => this.sync.uncertaintyAt(at - this.sync.offsetMs),
      concurrency: config.capacity.concurrency,
      queue: config.capacity.queue,
      tickMs: config.tickMs,
      wheelSlots: config.wheelSlots,
      journal: this.journal,
      envelope: (body, seq) => ({ ...envelope(body, this.coordNow()), seq }) as Report,
      // The executor calls this only once the report's transaction has committed.
      publish: (report) => {
        this.notIdle();
        if (this.welcomed) {
          this.publish(() => this.link.publishUp(report, this.journal.encoded(report)));
        }
      },
      publishBatch: (reports) => this.publishReports(reports),
      log: this.log,
      ...(this.updater ? { recovered: (row, at) => this.updater?.recovered(row, at) } : {}),
    });
  }

  private readonly bundle: { version: string; sha256: string };

  /** Coordinator time as this agent estimates it (rule 4). */
  coordNow(): number {
    return this.time.coordNow();
  }

  get stats(): {
    invalidMessages: number;
    dispatches: number;
    /** Acks ignored because they named another journal. */
    foreignAcks: number;
    /** Down messages refused by authentication (no valid MAC, replayed, outside the window). */
    authRefused: number;
    /** Outbox replays sent on request, and requests folded into one of them. */
    replays: number;
    replaysCoalesced: number;
    outboxDepth: number;
    welcomed: boolean;
  } {
    return {
      ...this.counters,
      replays: this.replays.counts.replays,
      replaysCoalesced: this.replays.counts.coalesced,
      outboxDepth: this.journal.outboxDepth,
      welcomed: this.welcomed,
    };
  }

  start(): void {
    // The estimate of the coordinator's clock the last process of this boot had, aged, until
    // this one has a sample: recovered commands start on it, not on this device's own clock
    // (offset 0), which would start them early by as much as that clock is ahead.
    const kept = this.journal.clock;
    if (kept) {
      const [o, r, a] = JSON.parse(kept) as number[];
      const c = this.sinceBoot();
      this.sync.restore({
        offsetMs: (o as number) - c,
        rttMs: r as number,
        atMs: (a as number) + c,
      });
    }
    const recovered = this.executor.recover();
    if (recovered.rescheduled + recovered.interrupted + recovered.expired + recovered.settled > 0) {
      this.log("info", "recovered journaled commands", { ...recovered });
    }
    this.link.start({
      ready: () => this.onReady(),
      message: (topic, payload) => this.onMessage(topic, payload),
      // Over the MQTT packet limit (1 MiB), so skipped unread: rejected and counted like any
      // payload over the protocol's limit.
      tooLarge: (topic, bytes) =>
        this.rejected(topic, {
          code: "AX_PROTO_TOO_LARGE",
          message: `payload is ${bytes} bytes, more than the limit of ${MAX_DOWN_BYTES}`,
        }),
      down: () => {
        this.welcomed = false;
      },
      // Said once a minute at most, and at once when the reason changes: a refused login or a
      // certificate the agent does not trust is retried for ever, and would otherwise say nothing.
      failed: (err) => {
        const now = this.clock.monoNow();
        if (err.message === this.linkFailure && now - this.linkFailureAt < 60_000) return;
        this.linkFailure = err.message;
        this.linkFailureAt = now;
        this.log("warn", `cannot connect to the broker: ${err.message}`, {
          code: "AX_LINK_FAILED",
        });
      },
    });
  }

  /** The last connect failure logged, and when (monotonic ms). */
  private linkFailure = "";
  private linkFailureAt = Number.NEGATIVE_INFINITY;

  private presence(status: "online" | "offline"): Buffer {
    return encode(
      envelope({ type: "presence", status, instanceId: this.instanceId }, this.coordNow()),
    );
  }

  private onReady(): void {
    if (this.stopped) return;
    this.welcomed = false;
    this.publish(() => this.link.publishPresence(this.presence("online")));
    this.sendHello();
  }

  private sendHello(): void {
    this.clock.clearTimer(this.helloTimer);
    this.helloTimer = undefined;
    if (this.stopped || this.welcomed || !this.link.connected) return;
    this.executor.flush(); // lastSeq below counts what already happened
    const sentAt = this.coordNow();
    this.sync.stamp(sentAt);
    const c = this.config;
    this.publish(() =>
      this.link.publishUp(
        envelope(
          {
            type: "hello",
            agentId: c.agentId,
            instanceId: this.instanceId,
            journalId: this.journal.journalId,
            lastSeq: this.journal.lastSeq,
            profile: c.profile,
            bundle: this.bundle,
            handlers: this.handlers.names(),
            capacity: { concurrency: c.capacity.concurrency, queue: c.capacity.queue },
            tags: c.tags,
            batchBytes: MAX_DOWN_BYTES,
            target: this.target,
          },
          sentAt,
        ),
      ),
    );
    this.helloTimer = this.clock.setTimer(() => this.sendHello(), HELLO_RETRY_MS);
  }

  private onMessage(topic: string, payload: Buffer): void {
    if (this.stopped) return;
    try {
      this.handleMessage(topic, payload);
    } catch (err) {
      // A message must never take the agent down; what failed is logged and the work it
      // concerns is recovered from the journal.
      this.log("error", `handling a message failed: ${(err as Error).message}`, { topic });
    }
  }

  /**
   * When the messages being handled arrived (local time): read once per turn of the loop, so
   * every message of one read from the socket has the time it arrived, not the time the ones
   * before it in that read were done with (a clock sample behind a burst of dispatches).
   */
  private arrivedAt(): number {
    let at = this.turnArrivedAt;
    if (at === undefined) {
      at = this.time.localNow();
      this.turnArrivedAt = at;
      queueMicrotask(() => {
        this.turnArrivedAt = undefined;
      });
    }
    return at;
  }

  /**
   * One down payload: a message, or a batch of commands handled item by item, in order, each as
   * if it had come alone. A bad item costs only itself; its dispatches are journaled together.
   */
  private handleMessage(topic: string, payload: Buffer): void {
    const receivedLocal = this.arrivedAt();
    let body = payload;
    let signedAt: number | undefined;
    // The limit is the sealed payload's, checked before anything reads it (protocol.md, "Size
    // limit"): the coordinator keeps its batches the seal's 82 bytes under it.
    if (payload.byteLength > MAX_DOWN_BYTES) {
      this.rejected(topic, {
        code: "AX_PROTO_TOO_LARGE",
        message: `payload is ${payload.byteLength} bytes, more than the limit of ${MAX_DOWN_BYTES}`,
      });
      return;
    }
    if (this.auth !== undefined) {
      const opened = this.auth.open(topic, payload, this.coordNow());
      if (!opened.ok) {
        this.refused(topic, opened.error);
        return;
      }
      body = opened.body;
      signedAt = opened.at;
    }
    const results = decodeAll(topic, body, {
      prefix: this.topics.prefix,
      maxBytes: MAX_DOWN_BYTES,
    });
    const [first] = results;
    const type = first?.ok && results.length === 1 ? first.value.message.type : undefined;
    // One signing time for the whole payload; a welcome or time (never in a batch) is exempt.
    // Judged only once a clock sample says what the coordinator's time is.
    if (
      signedAt !== undefined &&
      this.sync.sampleCount > 0 &&
      type !== "welcome" &&
      type !== "time"
    ) {
      const stale = this.auth?.stale(signedAt, this.coordNow());
      if (stale !== undefined) {
        this.refused(topic, stale);
        return;
      }
    }
    let group: (Dispatch | ReportBody)[] = [];
    for (const r of results) {
      if (!r.ok) {
        this.rejected(topic, r.error);
        const e = r.error;
        // Rule 6: an invalid dispatch whose id and round can be read is answered `rejected`.
        if (e.type === "dispatch" && e.executionId !== undefined && e.round !== undefined) {
          group.push({
            type: "rejected",
            executionId: e.executionId,
            round: e.round,
            reason: "invalid_dispatch",
            message: e.message.slice(0, 1024),
          });
        }
        continue;
      }
      if (r.value.channel !== "down") continue;
      const m = r.value.message;
      if (m.type === "dispatch") {
        this.counters.dispatches++;
        group.push(m);
        continue;
      }
      if (m.type === "cancel" || m.type === "query") {
        // In order: the dispatches before it (in this payload or earlier in this turn) are
        // journaled first, so a cancel right behind its dispatch finds it.
        if (group.length > 0) this.pendingDispatches.push(group);
        group = [];
        if (this.pendingDispatches.length > 0) this.commitPending(true);
      }
      this.onDown(m, receivedLocal);
    }
    if (group.length > 0) {
      this.pendingDispatches.push(group);
      this.scheduleBatch();
    }
  }

  /**
   * A message that failed authentication: counted, logged at most once per reason and minute,
   * and never answered (an answer to a forged dispatch would be the agent's own signed word).
   */
  private refused(topic: string, e: AuthRefusal): void {
    this.counters.authRefused++;
    const now = this.clock.monoNow();
    const last = this.refusalLogged.get(e.code);
    if (last !== undefined && now - last < 60_000) return;
    this.refusalLogged.set(e.code, now);
    this.log("warn", `refused message: ${e.code}: ${e.message}`, {
      topic,
      refusedSoFar: this.counters.authRefused,
    });
  }

  /**
   * Local time less the boot's monotonic clock: constant in one process, and what carries an
   * estimate kept in the journal over to the next process's local time (a wall clock stepped in
   * between moves local time, not the boot's clock).
   */
  private sinceBoot(): number {
    return this.time.localNow() - Number(process.hrtime.bigint()) / 1e6;
  }

  /** A clock sample was taken: held starts may be sooner, and the estimate is kept. */
  private sampled(): void {
    this.executor.retime();
    const s = this.sync.best;
    const c = this.sinceBoot();
    if (s) this.journal.clock = JSON.stringify([s.offsetMs + c, s.rttMs, s.atMs - c]);
  }

  /** An invalid message: logged with its reason and counted, never acted on. */
  private rejected(topic: string, e: Pick<ProtocolError, "code" | "message">): void {
    this.counters.invalidMessages++;
    this.log("warn", `rejected message: ${e.code}: ${e.message}`, { topic });
  }

  /** A down message other than a dispatch (those are journaled in batches, see flushBatch). */
  private onDown(m: Exclude<DownMessage, Dispatch>, receivedLocal: number): void {
    switch (m.type) {
      case "welcome":
        if (m.instanceId !== this.instanceId) return; // an answer to another process's hello
        if (this.sync.addSample(m.clock, receivedLocal)) this.sampled();
        this.heartbeatMs = m.heartbeatMs;
        this.batchBytes = m.batchBytes ?? 0;
        this.idleHeartbeatMs = m.idleHeartbeatMs ?? 0;
        // What is still pending is journaled first and sent by the replay below (not twice).
        this.executor.flush();
        this.welcomed = true;
        this.confirmUpdate();
        this.clock.clearTimer(this.helloTimer);
        this.helloTimer = undefined;
        this.log("info", "welcomed by the coordinator", {
          offsetMs: this.sync.offsetMs,
          uncertaintyMs: this.sync.uncertaintyMs,
        });
        this.replayOutbox();
        this.replays.ran();
        // One heartbeat now, the next at a random point of the period (heartbeat.ts).
        this.scheduleHeartbeat(0, heartbeatAfterWelcome(this.heartbeatMs, Math.random()));
        return;
      case "time":
        // A better estimate may make a held start sooner than its place on the wheel.
        if (this.sync.addSample(m.clock, receivedLocal)) this.sampled();
        return;
      case "ack":
        if (m.journalId !== undefined && m.journalId !== this.journal.journalId) {
          // Meant for another journal of this agentId (before a wipe, say): its upTo says
          // nothing about this outbox, and pruning by it could lose reports never stored.
          this.counters.foreignAcks++;
          this.log("debug", "ignored an ack for another journal", { journalId: m.journalId });
          return;
        }
        // Acks come in bursts; only the highest matters, applied once per batch.
        this.pendingAck = Math.max(this.pendingAck, m.upTo);
        if (m.replay === true) this.pendingReplay = true;
        this.scheduleBatch();
        return;
      case "cancel":
        this.executor.cancel(m.executionId, m.round);
        return;
      case "query":
        this.executor.query(m.executionId, m.round);
        return;
    }
  }

  private scheduleBatch(): void {
    if (this.batchScheduled) return;
    this.batchScheduled = true;
    setImmediate(() => this.flushBatch());
  }

  private flushBatch(): void {
    this.batchScheduled = false;
    this.commitPending(false);
  }

  /**
   * Group commit: the dispatches that arrived together are journaled in one transaction, and
   * their answers are sent only after it commits (a dispatch is written before it is
   * acknowledged). Up to DISPATCH_BATCH of them, or one batch of commands whole, unless `all`
   * (a cancel or query waits behind them). The executor's pending changes (commands that
   * finished meanwhile) are written first in the same commit.
   */
  private commitPending(all: boolean): void {
    if (this.stopped) return;
    const batch: (Dispatch | ReportBody)[] = [];
    for (;;) {
      const next = this.pendingDispatches[0];
      if (next === undefined) break;
      if (!all && batch.length > 0 && batch.length + next.length > DISPATCH_BATCH) break;
      this.pendingDispatches.shift();
      batch.push(...next);
    }
    const ack = this.pendingAck;
    this.pendingAck = 0;
    const replay = this.pendingReplay;
    this.pendingReplay = false;
    if (this.pendingDispatches.length > 0) this.scheduleBatch();
    try {
      // Answers are sent by the executor once this commits.
      this.executor.batch(() => {
        if (ack > 0) this.journal.ack(ack);
        for (const d of batch) {
          if (d.type === "dispatch") this.dispatchOne(d);
          // An unreadable dispatch's rejection, outboxed in its place among the others, after
          // what the executor has pending, so seqs follow the order things happened.
          else this.executor.report(d);
        }
      });
    } catch (err) {
      // The batch rolled back: nothing in it was answered, so the coordinator redispatches.
      this.log(
        "error",
        `journaling a batch of ${batch.length} dispatches failed: ${(err as Error).message}`,
      );
    }
    // After the ack has pruned what it covers: what is left is every report with seq > upTo.
    if (replay) this.replays.request();
  }

  /**
   * One dispatch of a batch. Its journal write is a savepoint of the batch's transaction, rolled
   * back alone when it throws: a dispatch that cannot be journaled costs only itself, not the
   * dispatches that arrived with it (issue 15: one such payload delayed two others by 5 s).
   */
  private dispatchOne(d: Dispatch): void {
    try {
      this.executor.dispatch(d);
    } catch (err) {
      this.log("error", `journaling dispatch ${d.executionId} failed: ${(err as Error).message}`, {
        executionId: d.executionId,
        round: d.round,
      });
    }
  }

  /** The next heartbeat in `delayMs`, and the one after it `thenMs` after that one. */
  private scheduleHeartbeat(delayMs: number, thenMs?: number): void {
    this.clock.clearTimer(this.heartbeatTimer);
    this.heartbeatTimer = this.clock.setTimer(() => {
      try {
        this.heartbeat(thenMs);
      } catch (err) {
        this.log("error", `heartbeat failed: ${(err as Error).message}`);
        this.scheduleHeartbeat(this.heartbeatMs);
      }
    }, delayMs);
  }

  /**
   * Deletes a batch of terminal commands past retention, and while batches come back full, the
   * next on a later turn of the loop: one batch a heartbeat kept 40 a second at most (at 5 s),
   * and a busier agent's journal grew without end.
   */
  private purge(): void {
    if (!this.stopped && this.journal.purge(200) === 200) setImmediate(() => this.purge());
  }

  private heartbeat(nextMs = this.heartbeatMs): void {
    this.heartbeatTimer = undefined;
    if (this.stopped) return;
    this.executor.flush(); // the counts, the outbox and the purge below read the journal
    // Retention: terminal commands past their window go, a small batch at a time so no
    // synchronous chunk of agent work grows long. Before the heartbeat, not after it: its bytes
    // leave when this turn of the loop ends, and what runs between its sentAt (t0) and then
    // counts as round trip in its clock sample.
    this.purge();
    this.executor.tidy();
    this.idleSent = false;
    if (this.welcomed && this.link.connected) {
      const counts = this.executor.counts;
      // Idle: nothing runs, is held or waits for an ack; its next heartbeat may be far off.
      this.idleSent =
        this.idleHeartbeatMs > this.heartbeatMs &&
        !this.shuttingDown &&
        counts.open + counts.running + counts.queued + this.journal.outboxDepth === 0;
      const sentAt = this.coordNow();
      this.sync.stamp(sentAt);
      this.publish(() =>
        this.link.publishUp(
          envelope(
            {
              type: "heartbeat",
              instanceId: this.instanceId,
              running: this.executor.runningRefs(),
              queued: counts.queued,
              scheduled: counts.scheduled,
              load: counts.running / this.config.capacity.concurrency,
              clockOffset: {
                offsetMs: this.sync.offsetMs,
                uncertaintyMs: this.sync.uncertaintyAt(this.time.localNow()),
              },
              journal: { depth: counts.open, outboxDepth: this.journal.outboxDepth },
              ...(this.shuttingDown ? { shuttingDown: true } : {}),
              time: this.sync.wantsSample(this.time.localNow(), counts.scheduled > 0),
              ...(this.idleSent ? { idle: true } : {}),
            },
            sentAt,
          ),
          undefined,
          // QoS 0: a heartbeat lost with its connection is one missed heartbeat (presence takes
          // three), and one the broker need not acknowledge costs both ends and the broker less.
          0,
        ),
      );
      // Unacknowledged reports are re-sent in order (rule 1) when acknowledgements have stopped
      // moving for a while (three heartbeats, at least 5 s): the coordinator may have restarted
      // or dropped one beyond a gap. While they progress the coordinator is just behind, and
      // re-sending everything would bury it under duplicates.
      const oldest = this.journal.oldestReport();
      const now = this.clock.monoNow();
      if (oldest?.seq !== this.lastOldestSeq) {
        this.lastOldestSeq = oldest?.seq;
        this.ackStallSince = now;
      } else if (oldest && now - this.ackStallSince >= Math.max(3 * this.heartbeatMs, 5_000)) {
        this.replays.request();
        this.ackStallSince = now;
      }
    }
    // Idle, the period stretches to idleHeartbeatMs, in the same proportion after a welcome.
    this.scheduleHeartbeat(
      this.idleSent ? (nextMs * this.idleHeartbeatMs) / this.heartbeatMs : nextMs,
    );
  }

  /**
   * A report is made: no longer idle, so the next heartbeat comes within heartbeatMs (at a random
   * point of it, as after a welcome, so a fleet sent one command together does not heartbeat in step).
   */
  private notIdle(): void {
    if (!this.idleSent) return;
    this.idleSent = false;
    this.scheduleHeartbeat(heartbeatAfterWelcome(this.heartbeatMs, Math.random()));
  }

  /** Re-sends every report still in the outbox, in seq order, as the journal wrote it (rule 1). */
  private replayOutbox(): void {
    if (this.stopped || !this.welcomed) return;
    this.executor.flush();
    this.publishJsons(this.journal.pendingReportTexts());
  }

  /**
   * Sends the reports of one commit: in batches (a message per up to MAX_BATCH_REPORTS reports,
   * within the payload size the coordinator's welcome gave) to a coordinator that reads them,
   * one message each otherwise. Either way each report's outboxed JSON is what is sent.
   */
  private publishReports(reports: readonly Report[]): void {
    this.notIdle();
    if (!this.welcomed) return;
    this.publishJsons(reports.map((r) => this.journal.encoded(r) ?? JSON.stringify(r)));
  }

  /** Publishes reports given as their JSON texts, in order, batched as {@link publishReports} says. */
  private publishJsons(all: readonly string[]): void {
    // A sealed batch is its MAC member longer (shared/protocol/mac.ts).
    const limit =
      Math.min(this.batchBytes, MAX_BATCH_BYTES) - (this.auth === undefined ? 0 : MAX_SEAL_BYTES);
    let jsons: string[] = [];
    let bytes = 2; // the brackets
    const send = () => {
      const [first] = jsons;
      if (jsons.length === 1 && first !== undefined) {
        this.publish(() => this.link.publishUp(REPORT, first));
      } else if (jsons.length > 1) {
        const batch = jsons;
        this.publish(() => this.link.publishUpBatch(batch));
      }
      jsons = [];
      bytes = 2;
    };
    for (const json of all) {
      const size = Buffer.byteLength(json) + 1; // and its comma
      if (jsons.length > 0 && (jsons.length >= MAX_BATCH_REPORTS || bytes + size > limit)) send();
      jsons.push(json);
      bytes += size;
    }
    send();
  }

  private publish(fn: () => Promise<void>): void {
    fn().catch((err: unknown) => this.log("warn", `publish failed: ${(err as Error).message}`));
  }

  /**
   * Rule 9: refuse new work, let running work finish within the grace period, publish `offline`
   * and disconnect.
   */
  stop(graceMs: number = this.config.shutdownGraceMs): Promise<void> {
    this.stopping ??= this.shutdown(graceMs);
    return this.stopping;
  }

  /**
   * An update switched the install to its new version: stop as on SIGTERM, without waiting for
   * the update's own execution (the next process reports it), and exit for systemd to restart.
   */
  private restartForUpdate(executionId: string): void {
    this.executor.detach(executionId);
    this.log("info", "restarting into the update");
    this.stop().then(
      () => this.exit(RESTART_EXIT),
      () => this.exit(RESTART_EXIT),
    );
  }

  /** Welcomed: an update on trial in this very version has registered, so it succeeded. */
  private confirmUpdate(): void {
    const outcome = this.updater?.confirm(Date.now());
    if (!outcome) return;
    this.executor.finishHeld(outcome.executionId, outcome.round, (row) =>
      outcomeReport(row, outcome, this.coordNow()),
    );
  }

  private async shutdown(graceMs: number): Promise<void> {
    this.executor.shuttingDown = true;
    this.shuttingDown = true;
    // Said at once, not at the next period: the coordinator stops routing work here now. Sent
    // before anything else goes on: with nothing running the drain below ends in this turn, and
    // the timers it clears would have taken the heartbeat with them.
    this.scheduleHeartbeat(0);
    await new Promise<void>((r) => this.clock.setTimer(r, 0));
    await this.executor.drainRunning(graceMs);
    this.stopped = true;
    this.replays.close();
    this.clock.clearTimer(this.helloTimer);
    this.clock.clearTimer(this.heartbeatTimer);
    // Rule 9: say offline and disconnect first, so no message arrives for a closed journal.
    await this.link.publishPresence(this.presence("offline")).catch(() => {});
    await this.link.close();
    this.executor.close();
    this.journal.close();
    await this.device.close().catch(() => {});
  }
}
