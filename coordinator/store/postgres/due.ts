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

/** A pending execution due to be read: by pendingBy ($2), or a command by commandsBy ($3). */
const PENDING_BY = "fire_at <= $3 AND (fire_at <= $2 OR kind = 'command')";

/**
 * The three lists' conditions. $1 now, $2 pendingBy, $3 commandsBy, $4 targets to skip
 * (DueOptions.skipTargets; with onlyTargets, {@link DUE_ONLY_WHERE} is read instead).
 *
 * The targets to skip are a subquery, which PostgreSQL hashes once per read: `= ANY($4)` is
 * searched element by element for every row once the prepared statement's plan is generic, and
 * with 10,000 agents out of reach and 100,000 commands waiting for them, one read took 8.4 s
 * (`npm run bench:backlog -- --store postgres`).
 */
const DUE_WHERE = {
  pending: `state = 'PENDING' AND ${PENDING_BY}
      AND (target_agent_id IS NULL OR deadline < $1
        OR target_agent_id NOT IN (SELECT unnest($4::text[])))`,
  retry:
    "state = 'RETRY_WAITING' AND (COALESCE(next_attempt_at, 0) <= $1 OR (kind = 'command' AND deadline < $1))",
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
 * ahead by the database clock; the rows returned are claimed for $7 until that clock plus $8.
 */
const CLAIM_DUE: Statement = {
  name: "ax_claim_due",
  text: `WITH clock AS (SELECT ${DB_NOW_MS} AS ms),
    ${LISTS.map(
      (list) => `${list} AS (
      SELECT id FROM executions WHERE ${DUE_WHERE[list]}
        AND (claimed_by IS NULL OR claimed_by = $7 OR claim_until <= (SELECT ms FROM clock))
        ${DUE_ORDER} LIMIT ${LIMIT_PARAM[list]} FOR UPDATE SKIP LOCKED)`,
    ).join(",\n    ")},
    picked AS (${LISTS.map((list) => `SELECT id, '${list}' AS due FROM ${list}`).join(" UNION ALL ")})
    UPDATE executions e SET claimed_by = $7, claim_until = (SELECT ms FROM clock) + $8::bigint
      FROM picked WHERE e.id = picked.id
      RETURNING picked.due, e.*`,
};

/**
 * With DueOptions.onlyTargets, `pending` is read in three parts, each by an index over PENDING
 * rows (migration 6) and none walking the commands waiting for agents out of reach: the
 * executions with no target, the commands of the listed agents ($4), and the commands of other
 * agents past their deadline (to be expired). Each part is limited by $6 and the caller keeps
 * the first $6 of them in due order; `retry` and `dispatchTimedOut` are as in {@link DUE_WHERE}.
 * $1 now, $2 pendingBy, $3 commandsBy, $5 the other lists' limit.
 */
const DUE_ONLY_WHERE: [string, string][] = [
  ["pending", `state = 'PENDING' AND target_agent_id IS NULL AND ${PENDING_BY}`],
  ["pending", `state = 'PENDING' AND target_agent_id = ANY($4::text[]) AND ${PENDING_BY}`],
  [
    "pending",
    `state = 'PENDING' AND target_agent_id IS NOT NULL AND deadline < $1
      AND target_agent_id NOT IN (SELECT unnest($4::text[])) AND ${PENDING_BY}`,
  ],
  ["retry", DUE_WHERE.retry],
  ["dispatchTimedOut", DUE_WHERE.dispatchTimedOut],
];

/**
 * {@link LIST_DUE} with onlyTargets: the parts of {@link DUE_ONLY_WHERE}. Unnamed, so planned for
 * each read's own targets: a named statement's generic plan, made after its fifth run for any
 * array, walked the pending rows in due order (25–30 ms at 100,000 waiting) instead of reading
 * by target (under 1 ms).
 */
const LIST_DUE_ONLY: Statement = {
  text: DUE_ONLY_WHERE.map(
    ([list, where]) =>
      `(SELECT '${list}' AS due, * FROM executions WHERE ${where} ${DUE_ORDER} LIMIT ${LIMIT_PARAM[list as DueList]})`,
  ).join(" UNION ALL "),
};

/**
 * {@link CLAIM_DUE} with onlyTargets: $7 the holder, $8 the claim's ttl; unnamed, as
 * {@link LIST_DUE_ONLY}. Each pending part claims up to $6 rows; those past the first $6 of all
 * three are not returned but stay claimed by this holder, which reads them again next time (its
 * own claims are readable to it) or lets them lapse to another.
 */
const CLAIM_DUE_ONLY: Statement = {
  text: `WITH clock AS (SELECT ${DB_NOW_MS} AS ms),
    ${DUE_ONLY_WHERE.map(
      ([list, where], i) => `part${i} AS (
      SELECT id, '${list}' AS due FROM executions WHERE ${where}
        AND (claimed_by IS NULL OR claimed_by = $7 OR claim_until <= (SELECT ms FROM clock))
        ${DUE_ORDER} LIMIT ${LIMIT_PARAM[list as DueList]} FOR UPDATE SKIP LOCKED)`,
    ).join(",\n    ")},
    picked AS (${DUE_ONLY_WHERE.map((_, i) => `SELECT id, due FROM part${i}`).join(" UNION ALL ")})
    UPDATE executions e SET claimed_by = $7, claim_until = (SELECT ms FROM clock) + $8::bigint
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
  const pendingLimit = pendingLimitOf(limit, options);
  // LIMIT 0 reads nothing of a list: PostgreSQL does not run a plan under it.
  const otherLimit = options.timeouts === false ? 0 : limit;
  const claim: DueClaim | undefined = options.claim;
  const claimArgs = claim ? [claim.holder, Math.max(0, Math.ceil(claim.ttlMs))] : [];
  // skipTargets wins when both are given (DueOptions).
  const only = options.skipTargets === undefined ? options.onlyTargets : undefined;
  let r: { rows: (ExecutionRow & { due: DueList })[] };
  if (only !== undefined) {
    const args = [now, pendingBy, commandsBy, only, sqlLimit(otherLimit), sqlLimit(pendingLimit)];
    r = await run(q, claim ? CLAIM_DUE_ONLY : LIST_DUE_ONLY, [...args, ...claimArgs]);
  } else {
    const args = [now, pendingBy, commandsBy, options.skipTargets ?? [], sqlLimit(otherLimit)];
    args.push(sqlLimit(pendingLimit));
    r = await run(q, claim ? CLAIM_DUE : LIST_DUE, [...args, ...claimArgs]);
  }
  const out: DueLists = { pending: [], retry: [], dispatchTimedOut: [] };
  for (const row of r.rows) out[row.due].push(toExecution(row));
  // UNION ALL keeps each part's order in practice, UPDATE … RETURNING does not: sort both.
  for (const list of LISTS) out[list].sort(dueOrder);
  // The three parts of pending with onlyTargets: the first in due order of all of them.
  if (out.pending.length > pendingLimit) out.pending.length = pendingLimit;
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
  // The event ledger guards against a redelivery, which comes within a broker session's life,
  // far inside the retention age.
  await run(
    q,
    `DELETE FROM events WHERE (name, msg_id, job_id) IN (
       SELECT name, msg_id, job_id FROM events WHERE fired_at < $1 ORDER BY fired_at LIMIT $2)`,
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
  // An idempotency key is kept as long as the executions it made.
  await run(
    q,
    `DELETE FROM idempotency WHERE scope IN (
       SELECT scope FROM idempotency WHERE created_at < $1 ORDER BY created_at LIMIT $2)`,
    [cutoffMs, max],
  );
  await purgeRollouts(q, cutoffMs, max);
  return ids.length;
}
