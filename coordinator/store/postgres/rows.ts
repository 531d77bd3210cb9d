import type { JobDefinition } from "../../domain/job.js";
import type { NewExecution, StoredJob } from "../port.js";

/*
 * The PostgreSQL store's rows and the records they hold. The columns of executions, timeline,
 * agents, alerts, job history and API tokens are SQLite's, with the same names and the same JSON
 * text, so their mapping is shared with that adapter (store/sqlite/rows.ts) rather than written
 * twice; what differs is here: jobs (a boolean `paused`, derived columns), coordinators, and a
 * batch of new executions as the column arrays one INSERT … SELECT FROM unnest(…) takes.
 */
export {
  type AgentRow,
  type AlertRow,
  type ApiTokenRow,
  type ExecutionRow,
  type JobHistoryRow,
  PATCH_COLUMNS,
  type TimelineRow,
  toAgent,
  toAlert,
  toApiToken,
  toExecution,
  toJobHistoryEntry,
  toTimelineEntry,
} from "../sqlite/rows.js";

export interface JobRow {
  id: string;
  version: number;
  definition: string;
  next_fire_at: number | null;
  paused: boolean;
  created_at: number;
  updated_at: number;
  updated_by: string | null;
}

export function toJob(row: JobRow): StoredJob {
  return {
    id: row.id,
    version: row.version,
    definition: JSON.parse(row.definition) as JobDefinition,
    nextFireAt: row.next_fire_at,
    paused: row.paused,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    updatedBy: row.updated_by,
  };
}

/**
 * The columns a new execution sets, in order, with their array types: {@link executionColumns}
 * returns the arrays in this order, and INSERT_EXECUTIONS_SQL (executions.ts) unnests them.
 */
export const NEW_EXECUTION_COLUMNS = [
  ["id", "text"],
  ["kind", "text"],
  ["job_id", "text"],
  ["job_version", "integer"],
  ["handler", "text"],
  ["params", "text"],
  ["target_agent_id", "text"],
  ["max_attempts", "integer"],
  ["max_dispatches", "integer"],
  ["fire_at", "double precision"],
  ["deadline", "double precision"],
  ["timeout_ms", "double precision"],
  ["dispatch_timeout_ms", "double precision"],
  ["priority", "integer"],
  ["retry_base_ms", "double precision"],
  ["retry_cap_ms", "double precision"],
  ["created_at", "double precision"],
  ["scheduled_for", "double precision"],
  ["shard_index", "integer"],
  ["shard_total", "integer"],
  ["group_key", "text"],
  ["tags", "text"],
] as const;

/** One value per {@link NEW_EXECUTION_COLUMNS} entry, as stored. */
function executionValues(e: NewExecution): unknown[] {
  return [
    e.id,
    e.kind,
    e.jobId,
    e.jobVersion,
    e.handler,
    JSON.stringify(e.params),
    e.targetAgentId,
    e.maxAttempts,
    e.maxDispatches,
    e.fireAt,
    e.deadline,
    e.timeoutMs,
    e.dispatchTimeoutMs,
    e.priority,
    e.retryBaseMs,
    e.retryCapMs,
    e.createdAt,
    e.scheduledFor ?? null,
    e.shardIndex ?? null,
    e.shardTotal ?? null,
    e.groupKey ?? null,
    // No tags is stored as NULL and read back as {}, as SQLite does.
    e.tags && Object.keys(e.tags).length > 0 ? JSON.stringify(e.tags) : null,
  ];
}

/** Appends a row's values to column arrays (one multi-row statement's parameters), in order. */
export function pushRow(columns: unknown[][], values: readonly unknown[]): void {
  for (let i = 0; i < columns.length; i++) columns[i]?.push(values[i]);
}

/** New executions as one array per column (the parameters of one multi-row INSERT). */
export function executionColumns(executions: readonly NewExecution[]): unknown[][] {
  const columns: unknown[][] = NEW_EXECUTION_COLUMNS.map(() => []);
  for (const e of executions) pushRow(columns, executionValues(e));
  return columns;
}

export { type CoordinatorRow, toCoordinator } from "../stored-text.js";
