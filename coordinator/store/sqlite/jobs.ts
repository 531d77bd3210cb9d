import { AxError } from "../../../shared/errors.js";
import type { JobDefinition } from "../../domain/job.js";
import type { JobChange, JobHistoryEntry, JobPage, StoredJob } from "../port.js";
import type { StoreContext } from "./context.js";
import { type JobHistoryRow, type JobRow, toJob, toJobHistoryEntry } from "./rows.js";
import { LISTENING_SQL } from "./statements.js";
import { deepFreeze, versionedJson, wrap } from "./values.js";

/*
 * The SQLite store's jobs: their versions, next fire times and history. Functions of the store's
 * context (context.ts), called by SqliteStore; each is one of its Store methods.
 */

/** Store.putJob: nothing written, and AX_STORE_CONFLICT, when `change.expectedVersion` is not the stored one. */
export function putJob(
  ctx: StoreContext,
  definition: JobDefinition,
  nextFireAt: number | null,
  now: number,
  change: JobChange,
): StoredJob {
  const { statements: sql } = ctx;
  return wrap("putJob", () =>
    ctx.writer.write(() => {
      const json = JSON.stringify(definition);
      const row = sql.prepare("SELECT * FROM jobs WHERE id = ?").get(definition.id) as
        | JobRow
        | undefined;
      if (change.expectedVersion !== undefined) {
        checkVersion(definition.id, change.expectedVersion, row?.version ?? 0);
      }
      if (row && versionedJson(JSON.parse(row.definition)) === versionedJson(definition)) {
        return toJob(row);
      }
      // A job deleted and created again continues its versions (deleteJob keeps them).
      const version = (row?.version ?? lastJobVersion(ctx, definition.id)) + 1;
      sql
        .prepare(
          `INSERT INTO jobs (id, version, definition, next_fire_at, paused, created_at, updated_at,
               updated_by)
             VALUES (@id, @version, @definition, @nextFireAt, @paused, @now, @now, @actor)
             ON CONFLICT (id) DO UPDATE SET version = @version, definition = @definition,
               next_fire_at = @nextFireAt, updated_at = @now, updated_by = @actor`,
        )
        .run({
          id: definition.id,
          version,
          definition: json,
          nextFireAt,
          paused: definition.paused ? 1 : 0,
          now,
          actor: change.actor,
        });
      sql
        .prepare(
          "INSERT INTO job_versions (job_id, version, definition, created_at) VALUES (?, ?, ?, ?)",
        )
        .run(definition.id, version, json, now);
      insertJobHistory(ctx, {
        jobId: definition.id,
        at: now,
        action: row ? "updated" : "created",
        version,
        actor: change.actor,
        detail: null,
      });
      return toJob(sql.prepare("SELECT * FROM jobs WHERE id = ?").get(definition.id) as JobRow);
    }),
  );
}

/**
 * Throws AX_STORE_CONFLICT unless the job is at the version the writer read (`actual` 0: there
 * is no such job, which `expected` 0 asks for).
 */
function checkVersion(jobId: string, expected: number, actual: number): void {
  if (expected === actual) return;
  const found = actual === 0 ? "does not exist" : `is at version ${actual}`;
  const wanted = expected === 0 ? "none" : `version ${expected}`;
  throw new AxError(
    "AX_STORE_CONFLICT",
    `store: job "${jobId}" ${found}, but the change expected ${wanted}: another writer changed it first`,
    { context: { jobId, expected, actual } },
  );
}

/** Store.setJobPaused. */
export function setJobPaused(
  ctx: StoreContext,
  jobId: string,
  paused: boolean,
  now: number,
  actor: string,
): StoredJob | undefined {
  const { statements: sql } = ctx;
  return wrap("setJobPaused", () =>
    ctx.writer.write(() => {
      const row = sql.prepare("SELECT * FROM jobs WHERE id = ?").get(jobId) as JobRow | undefined;
      if (!row) return undefined;
      if ((row.paused === 1) === paused) return toJob(row);
      sql.prepare("UPDATE jobs SET paused = ? WHERE id = ?").run(paused ? 1 : 0, jobId);
      insertJobHistory(ctx, {
        jobId,
        at: now,
        action: paused ? "paused" : "resumed",
        version: row.version,
        actor,
        detail: null,
      });
      return toJob({ ...row, paused: paused ? 1 : 0 });
    }),
  );
}

/** Store.getJob: the definition from the cache when it holds the job's current version. */
export function getJob(ctx: StoreContext, id: string): StoredJob | undefined {
  const { statements: sql, definitions } = ctx;
  return wrap("getJob", () => {
    const cached = definitions.get(id);
    // The definition's text is read only when the cache cannot answer: one query either way.
    const row = sql
      .prepare(
        cached
          ? "SELECT id, version, next_fire_at, paused, created_at, updated_at, updated_by FROM jobs WHERE id = ?"
          : "SELECT * FROM jobs WHERE id = ?",
      )
      .get(id) as (Omit<JobRow, "definition"> & { definition?: string }) | undefined;
    if (!row) return undefined;
    let definition: JobDefinition;
    if (cached?.version === row.version) {
      definition = cached.definition;
    } else {
      const json =
        row.definition ?? sql.prepare("SELECT definition FROM jobs WHERE id = ?").pluck().get(id);
      definition = deepFreeze(JSON.parse(json as string) as JobDefinition);
      definitions.set(id, row.version, definition);
    }
    return {
      id: row.id,
      version: row.version,
      definition,
      nextFireAt: row.next_fire_at,
      paused: row.paused === 1,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
      updatedBy: row.updated_by,
    };
  });
}

/** Store.getJobVersion. */
export function getJobVersion(
  ctx: StoreContext,
  jobId: string,
  version: number,
): JobDefinition | undefined {
  const cached = ctx.definitions.get(jobId);
  if (cached?.version === version) return cached.definition;
  const json = wrap("getJobVersion", () =>
    ctx.statements
      .prepare("SELECT definition FROM job_versions WHERE job_id = ? AND version = ?")
      .pluck()
      .get(jobId, version),
  ) as string | undefined;
  return json === undefined ? undefined : deepFreeze(JSON.parse(json) as JobDefinition);
}

/** Store.listJobs. */
export function listJobs(ctx: StoreContext): StoredJob[] {
  return wrap("listJobs", () =>
    (ctx.statements.prepare("SELECT * FROM jobs ORDER BY id").all() as JobRow[]).map(toJob),
  );
}

/** Store.pausedJobIds. */
export function pausedJobIds(ctx: StoreContext): string[] {
  return wrap("pausedJobIds", () =>
    (
      ctx.statements.prepare("SELECT id FROM jobs WHERE paused = 1 ORDER BY id").all() as {
        id: string;
      }[]
    ).map((r) => r.id),
  );
}

/** Store.pageJobs. */
export function pageJobs(ctx: StoreContext, query: { limit: number; cursor?: string }): JobPage {
  const { statements: sql } = ctx;
  const limit = Math.max(1, Math.floor(query.limit));
  // One row more than the page says whether there is a next one.
  const rows = wrap("pageJobs", () =>
    query.cursor === undefined
      ? (sql.prepare("SELECT * FROM jobs ORDER BY id LIMIT ?").all(limit + 1) as JobRow[])
      : (sql
          .prepare("SELECT * FROM jobs WHERE id > ? ORDER BY id LIMIT ?")
          .all(query.cursor, limit + 1) as JobRow[]),
  );
  const items = rows.slice(0, limit).map(toJob);
  const last = items.at(-1);
  return { items, nextCursor: rows.length > limit && last ? last.id : null };
}

/** Store.listListeningJobs. */
export function listListeningJobs(ctx: StoreContext): StoredJob[] {
  return wrap("listListeningJobs", () =>
    (
      ctx.statements
        .prepare(`SELECT * FROM jobs WHERE ${LISTENING_SQL} ORDER BY id`)
        .all() as JobRow[]
    ).map(toJob),
  );
}

/** Store.listLeadFires. */
export function listLeadFires(
  ctx: StoreContext,
): { jobId: string; nextFireAt: number; leadMs: number }[] {
  return wrap("listLeadFires", () =>
    (
      ctx.statements
        .prepare(
          // INDEXED BY: left to itself the planner walked jobs_next_fire, every active job, and
          // parsed each definition: about 100 ms of the event loop per scan at 100,000 jobs.
          `SELECT id, next_fire_at, json_extract(definition, '$.dispatchLead') AS lead
             FROM jobs INDEXED BY jobs_lead
             WHERE json_extract(definition, '$.dispatchLead') IS NOT NULL
               AND paused = 0 AND next_fire_at IS NOT NULL`,
        )
        .all() as { id: string; next_fire_at: number; lead: number }[]
    ).map((r) => ({ jobId: r.id, nextFireAt: r.next_fire_at, leadMs: r.lead })),
  );
}

/** Store.listDueFires. */
export function listDueFires(
  ctx: StoreContext,
  untilMs: number,
): { jobId: string; nextFireAt: number }[] {
  return wrap("listDueFires", () =>
    (
      ctx.statements
        .prepare(
          "SELECT id, next_fire_at FROM jobs WHERE paused = 0 AND next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at",
        )
        .all(untilMs) as { id: string; next_fire_at: number }[]
    ).map((r) => ({ jobId: r.id, nextFireAt: r.next_fire_at })),
  );
}

/** Store.listJobsDueBy. */
export function listJobsDueBy(ctx: StoreContext, untilMs: number): StoredJob[] {
  return wrap("listJobsDueBy", () =>
    (
      ctx.statements
        .prepare(
          "SELECT * FROM jobs WHERE paused = 0 AND next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at",
        )
        .all(untilMs) as JobRow[]
    ).map(toJob),
  );
}

/** The highest version a job ever had (0 for none): versions are never reused. */
function lastJobVersion(ctx: StoreContext, id: string): number {
  return (
    (ctx.statements
      .prepare("SELECT MAX(version) FROM job_versions WHERE job_id = ?")
      .pluck()
      .get(id) as number | null) ?? 0
  );
}

/** Store.deleteJob. */
export function deleteJob(
  ctx: StoreContext,
  id: string,
  change: { actor: string; at: number } | undefined,
): boolean {
  const { statements: sql } = ctx;
  return wrap("deleteJob", () =>
    ctx.writer.write(() => {
      ctx.definitions.delete(id);
      const version = sql.prepare("SELECT version FROM jobs WHERE id = ?").pluck().get(id) as
        | number
        | undefined;
      if (version === undefined) return false;
      sql.prepare("DELETE FROM jobs WHERE id = ?").run(id);
      insertJobHistory(ctx, {
        jobId: id,
        at: change?.at ?? ctx.nowMs(),
        action: "deleted",
        version,
        actor: change?.actor ?? "system",
        detail: null,
      });
      return true;
    }),
  );
}

/** Store.appendJobHistory. */
export function appendJobHistory(ctx: StoreContext, entry: Omit<JobHistoryEntry, "seq">): void {
  wrap("appendJobHistory", () => ctx.writer.write(() => insertJobHistory(ctx, entry)));
}

/** Adds a history entry inside the caller's write; its seq is the job's next one. */
function insertJobHistory(ctx: StoreContext, e: Omit<JobHistoryEntry, "seq">): void {
  ctx.statements
    .prepare(
      `INSERT INTO job_history (job_id, seq, at, action, version, actor, detail)
         SELECT @jobId, COALESCE(MAX(seq), 0) + 1, @at, @action, @version, @actor, @detail
         FROM job_history WHERE job_id = @jobId`,
    )
    .run({ ...e, detail: e.detail === null ? null : JSON.stringify(e.detail) });
}

/** Store.listJobHistory. */
export function listJobHistory(
  ctx: StoreContext,
  jobId: string,
  limit: number,
  beforeSeq: number,
): JobHistoryEntry[] {
  const rows = wrap("listJobHistory", () =>
    ctx.statements
      .prepare(
        `SELECT * FROM (SELECT * FROM job_history WHERE job_id = ? AND seq < ?
                         ORDER BY seq DESC LIMIT ?)
           ORDER BY seq`,
      )
      .all(jobId, beforeSeq, Math.max(1, Math.floor(limit))),
  ) as JobHistoryRow[];
  return rows.map(toJobHistoryEntry);
}
