import { ACTIVE_STATES, type ExecState, TERMINAL_STATES } from "../../shared/fsm.js";
import { AGENT_UPDATE_HANDLER } from "../../shared/update.js";
import {
  abortReason,
  FINAL_ROLLOUT_STATES,
  ReachBucket,
  type RolloutEvent,
  type RolloutRecord,
  ratePerMinute,
  selects,
  waveCap,
} from "../domain/rollout.js";
import { COMMAND_DEFAULTS } from "../operations/commands.js";
import type { AgentRecord, NewExecution, RolloutCount } from "../store/port.js";
import type { EngineContext } from "./context.js";
import type { Fleet } from "./fleet.js";
import { applyEvent, newExecutionId } from "./transitions.js";

/** How often the engine looks at the open rollouts when nothing tells it to sooner. */
export const ROLLOUT_TICK_MS = 250;
/** Agents reached by one rollout in one pass, at most: one write each pass stays short. */
const MAX_REACH_PER_PASS = 1_000;

/**
 * The agents a rollout's selector matches that can run its command (not revoked) and that it
 * does not `skip` (see {@link RolloutEngine.skipped}), by id.
 */
export function matchingAgents(
  fleet: Fleet,
  r: RolloutRecord,
  excluded: (agentId: string) => boolean,
  skip: (a: AgentRecord) => boolean = () => false,
): AgentRecord[] {
  return fleet
    .list()
    .filter(
      (a) =>
        selects(r.selector, a) &&
        a.handlers.includes(r.command.handler) &&
        !excluded(a.agentId) &&
        !skip(a),
    )
    .sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0));
}

/** A rollout's executions summed up, from {@link Store.countRolloutExecutions}. */
export interface RolloutTally {
  reached: number;
  byState: Partial<Record<ExecState, number>>;
  succeeded: number;
  /** Ended in a state the abort criteria count (FAILED, TIMED_OUT, EXPIRED by default). */
  failed: number;
  ended: number;
  open: number;
  /** Per wave: reached and by state. */
  waves: { reached: number; byState: Partial<Record<ExecState, number>>; open: number }[];
}

export function tally(r: RolloutRecord, counts: readonly RolloutCount[]): RolloutTally {
  const failOn = new Set<ExecState>(r.abort?.on ?? ["FAILED", "TIMED_OUT", "EXPIRED"]);
  const t: RolloutTally = {
    reached: 0,
    byState: {},
    succeeded: 0,
    failed: 0,
    ended: 0,
    open: 0,
    waves: r.waves.map(() => ({ reached: 0, byState: {}, open: 0 })),
  };
  for (const c of counts) {
    t.reached += c.count;
    t.byState[c.state] = (t.byState[c.state] ?? 0) + c.count;
    const w = t.waves[c.wave];
    if (w !== undefined) {
      w.reached += c.count;
      w.byState[c.state] = (w.byState[c.state] ?? 0) + c.count;
    }
    if (TERMINAL_STATES.has(c.state)) {
      t.ended += c.count;
      if (c.state === "SUCCEEDED") t.succeeded += c.count;
      if (failOn.has(c.state)) t.failed += c.count;
    } else {
      t.open += c.count;
      if (w !== undefined) w.open += c.count;
    }
  }
  return t;
}

/**
 * Drives the rollouts (docs/rollouts.md): at each pass, for every rollout not yet settled, it
 * checks the abort criteria, reaches the online agents the selector matches at the rate and
 * within the current wave (one store write per pass: the target rows and their executions, only
 * while the rollout is IN_PROGRESS), moves to the next wave once the current one ended and
 * soaked, completes it, and cancels what an aborted one left open. Everything it decides on is
 * read from the store at each pass, so a restart, or another coordinator taking over, picks a
 * rollout up where it was; only the rate's bucket lives in memory.
 */
export class RolloutEngine {
  private timer: NodeJS.Timeout | undefined;
  private soon: NodeJS.Immediate | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private closed = true;
  private readonly buckets = new Map<string, ReachBucket>();
  /** Agents each rollout reached, as read at its first pass and added to since. */
  private readonly reached = new Map<string, Set<string>>();
  /** Open executions of rollouts, so that one ending wakes the engine at once. */
  private readonly watched = new Set<string>();
  /** Executions of aborted rollouts an agent holds, to which a cancel was sent. */
  private readonly cancelSent = new Set<string>();
  /**
   * Of each `agent.update` rollout, the sha256 of the agent file its bundle installs (what an
   * agent running it reports in hello); null for another handler or a bundle not found. A
   * published bundle never changes, so it is read once.
   */
  private readonly installs = new Map<string, string | null>();
  /** Told of agents reached and of aborts (metrics). */
  onReached: ((n: number) => void) | undefined;
  onAborted: (() => void) | undefined;

  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
    /** An agent the coordinator sends nothing (revoked). */
    private readonly excluded: (agentId: string) => boolean,
    /** Tells the dispatch loop there is new work. */
    private readonly kick: () => void,
  ) {
    ctx.events.on("transition", (e) => {
      if (TERMINAL_STATES.has(e.to) && this.watched.delete(e.executionId)) this.wake();
    });
    ctx.events.on("agent", (e) => {
      if (e.status === "online") this.wake();
    });
  }

  start(): void {
    this.closed = false;
    this.timer = setInterval(() => this.wake(), ROLLOUT_TICK_MS);
    this.timer.unref?.();
    this.wake();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    if (this.soon !== undefined) clearImmediate(this.soon);
    this.timer = undefined;
    this.soon = undefined;
  }

  /** Resolves once the pass under way, if any, is done. */
  async idle(): Promise<void> {
    while (this.running !== undefined) await this.running;
  }

  /** Runs a pass soon (a rollout was created, paused, resumed or aborted; an execution ended). */
  wake(): void {
    if (this.closed) return;
    if (this.running !== undefined) {
      this.again = true;
      return;
    }
    if (this.soon !== undefined) return;
    this.soon = setImmediate(() => {
      this.soon = undefined;
      this.running = this.pass()
        .catch((err: unknown) => {
          this.ctx.log("error", `rollout pass failed: ${(err as Error).message}`);
        })
        .finally(() => {
          this.running = undefined;
          if (this.again) {
            this.again = false;
            this.wake();
          }
        });
    });
  }

  private async pass(): Promise<void> {
    const rollouts = await this.ctx.store.listUnsettledRollouts();
    const live = new Set(rollouts.map((r) => r.id));
    for (const id of this.buckets.keys()) if (!live.has(id)) this.buckets.delete(id);
    for (const id of this.reached.keys()) if (!live.has(id)) this.reached.delete(id);
    for (const id of this.installs.keys()) if (!live.has(id)) this.installs.delete(id);
    for (const r of rollouts) {
      if (this.closed) return;
      try {
        await this.advance(r);
      } catch (err) {
        this.ctx.log("error", `rollout ${r.id}: ${(err as Error).message}`, { rolloutId: r.id });
      }
    }
  }

  private async advance(r: RolloutRecord): Promise<void> {
    const now = this.ctx.clock.wallNow();
    const t = tally(r, await this.ctx.store.countRolloutExecutions(r.id));
    if (FINAL_ROLLOUT_STATES.has(r.state)) {
      await this.settle(r, t);
      return;
    }
    if (r.state === "CREATED" || r.state === "PAUSED") this.buckets.delete(r.id);
    // The criteria hold while paused too: executions already sent go on ending.
    const reason = r.state === "CREATED" ? undefined : abortReason(r.abort, t.ended, t.failed);
    if (reason !== undefined) {
      await this.abort(r, reason, "system", { ended: t.ended, failed: t.failed });
      return;
    }
    if (r.state !== "IN_PROGRESS") return;

    const matching = await this.matching(r);
    // No agent is reached after its end, nor, with a start time for all, once that time's
    // window (startWithin) is over: it could only expire there.
    const window = r.command.at === undefined ? null : r.command.at + r.command.startWithin;
    const endAt = Math.min(
      r.endsAt ?? Number.POSITIVE_INFINITY,
      window ?? Number.POSITIVE_INFINITY,
    );
    const ended = now >= endAt;
    const last = r.waves.length - 1;
    const reached = await this.reachedSet(r.id);
    // Reached and still matching: an agent reached and since revoked (or no longer tagged) is not
    // one of the matching agents a wave or the completion counts.
    let reachedMatching = 0;
    for (const a of matching) if (reached.has(a.agentId)) reachedMatching++;
    // Completed: every matching agent reached and done, or its end passed with nothing open.
    // One that matches no agent yet waits for one (or its end, or an abort).
    const allReached = r.wave >= last && matching.length > 0 && reachedMatching === matching.length;
    if (t.open === 0 && (allReached || ended)) {
      const why = ended
        ? `${endAt === window ? "its start window" : "its end"} passed: ${t.reached} of ${matching.length} matching agents reached`
        : `every matching agent reached (${t.reached})`;
      await this.transition(r, "COMPLETED", "completed", why, "system", {
        reached: t.reached,
        matching: matching.length,
        succeeded: t.succeeded,
        failed: t.failed,
      });
      return;
    }
    if (ended) return;

    const cap = waveCap(r.waves, r.wave, matching.length);
    // A wave that holds no agent yet (none matches) is not done: it waits for agents, so a
    // rollout created before its fleet still starts with its canary.
    if (cap === 0) return;
    if (reachedMatching >= cap && r.wave < last) {
      // The wave is reached: the next starts once its executions all ended and it soaked.
      if (t.open > 0) return;
      if (r.soakUntil === null) {
        const soak = r.waves[r.wave]?.soak ?? 0;
        if (soak > 0) {
          await this.update(r, { soakUntil: now + soak }, "wave-soaking", {
            wave: r.wave,
            soakUntil: now + soak,
          });
          return;
        }
      } else if (now < r.soakUntil) return;
      await this.update(r, { wave: r.wave + 1, soakUntil: null }, "wave-started", {
        wave: r.wave + 1,
        percent: r.waves[r.wave + 1]?.percent,
      });
      this.wake();
      return;
    }
    if (reachedMatching >= cap) return;
    await this.reach(r, t, matching, reached, cap - reachedMatching, now);
  }

  private async matching(r: RolloutRecord): Promise<AgentRecord[]> {
    return matchingAgents(this.fleet, r, this.excluded, await this.skipped(r));
  }

  /**
   * The agents a rollout leaves out: of an `agent.update` rollout, those not reached that already
   * run the bundle it installs (docs/rollouts.md, "Agent updates"). They are done already, so
   * they are neither reached nor counted as matching. One it reached stays counted, so the
   * agents it updates do not shrink its waves.
   */
  async skipped(r: RolloutRecord): Promise<(a: AgentRecord) => boolean> {
    if (r.command.handler !== AGENT_UPDATE_HANDLER) return () => false;
    let installs = this.installs.get(r.id);
    if (installs === undefined) {
      const sha256 = r.command.params.sha256;
      const bundle =
        typeof sha256 === "string" ? await this.ctx.store.getBundle(sha256) : undefined;
      installs = bundle?.agentSha256 ?? null;
      this.installs.set(r.id, installs);
    }
    if (installs === null) return () => false;
    const reached = await this.reachedSet(r.id);
    const on = installs;
    return (a) => a.bundleSha256 === on && !reached.has(a.agentId);
  }

  private async reachedSet(id: string): Promise<Set<string>> {
    let set = this.reached.get(id);
    if (set === undefined) {
      set = new Set((await this.ctx.store.listRolloutTargets(id)).map((t) => t.agentId));
      this.reached.set(id, set);
    }
    return set;
  }

  private async reach(
    r: RolloutRecord,
    t: RolloutTally,
    matching: AgentRecord[],
    reached: Set<string>,
    room: number,
    now: number,
  ): Promise<void> {
    let bucket = this.buckets.get(r.id);
    if (bucket === undefined) {
      bucket = new ReachBucket();
      this.buckets.set(r.id, bucket);
    }
    const allowed = Math.min(
      bucket.available(now, ratePerMinute(r.rate, t.succeeded)),
      room,
      MAX_REACH_PER_PASS,
    );
    if (allowed <= 0) return;
    // Online agents only: one offline now is reached when it comes back, while the rollout is open.
    const chosen = matching
      .filter((a) => a.status === "online" && !reached.has(a.agentId))
      .slice(0, allowed);
    if (chosen.length === 0) return;
    const fireAt = r.command.at ?? now;
    const targets = chosen.map((a) => ({
      agentId: a.agentId,
      wave: r.wave,
      execution: this.execution(r, a.agentId, fireAt, now),
    }));
    const done = new Set(
      await this.ctx.store.reachRolloutTargets(r.id, targets, now, {
        actor: r.createdBy,
        rolloutId: r.id,
        wave: r.wave,
      }),
    );
    if (done.size < targets.length) {
      // Paused or aborted since it was read, or some were reached by another coordinator: the
      // next pass reads who was reached again.
      this.reached.delete(r.id);
    }
    if (done.size === 0) return;
    bucket.take(done.size);
    for (const target of targets) {
      if (!done.has(target.agentId)) continue;
      reached.add(target.agentId);
      this.watched.add(target.execution.id);
    }
    this.onReached?.(done.size);
    this.kick();
  }

  private execution(r: RolloutRecord, agentId: string, fireAt: number, now: number): NewExecution {
    return {
      id: newExecutionId(now),
      kind: "command",
      jobId: null,
      jobVersion: null,
      handler: r.command.handler,
      params: r.command.params,
      targetAgentId: agentId,
      fireAt,
      // As documented: never started later than startWithin after its start time.
      deadline: fireAt + r.command.startWithin,
      timeoutMs: r.command.timeout,
      dispatchTimeoutMs: COMMAND_DEFAULTS.dispatchTimeoutMs,
      maxAttempts: 1,
      maxDispatches: COMMAND_DEFAULTS.maxDispatches,
      priority: COMMAND_DEFAULTS.priority,
      retryBaseMs: 1000,
      retryCapMs: 60_000,
      createdAt: now,
    };
  }

  /**
   * Aborts a rollout: ABORTED first (from then on no agent is reached: the reach write checks
   * the state), then every execution it left open is canceled.
   */
  async abort(
    r: RolloutRecord,
    reason: string,
    actor: string,
    detail: Record<string, unknown> | null = null,
  ): Promise<boolean> {
    const ok = await this.transition(r, "ABORTED", "aborted", reason, actor, detail);
    if (!ok) return false;
    this.onAborted?.();
    this.ctx.log("warn", `rollout ${r.id} aborted: ${reason}`, { rolloutId: r.id });
    this.wake();
    return true;
  }

  /** A final rollout: cancels what it left open, and is settled once nothing is. */
  private async settle(r: RolloutRecord, t: RolloutTally): Promise<void> {
    if (t.open > 0) {
      for (const target of await this.ctx.store.listRolloutTargets(r.id)) {
        const exec = await this.ctx.store.getExecution(target.executionId);
        if (exec === undefined || TERMINAL_STATES.has(exec.state)) continue;
        this.watched.add(exec.id);
        // Not dispatched: CANCELED at once. Held by an agent: a cancel goes to it, and its answer
        // ends the execution; the next pass looks again.
        // Sent once per process: the agent's answer, or its lease, ends it.
        if (this.cancelSent.has(exec.id)) continue;
        const outcome = await applyEvent(
          this.ctx,
          exec.id,
          { type: "cancel" },
          () => ({}),
          { by: "rollout", rolloutId: r.id, reason: r.reason },
          exec,
        );
        if (outcome === "applied" && ACTIVE_STATES.has(exec.state)) this.cancelSent.add(exec.id);
      }
      return;
    }
    for (const target of await this.ctx.store.listRolloutTargets(r.id)) {
      this.cancelSent.delete(target.executionId);
    }
    await this.update(r, { settled: true });
  }

  private async transition(
    r: RolloutRecord,
    to: RolloutRecord["state"],
    event: string,
    reason: string,
    actor: string,
    detail: Record<string, unknown> | null,
  ): Promise<boolean> {
    const now = this.ctx.clock.wallNow();
    const next: RolloutRecord = {
      ...r,
      state: to,
      reason,
      updatedAt: now,
      finishedAt: FINAL_ROLLOUT_STATES.has(to) ? now : r.finishedAt,
      // Completed only with nothing open; an aborted one settles once what it left open ended.
      settled: to === "COMPLETED",
    };
    const entry: Omit<RolloutEvent, "seq"> = {
      at: now,
      fromState: r.state,
      toState: to,
      event,
      actor,
      reason,
      detail,
    };
    const ok = await this.ctx.store.updateRollout(next, r.version, entry);
    if (ok && to === "COMPLETED") {
      this.ctx.log("info", `rollout ${r.id} completed: ${reason}`, { rolloutId: r.id });
    }
    return ok;
  }

  /** A change of where it is (wave, soak, settled), with a timeline entry when `event` is given. */
  private async update(
    r: RolloutRecord,
    patch: Partial<Pick<RolloutRecord, "wave" | "soakUntil" | "settled">>,
    event?: string,
    detail: Record<string, unknown> | null = null,
  ): Promise<boolean> {
    const now = this.ctx.clock.wallNow();
    return this.ctx.store.updateRollout(
      { ...r, ...patch, updatedAt: now },
      r.version,
      event === undefined
        ? undefined
        : {
            at: now,
            fromState: r.state,
            toState: r.state,
            event,
            actor: "system",
            reason: null,
            detail,
          },
    );
  }
}
