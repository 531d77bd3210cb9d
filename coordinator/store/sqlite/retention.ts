import type { StoreContext } from "./context.js";
import { purgeRollouts } from "./rollouts.js";
import { TERMINAL_SQL } from "./statements.js";
import { wrap } from "./values.js";

/** Store.purgeFinishedBefore: retention of finished executions, old fires and sent alerts. */
export function purgeFinishedBefore(ctx: StoreContext, cutoffMs: number, limit: number): number {
  // SQLite reads a negative LIMIT as "no limit".
  if (!(limit >= 1)) return 0;
  const max = Math.floor(limit);
  const { statements: sql } = ctx;
  return wrap("purgeFinishedBefore", () =>
    ctx.writer.write(() => {
      // INDEXED BY: without statistics the planner prefers executions_state and then reads
      // every terminal row to sort them, which makes each batch cost the whole table.
      const ids = sql
        .prepare(
          `SELECT id FROM executions INDEXED BY executions_finished
             WHERE ${TERMINAL_SQL} AND COALESCE(finished_at, updated_at) < ?
             ORDER BY COALESCE(finished_at, updated_at) LIMIT ?`,
        )
        .pluck()
        .all(cutoffMs, max) as string[];
      const dropTimeline = sql.prepare("DELETE FROM timeline WHERE execution_id = ?");
      const dropExecution = sql.prepare("DELETE FROM executions WHERE id = ?");
      for (const id of ids) {
        dropTimeline.run(id);
        dropExecution.run(id);
        ctx.executions.delete(id);
      }
      // The fires ledger makes firing exactly-once, and deleting its old rows is safe only
      // because a job's next_fire_at only moves forward: recordFire first compare-and-sets
      // next_fire_at from the nominal time it fires, so a time below the job's current
      // next_fire_at can never be fired again and its row guards nothing. A row at or after
      // next_fire_at may still be needed (a putJob from a stale read can set next_fire_at back
      // to a time already fired; only the row stops a second fire), so it is never deleted. A
      // job with no next fire time (exhausted, or gone) only gets a new one after `now`, far
      // past the cutoff, which also leaves a stale read the whole retention age of margin.
      sql
        .prepare(
          `DELETE FROM fires WHERE (job_id, scheduled_for) IN (
               SELECT f.job_id, f.scheduled_for FROM fires f LEFT JOIN jobs j ON j.id = f.job_id
               WHERE f.scheduled_for < @cutoff AND f.fired_at < @cutoff
                 AND (j.next_fire_at IS NULL OR f.scheduled_for < j.next_fire_at)
               ORDER BY f.scheduled_for LIMIT @max)`,
        )
        .run({ cutoff: cutoffMs, max });
      // The event ledger guards against a redelivery, which comes within a broker session's
      // life, far inside the retention age.
      sql
        .prepare(
          `DELETE FROM events WHERE (name, msg_id, job_id) IN (
             SELECT name, msg_id, job_id FROM events WHERE fired_at < ? ORDER BY fired_at LIMIT ?)`,
        )
        .run(cutoffMs, max);
      // Alerts age out with the executions they are about; a pending one is still being sent.
      sql
        .prepare(
          `DELETE FROM alerts WHERE id IN (
             SELECT id FROM alerts WHERE created_at < ? AND status != 'pending'
             ORDER BY created_at LIMIT ?)`,
        )
        .run(cutoffMs, max);
      // An idempotency key is kept as long as the executions it made.
      sql
        .prepare(
          `DELETE FROM idempotency WHERE scope IN (
             SELECT scope FROM idempotency WHERE created_at < ? ORDER BY created_at LIMIT ?)`,
        )
        .run(cutoffMs, max);
      purgeRollouts(ctx, cutoffMs, max);
      return ids.length;
    }),
  );
}
