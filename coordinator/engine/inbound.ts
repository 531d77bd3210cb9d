import { envelope } from "../../shared/message.js";
import type { Decoded, ProtocolError, Report, UpMessage } from "../../shared/protocol/index.js";
import type { EngineContext } from "./context.js";
import type { Leases } from "./leases.js";
import type { Registry } from "./registry.js";
import { applyEvent } from "./transitions.js";

/**
 * Everything that arrives from agents. Messages of one agent are handled one at a time, in order,
 * so report seqs are applied in the order the agent numbered them.
 */
export class Inbound {
  private readonly chains = new Map<string, Promise<void>>();
  /** Called after a report changed an execution, so the dispatcher can act at once. */
  onChange: () => void = () => {};
  /** Called for a message on an event topic. */
  onEvent:
    | ((name: string, msgId: string, payload: Record<string, unknown>) => Promise<unknown>)
    | undefined;

  constructor(
    private readonly ctx: EngineContext,
    private readonly registry: Registry,
    private readonly leases: Leases,
  ) {}

  handle(decoded: Decoded, receivedAt: number): void {
    const key = decoded.channel === "event" ? `event:${decoded.name}` : decoded.agentId;
    const prev = this.chains.get(key) ?? Promise.resolve();
    const next = prev
      .then(() => this.dispatch(decoded, receivedAt))
      .catch((err: unknown) => {
        this.ctx.log(
          "error",
          `handling a ${decoded.message.type} failed: ${(err as Error).message}`,
          { key },
        );
      });
    this.chains.set(key, next);
    void next.finally(() => {
      if (this.chains.get(key) !== next) return;
      this.chains.delete(key);
      // The agent's burst is handled: acknowledge it once, with the highest seq stored.
      this.flushAck(key);
    });
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
    this.registry
      .persistAcked(agentId)
      .then(() => this.sendAck(agentId, owed.upTo))
      .catch((err: unknown) =>
        this.ctx.log("warn", `storing acked seq of ${agentId} failed: ${(err as Error).message}`, {
          agentId,
        }),
      );
  }

  /** An undecodable message: rejected, logged with its reason, counted; never a crash. */
  invalid(error: ProtocolError, topic: string): void {
    this.ctx.log("warn", `rejected message on ${topic}: ${error.code}: ${error.message}`, {
      topic,
      code: error.code,
    });
    this.ctx.store.bumpCounter("invalid_messages").catch(() => {});
    this.ctx.events.emit("invalidMessage", {
      topic,
      code: error.code,
      message: error.message,
      at: this.ctx.clock.wallNow(),
    });
  }

  /** Resolves when every message received so far has been handled. */
  async drain(): Promise<void> {
    await Promise.all([...this.chains.values()]);
  }

  private async dispatch(d: Decoded, receivedAt: number): Promise<void> {
    if (d.channel === "presence") {
      await this.registry.presence(d.agentId, d.message.status, d.message.instanceId);
      return;
    }
    if (d.channel === "event") {
      await this.onEvent?.(d.name, d.message.msgId, d.message.payload ?? {});
      return;
    }
    if (d.channel !== "up") return; // down: our own traffic
    const m: UpMessage = d.message;
    switch (m.type) {
      case "hello": {
        const rec = await this.registry.hello(m, receivedAt);
        this.ctx.log("info", `agent ${m.agentId} registered (instance ${m.instanceId})`, {
          agentId: m.agentId,
        });
        await this.ctx.link.send(
          m.agentId,
          envelope(
            {
              type: "welcome",
              instanceId: m.instanceId,
              heartbeatMs: this.ctx.config.heartbeat,
              clock: { t0: m.sentAt, t1: receivedAt, t2: this.ctx.clock.wallNow() },
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
        if (!(await this.registry.heartbeat(d.agentId, m, receivedAt))) return;
        for (const ref of m.running) this.leases.renew(ref.executionId, ref.round, receivedAt);
        await this.ctx.link.send(
          d.agentId,
          envelope(
            { type: "time", clock: { t0: m.sentAt, t1: receivedAt, t2: this.ctx.clock.wallNow() } },
            this.ctx.clock.wallNow(),
          ),
        );
        return;
      }
      default:
        await this.report(d.agentId, m);
    }
  }

  /**
   * Rule 1: a report is applied once, in seq order. Already stored → acknowledged again and
   * dropped; the next expected → applied and acknowledged; beyond a gap → dropped unacknowledged
   * (the agent re-sends its outbox in order, which fills the gap).
   */
  private async report(agentId: string, r: Report): Promise<void> {
    const agent = this.registry.get(agentId);
    if (!agent) {
      await this.ctx.store.bumpCounter("reports_from_unknown_agents");
      return;
    }
    if (r.seq <= agent.ackedSeq) {
      await this.ctx.store.bumpCounter("duplicate_reports");
      this.owe(agentId, agent.ackedSeq);
      return;
    }
    if (r.seq > agent.ackedSeq + 1) {
      await this.ctx.store.bumpCounter("out_of_order_reports");
      return;
    }
    await this.applyReport(agentId, r);
    this.registry.ackedTo(agentId, r.seq);
    this.owe(agentId, r.seq);
    this.onChange();
  }

  private async applyReport(agentId: string, r: Report): Promise<void> {
    const id = r.executionId;
    switch (r.type) {
      case "accepted":
        await applyEvent(this.ctx, id, { type: "accepted", round: r.round });
        return;
      case "busy":
        this.registry.markBusy(agentId, this.ctx.clock.wallNow() + 1000);
        await applyEvent(this.ctx, id, { type: "busy", round: r.round });
        return;
      case "rejected":
        await applyEvent(
          this.ctx,
          id,
          { type: "rejected", round: r.round, reason: r.reason },
          () => ({
            message: `rejected by ${agentId}: ${r.reason}${r.message ? `: ${r.message}` : ""}`,
          }),
          { reason: r.reason },
        );
        return;
      case "started":
        this.leases.renew(id, r.round, this.ctx.clock.wallNow());
        await applyEvent(this.ctx, id, { type: "started", round: r.round }, () => ({
          startedAt: r.startedAt,
          lateMs: r.lateMs,
        }));
        return;
      case "finished":
        await applyEvent(
          this.ctx,
          id,
          { type: "finished", round: r.round, outcome: r.outcome, retryable: r.retryable },
          () => ({
            finishedAt: r.finishedAt,
            message: r.message,
            result: r.result ?? null,
            ...(r.startedAt === undefined ? {} : { startedAt: r.startedAt }),
          }),
          { outcome: r.outcome, retryable: r.retryable },
        );
        return;
      case "progress":
        this.leases.renew(id, r.round, this.ctx.clock.wallNow());
        return;
      case "state":
        await this.reconcile(agentId, r);
        return;
    }
  }

  /**
   * A `state` answer (to a query, a cancel or a duplicate dispatch). Held or running under the
   * current round: the lease is renewed. `unknown` for an execution the coordinator believes it
   * holds (a wiped journal, a lost dispatch): failed over at once, by the retry policy. A final
   * state: its `finished` report is on its way through the outbox and settles it.
   */
  private async reconcile(agentId: string, r: Extract<Report, { type: "state" }>): Promise<void> {
    const exec = await this.ctx.store.getExecution(r.executionId);
    if (!exec || exec.agentId !== agentId || r.round < exec.round) return;
    const now = this.ctx.clock.wallNow();
    if (r.localState === "scheduled" || r.localState === "queued" || r.localState === "running") {
      this.leases.renew(exec.id, r.round, now);
      return;
    }
    if (r.localState === "unknown" && (exec.state === "SCHEDULED" || exec.state === "RUNNING")) {
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "finished", round: exec.round, outcome: "interrupted", retryable: true },
        () => ({ finishedAt: now, message: `agent ${agentId} does not know this execution` }),
        { reason: "agent answered unknown", agentId },
      );
    }
  }

  /**
   * An ack says "stored": it is sent once the reports it covers are committed (never, if that
   * commit fails: the agent then re-sends them from its outbox).
   */
  private sendAck(agentId: string, upTo: number): void {
    this.ctx.store.afterCommit(() => {
      this.ctx.link
        .send(agentId, envelope({ type: "ack", upTo }, this.ctx.clock.wallNow()))
        .catch((err: unknown) =>
          this.ctx.log("warn", `ack to ${agentId} failed: ${(err as Error).message}`, { agentId }),
        );
    });
  }
}
