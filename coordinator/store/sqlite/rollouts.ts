import type { ExecState } from "../../../shared/fsm.js";
import type {
  RolloutEvent,
  RolloutRecord,
  RolloutState,
  RolloutTarget,
} from "../../domain/rollout.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import type { IdempotencyRecord, NewExecution, RolloutCount, RolloutPage } from "../port.js";
import type { StoreContext } from "./context.js";
import { insertExecution, insertIdempotency } from "./executions.js";
import { detailJson, wrap } from "./values.js";

/*
 * Rollouts in the SQLite store: the record as JSON beside the columns it is queried by, its
 * timeline, and one row per agent reached (the key that makes a reach happen once).
 */

/** The rollout's columns besides its JSON. */
function columns(r: RolloutRecord): [number, string, number, number, number | null, string] {
  return [r.version, r.state, r.settled ? 1 : 0, r.createdAt, r.finishedAt, JSON.stringify(r)];
}

function insertEvent(ctx: StoreContext, id: string, event: Omit<RolloutEvent, "seq">): void {
  const row = ctx.statements
    .prepare("SELECT COALESCE(MAX(seq), 0) AS seq FROM rollout_events WHERE rollout_id = ?")
    .get(id) as { seq: number };
  const detail = event.detail === null ? null : detailJson(event.detail, ctx.maxErrorTextBytes);
  const entry: RolloutEvent = {
    ...event,
    seq: row.seq + 1,
    detail: detail === null ? null : (JSON.parse(detail) as Record<string, unknown>),
  };
  ctx.statements
    .prepare("INSERT INTO rollout_events (rollout_id, seq, entry) VALUES (?, ?, ?)")
    .run(id, entry.seq, JSON.stringify(entry));
}

/** Store.createRollout. */
export function createRollout(
  ctx: StoreContext,
  r: RolloutRecord,
  event: Omit<RolloutEvent, "seq">,
  idempotency?: IdempotencyRecord,
): boolean {
  return wrap("createRollout", () =>
    ctx.writer.write(() => {
      const done = ctx.statements
        .prepare(
          `INSERT INTO rollouts (id, version, state, settled, created_at, finished_at, record)
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
        )
        .run(r.id, ...columns(r));
      if (done.changes === 0) return false;
      insertEvent(ctx, r.id, event);
      // A scope already taken throws here, and the write's savepoint undoes the rollout too.
      if (idempotency) insertIdempotency(ctx, idempotency);
      return true;
    }),
  );
}

/** Store.getRollout. */
export function getRollout(ctx: StoreContext, id: string): RolloutRecord | undefined {
  const row = wrap("getRollout", () =>
    ctx.statements.prepare("SELECT record FROM rollouts WHERE id = ?").get(id),
  ) as { record: string } | undefined;
  return row === undefined ? undefined : (JSON.parse(row.record) as RolloutRecord);
}

/** Store.pageRollouts. */
export function pageRollouts(
  ctx: StoreContext,
  query: { limit: number; cursor?: string; state?: RolloutState },
): RolloutPage {
  const where: string[] = [];
  const args: unknown[] = [];
  if (query.state !== undefined) {
    where.push("state = ?");
    args.push(query.state);
  }
  if (query.cursor !== undefined) {
    const c = decodeExecutionCursor(query.cursor);
    where.push("(created_at < ? OR (created_at = ? AND id < ?))");
    args.push(c.createdAt, c.createdAt, c.id);
  }
  const limit = Math.max(1, Math.floor(query.limit));
  const rows = wrap("pageRollouts", () =>
    ctx.statements
      .prepare(
        `SELECT record FROM rollouts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
           ORDER BY created_at DESC, id DESC LIMIT ?`,
      )
      .all(...args, limit + 1),
  ) as { record: string }[];
  const items = rows.slice(0, limit).map((r) => JSON.parse(r.record) as RolloutRecord);
  const last = items[items.length - 1];
  return {
    items,
    nextCursor:
      rows.length > limit && last !== undefined
        ? encodeExecutionCursor({ createdAt: last.createdAt, id: last.id })
        : null,
  };
}

/** Store.listUnsettledRollouts. */
export function listUnsettledRollouts(ctx: StoreContext): RolloutRecord[] {
  const rows = wrap("listUnsettledRollouts", () =>
    ctx.statements
      .prepare("SELECT record FROM rollouts WHERE settled = 0 ORDER BY created_at, id")
      .all(),
  ) as { record: string }[];
  return rows.map((r) => JSON.parse(r.record) as RolloutRecord);
}

/** Store.updateRollout. */
export function updateRollout(
  ctx: StoreContext,
  next: RolloutRecord,
  expectedVersion: number,
  event: Omit<RolloutEvent, "seq"> | undefined,
): boolean {
  return wrap("updateRollout", () =>
    ctx.writer.write(() => {
      const stored: RolloutRecord = { ...next, version: expectedVersion + 1 };
      const done = ctx.statements
        .prepare(
          `UPDATE rollouts SET version = ?, state = ?, settled = ?, created_at = ?, finished_at = ?,
             record = ? WHERE id = ? AND version = ?`,
        )
        .run(...columns(stored), next.id, expectedVersion);
      if (done.changes === 0) return false;
      if (event !== undefined) insertEvent(ctx, next.id, event);
      return true;
    }),
  );
}

/** Store.getRolloutTimeline. */
export function getRolloutTimeline(ctx: StoreContext, id: string): RolloutEvent[] {
  const rows = wrap("getRolloutTimeline", () =>
    ctx.statements
      .prepare("SELECT entry FROM rollout_events WHERE rollout_id = ? ORDER BY seq")
      .all(id),
  ) as { entry: string }[];
  return rows.map((r) => JSON.parse(r.entry) as RolloutEvent);
}

/** Store.reachRolloutTargets. */
export function reachRolloutTargets(
  ctx: StoreContext,
  rolloutId: string,
  targets: readonly { agentId: string; wave: number; execution: NewExecution }[],
  at: number,
  detail: Record<string, unknown> | undefined,
): string[] {
  if (targets.length === 0) return [];
  return wrap("reachRolloutTargets", () =>
    ctx.writer.write(() => {
      const state = ctx.statements
        .prepare("SELECT state FROM rollouts WHERE id = ?")
        .get(rolloutId) as { state: string } | undefined;
      if (state?.state !== "IN_PROGRESS") return [];
      const insert = ctx.statements.prepare(
        `INSERT INTO rollout_targets (rollout_id, agent_id, execution_id, wave, reached_at)
           VALUES (?, ?, ?, ?, ?) ON CONFLICT (rollout_id, agent_id) DO NOTHING`,
      );
      const json = detailJson(detail ?? null, ctx.maxErrorTextBytes);
      const reached: string[] = [];
      for (const t of targets) {
        if (insert.run(rolloutId, t.agentId, t.execution.id, t.wave, at).changes === 0) continue;
        insertExecution(ctx, t.execution, at, detail ?? null, json);
        reached.push(t.agentId);
      }
      return reached;
    }),
  );
}

/** Store.listRolloutTargets. */
export function listRolloutTargets(ctx: StoreContext, rolloutId: string): RolloutTarget[] {
  const rows = wrap("listRolloutTargets", () =>
    ctx.statements
      .prepare(
        `SELECT agent_id, execution_id, wave, reached_at FROM rollout_targets
           WHERE rollout_id = ? ORDER BY reached_at, agent_id`,
      )
      .all(rolloutId),
  ) as { agent_id: string; execution_id: string; wave: number; reached_at: number }[];
  return rows.map((r) => ({
    agentId: r.agent_id,
    executionId: r.execution_id,
    wave: r.wave,
    reachedAt: r.reached_at,
  }));
}

/** Store.countRolloutExecutions. */
export function countRolloutExecutions(ctx: StoreContext, rolloutId: string): RolloutCount[] {
  const rows = wrap("countRolloutExecutions", () =>
    ctx.statements
      .prepare(
        `SELECT t.wave AS wave, e.state AS state, COUNT(*) AS count
           FROM rollout_targets t JOIN executions e ON e.id = t.execution_id
           WHERE t.rollout_id = ? GROUP BY t.wave, e.state ORDER BY t.wave, e.state`,
      )
      .all(rolloutId),
  ) as { wave: number; state: ExecState; count: number }[];
  return rows;
}

/**
 * Retention of rollouts, inside the caller's write: up to `max` settled ones finished before
 * `cutoffMs`, with their timelines and targets (their executions age out on their own).
 */
export function purgeRollouts(ctx: StoreContext, cutoffMs: number, max: number): void {
  const ids = ctx.statements
    .prepare(
      `SELECT id FROM rollouts INDEXED BY rollouts_finished
         WHERE settled = 1 AND finished_at < ? ORDER BY finished_at LIMIT ?`,
    )
    .pluck()
    .all(cutoffMs, max) as string[];
  for (const id of ids) {
    ctx.statements.prepare("DELETE FROM rollout_targets WHERE rollout_id = ?").run(id);
    ctx.statements.prepare("DELETE FROM rollout_events WHERE rollout_id = ?").run(id);
    ctx.statements.prepare("DELETE FROM rollouts WHERE id = ?").run(id);
  }
}
