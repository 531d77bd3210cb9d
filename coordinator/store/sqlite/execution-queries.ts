import { type ExecState, TERMINAL_STATES } from "../../../shared/fsm.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import type {
  ExecutionFilter,
  ExecutionPage,
  ExecutionPageQuery,
  ExecutionRecord,
  PeerRecord,
  RoutedRecord,
  TimelineEntry,
} from "../port.js";
import { type PeerRow, type RoutedRow, toPeer, toRouted } from "../stored-text.js";
import type { StoreContext } from "./context.js";
import { type ExecutionRow, type TimelineRow, toExecution, toTimelineEntry } from "./rows.js";
import { OPEN_SQL } from "./statements.js";
import { wrap } from "./values.js";

/*
 * The SQLite store's reads of executions (but listDue, in due.ts): by id, by filter, by page, the
 * open peers that overlap rules look at, counts, timelines.
 */

/** Store.getExecution: from the cache when it holds the execution. */
export function getExecution(ctx: StoreContext, id: string): ExecutionRecord | undefined {
  const cached = ctx.executions.get(id);
  if (cached) return cached;
  const row = wrap("getExecution", () =>
    ctx.statements.prepare("SELECT * FROM executions WHERE id = ?").get(id),
  ) as ExecutionRow | undefined;
  if (!row) return undefined;
  const e = toExecution(row);
  ctx.executions.add(e);
  return e;
}

/** Store.listExecutions. */
export function listExecutions(ctx: StoreContext, filter: ExecutionFilter): ExecutionRecord[] {
  const where: string[] = [];
  const args: unknown[] = [];
  if (filter.jobId !== undefined) {
    where.push("job_id = ?");
    args.push(filter.jobId);
  }
  if (filter.agentId !== undefined) {
    where.push("agent_id = ?");
    args.push(filter.agentId);
  }
  if (filter.groupKey !== undefined) {
    where.push("group_key = ?");
    args.push(filter.groupKey);
  }
  if (filter.scheduledFor !== undefined) {
    where.push("scheduled_for = ?");
    args.push(filter.scheduledFor);
  }
  if (filter.states !== undefined && filter.states.length > 0) {
    where.push(`state IN (${filter.states.map(() => "?").join(", ")})`);
    args.push(...filter.states);
  }
  const sql = `SELECT * FROM executions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY created_at DESC, id DESC LIMIT ?`;
  args.push(filter.limit ?? 100);
  return wrap("listExecutions", () =>
    (ctx.statements.prepare(sql).all(...args) as ExecutionRow[]).map(toExecution),
  );
}

/** Store.listExecutionsInStates. */
export function listExecutionsInStates(
  ctx: StoreContext,
  states: ExecState[],
  limit: number,
): ExecutionRecord[] {
  if (states.length === 0) return [];
  // Open states only: the partial index of open executions serves the query.
  const open = states.every((st) => !TERMINAL_STATES.has(st)) ? `${OPEN_SQL} AND ` : "";
  const sql = `SELECT * FROM executions WHERE ${open}state IN (${states.map(() => "?").join(", ")})
      ORDER BY priority DESC, fire_at, created_at LIMIT ?`;
  return wrap("listExecutionsInStates", () =>
    (ctx.statements.prepare(sql).all(...states, limit) as ExecutionRow[]).map(toExecution),
  );
}

/** Store.listOpenPeers. */
export function listOpenPeers(
  ctx: StoreContext,
  by: { jobId: string } | { groupKey: string },
): PeerRecord[] {
  // By job: INDEXED BY, or the planner walks executions_job for its order, through every
  // finished execution the job ever had.
  const [column, index] =
    "jobId" in by ? ["job_id", "INDEXED BY executions_open_job"] : ["group_key", ""];
  const rows = wrap("listOpenPeers", () =>
    ctx.statements
      .prepare(
        `SELECT id, state, created_at, job_id, scheduled_for, shard_total FROM executions ${index}
           WHERE ${column} = ? AND ${OPEN_SQL} ORDER BY created_at, id`,
      )
      .all("jobId" in by ? by.jobId : by.groupKey),
  ) as PeerRow[];
  return rows.map(toPeer);
}

/** Store.listRecentlyRouted: down the job's (job_id, created_at) index, newest first. */
export function listRecentlyRouted(
  ctx: StoreContext,
  jobId: string,
  limit: number,
): RoutedRecord[] {
  const rows = wrap("listRecentlyRouted", () =>
    ctx.statements
      .prepare(
        `SELECT agent_id, state, shard_index, shard_total FROM executions INDEXED BY executions_job
           WHERE job_id = ? AND agent_id IS NOT NULL ORDER BY created_at DESC LIMIT ?`,
      )
      .all(jobId, Math.max(0, Math.floor(limit))),
  ) as RoutedRow[];
  return rows.map(toRouted);
}

/** Store.countInFlightByAgent. */
export function countInFlightByAgent(ctx: StoreContext): Record<string, number> {
  const rows = wrap("countInFlightByAgent", () =>
    ctx.statements
      .prepare(
        `SELECT agent_id, COUNT(*) AS n FROM executions
           WHERE ${OPEN_SQL} AND state IN ('DISPATCHED', 'SCHEDULED', 'RUNNING')
             AND agent_id IS NOT NULL
           GROUP BY agent_id`,
      )
      .all(),
  ) as { agent_id: string; n: number }[];
  return Object.fromEntries(rows.map((r) => [r.agent_id, r.n]));
}

/** Store.getTimeline. */
export function getTimeline(ctx: StoreContext, executionId: string): TimelineEntry[] {
  const rows = wrap("getTimeline", () =>
    ctx.statements
      .prepare("SELECT * FROM timeline WHERE execution_id = ? ORDER BY seq")
      .all(executionId),
  ) as TimelineRow[];
  return rows.map(toTimelineEntry);
}

/** Store.pageExecutions: keyset paging, newest first by (createdAt, id). */
export function pageExecutions(ctx: StoreContext, query: ExecutionPageQuery): ExecutionPage {
  const limit = Math.max(1, Math.floor(query.limit));
  const where: string[] = [];
  const args: unknown[] = [];
  const add = (sql: string, ...values: unknown[]) => {
    where.push(sql);
    args.push(...values);
  };
  if (query.jobId !== undefined) add("job_id = ?", query.jobId);
  // A command waits for its agent with agent_id unset: it is that agent's all the same.
  if (query.agentId !== undefined) add("COALESCE(agent_id, target_agent_id) = ?", query.agentId);
  if (query.kind !== undefined) add("kind = ?", query.kind);
  if (query.states !== undefined && query.states.length > 0) {
    add(`state IN (${query.states.map(() => "?").join(", ")})`, ...query.states);
  }
  if (query.createdFrom !== undefined) add("created_at >= ?", query.createdFrom);
  if (query.createdBefore !== undefined) add("created_at < ?", query.createdBefore);
  if (query.cursor !== undefined) {
    const after = decodeExecutionCursor(query.cursor);
    add("(created_at, id) < (?, ?)", after.createdAt, after.id);
  }
  // One row more than the page says whether there is a next one.
  const sql = `SELECT * FROM executions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY created_at DESC, id DESC LIMIT ?`;
  const rows = wrap(
    "pageExecutions",
    () => ctx.statements.prepare(sql).all(...args, limit + 1) as ExecutionRow[],
  );
  const items = rows.slice(0, limit).map(toExecution);
  const last = items.at(-1);
  return {
    items,
    nextCursor:
      rows.length > limit && last
        ? encodeExecutionCursor({ createdAt: last.createdAt, id: last.id })
        : null,
  };
}

/** Store.countOpenExecutions. */
export function countOpenExecutions(ctx: StoreContext): Partial<Record<ExecState, number>> {
  // OPEN_SQL word for word: the partial index of open executions answers it without the table.
  const rows = wrap("countOpenExecutions", () =>
    ctx.statements
      .prepare(`SELECT state, COUNT(*) AS n FROM executions WHERE ${OPEN_SQL} GROUP BY state`)
      .all(),
  ) as { state: ExecState; n: number }[];
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}
