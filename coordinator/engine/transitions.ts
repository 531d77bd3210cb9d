import { backoffMs } from "../../shared/backoff.js";
import {
  type Effect,
  type ExecEvent,
  snapshotOf,
  TERMINAL_STATES,
  transition,
} from "../../shared/fsm.js";
import { envelope } from "../../shared/message.js";
import { newSortedId } from "../domain/sorted-id.js";
import type {
  AlertRecord,
  EventFiring,
  ExecutionPatch,
  ExecutionRecord,
  TimelineStep,
} from "../store/port.js";
import type { AppliedTransition, EngineContext } from "./context.js";

export type ApplyOutcome = "applied" | "illegal" | "stale_round" | "not_found" | "conflict";

/** One event to apply, with the fields it sets and the detail its timeline entry records. */
export interface EventStep {
  event: ExecEvent;
  patch?: (exec: ExecutionRecord) => ExecutionPatch;
  detail?: Record<string, unknown>;
  /**
   * Effects of this step not to perform: a `dispatch` the coordinator decides, in the same
   * write, not to send (an `agent.update` refused before it leaves, engine/update-offer.ts).
   */
  withhold?: readonly Effect["type"][];
}

/**
 * Applies one event to an execution: asks the pure state machine, writes its decision with a
 * compare-and-set on (state, round), then performs the effects. A rejected event changes nothing
 * and is counted; a lost compare-and-set is retried on a fresh read.
 */
export async function applyEvent(
  ctx: EngineContext,
  executionId: string,
  event: ExecEvent,
  patch: (exec: ExecutionRecord) => ExecutionPatch = () => ({}),
  detail?: Record<string, unknown>,
  /** The execution as the caller just read it, which saves reading it again (the write checks). */
  known?: ExecutionRecord,
): Promise<ApplyOutcome> {
  const step: EventStep = detail === undefined ? { event, patch } : { event, patch, detail };
  const [outcome] = await applyEvents(ctx, executionId, [step], known);
  return outcome ?? "conflict";
}

/**
 * Applies several events to one execution in order, as one write: each is decided by the state
 * machine on the state the one before left, the last state is written with one compare-and-set,
 * and each applied event gets its own timeline entry. (An agent's burst of reports about one
 * execution — `started` then `finished` — costs one write instead of two.) An event the state
 * machine rejects is dropped and counted, and the others still apply. Returns each one's outcome.
 */
export async function applyEvents(
  ctx: EngineContext,
  executionId: string,
  steps: readonly EventStep[],
  known?: ExecutionRecord,
): Promise<ApplyOutcome[]> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const exec =
      attempt === 0 && known?.id === executionId
        ? known
        : await ctx.store.getExecution(executionId);
    if (!exec) return steps.map(() => "not_found");
    const now = ctx.clock.wallNow();
    const outcomes: ApplyOutcome[] = [];
    const dropped: { code: "illegal" | "stale_round"; message: string; event: string }[] = [];
    const applied: (TimelineStep & { effects: Effect[] })[] = [];
    const merged: ExecutionPatch = {};
    let cur = exec;
    const by = ctx.coordinatorId;
    for (const step of steps) {
      const result = transition(cur, step.event);
      if (!result.ok) {
        // A report of an older round is stale whatever the state now: one from an agent that
        // was failed over arrives after the new round may have ended, where it is also illegal.
        const ev = step.event;
        const code = "round" in ev && ev.round < cur.round ? "stale_round" : result.error.code;
        outcomes.push(code);
        dropped.push({ code, message: result.error.message, event: ev.type });
        continue;
      }
      const patch: ExecutionPatch = { ...step.patch?.(cur) };
      for (const effect of result.effects) {
        if (effect.type === "schedule_retry") {
          patch.nextAttemptAt =
            now + backoffMs(cur.attempt, { baseMs: cur.retryBaseMs, capMs: cur.retryCapMs });
        }
      }
      Object.assign(merged, patch);
      applied.push({
        event: step.event.type,
        from: cur.state,
        to: result.next.state,
        round: result.next.round,
        agentId: patch.agentId ?? cur.agentId,
        at: now,
        ...(by !== undefined
          ? { detail: { ...step.detail, coordinator: by } }
          : step.detail === undefined
            ? {}
            : { detail: step.detail }),
        effects:
          step.withhold === undefined
            ? result.effects
            : result.effects.filter((e) => !step.withhold?.includes(e.type)),
      });
      cur = { ...cur, ...result.next, ...patch };
      outcomes.push("applied");
    }
    const last = applied.at(-1);
    const moves: AppliedTransition[] = applied.map((t) => ({
      executionId,
      jobId: exec.jobId,
      agentId: t.agentId,
      event: t.event,
      from: t.from,
      to: t.to,
      round: t.round,
      at: now,
      fireAt: cur.fireAt,
      scheduledFor: exec.scheduledFor,
    }));
    let followUps: EventFiring | undefined;
    let alerts: AlertRecord[] = [];
    if (last) {
      const planned = followUpsOf(ctx, exec, cur);
      // Known without a read but for the first end after the jobs changed: no await per write.
      followUps = planned instanceof Promise ? await planned : planned;
      alerts = alertsOf(ctx, moves);
      const written = await ctx.store.applyTransition({
        executionId,
        expected: { state: exec.state, round: exec.round },
        next: snapshotOf(cur),
        patch: merged,
        at: now,
        event: last.event,
        agentId: last.agentId,
        ...(last.detail === undefined ? {} : { detail: last.detail }),
        ...(applied.length > 1 ? { steps: applied.map(({ effects: _, ...t }) => t) } : {}),
        ...(followUps === undefined ? {} : { followUps }),
        ...(alerts.length === 0 ? {} : { alerts }),
      });
      if (!written) continue;
    }
    for (const d of dropped) {
      await ctx.store.bumpCounter(
        d.code === "stale_round" ? "stale_reports" : "illegal_transitions",
      );
      ctx.events.emit("dropped", { executionId, reason: d.message, at: now });
      // An illegal one carries its code (docs/errors.md); a stale round is fencing at work.
      ctx.log("debug", `dropped ${d.event}: ${d.message}`, {
        executionId,
        ...(d.code === "stale_round" ? {} : { code: "AX_FSM_ILLEGAL_TRANSITION" }),
      });
    }
    for (const m of moves) ctx.events.emit("transition", m);
    if (followUps !== undefined) {
      const firing = followUps;
      ctx.store.afterCommit(() => ctx.followUps?.fired(firing));
    }
    if (alerts.length > 0) {
      const raised = alerts;
      ctx.store.afterCommit(() => ctx.transitionAlerts?.recorded(raised));
    }
    // Effects tell agents about the transitions, so they wait for them to be committed: a
    // dispatch sent for a fire that a crash then undid could run a nominal time that fires again.
    const effects = applied.flatMap((t) => t.effects);
    if (effects.length > 0) {
      const after = cur;
      ctx.store.afterCommit(() => void perform(ctx, after, effects));
    }
    return outcomes;
  }
  return steps.map(() => "conflict");
}

async function perform(
  ctx: EngineContext,
  exec: ExecutionRecord,
  effects: Effect[],
): Promise<void> {
  for (const effect of effects) {
    try {
      if (effect.type === "send_dispatch" && exec.agentId) {
        // Not awaited: waiting for the broker's PUBACK serialised every dispatch of a pass behind
        // a round trip. A publish that fails is covered by the dispatch timeout.
        const agentId = exec.agentId;
        ctx.link
          .send(
            agentId,
            envelope(
              {
                type: "dispatch",
                executionId: exec.id,
                round: effect.round,
                attempt: exec.attempt,
                handler: exec.handler,
                params: exec.params,
                fireAt: exec.fireAt,
                deadline: exec.deadline,
                timeoutMs: exec.timeoutMs,
                priority: exec.priority,
                ...(exec.shardTotal !== null && exec.shardIndex !== null
                  ? { shard: { index: exec.shardIndex, total: exec.shardTotal } }
                  : {}),
              },
              ctx.clock.wallNow(),
            ),
          )
          .catch((err: unknown) =>
            ctx.log("warn", `dispatch to ${agentId} not published: ${(err as Error).message}`, {
              executionId: exec.id,
              agentId,
            }),
          );
      } else if (effect.type === "send_cancel" && exec.agentId) {
        // Not awaited, like the dispatch: the broker's acknowledgement may wait behind a backlog
        // the caller is working through.
        const agentId = exec.agentId;
        ctx.link
          .send(
            agentId,
            envelope(
              { type: "cancel", executionId: exec.id, round: effect.round },
              ctx.clock.wallNow(),
            ),
          )
          .catch((err: unknown) =>
            ctx.log("warn", `cancel to ${agentId} not published: ${(err as Error).message}`, {
              executionId: exec.id,
              agentId,
            }),
          );
      } else if (effect.type === "terminal") {
        ctx.log("info", `execution ${exec.id} ended ${effect.state}`, {
          executionId: exec.id,
          jobId: exec.jobId,
          agentId: exec.agentId,
        });
      }
    } catch (err) {
      // A failed publish is not lost work: no `accepted` arrives, so the dispatch timeout resends.
      ctx.log("warn", `effect ${effect.type} failed: ${(err as Error).message}`, {
        executionId: exec.id,
      });
    }
  }
}

/** A fresh execution id. */
export const newExecutionId = (now: number) => newSortedId("ex_", now);

/**
 * What an execution's move from `before` into `after` fires, when it ends (an `after` trigger's
 * follow-ups, EngineContext.followUps), to be written with the transition. Undefined when it does
 * not end here or nothing follows it; a promise only while the listening jobs are read.
 */
export function followUpsOf(
  ctx: EngineContext,
  before: ExecutionRecord,
  after: ExecutionRecord,
): EventFiring | undefined | Promise<EventFiring | undefined> {
  if (ctx.followUps === undefined || before.jobId === null || after.state === before.state) {
    return undefined;
  }
  if (!TERMINAL_STATES.has(after.state)) return undefined;
  return ctx.followUps.plan(after);
}

/** The alerts of the transitions applied in one write (EngineContext.transitionAlerts). */
export function alertsOf(ctx: EngineContext, moves: readonly AppliedTransition[]): AlertRecord[] {
  const alerts = ctx.transitionAlerts;
  return alerts === undefined ? [] : moves.flatMap((m) => alerts.of(m));
}
