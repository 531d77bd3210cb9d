import { backoffMs } from "../../shared/backoff.js";
import { snapshotOf } from "../../shared/fsm.js";
import { envelope } from "../../shared/message.js";
import { decideFact, type Fact, roundHistory } from "../domain/facts.js";
import type { ExecutionPatch } from "../store/port.js";
import type { AppliedTransition, EngineContext } from "./context.js";
import type { Leases } from "./leases.js";
import { alertsOf, followUpsOf } from "./transitions.js";

/**
 * Reads back, once per execution per process, the older round a RUNNING record follows (a fact
 * adopted before a restart), so that the agent's heartbeats for that round renew its lease and a
 * query asks for it, as before the restart.
 */
export async function lookUpFollowed(
  ctx: EngineContext,
  leases: Leases,
  exec: { id: string; round: number; state: string },
  now: number,
): Promise<void> {
  if (exec.state !== "RUNNING" || !leases.mustLookUp(exec.id)) return;
  const { followedRound } = roundHistory(await ctx.store.getTimeline(exec.id));
  if (followedRound !== null && followedRound < exec.round) {
    leases.follow(exec.id, followedRound, exec.round, now);
  }
}

/**
 * Records a fact an agent reported about a round the record has moved past (issue 15, item 2):
 * reads the execution and its timeline, asks the pure rules (domain/facts.ts), and writes their
 * answer as a `fact` entry on the timeline — with a state change when the record now follows that
 * round. Nothing a device reports about running is ever dropped. `patch` holds what the report
 * says (start and finish times, result, message), applied only when the record follows it.
 */
export async function recordFact(
  ctx: EngineContext,
  leases: Leases,
  executionId: string,
  fact: Fact,
  patch: ExecutionPatch = {},
): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const exec = await ctx.store.getExecution(executionId);
    if (!exec) return;
    const history = roundHistory(await ctx.store.getTimeline(executionId));
    const decision = decideFact(exec, history, fact);
    if (decision.action === "known") return;
    const now = ctx.clock.wallNow();
    const adopt = decision.action === "adopt" ? decision : undefined;
    const next = adopt?.next ?? exec;
    const counter =
      decision.action === "note"
        ? "facts_noted"
        : decision.action === "adopt"
          ? "facts_adopted"
          : "facts_both_ran";
    const adoptPatch: ExecutionPatch = adopt
      ? {
          ...patch,
          agentId: fact.agentId,
          ...(adopt.scheduleRetry
            ? {
                nextAttemptAt:
                  now +
                  backoffMs(adopt.next.attempt, {
                    baseMs: exec.retryBaseMs,
                    capMs: exec.retryCapMs,
                  }),
              }
            : {}),
        }
      : {};
    const followUps = adopt
      ? await followUpsOf(ctx, exec, { ...exec, ...adopt.next, ...adoptPatch })
      : undefined;
    const moved: AppliedTransition | undefined = adopt && {
      executionId,
      jobId: exec.jobId,
      agentId: fact.agentId,
      event: "fact",
      from: exec.state,
      to: adopt.next.state,
      round: exec.round,
      at: now,
      fireAt: exec.fireAt,
      scheduledFor: exec.scheduledFor,
    };
    const alerts = moved ? alertsOf(ctx, [moved]) : [];
    const written = await ctx.store.applyTransition({
      executionId,
      expected: { state: exec.state, round: exec.round },
      next: snapshotOf(next),
      patch: adoptPatch,
      at: now,
      event: "fact",
      agentId: fact.agentId,
      ...(followUps === undefined ? {} : { followUps }),
      ...(alerts.length === 0 ? {} : { alerts }),
      counters: { [counter]: 1 },
      detail: {
        fact: fact.kind,
        round: fact.round,
        decision: counter.slice("facts_".length),
        started: fact.kind === "started" || fact.started,
        ...(fact.kind === "finished" ? { outcome: fact.outcome } : {}),
        ...(adopt ? { attempt: adopt.next.attempt } : {}),
        ...(adopt?.cancelRound === undefined ? {} : { canceledRound: adopt.cancelRound }),
        reason: decision.note,
      },
    });
    if (!written) continue;
    ctx.log(
      decision.action === "both_ran" ? "warn" : "info",
      `execution ${executionId}: ${decision.note}`,
      {
        executionId,
        agentId: fact.agentId,
      },
    );
    if (followUps !== undefined) {
      const firing = followUps;
      ctx.store.afterCommit(() => ctx.followUps?.fired(firing));
    }
    if (alerts.length > 0) ctx.store.afterCommit(() => ctx.transitionAlerts?.recorded(alerts));
    if (!adopt || !moved) return;
    if (adopt.next.state === "RUNNING") leases.follow(executionId, fact.round, exec.round, now);
    ctx.events.emit("transition", moved);
    const { cancelRound, cancelAgent } = adopt;
    if (cancelRound !== undefined && cancelAgent !== undefined) {
      // The later round must not start as well: a fence against starting stale work.
      ctx.store.afterCommit(() => {
        ctx.link
          .send(cancelAgent, envelope({ type: "cancel", executionId, round: cancelRound }, now))
          .catch((err: unknown) =>
            ctx.log("warn", `cancel to ${cancelAgent} not published: ${(err as Error).message}`, {
              executionId,
            }),
          );
      });
    }
    return;
  }
  // Not written (the execution kept changing under it): the report is not acknowledged, so the
  // agent re-sends it and the fact is decided again.
  throw new Error(`recording a fact about ${executionId} lost three compare-and-sets in a row`);
}
