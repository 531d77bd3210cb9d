import type { ExecState } from "../../../shared/fsm.js";
import type {
  RolloutEvent,
  RolloutRecord,
  RolloutState,
  RolloutTarget,
} from "../../domain/rollout.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import type { NewExecution, RolloutCount, RolloutPage } from "../port.js";
import { insertExecutions } from "./executions.js";
import { type Queryable, run } from "./tx.js";

/*
 * Rollouts in the PostgreSQL store, as in SQLite's (sqlite/rollouts.ts): the record as JSON
 * beside its queried columns, its timeline, one row per agent reached. The functions run in the
 * caller's transaction.
 */

function columns(r: RolloutRecord): [number, string, boolean, number, number | null, string] {
  return [r.version, r.state, r.settled, r.createdAt, r.finishedAt, JSON.stringify(r)];
}

/** Appends `event` to the rollout's timeline (the caller holds the rollout's row). */
async function insertEvent(
  q: Queryable,
  id: string,
  event: Omit<RolloutEvent, "seq">,
  detailText: string | null,
): Promise<void> {
  const r = await run<{ seq: number }>(
    q,
    "SELECT COALESCE(MAX(seq), 0)::int AS seq FROM rollout_events WHERE rollout_id = $1",
    [id],
  );
  const entry: RolloutEvent = {
    ...event,
    seq: (r.rows[0]?.seq ?? 0) + 1,
    detail: detailText === null ? null : (JSON.parse(detailText) as Record<string, unknown>),
  };
  await run(q, "INSERT INTO rollout_events (rollout_id, seq, entry) VALUES ($1, $2, $3)", [
    id,
    entry.seq,
    JSON.stringify(entry),
  ]);
}

export async function createRollout(
  q: Queryable,
  r: RolloutRecord,
  event: Omit<RolloutEvent, "seq">,
  detailText: string | null,
): Promise<boolean> {
  const done = await run(
    q,
    `INSERT INTO rollouts (id, version, state, settled, created_at, finished_at, record)
       VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
    [r.id, ...columns(r)],
  );
  if (!done.rowCount) return false;
  await insertEvent(q, r.id, event, detailText);
  return true;
}

export async function getRollout(q: Queryable, id: string): Promise<RolloutRecord | undefined> {
  const r = await run<{ record: string }>(q, "SELECT record FROM rollouts WHERE id = $1", [id]);
  const row = r.rows[0];
  return row === undefined ? undefined : (JSON.parse(row.record) as RolloutRecord);
}

export async function pageRollouts(
  q: Queryable,
  query: { limit: number; cursor?: string; state?: RolloutState },
): Promise<RolloutPage> {
  const where: string[] = [];
  const args: unknown[] = [];
  if (query.state !== undefined) {
    args.push(query.state);
    where.push(`state = $${args.length}`);
  }
  if (query.cursor !== undefined) {
    const c = decodeExecutionCursor(query.cursor);
    args.push(c.createdAt, c.id);
    where.push(`(created_at, id) < ($${args.length - 1}, $${args.length})`);
  }
  const limit = Math.max(1, Math.floor(query.limit));
  args.push(limit + 1);
  const r = await run<{ record: string }>(
    q,
    `SELECT record FROM rollouts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
       ORDER BY created_at DESC, id DESC LIMIT $${args.length}`,
    args,
  );
  const items = r.rows.slice(0, limit).map((row) => JSON.parse(row.record) as RolloutRecord);
  const last = items[items.length - 1];
  return {
    items,
    nextCursor:
      r.rows.length > limit && last !== undefined
        ? encodeExecutionCursor({ createdAt: last.createdAt, id: last.id })
        : null,
  };
}

export async function listUnsettledRollouts(q: Queryable): Promise<RolloutRecord[]> {
  const r = await run<{ record: string }>(
    q,
    "SELECT record FROM rollouts WHERE NOT settled ORDER BY created_at, id",
  );
  return r.rows.map((row) => JSON.parse(row.record) as RolloutRecord);
}

export async function updateRollout(
  q: Queryable,
  next: RolloutRecord,
  expectedVersion: number,
  event: Omit<RolloutEvent, "seq"> | undefined,
  detailText: string | null,
): Promise<boolean> {
  const stored: RolloutRecord = { ...next, version: expectedVersion + 1 };
  const done = await run(
    q,
    `UPDATE rollouts SET version = $1, state = $2, settled = $3, created_at = $4, finished_at = $5,
       record = $6 WHERE id = $7 AND version = $8`,
    [...columns(stored), next.id, expectedVersion],
  );
  if (!done.rowCount) return false;
  if (event !== undefined) await insertEvent(q, next.id, event, detailText);
  return true;
}

export async function getRolloutTimeline(q: Queryable, id: string): Promise<RolloutEvent[]> {
  const r = await run<{ entry: string }>(
    q,
    "SELECT entry FROM rollout_events WHERE rollout_id = $1 ORDER BY seq",
    [id],
  );
  return r.rows.map((row) => JSON.parse(row.entry) as RolloutEvent);
}

/**
 * Store.reachRolloutTargets: the rollout's row is read FOR SHARE, so an abort or a pause
 * (an UPDATE of that row) either commits before and is seen, or waits for this to commit.
 */
export async function reachRolloutTargets(
  q: Queryable,
  rolloutId: string,
  targets: readonly { agentId: string; wave: number; execution: NewExecution }[],
  at: number,
  detailText: string | null,
): Promise<string[]> {
  if (targets.length === 0) return [];
  const state = await run<{ state: string }>(
    q,
    "SELECT state FROM rollouts WHERE id = $1 FOR SHARE",
    [rolloutId],
  );
  if (state.rows[0]?.state !== "IN_PROGRESS") return [];
  const inserted = await run<{ agent_id: string }>(
    q,
    `INSERT INTO rollout_targets (rollout_id, agent_id, execution_id, wave, reached_at)
       SELECT $1, t.agent_id, t.execution_id, t.wave, $5
       FROM unnest($2::text[], $3::text[], $4::int[]) AS t(agent_id, execution_id, wave)
       ON CONFLICT (rollout_id, agent_id) DO NOTHING
       RETURNING agent_id`,
    [
      rolloutId,
      targets.map((t) => t.agentId),
      targets.map((t) => t.execution.id),
      targets.map((t) => t.wave),
      at,
    ],
  );
  const reached = new Set(inserted.rows.map((r) => r.agent_id));
  const executions = targets.filter((t) => reached.has(t.agentId)).map((t) => t.execution);
  await insertExecutions(
    q,
    executions,
    at,
    executions.map(() => detailText),
  );
  return targets.filter((t) => reached.has(t.agentId)).map((t) => t.agentId);
}

export async function listRolloutTargets(
  q: Queryable,
  rolloutId: string,
): Promise<RolloutTarget[]> {
  const r = await run<{ agent_id: string; execution_id: string; wave: number; reached_at: number }>(
    q,
    `SELECT agent_id, execution_id, wave, reached_at FROM rollout_targets
       WHERE rollout_id = $1 ORDER BY reached_at, agent_id`,
    [rolloutId],
  );
  return r.rows.map((row) => ({
    agentId: row.agent_id,
    executionId: row.execution_id,
    wave: row.wave,
    reachedAt: row.reached_at,
  }));
}

export async function countRolloutExecutions(
  q: Queryable,
  rolloutId: string,
): Promise<RolloutCount[]> {
  const r = await run<{ wave: number; state: ExecState; count: number }>(
    q,
    `SELECT t.wave AS wave, e.state AS state, COUNT(*)::int AS count
       FROM rollout_targets t JOIN executions e ON e.id = t.execution_id
       WHERE t.rollout_id = $1 GROUP BY t.wave, e.state ORDER BY t.wave, e.state`,
    [rolloutId],
  );
  return r.rows;
}

/**
 * Retention of rollouts, in the caller's transaction: up to `max` settled ones finished before
 * `cutoffMs`, with their timelines and targets (their executions age out on their own).
 */
export async function purgeRollouts(q: Queryable, cutoffMs: number, max: number): Promise<void> {
  const ids = (
    await run<{ id: string }>(
      q,
      `SELECT id FROM rollouts WHERE settled AND finished_at < $1 ORDER BY finished_at LIMIT $2`,
      [cutoffMs, max],
    )
  ).rows.map((r) => r.id);
  if (ids.length === 0) return;
  await run(q, "DELETE FROM rollout_targets WHERE rollout_id = ANY($1::text[])", [ids]);
  await run(q, "DELETE FROM rollout_events WHERE rollout_id = ANY($1::text[])", [ids]);
  await run(q, "DELETE FROM rollouts WHERE id = ANY($1::text[])", [ids]);
}
