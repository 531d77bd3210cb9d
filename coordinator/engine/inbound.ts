import type { ErrorCode } from "../../shared/errors.js";
import { snapshotOf, TERMINAL_STATES } from "../../shared/fsm.js";
import { envelope } from "../../shared/message.js";
import {
  type Decoded,
  type DownMessage,
  type Heartbeat,
  OUTCOMES,
  type Outcome,
  type ProtocolError,
  type Report,
  type UpMessage,
} from "../../shared/protocol/index.js";
import { LogThrottle } from "../domain/log-throttle.js";
import type { Refusal } from "../link/auth.js";
import { MAX_INBOUND_BACKLOG } from "../link/mqtt-link.js";
import type { EngineContext } from "./context.js";
import { inLanes, storeLanes } from "./execution-loop.js";
import { lookUpFollowed, recordFact } from "./facts.js";
import type { Fleet } from "./fleet.js";
import type { Leases } from "./leases.js";
import { applyEvent, applyEvents, type EventStep } from "./transitions.js";

/** Messages of one sender handled in one turn of the event loop, at most. */
export const INBOUND_CHUNK = 256;

/**
 * Executions of one chunk of reports applied at once on PostgreSQL: the whole chunk, so that
 * their reads share a statement and their writes fill the group commit's transactions. In the
 * dispatcher's 64 lanes a chunk of 256 waited for four reads and four commits in turn, and from
 * two agents at 1,250 fires/s the answers lagged behind the dispatches (start p50 0.06 and 2.7 s
 * in two runs; whole chunks, 6.5 and 4.5 ms).
 */
const PG_INBOUND_LANES = INBOUND_CHUNK;

/**
 * Reports held per agent because they arrived beyond a gap (a report not yet received), until the
 * gap is filled. Beyond this many the newest are let go: the agent's outbox still has them, and
 * the replay that fills the gap brings them again.
 */
export const MAX_AHEAD_REPORTS = 10_000;

/**
 * Times the first report held beyond a gap is sent again, the gap still open, before the reports
 * of the gap are taken as gone from the agent (see {@link Inbound.reports}).
 */
export const GAP_GONE_AFTER_RESENDS = 3;

/** At most one replay request per agent in this long: the first one already asks for everything. */
export const REPLAY_REQUEST_INTERVAL_MS = 1_000;

/**
 * A report that came authentic from its agent but could not be read: a bug of the agent's, or a
 * field this coordinator does not know. What it says cannot be applied, but its `seq` is the
 * agent's, so it is acknowledged in its turn. Held back, it would stop every report behind it for
 * good: the gap it leaves is replayed, and refused again, at every request.
 */
interface UnreadableReport {
  type: "unreadable";
  seq: number;
  /** "" when it could not be read. */
  executionId: string;
  round?: number;
  /** The `type` it was sent as, when that was a string. */
  sentAs?: string;
  code: ErrorCode;
  message: string;
}

/** What an agent's outbox holds, in seq order: reports, and those that could not be read. */
type InboundReport = Report | UnreadableReport;

/** An unreadable report in its agent's queue. */
interface Unreadable {
  channel: "unreadable";
  agentId: string;
  report: UnreadableReport;
}

/** A message waiting in its sender's queue, with when it arrived. */
interface Queued {
  decoded: Decoded | Unreadable;
  receivedAt: number;
}

/** The report in a message from an agent, if it is one (not a hello or heartbeat). */
function reportOf(d: Decoded | Unreadable): InboundReport | undefined {
  if (d.channel === "unreadable") return d.report;
  if (d.channel !== "up") return undefined;
  const m = d.message;
  return m.type === "hello" || m.type === "heartbeat" ? undefined : m;
}

/**
 * The report an invalid message was, if it can be acknowledged: protocol v1, a report (not a
 * `hello` or `heartbeat`), its `seq` readable, and refused for a field or its type, not for its
 * version or its sender.
 */
function unreadableReport(error: ProtocolError): UnreadableReport | undefined {
  if (error.seq === undefined) return undefined;
  if (error.code !== "AX_PROTO_INVALID_FIELD" && error.code !== "AX_PROTO_UNKNOWN_TYPE") {
    return undefined;
  }
  if (error.type === "hello" || error.type === "heartbeat") return undefined;
  return {
    type: "unreadable",
    seq: error.seq,
    executionId: error.executionId ?? "",
    ...(error.round === undefined ? {} : { round: error.round }),
    ...(error.type === undefined ? {} : { sentAs: error.type.slice(0, 64) }),
    code: error.code,
    message: error.message.slice(0, 512),
  };
}

/** Executions whose `finished` report could not be read, remembered for their agent's answer. */
const MAX_UNREADABLE_FINISHES = 10_000;

/**
 * Everything that arrives from agents. Messages of one agent are handled one at a time, in order,
 * so report seqs are applied in the order the agent numbered them. They are taken in bursts —
 * what arrived by the next turn of the event loop — so that consecutive reports about one
 * execution are applied as one write.
 */
export class Inbound {
  private readonly queues = new Map<string, { items: Queued[]; done: Promise<void> }>();
  /** Messages handed in and not yet handled, over all queues. */
  private waiting = 0;
  /** Called when the backlog has fallen to half the link's limit (it may read on). */
  onCaughtUp: () => void = () => {};
  /** Called after a report changed an execution, so the dispatcher can act at once. */
  onChange: () => void = () => {};
  /** Called for a message on an event topic. */
  onEvent:
    | ((name: string, msgId: string, payload: Record<string, unknown>) => Promise<unknown>)
    | undefined;

  /** Reports that arrived beyond a gap, per agent, by seq (with the journal they belong to). */
  private readonly ahead = new Map<
    string,
    {
      journalId: string;
      bySeq: Map<number, InboundReport>;
      /** The lowest seq held, and how many bursts sent it again while it stayed the lowest. */
      head?: number;
      resends?: number;
    }
  >();
  /** When a replay was last asked of each agent (wall ms). */
  private readonly replayAskedAt = new Map<string, number>();
  /** Agents heard from (a heartbeat) since the link last came up. */
  private readonly heardSinceUp = new Set<string>();
  /** Refusals logged: once per source and reason a minute. */
  private readonly refusalLogged = new LogThrottle();
  /**
   * Invalid messages logged: once per topic and code a minute, unreadable reports once per agent
   * a minute. Each is still counted, and announced on the event bus.
   */
  private readonly invalidLogged = new LogThrottle();
  /** When each agent was last sent a clock sample for a stale message. */
  private readonly resyncAt = new Map<string, number>();
  /**
   * Executions whose `finished` could not be read, with the round and why: the agent is asked
   * for the execution's state, and its answer settles the outcome (see {@link unreadable}).
   */
  private readonly unreadableFinishes = new Map<string, { round: number; why: string }>();

  /**
   * Executions of one chunk of an agent's reports applied side by side: one after the other on
   * SQLite (see {@link storeLanes}), {@link PG_INBOUND_LANES} at once on PostgreSQL.
   */
  private readonly lanes: number;

  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
    private readonly leases: Leases,
  ) {
    this.lanes = storeLanes(ctx.config) <= 1 ? 1 : PG_INBOUND_LANES;
  }

  /**
   * The link (re)connected. What agents published while it was down may be lost (a broker that
   * lost the session, a first start): each agent's first heartbeat from now on tells whether its
   * outbox holds reports, and if so it is asked to re-send them at once, rather than after its own
   * stall timer (seconds).
   */
  linkUp(_at: number): void {
    this.heardSinceUp.clear();
  }

  /**
   * Who handles which agent moved (`cluster.dispatch` `shared`): what is held of an agent that
   * left (reports beyond a gap, having been heard since the link came up) is forgotten, since it
   * is another's now, and should it come back, what it sent meanwhile was another's to
   * acknowledge. An agent taken up here was not heard here, so it is asked for its outbox at its
   * next heartbeat, as after the link's return. The agents that stayed keep what they had.
   */
  shareMoved(): void {
    const share = this.ctx.share;
    for (const id of this.ahead.keys()) if (!share?.agent(id)) this.ahead.delete(id);
    for (const id of this.heardSinceUp) if (!share?.agent(id)) this.heardSinceUp.delete(id);
  }

  /** Messages handed in and not yet handled. */
  get backlog(): number {
    return this.waiting;
  }

  handle(decoded: Decoded | Unreadable, receivedAt: number): void {
    // Several coordinators, each with its share (`cluster.dispatch` `shared`): the others'
    // agents are theirs to handle (their messages reach every coordinator). An event is every
    // coordinator's: the first to record it in the store fires it, so none is lost while the
    // shares move.
    const share = this.ctx.share;
    if (share !== undefined && decoded.channel !== "event" && !share.agent(decoded.agentId)) {
      return;
    }
    const key = decoded.channel === "event" ? `event:${decoded.name}` : decoded.agentId;
    const queued = this.queues.get(key);
    // A heartbeat with nothing ahead of it from its agent is handled at once, in memory: at
    // 10,000 agents these are 2,000 messages a second, and a queue, a turn of the loop and a
    // chain of promises each were most of what one cost.
    if (
      queued === undefined &&
      decoded.channel === "up" &&
      decoded.message.type === "heartbeat" &&
      this.fleet.heartbeatInMemory(decoded.agentId, decoded.message, receivedAt)
    ) {
      this.heartbeatHandled(decoded.agentId, decoded.message, receivedAt);
      return;
    }
    this.waiting++;
    if (queued) {
      queued.items.push({ decoded, receivedAt });
      return;
    }
    const q = { items: [{ decoded, receivedAt }], done: Promise.resolve() };
    this.queues.set(key, q);
    // Wait one turn of the loop, so the rest of what the socket delivered joins the burst.
    q.done = new Promise<void>((resolve) => setImmediate(resolve)).then(() =>
      this.drainQueue(key, q),
    );
  }

  private async drainQueue(key: string, q: { items: Queued[] }): Promise<void> {
    try {
      while (q.items.length > 0) {
        const items = q.items.splice(0, INBOUND_CHUNK);
        try {
          await this.burst(items);
        } finally {
          this.waiting -= items.length;
          if (this.waiting <= MAX_INBOUND_BACKLOG / 2) this.onCaughtUp();
        }
        // Handling a report is bookkeeping; firing and dispatching are what must be on time.
        // Yield to the event loop between chunks, so the firing wheel's and the dispatcher's
        // timers run in between: a backlog of thousands of reports handled in one go held the
        // loop for up to 450 ms, and dispatches fell behind their fire times.
        if (q.items.length > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } finally {
      // Nothing runs between the loop's last check and here: a message arriving later starts a
      // new queue.
      this.queues.delete(key);
      // The agent's burst is handled: acknowledge it once, with the highest seq stored.
      this.flushAck(key);
    }
  }

  /**
   * Handles a burst in order. Consecutive reports go together: reports about different
   * executions commute, so each execution's reports in the run are applied as one write.
   */
  private async burst(items: Queued[]): Promise<void> {
    for (let i = 0; i < items.length; ) {
      const { decoded, receivedAt } = items[i] as Queued;
      let end = i + 1;
      if (reportOf(decoded)) {
        while (end < items.length && reportOf((items[end] as Queued).decoded)) end++;
      }
      const run = items.slice(i, end);
      i = end;
      try {
        if (decoded.channel !== "event" && decoded.channel !== "presence" && reportOf(decoded)) {
          await this.reports(
            decoded.agentId,
            run.map((x) => reportOf(x.decoded) as InboundReport),
          );
        } else if (decoded.channel !== "unreadable") {
          await this.handleMessage(decoded, receivedAt);
        }
      } catch (err) {
        const type = decoded.channel === "unreadable" ? "report" : decoded.message.type;
        this.ctx.log("error", `handling a ${type} failed: ${(err as Error).message}`, {
          count: run.length,
        });
      }
    }
  }

  /** Acks owed per agent; sent when its queue of messages drains (or every 64 reports). */
  private readonly owedAcks = new Map<string, { upTo: number; count: number }>();

  private owe(agentId: string, upTo: number): void {
    const owed = this.owedAcks.get(agentId) ?? { upTo: 0, count: 0 };
    owed.upTo = Math.max(owed.upTo, upTo);
    owed.count++;
    this.owedAcks.set(agentId, owed);
    if (owed.count >= 64) this.flushAck(agentId);
  }

  private flushAck(agentId: string): void {
    const owed = this.owedAcks.get(agentId);
    if (!owed) return;
    this.owedAcks.delete(agentId);
    this.fleet
      .persistAcked(agentId)
      .then(() => this.sendAck(agentId, owed.upTo))
      .catch((err: unknown) =>
        this.ctx.log("warn", `storing acked seq of ${agentId} failed: ${(err as Error).message}`, {
          agentId,
        }),
      );
  }

  /**
   * An undecodable message: rejected, logged with its reason, counted; never a crash. One that
   * `sender` sent (it passed authentication, on its `up` topic) and that was a report whose
   * `seq` could be read joins that agent's reports in their order, to be acknowledged in its turn
   * (and logged then): {@link UnreadableReport}.
   */
  invalid(error: ProtocolError, topic: string, sender?: string): void {
    const at = this.ctx.clock.wallNow();
    const report = sender === undefined ? undefined : unreadableReport(error);
    if (sender !== undefined && report !== undefined) {
      this.handle({ channel: "unreadable", agentId: sender, report }, at);
    } else if (this.invalidLogged.allow(`${topic}\u0000${error.code}`, at)) {
      this.ctx.log("warn", `rejected message on ${topic}: ${error.code}: ${error.message}`, {
        topic,
        code: error.code,
      });
    }
    this.ctx.store.bumpCounter("invalid_messages").catch(() => {});
    this.ctx.events.emit("invalidMessage", {
      topic,
      code: error.code,
      message: error.message,
      at: this.ctx.clock.wallNow(),
    });
  }

  /**
   * A message that failed authentication: it changes nothing. Counted (ax_auth_refused_total),
   * logged at most once per source and reason a minute, so a flood of forgeries cannot flood the
   * log. An authentic hello or heartbeat refused as stale is answered with a clock sample (once a
   * second at most), so an agent whose clock is off corrects it instead of being refused forever.
   */
  refused(error: Refusal, topic: string, stale?: Decoded): void {
    const at = this.ctx.clock.wallNow();
    this.ctx.events.emit("refusedMessage", {
      topic,
      code: error.code,
      source: error.source,
      message: error.message,
      at,
    });
    // A quiet refusal's debug line must not use up the minute's warning of its source and code.
    const quiet = error.quiet === true;
    if (
      this.refusalLogged.allow(`${error.source}\u0000${error.code}${quiet ? "\u0000q" : ""}`, at)
    ) {
      const level = quiet ? "debug" : "warn";
      this.ctx.log(level, `refused message on ${topic}: ${error.code}: ${error.message}`, {
        topic,
        code: error.code,
        source: error.source,
      });
    }
    if (stale === undefined || stale.channel !== "up" || error.resync === undefined) return;
    const m = stale.message;
    if (m.type !== "hello" && m.type !== "heartbeat") return;
    const lastSync = this.resyncAt.get(stale.agentId) ?? Number.NEGATIVE_INFINITY;
    if (at - lastSync < 1_000) return;
    if (this.resyncAt.size >= 10_000) this.resyncAt.clear();
    this.resyncAt.set(stale.agentId, at);
    this.publish(
      stale.agentId,
      envelope({ type: "time", clock: { t0: m.sentAt, t1: at, t2: this.ctx.clock.wallNow() } }, at),
    );
  }

  /** Resolves when every message received so far has been handled. */
  async drain(): Promise<void> {
    await Promise.all([...this.queues.values()].map((q) => q.done));
  }

  /**
   * Handles one message from an agent, other than a run of reports taken together: its presence
   * (online, or its Last Will), a hello, a heartbeat, or a report on its own.
   */
  private async handleMessage(d: Decoded, receivedAt: number): Promise<void> {
    if (d.channel === "presence") {
      await this.fleet.presence(d.agentId, d.message.status, d.message.instanceId);
      return;
    }
    if (d.channel === "event") {
      await this.onEvent?.(d.name, d.message.msgId, d.message.payload ?? {});
      return;
    }
    if (d.channel !== "up") return; // down: our own traffic
    const m: UpMessage = d.message;
    this.fleet.heardFrom(d.agentId, m.sentAt);
    switch (m.type) {
      case "hello": {
        const rec = await this.fleet.hello(m, receivedAt);
        if (this.ahead.get(m.agentId)?.journalId !== rec.journalId) this.ahead.delete(m.agentId);
        this.heardSinceUp.add(m.agentId); // the welcome below makes it replay its outbox
        this.ctx.log("info", `agent ${m.agentId} registered (instance ${m.instanceId})`, {
          agentId: m.agentId,
        });
        // Not awaited: the broker's acknowledgement may sit behind this very backlog.
        this.publish(
          m.agentId,
          envelope(
            {
              type: "welcome",
              instanceId: m.instanceId,
              heartbeatMs: this.ctx.config.heartbeatMs,
              clock: { t0: m.sentAt, t1: receivedAt, t2: this.ctx.clock.wallNow() },
              // What the link reads: a batch of reports up to the payload limit.
              batchBytes: this.ctx.config.maxPayloadBytes,
              // An idle agent may heartbeat less often (protocol.md, heartbeat): offered only when
              // it is longer than the heartbeat.
              ...(this.ctx.config.idleHeartbeatMs > this.ctx.config.heartbeatMs
                ? { idleHeartbeatMs: this.ctx.config.idleHeartbeatMs }
                : {}),
            },
            this.ctx.clock.wallNow(),
          ),
        );
        // Tell the agent what is already stored, so it prunes its outbox and replays the rest.
        this.sendAck(m.agentId, rec.ackedSeq);
        this.onChange();
        return;
      }
      case "heartbeat": {
        if (!(await this.fleet.heartbeat(d.agentId, m, receivedAt))) return;
        this.heartbeatHandled(d.agentId, m, receivedAt);
        return;
      }
      default:
        await this.reports(d.agentId, [m]);
    }
  }

  /** What follows a heartbeat the fleet took: replay, leases, and a clock sample if asked. */
  private heartbeatHandled(agentId: string, m: Heartbeat, receivedAt: number): void {
    if (!this.heardSinceUp.has(agentId)) {
      this.heardSinceUp.add(agentId);
      if (m.journal.outboxDepth > 0) this.askReplay(agentId);
    }
    for (const ref of m.running) this.leases.renew(ref.executionId, ref.round, receivedAt);
    // A clock sample only when the agent's estimate needs one (docs/protocol.md, "How often a
    // sample"): at 10,000 agents an answer to every heartbeat was 2,000 publishes a second.
    if (m.time === false) return;
    this.publish(
      agentId,
      envelope(
        { type: "time", clock: { t0: m.sentAt, t1: receivedAt, t2: this.ctx.clock.wallNow() } },
        this.ctx.clock.wallNow(),
      ),
    );
  }

  /**
   * Rule 1: a report is applied once, in seq order. Already stored → acknowledged again and
   * dropped; the next expected → applied and acknowledged; beyond a gap → held until the gap is
   * filled, and the agent is asked to re-send from the gap (`ack` with `replay`). Reports about
   * one execution apply in their order, as one write; those about different executions are
   * independent. An ack never covers a report that was not applied.
   */
  private async reports(agentId: string, rs: InboundReport[]): Promise<void> {
    const agent = this.fleet.get(agentId);
    if (!agent) {
      await this.ctx.store.bumpCounter("reports_from_unknown_agents", rs.length);
      return;
    }
    // Several coordinators, each with its share: for a renewal's time after the share moved, the
    // one this agent left may still have applied and acknowledged its reports. A gap is then
    // no gap: the store's acked seq says how far they went, and the agent no longer has them.
    if (
      this.ctx.share !== undefined &&
      !this.ahead.has(agentId) &&
      Math.min(...rs.map((r) => r.seq)) > agent.ackedSeq + 1
    ) {
      await this.fleet.catchUpAcked(agentId);
    }
    let held = this.ahead.get(agentId);
    if (held?.journalId !== agent.journalId) {
      held = { journalId: agent.journalId, bySeq: new Map() };
    }
    let start = agent.ackedSeq + 1;
    let duplicates = 0;
    let headResent = false;
    for (const r of rs) {
      if (r.seq < start || held.bySeq.has(r.seq)) {
        duplicates++;
        if (r.seq === held.head) headResent = true;
      } else if (held.bySeq.size < MAX_AHEAD_REPORTS || r.seq < start + MAX_AHEAD_REPORTS) {
        held.bySeq.set(r.seq, r);
      }
    }
    if (duplicates > 0) {
      await this.ctx.store.bumpCounter("duplicate_reports", duplicates);
      this.owe(agentId, agent.ackedSeq);
    }
    if (headResent && !held.bySeq.has(start)) {
      held.resends = (held.resends ?? 0) + 1;
      const head = held.head as number;
      if (held.resends >= GAP_GONE_AFTER_RESENDS) {
        // The agent re-sends its outbox from its oldest report, and has sent this one again and
        // again without the ones before it: they are no longer in its outbox. Something
        // acknowledged them and forgot (a store restored from a backup older than the agent's
        // acknowledgements). Waiting for them would hold every report of this agent for ever.
        const gone = head - start;
        await this.ctx.store.bumpCounter("missing_reports", gone);
        this.ctx.log(
          "error",
          `reports ${start}–${head - 1} of ${agentId} are gone: its outbox starts at ${head}, so they were acknowledged before and the store does not have them (restored from an older backup?); going on from ${head}. What they said is lost: check the executions ${agentId} ran meanwhile.`,
          { agentId, from: start, to: head - 1 },
        );
        start = head;
      }
    }
    const byExecution = new Map<string, InboundReport[]>();
    let next = start;
    for (let r = held.bySeq.get(next); r !== undefined; r = held.bySeq.get(next)) {
      held.bySeq.delete(next);
      const list = byExecution.get(r.executionId);
      if (list) list.push(r);
      else byExecution.set(r.executionId, [r]);
      next++;
    }
    if (held.bySeq.size > 0) {
      // A gap: what follows it waits here, and the agent re-sends from the gap.
      let head = Number.POSITIVE_INFINITY;
      for (const seq of held.bySeq.keys()) if (seq < head) head = seq;
      if (head !== held.head) {
        held.head = head;
        held.resends = 0;
      }
      this.ahead.set(agentId, held);
      await this.ctx.store.bumpCounter("out_of_order_reports", rs.length - duplicates);
      this.askReplay(agentId);
    } else this.ahead.delete(agentId);
    if (byExecution.size === 0) return;
    // Acknowledged up to the report before the first that could not be applied (the agent
    // re-sends from there; what was applied after it is then known and changes nothing).
    // The executions are independent: on PostgreSQL they are applied side by side (each one's
    // reports still in order, as one write), so that their writes share transactions rather than
    // queue one round trip after the other behind a single agent's burst.
    let ackTo = next - 1;
    await inLanes(
      [...byExecution.values()],
      (group) => (group[0] as InboundReport).executionId,
      this.lanes,
      async (group) => {
        try {
          await this.applyReports(agentId, group);
        } catch (err) {
          const first = group[0] as InboundReport;
          ackTo = Math.min(ackTo, first.seq - 1);
          this.ctx.log(
            "error",
            `applying ${group.length} report(s) about ${first.executionId || "no execution"} failed: ${(err as Error).message}`,
            { agentId, executionId: first.executionId },
          );
        }
      },
    );
    if (ackTo < next - 1) {
      // What was held beyond the failure is dropped with it; the replay brings it all again.
      this.ahead.delete(agentId);
      this.askReplay(agentId);
    }
    if (ackTo <= agent.ackedSeq) return;
    this.fleet.ackedTo(agentId, ackTo);
    this.owe(agentId, ackTo);
    this.onChange();
  }

  /**
   * Asks the agent to re-send its outbox from the first report not stored (at most once per
   * {@link REPLAY_REQUEST_INTERVAL_MS}): an `ack` of what is stored, with `replay`.
   */
  private askReplay(agentId: string): void {
    const now = this.ctx.clock.wallNow();
    if (
      now - (this.replayAskedAt.get(agentId) ?? Number.NEGATIVE_INFINITY) <
      REPLAY_REQUEST_INTERVAL_MS
    ) {
      return;
    }
    this.replayAskedAt.set(agentId, now);
    this.ctx.store.bumpCounter("replay_requests").catch(() => {});
    this.fleet
      .persistAcked(agentId)
      .then(() => this.sendAck(agentId, this.fleet.get(agentId)?.ackedSeq ?? 0, true))
      .catch((err: unknown) =>
        this.ctx.log("warn", `asking ${agentId} to replay failed: ${(err as Error).message}`, {
          agentId,
        }),
      );
  }

  /** Applies in-order reports about one execution; their transitions as one write. */
  private async applyReports(agentId: string, rs: InboundReport[]): Promise<void> {
    const steps: EventStep[] = [];
    const stepReports: Report[] = [];
    // What a report says of its agent (busy, shutting down), acted on once its step applied: a
    // report of an older round, or replayed from an earlier process, changes nothing.
    const onApplied: ((() => void) | undefined)[] = [];
    let id = "";
    const flush = async () => {
      if (steps.length === 0) return;
      const outcomes = await applyEvents(this.ctx, id, steps.splice(0));
      if (outcomes.includes("conflict")) {
        // The execution changed under each of its writes (applyEvents gave up): nothing was
        // applied, so nothing may be acknowledged. The agent re-sends from the first.
        throw new Error(`execution ${id} changed under every write; not applied, asked again`);
      }
      const reports = stepReports.splice(0);
      const effects = onApplied.splice(0);
      for (const [i, outcome] of outcomes.entries()) {
        if (outcome === "applied") effects[i]?.();
      }
      // Facts outrank fences: a start or finish the state machine would not take (an older
      // round, or a record that had moved on) is a fact about the device, and is recorded.
      for (const [i, outcome] of outcomes.entries()) {
        const r = reports[i];
        if (r === undefined || (outcome !== "stale_round" && outcome !== "illegal")) continue;
        await this.lateFact(agentId, r);
      }
    };
    for (const report of rs) {
      if (report.type === "unreadable") {
        await flush();
        await this.unreadable(agentId, report);
        continue;
      }
      // The answer that settles a finish that could not be read stands in for that finish.
      let settles = this.settlesUnreadable(report);
      if (settles === undefined && this.mayAnswerUnreadable(report)) {
        await flush();
        settles = await this.settlesUnreadableOnRecord(agentId, report);
      }
      if (settles === null) continue;
      const r = settles ?? report;
      id = r.executionId;
      if (r.type === "finished" && r.outcome === "canceled") {
        // Which round the record follows may need reading back after a restart (facts.ts): a
        // later round cancelled on its agent must not end a record that follows an older one.
        const exec = await this.ctx.store.getExecution(id);
        if (exec) await lookUpFollowed(this.ctx, this.leases, exec, this.ctx.clock.wallNow());
      }
      if (r.type === "finished" && this.leases.ranRound(id, r.round) !== r.round) {
        // The record follows an older round that started (a fact adopted), and this round was
        // cancelled on its agent: its end is a fact about a round not followed, never the
        // record's end (a `finished canceled` would make it CANCELED while the other runs).
        await flush();
        await this.lateFact(agentId, r);
        continue;
      }
      if (r.type !== "progress" && r.type !== "state") stepReports.push(r);
      const current = this.fleet.fromCurrentProcess(agentId, r.seq);
      const busy = () => {
        if (current) this.fleet.markBusy(agentId, this.ctx.clock.wallNow());
      };
      switch (r.type) {
        case "accepted":
          onApplied.push(() => this.fleet.markAccepting(agentId));
          steps.push({ event: { type: "accepted", round: r.round } });
          break;
        case "busy":
          onApplied.push(busy);
          steps.push({ event: { type: "busy", round: r.round } });
          break;
        case "rejected":
          // "Not now": the agent is stopping (nothing more is routed to it) or its journal is
          // full (passed over like a busy agent); the execution waits instead of failing.
          onApplied.push(
            r.reason === "shutting_down"
              ? () => {
                  if (current) this.fleet.markDraining(agentId);
                }
              : r.reason === "journal_full"
                ? busy
                : undefined,
          );
          steps.push({
            event: { type: "rejected", round: r.round, reason: r.reason },
            patch: () => ({
              message: `rejected by ${agentId}: ${r.reason}${r.message ? `: ${r.message}` : ""}`,
            }),
            detail: { reason: r.reason },
          });
          break;
        case "started":
          this.leases.renew(id, r.round, this.ctx.clock.wallNow());
          onApplied.push(undefined);
          steps.push({
            event: { type: "started", round: r.round },
            patch: () => ({ startedAt: r.startedAt, lateMs: r.lateMs }),
          });
          break;
        case "finished":
          onApplied.push(undefined);
          steps.push({
            event: { type: "finished", round: r.round, outcome: r.outcome, retryable: r.retryable },
            patch: () => ({
              finishedAt: r.finishedAt,
              message: r.message,
              result: r.result ?? null,
              ...(r.startedAt === undefined ? {} : { startedAt: r.startedAt }),
            }),
            detail: {
              outcome: r.outcome,
              retryable: r.retryable,
              ...(r.startedAt === undefined ? {} : { startedAt: r.startedAt }),
              ...(r.interruptedPhase === undefined ? {} : { phase: r.interruptedPhase }),
            },
          });
          break;
        case "progress":
          this.leases.renew(id, r.round, this.ctx.clock.wallNow());
          break;
        case "state":
          await flush();
          await this.reconcile(agentId, r);
          break;
      }
    }
    await flush();
  }

  /**
   * An authentic report that could not be read, in its turn: counted, logged, and written to its
   * execution's timeline when it names one of this agent's (event `report_unreadable`); it
   * changes no state. When it was the `finished` of the round the record follows, the agent is
   * asked for the execution's state, and its answer stands in for the finish
   * ({@link settlesUnreadable}); without an answer the execution ends as any other whose finish
   * never came (its lease lapses, or its run times out).
   */
  private async unreadable(agentId: string, r: UnreadableReport): Promise<void> {
    const what = `${r.sentAs === undefined ? "report" : `${r.sentAs} report`} seq ${r.seq}`;
    const now = this.ctx.clock.wallNow();
    if (this.invalidLogged.allow(`unreadable\u0000${agentId}`, now)) {
      this.ctx.log(
        "warn",
        `${what} from ${agentId}${r.executionId ? ` about ${r.executionId}` : ""} could not be read, and is acknowledged without effect: ${r.code}: ${r.message}`,
        {
          agentId,
          seq: r.seq,
          code: r.code,
          ...(r.executionId ? { executionId: r.executionId } : {}),
        },
      );
    }
    // Counted with its timeline entry when it has one (one write: both or neither), else alone.
    const exec = r.executionId ? await this.ctx.store.getExecution(r.executionId) : undefined;
    if (!exec || (exec.agentId !== agentId && exec.targetAgentId !== agentId)) {
      await this.ctx.store.bumpCounter("unreadable_reports");
      return;
    }
    const entered = await this.ctx.store.applyTransition({
      executionId: exec.id,
      expected: { state: exec.state, round: exec.round },
      next: snapshotOf(exec),
      patch: {},
      at: now,
      event: "report_unreadable",
      agentId,
      detail: {
        seq: r.seq,
        ...(r.sentAs === undefined ? {} : { type: r.sentAs }),
        ...(r.round === undefined ? {} : { round: r.round }),
        code: r.code,
        reason: r.message,
      },
      counters: { unreadable_reports: 1 },
    });
    // The record moved meanwhile (a write of the same execution between the read and this one):
    // the report is counted all the same.
    if (!entered) await this.ctx.store.bumpCounter("unreadable_reports");
    if (
      r.sentAs !== "finished" ||
      r.round === undefined ||
      r.round !== exec.round ||
      exec.agentId !== agentId ||
      TERMINAL_STATES.has(exec.state)
    ) {
      return;
    }
    if (this.unreadableFinishes.size >= MAX_UNREADABLE_FINISHES) {
      const oldest = this.unreadableFinishes.keys().next().value as string;
      this.unreadableFinishes.delete(oldest);
    }
    this.unreadableFinishes.set(exec.id, { round: r.round, why: `${r.code}: ${r.message}` });
    this.ctx.store.afterCommit(() =>
      this.publish(
        agentId,
        envelope({ type: "query", executionId: exec.id, round: r.round as number }, now),
      ),
    );
  }

  /**
   * A `state` answer with a final local state, about a round whose `finished` could not be read:
   * the `finished` it stands for (its outcome, never retryable, since whether the failure was
   * cannot be known; the time of the answer, and no result). `null` for an `unknown` answer about
   * it: the agent finished it and has since let it go, so it is not "interrupted" (which would
   * retry it); the lease settles it. `undefined` for any other report.
   */
  private settlesUnreadable(r: Report): Report | null | undefined {
    if (r.type !== "state") return undefined;
    const pending = this.unreadableFinishes.get(r.executionId);
    if (pending === undefined || pending.round !== r.round) return undefined;
    if (r.localState === "unknown") {
      this.unreadableFinishes.delete(r.executionId);
      return null;
    }
    if (!(OUTCOMES as readonly string[]).includes(r.localState)) return undefined;
    this.unreadableFinishes.delete(r.executionId);
    return {
      v: r.v,
      msgId: r.msgId,
      sentAt: r.sentAt,
      type: "finished",
      executionId: r.executionId,
      round: r.round,
      seq: r.seq,
      outcome: r.localState as Outcome,
      retryable: false,
      message:
        `the agent's finished report could not be read (${pending.why}); outcome from its state answer`.slice(
          0,
          4096,
        ),
      finishedAt: this.ctx.clock.wallNow(),
    };
  }

  /**
   * Whether `r` may be the answer about a finish that could not be read, though none is awaited in
   * memory (this coordinator has restarted since, or it was forgotten): a `state` with a final
   * local state or `unknown`.
   */
  private mayAnswerUnreadable(r: Report): r is Extract<Report, { type: "state" }> {
    return (
      r.type === "state" &&
      !this.unreadableFinishes.has(r.executionId) &&
      (r.localState === "unknown" || (OUTCOMES as readonly string[]).includes(r.localState))
    );
  }

  /**
   * {@link settlesUnreadable} from the record: the answer settles the finish when the execution
   * still runs the answer's round on this agent and its timeline holds that round's `finished`
   * as unreadable. What is awaited lives in memory, and an answer that came after a restart
   * would otherwise leave the execution to its lease, to be run again.
   */
  private async settlesUnreadableOnRecord(
    agentId: string,
    r: Extract<Report, { type: "state" }>,
  ): Promise<Report | null | undefined> {
    const exec = await this.ctx.store.getExecution(r.executionId);
    if (!exec || TERMINAL_STATES.has(exec.state)) return undefined;
    if (exec.agentId !== agentId || exec.round !== r.round) return undefined;
    const entry = (await this.ctx.store.getTimeline(exec.id))
      .reverse()
      .find(
        (e) =>
          e.event === "report_unreadable" &&
          e.detail?.type === "finished" &&
          e.detail.round === r.round,
      );
    if (entry === undefined) return undefined;
    const why = `${String(entry.detail?.code)}: ${String(entry.detail?.reason)}`;
    this.unreadableFinishes.set(exec.id, { round: r.round, why });
    return this.settlesUnreadable(r);
  }

  /**
   * A `state` answer (to a query, a cancel or a duplicate dispatch). Held or running under the
   * current round: the lease is renewed. `unknown` for an execution the coordinator believes it
   * holds (a wiped journal, a lost dispatch): failed over at once, by the retry policy. A final
   * state: its `finished` report is on its way through the outbox and settles it.
   */
  private async reconcile(agentId: string, r: Extract<Report, { type: "state" }>): Promise<void> {
    const exec = await this.ctx.store.getExecution(r.executionId);
    if (!exec) return;
    const now = this.ctx.clock.wallNow();
    const followed = this.leases.ranRound(exec.id, exec.round);
    const current = exec.agentId === agentId && r.round === followed;
    if (r.localState === "scheduled" || r.localState === "queued") {
      if (current && !TERMINAL_STATES.has(exec.state)) {
        this.leases.renew(exec.id, r.round, now);
        return;
      }
      // The agent holds a round the record has moved past: it must not start it as well.
      await this.ctx.store.bumpCounter("stale_holds_canceled");
      this.publish(
        agentId,
        envelope({ type: "cancel", executionId: exec.id, round: r.round }, now),
      );
      return;
    }
    if (r.localState === "running") {
      if (current && exec.state === "RUNNING") {
        this.leases.renew(exec.id, r.round, now);
        return;
      }
      // Running under a round the record does not follow: a fact, recorded like a late start.
      await recordFact(this.ctx, this.leases, exec.id, {
        kind: "started",
        round: r.round,
        agentId,
      });
      return;
    }
    if (
      r.localState === "unknown" &&
      exec.agentId === agentId &&
      r.round >= exec.round &&
      (exec.state === "SCHEDULED" || exec.state === "RUNNING")
    ) {
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "finished", round: exec.round, outcome: "interrupted", retryable: true },
        () => ({ finishedAt: now, message: `agent ${agentId} does not know this execution` }),
        { reason: "agent answered unknown", agentId, guess: true },
      );
    }
    // A final local state: its `finished` report is in the agent's outbox and settles it.
  }

  /** A start or finish that the state machine would not take, recorded as a fact (facts.ts). */
  private async lateFact(agentId: string, r: Report): Promise<void> {
    if (r.type === "started") {
      await recordFact(
        this.ctx,
        this.leases,
        r.executionId,
        { kind: "started", round: r.round, agentId },
        { startedAt: r.startedAt, lateMs: r.lateMs },
      );
    } else if (r.type === "finished") {
      await recordFact(
        this.ctx,
        this.leases,
        r.executionId,
        {
          kind: "finished",
          round: r.round,
          agentId,
          outcome: r.outcome,
          retryable: r.retryable,
          started: r.startedAt !== undefined,
        },
        {
          finishedAt: r.finishedAt,
          message: r.message,
          result: r.result ?? null,
          ...(r.startedAt === undefined ? {} : { startedAt: r.startedAt }),
        },
      );
    } else {
      // accepted, busy, rejected of a round the record moved past: an answer to an old
      // dispatch, not a fact about running; counted by the state machine's drop.
    }
  }

  /**
   * An ack says "stored": it is sent once the reports it covers are committed (never, if that
   * commit fails: the agent then re-sends them from its outbox).
   */
  private sendAck(agentId: string, upTo: number, replay = false): void {
    // Named by journal, so an ack meant for a device's old journal never prunes its new one.
    const journalId = this.fleet.get(agentId)?.journalId;
    this.ctx.store.afterCommit(() =>
      this.publish(
        agentId,
        envelope(
          {
            type: "ack",
            upTo,
            ...(journalId === undefined ? {} : { journalId }),
            ...(replay ? { replay: true } : {}),
          },
          this.ctx.clock.wallNow(),
        ),
      ),
    );
  }

  /**
   * Sends without waiting for the broker's acknowledgement: that may sit behind the very backlog
   * this queue is working through, while the link holds its socket (MAX_INBOUND_BACKLOG).
   */
  private publish(agentId: string, message: DownMessage): void {
    this.ctx.link.send(agentId, message).catch((err: unknown) => {
      // Stopping: what is handled after the link closed is stored all the same, and the next
      // start's ack (after its welcome) tells the agent so. Nothing to warn about.
      if (this.ctx.link.closed) return;
      this.ctx.log("warn", `${message.type} to ${agentId} failed: ${(err as Error).message}`, {
        agentId,
      });
    });
  }
}
