import type { ExecutionRecord } from "../store/port.js";

/** Where a lease stands for one execution (by id), kept in memory and rebuilt after a restart. */
interface Lease {
  round: number;
  /** When its agent last vouched for it: a heartbeat listing it, a state answer, a report. */
  renewedAt: number;
  /** When a query was sent because the lease lapsed; undefined while none is outstanding. */
  queriedAt: number | undefined;
}

export type LeaseAction =
  | { action: "ok" }
  | { action: "query" }
  | { action: "fail_over"; reason: string };

/**
 * Execution leases (DESIGN §3 "Leases"). A running execution is held by its agent as long as the
 * agent's heartbeats list it. When they stop (the agent is gone, or no longer runs it) the lease
 * lapses: the coordinator queries the agent, and without an answer in time fails the execution
 * over by its retry policy — the next dispatch's higher round fences the old holder.
 *
 * Leases live in memory: after a coordinator restart every lease starts fresh from the restart
 * time, which only delays a fail-over, never causes a wrong one.
 */
export class Leases {
  private readonly leases = new Map<string, Lease>();
  /**
   * Executions whose record follows an older round than their latest (a fact showed that round
   * ran): the agent vouches for that round, and it renews the lease of the latest.
   */
  private readonly followed = new Map<string, { ran: number; latest: number }>();

  constructor(
    private readonly leaseMs: number,
    private readonly queryTimeoutMs: number,
  ) {}

  /** The agent vouched for (executionId, round) at `now`. */
  renew(executionId: string, ran: number, now: number): void {
    const f = this.followed.get(executionId);
    const round = f !== undefined && f.ran === ran ? f.latest : ran;
    const l = this.leases.get(executionId);
    if (l && l.round > round) return;
    this.leases.set(executionId, { round, renewedAt: now, queriedAt: undefined });
  }

  /** The record of `executionId` follows round `ran` although `latest` was issued after it. */
  follow(executionId: string, ran: number, latest: number, now: number): void {
    if (this.followed.size >= 100_000) this.followed.clear(); // bounded; a lost entry only delays
    this.followed.set(executionId, { ran, latest });
    this.leases.set(executionId, { round: latest, renewedAt: now, queriedAt: undefined });
  }

  /** Executions whose followed round was looked up in their timeline since this process began. */
  private readonly looked = new Set<string>();

  /**
   * Whether `executionId`'s followed round must still be read from its timeline: once per
   * execution per process, since {@link follow} lives in memory and a restart forgot it (the
   * agent, still running the older round, would have its lease lapse).
   */
  mustLookUp(executionId: string): boolean {
    if (this.looked.has(executionId) || this.followed.has(executionId)) return false;
    if (this.looked.size >= 100_000) this.looked.clear(); // bounded; a lost entry costs a read
    this.looked.add(executionId);
    return true;
  }

  /** The round an agent runs the execution under, for a query: the followed one, if any. */
  ranRound(executionId: string, latest: number): number {
    const f = this.followed.get(executionId);
    return f !== undefined && f.latest === latest ? f.ran : latest;
  }

  /** The execution has left its agent (ended, or waits for a new dispatch). */
  forget(executionId: string): void {
    this.leases.delete(executionId);
    this.followed.delete(executionId);
    this.looked.delete(executionId);
  }

  /** Leases held in memory (one per execution an agent holds). */
  get size(): number {
    return this.leases.size;
  }

  /**
   * Forgets the leases not renewed since `before`: with dispatch shared, those of executions
   * whose agent moved to another coordinator, which this one no longer checks and whose end it
   * does not hear (every lease it checks ends or renews long before). Returns how many went.
   */
  prune(before: number): number {
    let n = 0;
    for (const [id, l] of this.leases) {
      if (l.renewedAt >= before) continue;
      this.forget(id);
      n++;
    }
    return n;
  }

  /**
   * What to do about a running execution at `now`: nothing, send a query, or fail it over.
   * `agentLive` is false once the fleet has taken the agent offline.
   */
  check(
    exec: Pick<ExecutionRecord, "id" | "round" | "startedAt" | "updatedAt">,
    agentLive: boolean,
    now: number,
    /** When the coordinator's link last came up: a lease does not lapse for its own outage. */
    reachableSince = Number.NEGATIVE_INFINITY,
    /**
     * How long the agent may be silent (even offline) about it before the lease lapses: an
     * `agent.update` restarts its agent and is reported by the next process (updateHoldMs).
     */
    holdMs = 0,
  ): LeaseAction {
    let l = this.leases.get(exec.id);
    if (!l || l.round < exec.round) {
      // First sight (or a new round): the lease starts now.
      l = {
        round: exec.round,
        renewedAt: Math.max(now - (agentLive ? 0 : this.leaseMs), exec.updatedAt),
        queriedAt: undefined,
      };
      this.leases.set(exec.id, l);
    }
    const silent = now - Math.max(l.renewedAt, reachableSince);
    const lapsed = silent > holdMs && (!agentLive || silent > this.leaseMs + holdMs);
    if (!lapsed) return { action: "ok" };
    if (l.queriedAt === undefined) {
      l.queriedAt = now;
      return { action: "query" };
    }
    if (now - l.queriedAt > this.queryTimeoutMs) {
      this.leases.delete(exec.id);
      return {
        action: "fail_over",
        reason: agentLive
          ? `lease lapsed: not in the agent's heartbeats, and no answer to a query within ${this.queryTimeoutMs} ms`
          : `lease lapsed: the agent is offline, and no answer to a query within ${this.queryTimeoutMs} ms`,
      };
    }
    return { action: "ok" };
  }
}
