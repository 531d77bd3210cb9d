import type { ExecState } from "../../../shared/fsm.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import type {
  ExecutionFilter,
  ExecutionPage,
  ExecutionPageQuery,
  ExecutionRecord,
  TimelineEntry,
} from "../port.js";
import { sqlLimit } from "./executions.js";
import { OPEN_STATES_SQL } from "./migrations.js";
import { type ExecutionRow, type TimelineRow, toExecution, toTimelineEntry } from "./rows.js";
import { type Queryable, run } from "./tx.js";

/* The execution listings of the operator surface and the engine: reads only. */

/** A WHERE clause being built: each condition adds its values as the next parameters. */
class Where {
  readonly parts: string[] = [];
  readonly values: unknown[] = [];
  add(condition: (next: () => string) => string, ...values: unknown[]): void {
    let i = this.values.length;
    this.parts.push(condition(() => `$${++i}`));
    this.values.push(...values);
  }
  get sql(): string {
    return this.parts.length ? `WHERE ${this.parts.join(" AND ")}` : "";
  }
  /** The next parameter's placeholder, for what follows the WHERE clause. */
  next(): string {
    return `$${this.values.length + 1}`;
  }
}

/** Executions matching every filter given, newest first (Store.listExecutions). */
export async function listExecutions(
  q: Queryable,
  filter: ExecutionFilter,
): Promise<ExecutionRecord[]> {
  const w = new Where();
  if (filter.jobId !== undefined) w.add((p) => `job_id = ${p()}`, filter.jobId);
  if (filter.agentId !== undefined) w.add((p) => `agent_id = ${p()}`, filter.agentId);
  if (filter.groupKey !== undefined) w.add((p) => `group_key = ${p()}`, filter.groupKey);
  if (filter.scheduledFor !== undefined) {
    w.add((p) => `scheduled_for = ${p()}`, filter.scheduledFor);
  }
  if (filter.states !== undefined && filter.states.length > 0) {
    w.add((p) => `state = ANY(${p()}::text[])`, filter.states);
  }
  const r = await run<ExecutionRow>(
    q,
    `SELECT * FROM executions ${w.sql} ORDER BY created_at DESC, id DESC LIMIT ${w.next()}`,
    [...w.values, sqlLimit(filter.limit ?? 100)],
  );
  return r.rows.map(toExecution);
}

/** One keyset page of executions, newest first by (createdAt, id) (Store.pageExecutions). */
export async function pageExecutions(
  q: Queryable,
  query: ExecutionPageQuery,
): Promise<ExecutionPage> {
  const limit = Math.max(1, Math.floor(query.limit));
  const w = new Where();
  if (query.jobId !== undefined) w.add((p) => `job_id = ${p()}`, query.jobId);
  // A command waits for its agent with agent_id unset: it is that agent's all the same.
  if (query.agentId !== undefined) {
    w.add((p) => `COALESCE(agent_id, target_agent_id) = ${p()}`, query.agentId);
  }
  if (query.kind !== undefined) w.add((p) => `kind = ${p()}`, query.kind);
  if (query.states !== undefined && query.states.length > 0) {
    w.add((p) => `state = ANY(${p()}::text[])`, query.states);
  }
  if (query.createdFrom !== undefined) w.add((p) => `created_at >= ${p()}`, query.createdFrom);
  if (query.createdBefore !== undefined) {
    w.add((p) => `created_at < ${p()}`, query.createdBefore);
  }
  if (query.cursor !== undefined) {
    const after = decodeExecutionCursor(query.cursor);
    w.add((p) => `(created_at, id) < (${p()}, ${p()})`, after.createdAt, after.id);
  }
  // One row more than the page says whether there is a next one.
  const r = await run<ExecutionRow>(
    q,
    `SELECT * FROM executions ${w.sql} ORDER BY created_at DESC, id DESC LIMIT ${w.next()}`,
    [...w.values, limit + 1],
  );
  const items = r.rows.slice(0, limit).map(toExecution);
  const last = items.at(-1);
  return {
    items,
    nextCursor:
      r.rows.length > limit && last
        ? encodeExecutionCursor({ createdAt: last.createdAt, id: last.id })
        : null,
  };
}

/** How many executions each agent holds (DISPATCHED, SCHEDULED or RUNNING). */
export async function countInFlightByAgent(q: Queryable): Promise<Record<string, number>> {
  const r = await run<{ agent_id: string; n: number }>(
    q,
    `SELECT agent_id, COUNT(*) AS n FROM executions
       WHERE state IN ('DISPATCHED', 'SCHEDULED', 'RUNNING') AND agent_id IS NOT NULL
       GROUP BY agent_id`,
  );
  return Object.fromEntries(r.rows.map((row) => [row.agent_id, row.n]));
}

/** How many executions are in each open state; states with none are left out. */
export async function countOpenExecutions(
  q: Queryable,
): Promise<Partial<Record<ExecState, number>>> {
  const r = await run<{ state: ExecState; n: number }>(
    q,
    `SELECT state, COUNT(*) AS n FROM executions WHERE state IN ${OPEN_STATES_SQL} GROUP BY state`,
  );
  return Object.fromEntries(r.rows.map((row) => [row.state, row.n]));
}

export async function getTimeline(q: Queryable, executionId: string): Promise<TimelineEntry[]> {
  const r = await run<TimelineRow>(
    q,
    "SELECT * FROM timeline WHERE execution_id = $1 ORDER BY seq",
    [executionId],
  );
  return r.rows.map(toTimelineEntry);
}
