import { type DueOptions, dueOrder, type ExecutionRecord, pendingLimitOf } from "../port.js";
import type { StoreContext } from "./context.js";
import { type ExecutionRow, toExecution } from "./rows.js";
import { OPEN_SQL } from "./statements.js";
import { wrap } from "./values.js";

/*
 * What the dispatcher acts on (Store.listDue): the SQLite store's hottest read, once per pass of
 * the execution loop.
 */

/** Store.listDue's answer. */
export interface DueWork {
  pending: ExecutionRecord[];
  retry: ExecutionRecord[];
  dispatchTimedOut: ExecutionRecord[];
}

/**
 * The order and length of a list of due work. The length is written into the SQL, not bound:
 * SQLite runs a statement with a bound LIMIT about four times slower (34 µs against 7 µs for
 * an empty list here), and the dispatcher reads these lists on every pass, hundreds of times a
 * second under load. It is rounded up ({@link limitBucket}), so that a few dozen statements
 * serve every length, and the caller cuts the rows to the length asked for ({@link cut}).
 */
function order(limit: number): string {
  return `ORDER BY priority DESC, fire_at, created_at LIMIT ${limitBucket(limit)}`;
}

/**
 * `limit` rounded up to one of eight steps between consecutive powers of two (8, 9, …, 15
 * times a power of two; below 8, itself), so a list reads at most an eighth more rows than it
 * keeps; -1 (SQLite's "no limit") for a negative one.
 */
export function limitBucket(limit: number): number {
  if (limit < 0 || !Number.isFinite(limit)) return -1;
  const n = Math.ceil(limit);
  if (n <= 8) return n;
  const step = 2 ** (Math.floor(Math.log2(n)) - 3);
  return Math.ceil(n / step) * step;
}

/** `rows` cut to `limit` (a negative one: all of them), in place. */
function cut<T>(rows: T[], limit: number): T[] {
  if (limit >= 0 && rows.length > limit) rows.length = limit;
  return rows;
}

/** Store.listDue: with `options.claim`, also claims what it returns (see {@link listDueClaimed}). */
export function listDue(
  ctx: StoreContext,
  now: number,
  pendingBy: number,
  limit: number,
  options: DueOptions,
): DueWork {
  if (options.claim !== undefined) return listDueClaimed(ctx, now, pendingBy, limit, options);
  return wrap("listDue", () => selectDue(ctx, now, pendingBy, limit, options, order, []));
}

/**
 * The three lists of due work. `tail(n)`: what follows each query's WHERE clause (more
 * conditions, then {@link order} for a list of `n`), whose parameters are `tailArgs`.
 */
function selectDue(
  ctx: StoreContext,
  now: number,
  pendingBy: number,
  limit: number,
  options: DueOptions,
  tail: (limit: number) => string,
  tailArgs: readonly unknown[],
): DueWork {
  const commandsBy = Math.max(pendingBy, options.commandsBy ?? pendingBy);
  const skip = options.skipTargets ?? [];
  const pendingLimit = pendingLimitOf(limit, options);
  const timeouts = options.timeouts !== false;
  const only = options.skipTargets === undefined ? options.onlyTargets : undefined;
  return {
    // No pending rows asked for (the dispatcher reads them only when they may have changed):
    // not even the list of agents out of reach is bound.
    pending:
      pendingLimit === 0
        ? []
        : only !== undefined
          ? selectPendingOf(ctx, only, now, pendingBy, commandsBy, pendingLimit, tail, tailArgs)
          : cut(
              selectExecutions(
                ctx,
                `FROM executions WHERE ${OPEN_SQL} AND state = 'PENDING' AND fire_at <= ?
           AND (fire_at <= ? OR kind = 'command')
           ${skip.length > 0 ? "AND (target_agent_id IS NULL OR deadline < ? OR target_agent_id NOT IN (SELECT value FROM json_each(?)))" : ""}
           ${tail(pendingLimit)}`,
                commandsBy,
                pendingBy,
                // A command for an agent out of reach is still read once its deadline has
                // passed, so that it is expired rather than left PENDING for ever.
                ...(skip.length > 0 ? [now, JSON.stringify(skip)] : []),
                ...tailArgs,
              ),
              pendingLimit,
            ),
    retry: !timeouts
      ? []
      : cut(
          selectExecutions(
            ctx,
            `FROM executions WHERE ${OPEN_SQL} AND state = 'RETRY_WAITING'
           AND (COALESCE(next_attempt_at, 0) <= ? OR (kind = 'command' AND deadline < ?)) ${tail(limit)}`,
            now,
            now,
            ...tailArgs,
          ),
          limit,
        ),
    dispatchTimedOut: !timeouts
      ? []
      : cut(
          selectExecutions(
            ctx,
            `FROM executions WHERE ${OPEN_SQL} AND state = 'DISPATCHED'
           AND COALESCE(dispatched_at, 0) + dispatch_timeout_ms <= ? ${tail(limit)}`,
            now,
            ...tailArgs,
          ),
          limit,
        ),
  };
}

/**
 * `pending` for {@link DueOptions.onlyTargets}: three reads, each through an index that holds
 * only pending rows (migration 17), merged in the order of {@link ORDER} — the executions with
 * no target, those of the agents in `only` (one index range each), and the commands past their
 * deadline, whoever they are for (to be expired). None of them walks the commands waiting for an
 * agent out of reach, as the one read with `skipTargets` must.
 */
function selectPendingOf(
  ctx: StoreContext,
  only: readonly string[],
  now: number,
  pendingBy: number,
  commandsBy: number,
  pendingLimit: number,
  tailFor: (limit: number) => string,
  tailArgs: readonly unknown[],
): ExecutionRecord[] {
  const tail = tailFor(pendingLimit);
  const due = "state = 'PENDING' AND fire_at <= ? AND (fire_at <= ? OR kind = 'command')";
  const parts = [
    selectExecutions(
      ctx,
      `FROM executions INDEXED BY executions_pending_target
         WHERE target_agent_id IS NULL AND ${due} ${tail}`,
      commandsBy,
      pendingBy,
      ...tailArgs,
    ),
    only.length === 0
      ? []
      : selectExecutions(
          ctx,
          `FROM executions INDEXED BY executions_pending_target
             WHERE target_agent_id IN (SELECT value FROM json_each(?)) AND ${due} ${tail}`,
          JSON.stringify(only),
          commandsBy,
          pendingBy,
          ...tailArgs,
        ),
    selectExecutions(
      ctx,
      `FROM executions INDEXED BY executions_pending_deadline
         WHERE target_agent_id IS NOT NULL AND state = 'PENDING' AND deadline < ?
           AND fire_at <= ? AND (fire_at <= ? OR kind = 'command') ${tail}`,
      now,
      commandsBy,
      pendingBy,
      ...tailArgs,
    ),
  ];
  const seen = new Set<string>();
  const out: ExecutionRecord[] = [];
  for (const part of parts) {
    for (const e of part) {
      if (seen.has(e.id)) continue; // an agent in reach's command past its deadline
      seen.add(e.id);
      out.push(e);
    }
  }
  out.sort(dueOrder);
  if (pendingLimit >= 0 && out.length > pendingLimit) out.length = pendingLimit;
  return out;
}

/** Rows that another holder's unexpired claim keeps from this one; `limit` as {@link order}. */
const unclaimed = (limit: number) =>
  `AND (claimed_by IS NULL OR claimed_by = ? OR claim_until <= ?) ${order(limit)}`;

/**
 * Store.listDue for one of several coordinators: in one write (so behind the membership's fence,
 * and with the file's write lock, so two stores never read the same unclaimed rows), rows another
 * holder claims until after the store's clock are passed over and every row returned is claimed
 * for `holder` until the store's clock plus `ttlMs`.
 */
function listDueClaimed(
  ctx: StoreContext,
  now: number,
  pendingBy: number,
  limit: number,
  options: DueOptions,
): DueWork {
  const { holder, ttlMs } = options.claim as NonNullable<DueOptions["claim"]>;
  return wrap("listDue", () =>
    ctx.writer.write(() => {
      const at = ctx.nowMs();
      const due = selectDue(ctx, now, pendingBy, limit, options, unclaimed, [holder, at]);
      const claim = ctx.statements.prepare(
        "UPDATE executions SET claimed_by = ?, claim_until = ? WHERE id = ?",
      );
      for (const list of [due.pending, due.retry, due.dispatchTimedOut]) {
        for (const e of list) claim.run(holder, at + ttlMs, e.id);
      }
      return due;
    }),
  );
}

/**
 * The executions a query selects (`rest`: its FROM clause onwards), in its order. Under group
 * commit only their ids are read and the records come from the cache where it holds them: the
 * dispatcher's executions were mostly written moments before, and reading and decoding every
 * column of each again was a tenth of the coordinator's time at 2,000 fires/s.
 */
function selectExecutions(ctx: StoreContext, rest: string, ...args: unknown[]): ExecutionRecord[] {
  const { statements: sql, executions } = ctx;
  if (!ctx.writer.groupCommit) {
    return (sql.prepare(`SELECT * ${rest}`).all(...args) as ExecutionRow[]).map(toExecution);
  }
  const ids = sql
    .prepare(`SELECT id ${rest}`)
    .pluck()
    .all(...args) as string[];
  const out: ExecutionRecord[] = [];
  for (const id of ids) {
    let e = executions.get(id);
    if (!e) {
      const row = sql.prepare("SELECT * FROM executions WHERE id = ?").get(id) as
        | ExecutionRow
        | undefined;
      if (!row) continue;
      e = toExecution(row);
      executions.add(e);
    }
    out.push(e);
  }
  return out;
}
