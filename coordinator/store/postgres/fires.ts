import {
  type EventFiring,
  type EventRecorded,
  eventEntryDetail,
  type FireBatch,
  type NewExecution,
} from "../port.js";
import { insertExecutions, insertNewExecutions } from "./executions.js";
import { bumpCounter, putAlert } from "./fleet.js";
import { executionColumns, NEW_EXECUTION_COLUMNS, pushRow } from "./rows.js";
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

/**
 * Inserts the event ledger's rows of a message ($1, $2): its own (job '') and one per job ($4,
 * with $5 executions each), at $3; returns the job ids of the rows inserted.
 */
const EVENT: Statement = {
  name: "ax_event",
  text: `INSERT INTO events (name, msg_id, job_id, fired_at, executions)
      SELECT $1, $2, j, $3, n FROM unnest($4::text[], $5::integer[]) AS t(j, n)
      ON CONFLICT DO NOTHING RETURNING job_id`,
};

/**
 * Fires an event message once per job (Store.recordEvent). Of two coordinators inserting one
 * message's rows, the second's INSERT waits for the first's, then conflicts on each row the
 * first inserted: exactly one creates each job's executions.
 */
export async function recordEvent(
  q: Queryable,
  event: EventFiring,
  detailJson: (detail: Record<string, unknown>) => string | null,
): Promise<EventRecorded> {
  const total = event.fires.reduce((n, f) => n + f.executions.length, 0);
  const inserted = await run<{ job_id: string }>(q, EVENT, [
    event.name,
    event.msgId,
    event.at,
    ["", ...event.fires.map((f) => f.jobId)],
    [total, ...event.fires.map((f) => f.executions.length)],
  ]);
  const rows = new Set(inserted.rows.map((r) => r.job_id));
  const fired = event.fires.filter((f) => rows.has(f.jobId));
  const executions = fired.flatMap((f) => f.executions);
  if (executions.length > 0) {
    await insertExecutions(
      q,
      executions,
      event.at,
      executions.map((e) => detailJson(eventEntryDetail(event, e))),
    );
  }
  return { first: rows.has(""), fired: fired.map((f) => f.jobId) };
}

/** Records a firing under the misfire policy (Store.recordFires). */
export async function recordFires(
  q: Queryable,
  batch: FireBatch,
  detailJson: (detail: Record<string, unknown>) => string | null,
  maxTextBytes: number,
): Promise<boolean> {
  const advanced = await run(q, ADVANCE, [
    batch.jobId,
    batch.expectedNext,
    batch.nextFireAt,
    batch.at,
  ]);
  if (advanced.rowCount !== 1) return false;
  for (const a of batch.alerts ?? []) await putAlert(q, a, maxTextBytes);
  if (batch.missedCount) await bumpCounter(q, "missed_fires", batch.missedCount);
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
          ...(batch.by === undefined ? {} : { coordinator: batch.by }),
        }),
      );
    }
  }
  await insertExecutions(q, executions, batch.at, details);
  return true;
}

/**
 * True for the firing most are: one nominal time, one execution, nothing missed. Such firings
 * of different jobs can be recorded together ({@link recordSimpleFires}).
 */
export function isSimpleFire(batch: FireBatch): boolean {
  return (
    batch.missed.length === 0 &&
    !batch.missedCount &&
    !batch.alerts?.length &&
    batch.fires.length === 1 &&
    batch.fires[0]?.executions.length === 1
  );
}

const m = NEW_EXECUTION_COLUMNS.length;

/**
 * Simple firings of distinct jobs in one statement, each as {@link recordFires} records it: the
 * job compare-and-set from its expected next fire time, the fire row where the job advanced
 * (and the nominal time is not in the ledger yet), the execution and its created entry where
 * the fire row went in. $1…$6 the firings, then the executions' columns, then their details.
 */
const RECORD_SIMPLE_FIRES = `WITH b AS (
    SELECT * FROM unnest($1::text[], $2::double precision[], $3::double precision[],
        $4::double precision[], $5::double precision[], $6::text[])
      AS b(job_id, expected, next_fire_at, at, scheduled_for, execution_id)),
  advanced AS (
    UPDATE jobs j SET next_fire_at = b.next_fire_at, updated_at = b.at
      FROM b WHERE j.id = b.job_id AND j.next_fire_at = b.expected
      RETURNING j.id),
  fired AS (
    INSERT INTO fires (job_id, scheduled_for, fired_at, execution_id, status)
      SELECT b.job_id, b.scheduled_for, b.at, b.execution_id, 'fired'
      FROM b JOIN advanced ON advanced.id = b.job_id
      ON CONFLICT DO NOTHING
      RETURNING execution_id),
  created AS (${insertNewExecutions(7, "JOIN fired ON fired.execution_id = t.id")}),
  entries AS (
    INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id,
        detail)
      SELECT created.id, 1, b.at, 'created', NULL, 'PENDING', 0, NULL, d.detail
      FROM created
        JOIN b ON b.execution_id = created.id
        JOIN unnest($6::text[], $${m + 7}::text[]) AS d(id, detail) ON d.id = created.id)
  SELECT id FROM advanced`;

/**
 * Records simple firings ({@link isSimpleFire}) of distinct jobs together; each one's result as
 * {@link recordFires} would return it (true when its job advanced).
 */
export async function recordSimpleFires(
  q: Queryable,
  batches: readonly FireBatch[],
  detailJson: (detail: Record<string, unknown>) => string | null,
): Promise<boolean[]> {
  const firings: unknown[][] = [[], [], [], [], [], []];
  const executions: NewExecution[] = [];
  const details: (string | null)[] = [];
  for (const batch of batches) {
    const fire = batch.fires[0];
    const e = fire?.executions[0];
    if (fire === undefined || e === undefined || !isSimpleFire(batch)) {
      throw new Error("recordSimpleFires: simple firings only");
    }
    const values = [batch.jobId, batch.expectedNext, batch.nextFireAt, batch.at];
    values.push(fire.scheduledFor, e.id);
    pushRow(firings, values);
    executions.push({ ...e, scheduledFor: fire.scheduledFor });
    details.push(
      detailJson({
        scheduledFor: fire.scheduledFor,
        ...(e.shardTotal ? { shard: `${e.shardIndex}/${e.shardTotal}` } : {}),
        ...(batch.by === undefined ? {} : { coordinator: batch.by }),
      }),
    );
  }
  const r = await run<{ id: string }>(q, RECORD_SIMPLE_FIRES, [
    ...firings,
    ...executionColumns(executions),
    details,
  ]);
  const advanced = new Set(r.rows.map((row) => row.id));
  return batches.map((b) => advanced.has(b.jobId));
}
