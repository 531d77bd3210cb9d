import type { NewExecution, StoredJob } from "../store/port.js";
import { newExecutionId } from "./transitions.js";

/**
 * The executions one firing of `job` creates: one per shard, carrying the job's handler, params,
 * limits, group and routing tags. Every way a job fires (its trigger, an event, an `after`, an
 * operator's "run now") builds them here, so none of them skips a rule.
 */
export function jobExecutions(
  job: StoredJob,
  fireAt: number,
  now: number,
  params: Record<string, unknown> = job.definition.params,
): NewExecution[] {
  const def = job.definition;
  const out: NewExecution[] = [];
  for (let index = 0; index < def.shards; index++) {
    out.push({
      id: newExecutionId(now),
      kind: "job",
      jobId: job.id,
      jobVersion: job.version,
      handler: def.handler,
      params,
      targetAgentId: null,
      fireAt,
      deadline: fireAt + def.deadline,
      timeoutMs: def.timeout,
      dispatchTimeoutMs: def.dispatchTimeout,
      maxAttempts: def.retry.maxAttempts,
      maxDispatches: def.maxDispatches,
      priority: def.priority,
      retryBaseMs: def.retry.baseMs,
      retryCapMs: def.retry.capMs,
      createdAt: now,
      groupKey: def.group ?? null,
      tags: def.tags,
      ...(def.shards > 1 ? { shardIndex: index, shardTotal: def.shards } : {}),
    });
  }
  return out;
}
