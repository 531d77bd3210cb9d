import { AxError } from "../../../shared/errors.js";
import type { CoordinatorRecord } from "../port.js";
import { DB_NOW_MS } from "./executions.js";
import { type CoordinatorRow, toCoordinator } from "./rows.js";
import { type Queryable, run } from "./tx.js";

/*
 * Coordinators sharing the store: membership by lease, fenced by epoch. All times are the
 * database's clock, so coordinators' clocks may disagree without effect.
 */

/** What a store object remembers of its membership. */
export interface Membership {
  id: string;
  epoch: number;
  leaseMs: number;
  /** Set for good once a write or a renewal found the membership lapsed or taken over. */
  fenced: boolean;
}

/** The database's clock, UTC ms (Store.clockNow). */
export async function clockNow(q: Queryable): Promise<number> {
  const r = await run<{ ms: number }>(q, `SELECT ${DB_NOW_MS} AS ms`);
  return r.rows[0]?.ms as number;
}

/** Joins as `id` (Store.joinCoordinators): a new epoch, one more than any earlier one. */
export async function join(
  q: Queryable,
  id: string,
  leaseMs: number,
  info: Record<string, unknown>,
): Promise<CoordinatorRecord> {
  const r = await run<CoordinatorRow>(
    q,
    `INSERT INTO coordinators (id, epoch, joined_at, renewed_at, lease_until, info)
       SELECT $1, 1, c.ms, c.ms, c.ms + $2::bigint, $3 FROM (SELECT ${DB_NOW_MS} AS ms) c
       ON CONFLICT (id) DO UPDATE SET epoch = coordinators.epoch + 1,
         joined_at = excluded.joined_at, renewed_at = excluded.renewed_at,
         lease_until = excluded.lease_until, info = excluded.info
       RETURNING *`,
    [id, leaseMs, JSON.stringify(info)],
  );
  return toCoordinator(r.rows[0] as CoordinatorRow);
}

/** Extends the lease if it has not lapsed and no newer epoch joined; false otherwise. */
export async function renew(
  q: Queryable,
  m: Membership,
  info: Record<string, unknown> | undefined,
): Promise<boolean> {
  const r = await run(
    q,
    `UPDATE coordinators SET renewed_at = c.ms, lease_until = c.ms + $3::bigint,
         info = COALESCE($4, info)
       FROM (SELECT ${DB_NOW_MS} AS ms) c
       WHERE id = $1 AND epoch = $2 AND lease_until > c.ms`,
    [m.id, m.epoch, m.leaseMs, info === undefined ? null : JSON.stringify(info)],
  );
  return r.rowCount === 1;
}

/** Ends the membership now: its lease ends at the database's present. */
export async function leave(q: Queryable, m: Membership): Promise<void> {
  await run(
    q,
    `UPDATE coordinators SET lease_until = LEAST(lease_until, ${DB_NOW_MS})
       WHERE id = $1 AND epoch = $2`,
    [m.id, m.epoch],
  );
}

/** The live coordinators, oldest joined first. */
export async function listLive(q: Queryable): Promise<CoordinatorRecord[]> {
  const r = await run<CoordinatorRow>(
    q,
    `SELECT * FROM coordinators WHERE lease_until > ${DB_NOW_MS} ORDER BY joined_at, id`,
  );
  return r.rows.map(toCoordinator);
}

/**
 * What ends every write transaction of a joined store, in one round trip: the fence, then
 * COMMIT, as one query string (the simple protocol runs them in order, and none after an error).
 * The fence (`ax_fence`, migration 7) raises SQLSTATE AXF01 unless the membership's row still has
 * its epoch and a lease ahead by the database clock, and the transaction then rolls back. As a
 * statement of its own it was a third of a small write's round trips, and under load round trips
 * were most of a group's time.
 *
 * Checked last, a write that passed it commits within that round trip. It is a plain read, no
 * row lock: FOR SHARE on the one row every write of a coordinator checks made each write lock it
 * (a multixact per tuple under concurrency) and queued the renewal's UPDATE behind them, then
 * the next writes behind the renewal, until the lease lapsed under load. The coordinator's own
 * fence, which stops it before its lease can lapse here (engine/membership.ts), covers the round
 * trip.
 */
export function fenceAndCommit(m: Membership): string {
  if (!Number.isSafeInteger(m.epoch))
    throw new Error(`membership epoch ${m.epoch}: not an integer`);
  return `SELECT ax_fence(${sqlLiteral(m.id)}, ${m.epoch}); COMMIT`;
}

/** True for the error of a transaction whose fence failed ({@link fenceAndCommit}). */
export function isFenceError(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === "AXF01";
}

/**
 * A string as an SQL literal, whatever `standard_conforming_strings` says: quotes doubled, and
 * backslashes doubled in an E'' literal (as node-postgres' escapeLiteral).
 */
export function sqlLiteral(s: string): string {
  const quoted = s.replaceAll("'", "''");
  return s.includes("\\") ? ` E'${quoted.replaceAll("\\", "\\\\")}'` : `'${quoted}'`;
}

/** The error of a write refused by the fence. */
export function fencedError(m: Membership, what: string): AxError {
  return new AxError(
    "AX_STORE_FENCED",
    `store: ${what} refused: coordinator "${m.id}" (epoch ${m.epoch}) is no longer a member of the store (its lease lapsed, or it joined again elsewhere); join again for a new epoch`,
    { retryable: true, context: { coordinatorId: m.id, epoch: m.epoch } },
  );
}
