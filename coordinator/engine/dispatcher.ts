import { envelope } from "../../shared/message.js";
import { eligibleAgents, roundRobin } from "../domain/routing.js";
import type { ExecutionRecord } from "../store/port.js";
import type { EngineContext } from "./context.js";
import type { Leases } from "./leases.js";
import type { Registry } from "./registry.js";
import { applyEvent } from "./transitions.js";

const BATCH = 500;

/**
 * The loop that moves executions along on the coordinator's own clock: dispatches what is due,
 * redispatches what was not accepted in time, starts retries, expires what missed its deadline,
 * and times out runs the agent never finished.
 */
export class Dispatcher {
  private timer: ReturnType<EngineContext["clock"]["setTimer"]> | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private closed = false;
  /** Last agent chosen per job (or per handler for commands), for ROUND_ROBIN. */
  private readonly cursors = new Map<string, string>();

  constructor(
    private readonly ctx: EngineContext,
    private readonly registry: Registry,
    private readonly leases: Leases,
  ) {}

  start(): void {
    this.arm(0);
  }

  /** Runs a pass as soon as possible (new work, or an agent came online). */
  kick(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.arm(0);
  }

  /** Resolves when the pass in progress, if any, has finished. */
  async idle(): Promise<void> {
    await this.running;
  }

  private arm(delayMs: number): void {
    if (this.closed) return;
    if (this.timer !== undefined) this.ctx.clock.clearTimer(this.timer);
    this.timer = this.ctx.clock.setTimer(() => {
      this.timer = undefined;
      this.running = this.pass()
        .catch((err: unknown) =>
          this.ctx.log("error", `dispatch pass failed: ${(err as Error).message}`),
        )
        .finally(() => {
          this.running = undefined;
          const again = this.again;
          this.again = false;
          this.arm(again ? 0 : this.ctx.config.poll);
        });
    }, delayMs);
  }

  private async pass(): Promise<void> {
    const now = this.ctx.clock.wallNow();
    await this.registry.sweep(now);
    const { store } = this.ctx;

    for (const exec of await store.listExecutionsInStates(["RETRY_WAITING"], BATCH)) {
      if (exec.deadline < now) await applyEvent(this.ctx, exec.id, { type: "expire" });
      else if ((exec.nextAttemptAt ?? 0) <= now) {
        // A retry is a new attempt at a new time; it keeps the original start window's length.
        await applyEvent(this.ctx, exec.id, { type: "retry_due" }, (e) => ({
          fireAt: now,
          deadline: now + (e.deadline - e.fireAt),
        }));
      }
    }

    for (const exec of await store.listExecutionsInStates(["PENDING"], BATCH)) {
      if (exec.deadline < now) {
        await applyEvent(this.ctx, exec.id, { type: "expire" }, () => ({}), {
          reason: "no agent before deadline",
        });
        continue;
      }
      if (exec.fireAt - this.ctx.config.dispatchLead > now) continue;
      const agentId = this.route(exec, now);
      if (agentId === undefined) continue; // waits in PENDING until an agent is live or it expires
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "dispatch" },
        () => ({ agentId, dispatchedAt: now }),
        {
          agentId,
        },
      );
    }

    for (const exec of await store.listExecutionsInStates(["DISPATCHED"], BATCH)) {
      if ((exec.dispatchedAt ?? 0) + exec.dispatchTimeoutMs > now) continue;
      const agentId = this.route(exec, now) ?? exec.agentId ?? undefined;
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "dispatch_timeout", round: exec.round },
        () => ({ dispatchedAt: now, ...(agentId === undefined ? {} : { agentId }) }),
        { reason: "no accepted within dispatchTimeoutMs" },
      );
    }

    const grace = this.ctx.config.timeoutGrace;
    for (const exec of await store.listExecutionsInStates(["RUNNING", "SCHEDULED"], BATCH)) {
      if (await this.checkLease(exec, now)) continue;
      const startedBy = exec.state === "RUNNING" ? (exec.startedAt ?? exec.fireAt) : exec.deadline;
      const limit =
        exec.state === "RUNNING" ? startedBy + exec.timeoutMs + grace : startedBy + grace;
      if (limit > now) continue;
      if (exec.state === "RUNNING") {
        await applyEvent(
          this.ctx,
          exec.id,
          { type: "timed_out", round: exec.round, retryable: true },
          () => ({ finishedAt: now, message: "no finished report within timeout + grace" }),
        );
      } else {
        await applyEvent(this.ctx, exec.id, { type: "expire" }, () => ({
          message: "not started by deadline",
        }));
      }
    }
  }

  /**
   * Leases: a running execution whose agent stopped vouching for it is queried, then failed over
   * by its retry policy. A scheduled one is never failed over this way: an agent keeps firing
   * what it holds while offline, so moving it elsewhere could run it twice; its deadline bounds
   * it instead. Returns true when the execution was handled here.
   */
  private async checkLease(exec: ExecutionRecord, now: number): Promise<boolean> {
    if (exec.agentId === null || exec.state !== "RUNNING") return false;
    const agentLive = this.registry.get(exec.agentId)?.status === "online";
    const decision = this.leases.check(exec, agentLive, now);
    if (decision.action === "query") {
      await this.ctx.link
        .send(
          exec.agentId,
          envelope({ type: "query", executionId: exec.id, round: exec.round }, now),
        )
        .catch(() => {});
      return true;
    }
    if (decision.action === "fail_over") {
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "finished", round: exec.round, outcome: "interrupted", retryable: true },
        () => ({ finishedAt: now, message: decision.reason }),
        { reason: decision.reason },
      );
      return true;
    }
    return false;
  }

  private route(exec: ExecutionRecord, now: number): string | undefined {
    if (exec.targetAgentId !== null) {
      return this.registry.isLive(exec.targetAgentId, now) ? exec.targetAgentId : undefined;
    }
    const candidates = eligibleAgents(this.registry.list(), exec.handler, (a) =>
      this.registry.isLive(a.agentId, now),
    );
    const key = exec.jobId ?? `handler:${exec.handler}`;
    const chosen = roundRobin(candidates, this.cursors.get(key));
    if (chosen) this.cursors.set(key, chosen.agentId);
    return chosen?.agentId;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.ctx.clock.clearTimer(this.timer);
  }
}
