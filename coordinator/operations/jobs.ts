import { AxError } from "../../shared/errors.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import { AGENT_UPDATE_HANDLER } from "../../shared/update.js";
import {
  AGENT_UPDATE_NOT_A_JOB,
  formatIssues,
  type JobDefinitionInput,
  jobDefinitionSchema,
  type Trigger,
} from "../domain/job.js";
import { firstFireAt, preview } from "../domain/schedule.js";
import type { EngineContext } from "../engine/context.js";
import type { FiringLoop } from "../engine/firing.js";
import { jobExecutions } from "../engine/job-executions.js";
import { applyEvent, newExecutionId } from "../engine/transitions.js";
import type { EventTriggers } from "../engine/triggers.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../store/cursor.js";
import type { JobHistoryEntry, JobPage, StoredJob } from "../store/port.js";
import { type Idempotency, once, replayed } from "./idempotency.js";

/** Which fire times a preview lists: `n` of them after `after` (UTC ms, default now). */
export interface PreviewRequest {
  n: number;
  after?: number | undefined;
}

/** The outcome of one firing of a job, over all its shards. */
export interface FiringOutcome {
  state: "SUCCEEDED" | "RUNNING" | "FAILED";
  shards: number;
  byState: Record<string, number>;
}

export function jobNotFound(jobId: string): AxError {
  return new AxError("AX_JOB_NOT_FOUND", `job "${jobId}" not found`, { context: { jobId } });
}

/** The definition checks beyond its schema's, as AX_JOB_INVALID with each issue's path. */
function invalidJob(id: unknown, message: string, path: string[]): AxError {
  return new AxError(
    "AX_JOB_INVALID",
    `job${typeof id === "string" ? ` "${id}"` : ""} is invalid\n${path.join(".")}: ${message}`,
    { context: { issues: [{ path, message }] } },
  );
}

/**
 * Jobs: define, change, delete, pause, resume, fire by hand, preview, and read. Each operation
 * validates, takes the time from the coordinator's clock, writes, and tells the loops that care.
 */
export class JobOperations {
  constructor(
    private readonly ctx: EngineContext,
    private readonly firing: FiringLoop,
    private readonly triggers: EventTriggers,
    /** Tells the dispatch loop there is new work. */
    private readonly kick: () => void,
    /** Forgets a deleted job's routing state (round-robin cursor, sticky agent, shards). */
    private readonly forgetRouting: (jobId: string) => void,
  ) {}

  /** One page of jobs in id order (see the store's `pageJobs`). */
  async list(query: { limit: number; cursor?: string | undefined }): Promise<JobPage> {
    return this.ctx.store.pageJobs({
      limit: query.limit,
      ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
    });
  }

  /** A job; AX_JOB_NOT_FOUND when there is none. */
  async get(jobId: string): Promise<StoredJob> {
    const job = await this.ctx.store.getJob(jobId);
    if (!job) throw jobNotFound(jobId);
    return job;
  }

  /** Stores version 1 of a new job; AX_JOB_EXISTS when the id is taken. */
  async create(input: JobDefinitionInput | unknown, actor = "system"): Promise<StoredJob> {
    const id = (input as { id?: unknown } | null)?.id;
    if (typeof id === "string" && (await this.ctx.store.getJob(id))) {
      throw new AxError(
        "AX_JOB_EXISTS",
        `job "${id}" already exists; update it instead (PUT /api/jobs/${id}, ax job edit)`,
        { context: { jobId: id } },
      );
    }
    return this.put(input, actor);
  }

  /**
   * Replaces an existing job's definition (its `id` is `jobId`): a new version when it changed.
   * AX_JOB_NOT_FOUND when there is no such job.
   */
  async update(
    jobId: string,
    input: Record<string, unknown>,
    actor = "system",
    ifVersion?: number,
  ): Promise<StoredJob> {
    if (!(await this.ctx.store.getJob(jobId))) throw jobNotFound(jobId);
    return this.put({ ...input, id: jobId }, actor, ifVersion);
  }

  /**
   * Validates a job definition and stores it: the job, or a new version when it changed, with
   * `actor` (an API token's name) in its history. A new job starts paused when its definition
   * says so; a stored one keeps its state (pause and resume change it).
   *
   * With `ifVersion` (HTTP `If-Match`: the version the operator read), the job must still be at
   * that version (0: must not exist), else AX_STORE_CONFLICT and nothing is written: of two
   * operators editing one job, the second is told. Without it the last write wins, but each
   * write is still checked against the version it was computed from (another coordinator's
   * write in between makes it read again), so a next fire time is never derived from a
   * definition that was no longer current.
   */
  async put(
    input: JobDefinitionInput | unknown,
    actor = "system",
    ifVersion?: number,
  ): Promise<StoredJob> {
    const parsed = jobDefinitionSchema.safeParse(input);
    if (!parsed.success) {
      const id = (input as { id?: unknown } | null)?.id;
      throw new AxError(
        "AX_JOB_INVALID",
        `job${typeof id === "string" ? ` "${id}"` : ""} is invalid\n${formatIssues(parsed.error)}`,
        {
          context: {
            issues: parsed.error.issues.map((i) => ({
              path: i.path.map(String),
              message: i.message,
            })),
          },
        },
      );
    }
    const def = parsed.data;
    if (def.trigger.type === "after" && def.trigger.job === def.id) {
      throw invalidJob(def.id, "a job cannot fire after itself", ["trigger", "job"]);
    }
    if (def.handler === AGENT_UPDATE_HANDLER) {
      throw invalidJob(def.id, AGENT_UPDATE_NOT_A_JOB, ["handler"]);
    }
    let job: StoredJob | undefined;
    for (let attempt = 1; job === undefined; attempt++) {
      const now = this.ctx.clock.wallNow();
      const existing = await this.ctx.store.getJob(def.id);
      const current = existing?.version ?? 0;
      if (ifVersion !== undefined && current !== ifVersion)
        throw versionConflict(def.id, ifVersion, current);
      const sameTrigger =
        existing && JSON.stringify(existing.definition.trigger) === JSON.stringify(def.trigger);
      // An unchanged trigger keeps its next fire time, so re-loading a jobs file fires nothing twice.
      const nextFireAt = sameTrigger ? existing.nextFireAt : firstFireAt(def.trigger, now);
      try {
        job = await this.ctx.store.putJob(
          existing ? { ...def, paused: existing.paused } : def,
          nextFireAt,
          now,
          { actor, expectedVersion: current },
        );
      } catch (err) {
        const raced = err instanceof AxError && err.code === "AX_STORE_CONFLICT";
        if (!raced || ifVersion !== undefined || attempt >= 3) throw err;
      }
    }
    this.triggers.invalidate();
    await this.firing.rescan();
    await this.ctx.store.flush();
    return job;
  }

  /** Deletes a job: it fires no more; its executions stay. AX_JOB_NOT_FOUND when there is none. */
  async delete(jobId: string, actor = "system"): Promise<void> {
    if (!(await this.ctx.store.deleteJob(jobId, { actor, at: this.ctx.clock.wallNow() })))
      throw jobNotFound(jobId);
    this.triggers.invalidate();
    this.forgetRouting(jobId);
    await this.ctx.store.flush();
  }

  /**
   * Pauses a job: it fires nothing until resumed. State, not a new version (issue 17): the
   * history records who paused it. Pausing a paused job changes nothing. Its fires made ahead of
   * their time (`dispatchLead`) that have not started are canceled with it: what the pause
   * stops is every run from now on, not only the fires still to be made.
   */
  async pause(jobId: string, actor = "system"): Promise<StoredJob> {
    const now = this.ctx.clock.wallNow();
    const job = await this.ctx.store.setJobPaused(jobId, true, now, actor);
    if (!job) throw jobNotFound(jobId);
    this.triggers.invalidate();
    await this.cancelEarly(jobId, now, actor, "job paused before its time");
    await this.ctx.store.flush();
    return job;
  }

  /**
   * The pause commits before its cancels (one write each), so a crash or a failed write between
   * them leaves fires made ahead of their time to run after it. Run where what runs once for the
   * cluster does (at start, and on a new leader): each paused job's executions made before its
   * pause (its history's latest `paused` entry) for a time after it are cancelled, as the pause
   * would have. Returns how many were.
   */
  async repairPauses(): Promise<number> {
    let canceled = 0;
    for (const jobId of await this.ctx.store.pausedJobIds()) {
      // Oldest first: the last pause or resume among the job's latest entries.
      const last = (await this.ctx.store.listJobHistory(jobId, 100))
        .filter((h) => h.action === "paused" || h.action === "resumed")
        .at(-1);
      if (last?.action !== "paused") continue;
      canceled += await this.cancelEarly(
        jobId,
        last.at,
        "system",
        "job paused before its time (found at start)",
        // Made after the pause is an operator's "run now", not a fire the pause missed.
        last.at,
      );
    }
    if (canceled > 0) {
      await this.ctx.store.flush();
      this.ctx.log("warn", `canceled ${canceled} execution(s) of paused jobs that a pause left`);
    }
    return canceled;
  }

  /**
   * Cancels the job's executions for a time after `pausedAt` that have not started (and, with
   * `madeBy`, were created by then). A page at a time (a long lead on a short interval makes
   * many).
   */
  private async cancelEarly(
    jobId: string,
    pausedAt: number,
    actor: string,
    reason: string,
    madeBy = Number.POSITIVE_INFINITY,
  ): Promise<number> {
    let canceled = 0;
    // One its agent holds stays open until the agent answers the cancel, so each is sent one
    // once: a page with none new is the last.
    const seen = new Set<string>();
    for (let pages = 0; pages < 1_000; pages++) {
      const open = await this.ctx.store.listExecutions({
        jobId,
        states: ["PENDING", "DISPATCHED", "SCHEDULED"],
        limit: 1_000,
      });
      const fresh = open.filter((e) => !seen.has(e.id));
      if (fresh.length === 0) break;
      for (const e of fresh) {
        seen.add(e.id);
        // A fire whose time had come is the job's run before the pause, and a retry is that of
        // a run already made: they go on.
        if (e.fireAt <= pausedAt || e.attempt > 1 || e.createdAt > madeBy) continue;
        await applyEvent(this.ctx, e.id, { type: "cancel" }, () => ({}), {
          by: "operator",
          actor,
          reason,
        });
        canceled++;
      }
    }
    return canceled;
  }

  /**
   * Resumes a job. Its next fire time, kept while it was paused, is due if it passed meanwhile:
   * it is fired at once by the firing loop's path, so the times missed follow the job's misfire
   * policy (FIRE_ONCE fires the latest now, SKIP none, CATCH_UP some) and are recorded as missed
   * otherwise; the job returned has the next fire time after now.
   */
  async resume(jobId: string, actor = "system"): Promise<StoredJob> {
    // Resuming an active job changes nothing (api.md): its next time is the firing loop's, and
    // handing it to the misfire check here, with no threshold, could call a fire a few ms late
    // a misfire.
    const before = await this.ctx.store.getJob(jobId);
    if (!before) throw jobNotFound(jobId);
    if (!before.paused) return before;
    const job = await this.ctx.store.setJobPaused(jobId, false, this.ctx.clock.wallNow(), actor);
    if (!job) throw jobNotFound(jobId);
    this.triggers.invalidate();
    await this.firing.fireIfDue(jobId);
    await this.ctx.store.flush();
    return (await this.ctx.store.getJob(jobId)) ?? job;
  }

  /**
   * Fires a job now, outside its trigger (an operator's "run now"), with all its rules: shards,
   * group, routing tags. Returns the ids of every execution created (one per shard).
   */
  async trigger(jobId: string, actor = "system", key?: Idempotency): Promise<string[]> {
    const made = await replayed<string[]>(this.ctx, key);
    if (made !== undefined) return made;
    const job = await this.get(jobId);
    const now = this.ctx.clock.wallNow();
    const executions = jobExecutions(job, now, now);
    // Every shard or none: one write for the run, so a fault cannot leave part of it made (and
    // the operator's "run now" again run the made part twice).
    const ids = executions.map((e) => e.id);
    const first = await once(this.ctx, key, ids, (record) =>
      this.ctx.store.createExecutions(executions, now, { actor }, record),
    );
    // Another request with the key ran it meanwhile: its answer, and nothing more.
    if (first !== ids) return first;
    await this.ctx.store.appendJobHistory({
      jobId,
      at: now,
      action: "triggered",
      version: job.version,
      actor,
      detail: { executionIds: executions.map((e) => e.id) },
    });
    await this.ctx.store.flush();
    this.kick();
    return executions.map((e) => e.id);
  }

  /** A stored job's next nominal fire times. */
  async preview(jobId: string, req: PreviewRequest): Promise<number[]> {
    const job = await this.get(jobId);
    return this.previewTrigger(job.definition.trigger, req);
  }

  /** A trigger's next nominal fire times, stored or not. */
  previewTrigger(trigger: Trigger, req: PreviewRequest): number[] {
    return preview(trigger, req.after ?? this.ctx.clock.wallNow(), req.n);
  }

  /**
   * Who changed a job or fired it by hand (kept after the job is deleted), a page at a time,
   * from the newest back: each page holds the newest `limit` entries before the cursor, oldest
   * first, and `nextCursor` (null on the first entry's page) reads the page before it.
   */
  async history(
    jobId: string,
    page: { limit?: number; cursor?: string | undefined } = {},
  ): Promise<{ items: JobHistoryEntry[]; nextCursor: string | null }> {
    const limit = page.limit ?? 100;
    let before: number | undefined;
    if (page.cursor !== undefined) {
      const c = decodeExecutionCursor(page.cursor);
      // A cursor of another job's history is not one this listing returned.
      if (c.id !== `history:${jobId}`) {
        throw new AxError(
          "AX_STORE_BAD_CURSOR",
          `cursor "${page.cursor}" is not one a listing returned`,
          { context: { cursor: page.cursor } },
        );
      }
      before = c.createdAt;
    }
    // One more than the page: whether any is left before it.
    const got = await this.ctx.store.listJobHistory(jobId, limit + 1, before);
    const items = got.length > limit ? got.slice(1) : got;
    const first = items[0];
    return {
      items,
      nextCursor:
        got.length > limit && first !== undefined
          ? encodeExecutionCursor({ createdAt: first.seq, id: `history:${jobId}` })
          : null,
    };
  }

  /**
   * Fires every job listening for event `name` (as a message on `ax/v1/events/{name}` would),
   * with `payload` merged into their params. Returns how many jobs fired.
   */
  async fireEvent(name: string, payload: Record<string, unknown> = {}): Promise<number> {
    // Each fits alone; together they must fit a dispatch. Refused before anything fires.
    const misfits = await this.triggers.eventMisfits(name, payload);
    if (misfits.length > 0) {
      const issues = misfits.map((m) => ({
        path: "body.payload",
        message: `merged into job "${m.jobId}"'s params, ${m.problem}`,
      }));
      throw new AxError(
        "AX_API_INVALID_REQUEST",
        `invalid request\n${issues.map((i) => `${i.path}: ${i.message}`).join("\n")}`,
        { context: { issues } },
      );
    }
    const fired = await this.triggers.onEvent(
      name,
      newExecutionId(this.ctx.clock.wallNow()),
      payload,
    );
    await this.ctx.store.flush();
    return fired;
  }

  /**
   * The outcome of one firing of a job (all its shards): SUCCEEDED when every shard succeeded,
   * RUNNING while any has not ended, FAILED otherwise; with the count of shards in each state.
   */
  async firingOutcome(jobId: string, scheduledFor: number): Promise<FiringOutcome> {
    const execs = await this.ctx.store.listExecutions({ jobId, scheduledFor, limit: 10_000 });
    const byState: Record<string, number> = {};
    for (const e of execs) byState[e.state] = (byState[e.state] ?? 0) + 1;
    const open = execs.some((e) => !TERMINAL_STATES.has(e.state));
    const state = open
      ? "RUNNING"
      : execs.length > 0 && execs.every((e) => e.state === "SUCCEEDED")
        ? "SUCCEEDED"
        : "FAILED";
    return { state, shards: execs.length, byState };
  }
}

/** AX_STORE_CONFLICT for a job write based on a version that is no longer the stored one. */
function versionConflict(jobId: string, expected: number, actual: number): AxError {
  return new AxError(
    "AX_STORE_CONFLICT",
    expected === 0
      ? `job "${jobId}" already exists (version ${actual}); it was created by another write`
      : `job "${jobId}" is at version ${actual}, not ${expected}: it was changed by another write since it was read; read it again and repeat the change`,
    { context: { jobId, expected, actual } },
  );
}
