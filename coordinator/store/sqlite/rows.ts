import type { ExecState } from "../../../shared/fsm.js";
import type { JobDefinition } from "../../domain/job.js";
import type {
  AgentRecord,
  AlertRecord,
  ApiTokenRecord,
  ExecutionKind,
  ExecutionPatch,
  ExecutionRecord,
  JobHistoryEntry,
  StoredJob,
  TimelineEntry,
} from "../port.js";

/*
 * The SQLite store's rows and the records they hold (store/records.ts, store/port.ts): columns
 * are snake_case, JSON values are stored as text.
 */

export interface JobRow {
  id: string;
  version: number;
  definition: string;
  next_fire_at: number | null;
  paused: number;
  created_at: number;
  updated_at: number;
  updated_by: string | null;
}

export interface ExecutionRow {
  id: string;
  kind: ExecutionKind;
  job_id: string | null;
  job_version: number | null;
  handler: string;
  params: string;
  target_agent_id: string | null;
  agent_id: string | null;
  state: ExecState;
  round: number;
  attempt: number;
  max_attempts: number;
  dispatches: number;
  max_dispatches: number;
  fire_at: number;
  deadline: number;
  timeout_ms: number;
  dispatch_timeout_ms: number;
  priority: number;
  retry_base_ms: number;
  retry_cap_ms: number;
  created_at: number;
  updated_at: number;
  dispatched_at: number | null;
  started_at: number | null;
  finished_at: number | null;
  late_ms: number | null;
  next_attempt_at: number | null;
  result: string | null;
  message: string | null;
  message_bytes: number | null;
  scheduled_for: number | null;
  shard_index: number | null;
  shard_total: number | null;
  group_key: string | null;
  tags: string | null;
}

export interface TimelineRow {
  execution_id: string;
  seq: number;
  at: number;
  event: string;
  from_state: ExecState | null;
  to_state: ExecState;
  round: number;
  agent_id: string | null;
  detail: string | null;
}

/** An agent's record is kept whole as JSON; its acked seq in a column of its own. */
export interface AgentRow {
  record: string;
  acked_seq: number;
}

export interface AlertRow {
  id: string;
  kind: string;
  url: string;
  payload: string;
  status: AlertRecord["status"];
  attempts: number;
  last_error: string | null;
  created_at: number;
  updated_at: number;
}

export interface JobHistoryRow {
  job_id: string;
  seq: number;
  at: number;
  action: JobHistoryEntry["action"];
  version: number | null;
  actor: string;
  detail: string | null;
}

export interface ApiTokenRow {
  name: string;
  digest: string;
  role: ApiTokenRecord["role"];
  created_at: number;
  created_by: string;
  last_used_at: number | null;
}

export function toJob(row: JobRow): StoredJob {
  return {
    id: row.id,
    version: row.version,
    definition: JSON.parse(row.definition) as JobDefinition,
    nextFireAt: row.next_fire_at,
    paused: row.paused === 1,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    updatedBy: row.updated_by,
  };
}

export function toExecution(r: ExecutionRow): ExecutionRecord {
  return {
    id: r.id,
    kind: r.kind,
    jobId: r.job_id,
    jobVersion: r.job_version,
    handler: r.handler,
    params: JSON.parse(r.params) as Record<string, unknown>,
    targetAgentId: r.target_agent_id,
    agentId: r.agent_id,
    state: r.state,
    round: r.round,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    dispatches: r.dispatches,
    maxDispatches: r.max_dispatches,
    fireAt: r.fire_at,
    deadline: r.deadline,
    timeoutMs: r.timeout_ms,
    dispatchTimeoutMs: r.dispatch_timeout_ms,
    priority: r.priority,
    retryBaseMs: r.retry_base_ms,
    retryCapMs: r.retry_cap_ms,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    dispatchedAt: r.dispatched_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
    lateMs: r.late_ms,
    nextAttemptAt: r.next_attempt_at,
    result: r.result === null ? null : (JSON.parse(r.result) as Record<string, unknown>),
    message: r.message,
    messageBytes: r.message_bytes,
    scheduledFor: r.scheduled_for,
    shardIndex: r.shard_index,
    shardTotal: r.shard_total,
    groupKey: r.group_key,
    tags: r.tags === null ? {} : (JSON.parse(r.tags) as Record<string, string>),
  };
}

export function toTimelineEntry(r: TimelineRow): TimelineEntry {
  const detail = r.detail === null ? null : (JSON.parse(r.detail) as Record<string, unknown>);
  return {
    executionId: r.execution_id,
    seq: r.seq,
    at: r.at,
    event: r.event,
    fromState: r.from_state,
    toState: r.to_state,
    round: r.round,
    agentId: r.agent_id,
    reason: typeof detail?.reason === "string" ? detail.reason : null,
    detail,
    actor: typeof detail?.actor === "string" ? detail.actor : null,
  };
}

export function toAgent(r: AgentRow): AgentRecord {
  return { ...(JSON.parse(r.record) as AgentRecord), ackedSeq: r.acked_seq };
}

export function toAlert(r: AlertRow): AlertRecord {
  return {
    id: r.id,
    kind: r.kind,
    url: r.url,
    payload: JSON.parse(r.payload) as Record<string, unknown>,
    status: r.status,
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export function toJobHistoryEntry(r: JobHistoryRow): JobHistoryEntry {
  return {
    jobId: r.job_id,
    seq: r.seq,
    at: r.at,
    action: r.action,
    version: r.version,
    actor: r.actor,
    detail: r.detail === null ? null : (JSON.parse(r.detail) as Record<string, unknown>),
  };
}

export function toApiToken(r: ApiTokenRow): ApiTokenRecord {
  return {
    name: r.name,
    role: r.role,
    digest: r.digest,
    createdAt: r.created_at,
    createdBy: r.created_by,
    lastUsedAt: r.last_used_at,
  };
}

/** Patchable fields and their columns; bit i of a patch's shape stands for entry i. */
export const PATCH_COLUMNS = [
  ["agentId", "agent_id"],
  ["dispatchedAt", "dispatched_at"],
  ["startedAt", "started_at"],
  ["finishedAt", "finished_at"],
  ["lateMs", "late_ms"],
  ["nextAttemptAt", "next_attempt_at"],
  ["result", "result"],
  ["message", "message"],
  ["fireAt", "fire_at"],
  ["deadline", "deadline"],
] as const satisfies readonly (readonly [keyof ExecutionPatch, string])[];
