import type { FireBatch, NewExecution } from "../port.js";
import { insertExecutions } from "./executions.js";
import { type Queryable, run, type Statement } from "./tx.js";

/*
 * Firing exactly once (Store.recordFire, Store.recordFires). The guard is the fires table's
 * primary key (job_id, scheduled_for), as in SQLite; the job's next fire time is compare-and-set
 * first. Of two coordinators firing one nominal time, the second's UPDATE waits for the first's
 * row lock, then finds next_fire_at moved on and changes nothing: exactly one gets true.
 */

/** Advances the job from $2 to $3 (at $4) and inserts the fire row; returns it when inserted. */
const FIRE: Statement = {
  name: "ax_fire",
  text: `WITH advanced AS (
      UPDATE jobs SET next_fire_at = $3, updated_at = $4 WHERE id = $1 AND next_fire_at = $2
        RETURNING id)
    INSERT INTO fires (job_id, scheduled_for, fired_at, execution_id)
      SELECT id, $2, $4, $5 FROM advanced
      ON CONFLICT DO NOTHING
      RETURNING 1`,
};

/** Advances the job from $2 to $3 (at $4); returns it when advanced. */
const ADVANCE: Statement = {
  name: "ax_advance_job",
  text: "UPDATE jobs SET next_fire_at = $3, updated_at = $4 WHERE id = $1 AND next_fire_at = $2 RETURNING 1",
};

/** Records one firing (Store.recordFire); `detailJson` serialises the created entry's detail. */
export async function recordFire(
  q: Queryable,
  fire: {
    jobId: string;
    scheduledFor: number;
    nextFireAt: number | null;
    execution: NewExecution;
    at: number;
  },
  detailJson: (detail: Record<string, unknown>) => string | null,
): Promise<boolean> {
  const fired = await run(q, FIRE, [
    fire.jobId,
    fire.scheduledFor,
    fire.nextFireAt,
    fire.at,
    fire.execution.id,
  ]);
  if (fired.rowCount !== 1) return false;
  await insertExecutions(q, [fire.execution], fire.at, [
    detailJson({ scheduledFor: fire.scheduledFor }),
  ]);
  return true;
}

/** Records a firing under the misfire policy (Store.recordFires). */
export async function recordFires(
  q: Queryable,
  batch: FireBatch,
  detailJson: (detail: Record<string, unknown>) => string | null,
): Promise<boolean> {
  const advanced = await run(q, ADVANCE, [
    batch.jobId,
    batch.expectedNext,
    batch.nextFireAt,
    batch.at,
  ]);
  if (advanced.rowCount !== 1) return false;
  if (batch.missed.length > 0) {
    await run(
      q,
      `INSERT INTO fires (job_id, scheduled_for, fired_at, execution_id, status)
         SELECT $1, t, $3, '', 'missed' FROM unnest($2::double precision[]) AS t
         ON CONFLICT DO NOTHING`,
      [batch.jobId, batch.missed, batch.at],
    );
  }
  const firing = batch.fires.filter((f) => f.executions.length > 0);
  if (firing.length === 0) return true;
  // A nominal time already in the ledger is never fired again: only the fire rows inserted
  // here get their executions.
  const inserted = await run<{ scheduled_for: number }>(
    q,
    `INSERT INTO fires (job_id, scheduled_for, fired_at, execution_id, status)
       SELECT $1, t.s, $3, t.e, 'fired' FROM unnest($2::double precision[], $4::text[]) AS t(s, e)
       ON CONFLICT DO NOTHING
       RETURNING scheduled_for`,
    [
      batch.jobId,
      firing.map((f) => f.scheduledFor),
      batch.at,
      firing.map((f) => f.executions[0]?.id),
    ],
  );
  const fired = new Set(inserted.rows.map((r) => r.scheduled_for));
  const executions: NewExecution[] = [];
  const details: (string | null)[] = [];
  for (const fire of firing) {
    if (!fired.has(fire.scheduledFor)) continue;
    // Once each: a time listed twice in `fires` got one row.
    fired.delete(fire.scheduledFor);
    for (const e of fire.executions) {
      executions.push({ ...e, scheduledFor: fire.scheduledFor });
      details.push(
        detailJson({
          scheduledFor: fire.scheduledFor,
          ...(e.shardTotal ? { shard: `${e.shardIndex}/${e.shardTotal}` } : {}),
        }),
      );
    }
  }
  await insertExecutions(q, executions, batch.at, details);
  return true;
}
