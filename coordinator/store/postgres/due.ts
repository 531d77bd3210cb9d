import {
  type DueClaim,
  type DueOptions,
  dueOrder,
  type ExecutionRecord,
  pendingLimitOf,
} from "../port.js";
import { DB_NOW_MS, DUE_ORDER, sqlLimit } from "./executions.js";
import { TERMINAL_STATES_SQL } from "./migrations.js";
import { purgeRollouts } from "./rollouts.js";
import { type ExecutionRow, toExecution } from "./rows.js";
import { type Queryable, run, type Statement } from "./tx.js";

/*
 * What the dispatcher must act on (Store.listDue), with or without claims, and retention
 * (Store.purgeFinishedBefore).
 */

/**
 * The three lists' conditions. $1 now, $2 pendingBy, $3 commandsBy, $4 targets to skip, $7 the
 * only targets whose commands are read (DueOptions.onlyTargets; NULL: read all but $4's).
 */
const DUE_WHERE = {
  pending: `state = 'PENDING' AND fire_at <= $3 AND (fire_at <= $2 OR kind = 'command')
      AND (target_agent_id IS NULL OR deadline < $1 OR CASE WHEN $7::text[] IS NULL
        THEN NOT (target_agent_id = ANY($4::text[])) ELSE target_agent_id = ANY($7::text[]) END)`,
  retry: "state = 'RETRY_WAITING' AND (COALESCE(next_attempt_at, 0) <= $1 OR deadline < $1)",
  dispatchTimedOut:
    "state = 'DISPATCHED' AND COALESCE(dispatched_at, 0) + dispatch_timeout_ms <= $1",
} as const;

type DueList = keyof typeof DUE_WHERE;
const LISTS = Object.keys(DUE_WHERE) as DueList[];

/** The LIMIT parameter of each list: $5, but $6 for `pending` (DueOptions.pendingLimit). */
const LIMIT_PARAM: Record<DueList, string> = { pending: "$6", retry: "$5", dispatchTimedOut: "$5" };

/**
 * The three lists in one statement, each row tagged with its list; $5 the limit of each but
 * `pending`'s, $6. (A command for an agent out of reach is still read once its deadline has
 * passed, so that it is expired rather than left PENDING for ever.)
 */
const LIST_DUE: Statement = {
  name: "ax_list_due",
  text: LISTS.map(
    (list) =>
      `(SELECT '${list}' AS due, * FROM executions WHERE ${DUE_WHERE[list]} ${DUE_ORDER} LIMIT ${LIMIT_PARAM[list]})`,
  ).join(" UNION ALL "),
};

/**
 * The three lists, claimed for a holder in the same statement: the candidates of each list
 * are read `FOR UPDATE SKIP LOCKED` (rows another coordinator is claiming or writing right now
 * are passed over, not waited for), leaving out rows another holder claims until a time still
 * ahead by the database clock; the rows returned are claimed for $8 until that clock plus $9.
 */
const CLAIM_DUE: Statement = {
  name: "ax_claim_due",
  text: `WITH clock AS (SELECT ${DB_NOW_MS} AS ms),
    ${LISTS.map(
      (list) => `${list} AS (
      SELECT id FROM executions WHERE ${DUE_WHERE[list]}
        AND (claimed_by IS NULL OR claimed_by = $8 OR claim_until <= (SELECT ms FROM clock))
        ${DUE_ORDER} LIMIT ${LIMIT_PARAM[list]} FOR UPDATE SKIP LOCKED)`,
    ).join(",\n    ")},
    picked AS (${LISTS.map((list) => `SELECT id, '${list}' AS due FROM ${list}`).join(" UNION ALL ")})
    UPDATE executions e SET claimed_by = $8, claim_until = (SELECT ms FROM clock) + $9::bigint
      FROM picked WHERE e.id = picked.id
      RETURNING picked.due, e.*`,
};

export type DueLists = Record<DueList, ExecutionRecord[]>;

/**
 * The due lists at `now` (Store.listDue). With `claim`, they are claimed in the same statement
 * (see {@link CLAIM_DUE}); the caller runs it in a write transaction.
 */
export async function listDue(
  q: Queryable,
  now: number,
  pendingBy: number,
  limit: number,
  options: DueOptions,
): Promise<DueLists> {
  const commandsBy = Math.max(pendingBy, options.commandsBy ?? pendingBy);
  const args: unknown[] = [now, pendingBy, commandsBy, options.skipTargets ?? [], sqlLimit(limit)];
  args.push(sqlLimit(pendingLimitOf(limit, options)));
  args.push(options.skipTargets === undefined ? (options.onlyTargets ?? null) : null);
  const claim: DueClaim | undefined = options.claim;
  const r = claim
    ? await run<ExecutionRow & { due: DueList }>(q, CLAIM_DUE, [
        ...args,
        claim.holder,
        Math.max(0, Math.ceil(claim.ttlMs)),
      ])
    : await run<ExecutionRow & { due: DueList }>(q, LIST_DUE, args);
  const out: DueLists = { pending: [], retry: [], dispatchTimedOut: [] };
  for (const row of r.rows) out[row.due].push(toExecution(row));
  // UNION ALL keeps each part's order in practice, UPDATE … RETURNING does not: sort both.
  for (const list of LISTS) out[list].sort(dueOrder);
  return out;
}

/**
 * Retention (Store.purgeFinishedBefore): up to `max` terminal executions finished before
 * `cutoffMs`, oldest first, with their timelines; old fire records no job can fire again; old
 * alerts that are done. Returns how many executions went.
 */
export async function purgeFinishedBefore(
  q: Queryable,
  cutoffMs: number,
  max: number,
): Promise<number> {
  const ids = (
    await run<{ id: string }>(
      q,
      `SELECT id FROM executions
         WHERE state IN ${TERMINAL_STATES_SQL} AND COALESCE(finished_at, updated_at) < $1
         ORDER BY COALESCE(finished_at, updated_at) LIMIT $2`,
      [cutoffMs, max],
    )
  ).rows.map((r) => r.id);
  if (ids.length > 0) {
    await run(q, "DELETE FROM timeline WHERE execution_id = ANY($1::text[])", [ids]);
    await run(q, "DELETE FROM executions WHERE id = ANY($1::text[])", [ids]);
  }
  // As SQLite's purge (store/sqlite/sqlite-store.ts says why at length): a fire record below its
  // job's next fire time can never be fired again and guards nothing; one at or after it may.
  await run(
    q,
    `DELETE FROM fires WHERE (job_id, scheduled_for) IN (
         SELECT f.job_id, f.scheduled_for FROM fires f LEFT JOIN jobs j ON j.id = f.job_id
         WHERE f.scheduled_for < $1 AND f.fired_at < $1
           AND (j.next_fire_at IS NULL OR f.scheduled_for < j.next_fire_at)
         ORDER BY f.scheduled_for LIMIT $2)`,
    [cutoffMs, max],
  );
  // Alerts age out with the executions they are about; a pending one is still being sent.
  await run(
    q,
    `DELETE FROM alerts WHERE id IN (
       SELECT id FROM alerts WHERE created_at < $1 AND status != 'pending'
       ORDER BY created_at LIMIT $2)`,
    [cutoffMs, max],
  );
  await purgeRollouts(q, cutoffMs, max);
  return ids.length;
}
