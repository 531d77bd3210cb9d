import { AxError } from "../../../shared/errors.js";
import type { CoordinatorRecord } from "../port.js";
import { DB_NOW_MS } from "./executions.js";
import { type CoordinatorRow, toCoordinator } from "./rows.js";
import { type Queryable, run, type Statement } from "./tx.js";

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
 * The fence, first in every write transaction of a joined store: its row must still have its
 * epoch and a lease ahead by the database clock. A plain read, no row lock: FOR SHARE on the one
 * row every write of a coordinator checks made each write lock it (a multixact per tuple under
 * concurrency) and queued the renewal's UPDATE behind them, then the next writes behind the
 * renewal, until the lease lapsed under load. Without the lock a write that passed the check
 * may commit a transaction's length after a lapse or a rejoin; the coordinator's own fence,
 * which stops it before its lease can lapse here (engine/membership.ts), covers that window.
 */
const FENCE: Statement = {
  name: "ax_fence",
  text: `SELECT 1 FROM coordinators WHERE id = $1 AND epoch = $2 AND lease_until > ${DB_NOW_MS}`,
};

/** Checks the fence; marks the membership fenced and throws AX_STORE_FENCED when it fails. */
export async function checkFence(q: Queryable, m: Membership, what: string): Promise<void> {
  const r = await run(q, FENCE, [m.id, m.epoch]);
  if (r.rowCount === 1) return;
  m.fenced = true;
  throw fencedError(m, what);
}

/** The error of a write refused by the fence. */
export function fencedError(m: Membership, what: string): AxError {
  return new AxError(
    "AX_STORE_FENCED",
    `store: ${what} refused: coordinator "${m.id}" (epoch ${m.epoch}) is no longer a member of the store (its lease lapsed, or it joined again elsewhere); join again for a new epoch`,
    { retryable: true, context: { coordinatorId: m.id, epoch: m.epoch } },
  );
}
