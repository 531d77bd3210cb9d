import { backoffMs } from "../../shared/backoff.js";
import { type Effect, type ExecEvent, transition } from "../../shared/fsm.js";
import { newId } from "../../shared/ids.js";
import { envelope } from "../../shared/message.js";
import type { ExecutionPatch, ExecutionRecord } from "../store/port.js";
import type { EngineContext } from "./context.js";

export type ApplyOutcome = "applied" | "illegal" | "stale_round" | "not_found" | "conflict";

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
  for (let attempt = 0; attempt < 3; attempt++) {
    const exec =
      attempt === 0 && known?.id === executionId
        ? known
        : await ctx.store.getExecution(executionId);
    if (!exec) return "not_found";
    const result = transition(exec, event);
    if (!result.ok) {
      await ctx.store.bumpCounter(
        result.error.code === "stale_round" ? "stale_reports" : "illegal_transitions",
      );
      ctx.events.emit("dropped", {
        executionId,
        reason: result.error.message,
        at: ctx.clock.wallNow(),
      });
      ctx.log("debug", `dropped ${event.type}: ${result.error.message}`, { executionId });
      return result.error.code;
    }
    const now = ctx.clock.wallNow();
    const fullPatch: ExecutionPatch = { ...patch(exec) };
    for (const effect of result.effects) {
      if (effect.type === "schedule_retry") {
        fullPatch.nextAttemptAt =
          now + backoffMs(exec.attempt, { baseMs: exec.retryBaseMs, capMs: exec.retryCapMs });
      }
    }
    const written = await ctx.store.applyTransition({
      executionId,
      expected: { state: exec.state, round: exec.round },
      next: result.next,
      patch: fullPatch,
      at: now,
      event: event.type,
      agentId: fullPatch.agentId ?? exec.agentId,
      ...(detail === undefined ? {} : { detail }),
    });
    if (!written) continue;
    ctx.events.emit("transition", {
      executionId,
      jobId: exec.jobId,
      agentId: fullPatch.agentId ?? exec.agentId,
      event: event.type,
      from: exec.state,
      to: result.next.state,
      round: result.next.round,
      at: now,
    });
    // Effects tell agents about the transition, so they wait for it to be committed: a dispatch
    // sent for a fire that a crash then undid could run a nominal time that fires again.
    const after = { ...exec, ...result.next, ...fullPatch };
    if (result.effects.length > 0) {
      ctx.store.afterCommit(() => void perform(ctx, after, result.effects));
    }
    return "applied";
  }
  return "conflict";
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
            }),
          );
      } else if (effect.type === "send_cancel" && exec.agentId) {
        await ctx.link.send(
          exec.agentId,
          envelope(
            { type: "cancel", executionId: exec.id, round: effect.round },
            ctx.clock.wallNow(),
          ),
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
export const newExecutionId = (now: number) => newId("ex_", now);
