import { AxError } from "../../../shared/errors.js";
import type { JobDefinition } from "../../domain/job.js";
import type { JobChange, JobHistoryEntry, JobPage, StoredJob } from "../port.js";
import { versionedJson } from "../stored-text.js";
import { type JobHistoryRow, type JobRow, toJob, toJobHistoryEntry } from "./rows.js";
import { type Queryable, run } from "./tx.js";

/*
 * Jobs, their versions and their history: the statements of PgStore's job methods, each run on
 * the transaction (or pool) the store hands in.
 */

const JOB_COLUMNS =
  "id, version, definition, next_fire_at, paused, created_at, updated_at, updated_by";

/** Creates or versions a job (Store.putJob); the job row is locked first, so writers serialize. */
export async function putJob(
  q: Queryable,
  definition: JobDefinition,
  nextFireAt: number | null,
  now: number,
  change: JobChange,
): Promise<{ job: StoredJob; changed: boolean }> {
  const row = (
    await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE`, [
      definition.id,
    ])
  ).rows[0];
  if (change.expectedVersion !== undefined) {
    const actual = row?.version ?? 0;
    if (actual !== change.expectedVersion) {
      throw new AxError(
        "AX_STORE_CONFLICT",
        actual === 0
          ? `job "${definition.id}" does not exist, but the write expected version ${change.expectedVersion}`
          : `job "${definition.id}" is at version ${actual}, but the write expected version ${change.expectedVersion}: another writer changed it first`,
        { context: { jobId: definition.id, expected: change.expectedVersion, actual } },
      );
    }
  }
  if (row && versionedJson(JSON.parse(row.definition)) === versionedJson(definition)) {
    return { job: toJob(row), changed: false };
  }
  // A job deleted and created again continues its versions (deleteJob keeps them). Two writers
  // creating one job at once compute the same version: the job_versions key refuses the later,
  // which runs again and finds the job (tx.ts retries that collision).
  const version = (row?.version ?? (await lastJobVersion(q, definition.id))) + 1;
  const json = JSON.stringify(definition);
  const written = await run<JobRow>(
    q,
    `INSERT INTO jobs (id, version, definition, trigger_type, dispatch_lead, next_fire_at, paused,
         created_at, updated_at, updated_by)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)
       ON CONFLICT (id) DO UPDATE SET version = $2, definition = $3, trigger_type = $4,
         dispatch_lead = $5, next_fire_at = $6, updated_at = $8, updated_by = $9
       RETURNING ${JOB_COLUMNS}`,
    [
      definition.id,
      version,
      json,
      definition.trigger.type,
      definition.dispatchLead ?? null,
      nextFireAt,
      definition.paused === true,
      now,
      change.actor,
    ],
  );
  await run(
    q,
    "INSERT INTO job_versions (job_id, version, definition, created_at) VALUES ($1, $2, $3, $4)",
    [definition.id, version, json, now],
  );
  await insertJobHistory(q, {
    jobId: definition.id,
    at: now,
    action: row ? "updated" : "created",
    version,
    actor: change.actor,
    detail: null,
  });
  return { job: toJob(written.rows[0] as JobRow), changed: true };
}

/** The highest version a job ever had (0 for none): versions are never reused. */
async function lastJobVersion(q: Queryable, id: string): Promise<number> {
  const r = await run<{ v: number | null }>(
    q,
    "SELECT MAX(version) AS v FROM job_versions WHERE job_id = $1",
    [id],
  );
  return r.rows[0]?.v ?? 0;
}

/** Pauses or resumes a job (Store.setJobPaused); `changed` when its state moved. */
export async function setJobPaused(
  q: Queryable,
  jobId: string,
  paused: boolean,
  now: number,
  actor: string,
): Promise<{ job: StoredJob | undefined; changed: boolean }> {
  const row = (
    await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE`, [jobId])
  ).rows[0];
  if (!row) return { job: undefined, changed: false };
  if (row.paused === paused) return { job: toJob(row), changed: false };
  await run(q, "UPDATE jobs SET paused = $1 WHERE id = $2", [paused, jobId]);
  await insertJobHistory(q, {
    jobId,
    at: now,
    action: paused ? "paused" : "resumed",
    version: row.version,
    actor,
    detail: null,
  });
  return { job: toJob({ ...row, paused }), changed: true };
}

/** Deletes a job, recording it in its history; false when there was none. */
export async function deleteJob(
  q: Queryable,
  id: string,
  change: { actor: string; at: number },
): Promise<boolean> {
  const gone = await run<{ version: number }>(
    q,
    "DELETE FROM jobs WHERE id = $1 RETURNING version",
    [id],
  );
  const version = gone.rows[0]?.version;
  if (version === undefined) return false;
  await insertJobHistory(q, {
    jobId: id,
    at: change.at,
    action: "deleted",
    version,
    actor: change.actor,
    detail: null,
  });
  return true;
}

/** Appends a history entry with the job's next seq. */
export async function insertJobHistory(
  q: Queryable,
  e: Omit<JobHistoryEntry, "seq">,
): Promise<void> {
  await run(
    q,
    `INSERT INTO job_history (job_id, seq, at, action, version, actor, detail)
       SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5, $6 FROM job_history WHERE job_id = $1`,
    [
      e.jobId,
      e.at,
      e.action,
      e.version,
      e.actor,
      e.detail === null ? null : JSON.stringify(e.detail),
    ],
  );
}

/** A job's history, oldest first, the newest `limit` entries before `beforeSeq`. */
export async function listJobHistory(
  q: Queryable,
  jobId: string,
  limit: number,
  beforeSeq: number,
): Promise<JobHistoryEntry[]> {
  const r = await run<JobHistoryRow>(
    q,
    `SELECT * FROM (SELECT * FROM job_history WHERE job_id = $1 AND seq < $3
                     ORDER BY seq DESC LIMIT $2) h
       ORDER BY seq`,
    // seq is an integer column: "before everything" is its largest value.
    [jobId, Math.max(1, Math.floor(limit)), Math.min(beforeSeq, 2_147_483_647)],
  );
  return r.rows.map(toJobHistoryEntry);
}

export async function getJob(q: Queryable, id: string): Promise<StoredJob | undefined> {
  const r = await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs WHERE id = $1`, [id]);
  const row = r.rows[0];
  return row ? toJob(row) : undefined;
}

/** The rows of the jobs `ids` (unique), in no order; for {@link ReadBatch}. */
export async function getJobRows(q: Queryable, ids: string[]): Promise<JobRow[]> {
  return (await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs WHERE id = ANY($1::text[])`, [ids]))
    .rows;
}

/** A job version's row, keyed for {@link ReadBatch}. */
export interface JobVersionRow {
  job_id: string;
  version: number;
  definition: string;
}

/** The stored definitions of these versions (unique), in no order. */
export async function getJobVersionRows(
  q: Queryable,
  keys: { jobId: string; version: number }[],
): Promise<JobVersionRow[]> {
  return (
    await run<JobVersionRow>(
      q,
      `SELECT v.job_id, v.version, v.definition
         FROM unnest($1::text[], $2::integer[]) AS k(job_id, version)
         JOIN job_versions v ON v.job_id = k.job_id AND v.version = k.version`,
      [keys.map((k) => k.jobId), keys.map((k) => k.version)],
    )
  ).rows;
}

export async function getJobVersion(
  q: Queryable,
  jobId: string,
  version: number,
): Promise<JobDefinition | undefined> {
  const r = await run<{ definition: string }>(
    q,
    "SELECT definition FROM job_versions WHERE job_id = $1 AND version = $2",
    [jobId, version],
  );
  const json = r.rows[0]?.definition;
  return json === undefined ? undefined : (JSON.parse(json) as JobDefinition);
}

/** Every job in id order (byte order: the column's collation is "C"). */
export async function listJobs(q: Queryable): Promise<StoredJob[]> {
  const r = await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs ORDER BY id`);
  return r.rows.map(toJob);
}

/** One page of jobs in id order after `cursor` (the previous page's last id). */
export async function pageJobs(
  q: Queryable,
  query: { limit: number; cursor?: string },
): Promise<JobPage> {
  const limit = Math.max(1, Math.floor(query.limit));
  // One row more than the page says whether there is a next one.
  const r =
    query.cursor === undefined
      ? await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs ORDER BY id LIMIT $1`, [limit + 1])
      : await run<JobRow>(q, `SELECT ${JOB_COLUMNS} FROM jobs WHERE id > $1 ORDER BY id LIMIT $2`, [
          query.cursor,
          limit + 1,
        ]);
  const items = r.rows.slice(0, limit).map(toJob);
  const last = items.at(-1);
  return { items, nextCursor: r.rows.length > limit && last ? last.id : null };
}

/** The jobs with an event or after trigger, paused or not, by id. */
export async function listListeningJobs(q: Queryable): Promise<StoredJob[]> {
  const r = await run<JobRow>(
    q,
    `SELECT ${JOB_COLUMNS} FROM jobs WHERE trigger_type IN ('event', 'after') ORDER BY id`,
  );
  return r.rows.map(toJob);
}

export async function listLeadFires(
  q: Queryable,
): Promise<{ jobId: string; nextFireAt: number; leadMs: number }[]> {
  const r = await run<{ id: string; next_fire_at: number; dispatch_lead: number }>(
    q,
    `SELECT id, next_fire_at, dispatch_lead FROM jobs
       WHERE dispatch_lead IS NOT NULL AND NOT paused AND next_fire_at IS NOT NULL`,
  );
  return r.rows.map((row) => ({
    jobId: row.id,
    nextFireAt: row.next_fire_at,
    leadMs: row.dispatch_lead,
  }));
}

export async function listDueFires(
  q: Queryable,
  untilMs: number,
): Promise<{ jobId: string; nextFireAt: number }[]> {
  const r = await run<{ id: string; next_fire_at: number }>(
    q,
    "SELECT id, next_fire_at FROM jobs WHERE NOT paused AND next_fire_at <= $1 ORDER BY next_fire_at",
    [untilMs],
  );
  return r.rows.map((row) => ({ jobId: row.id, nextFireAt: row.next_fire_at }));
}

export async function listJobsDueBy(q: Queryable, untilMs: number): Promise<StoredJob[]> {
  const r = await run<JobRow>(
    q,
    `SELECT ${JOB_COLUMNS} FROM jobs WHERE NOT paused AND next_fire_at <= $1 ORDER BY next_fire_at`,
    [untilMs],
  );
  return r.rows.map(toJob);
}
