import { TERMINAL_STATES } from "../../shared/fsm.js";
import { paramsSchema } from "../domain/job.js";
import {
  type EventFiring,
  type ExecutionRecord,
  followUpKey,
  type NewExecution,
  type StoredJob,
} from "../store/port.js";
import { capUtf8 } from "../store/stored-text.js";
import type { EngineContext, FollowUps } from "./context.js";
import { jobExecutions } from "./job-executions.js";

/**
 * Why `params` could not be carried by a dispatch (too many keys, too deep, too large), or
 * undefined when they can: a job's params merged with what fired it are checked again, since each
 * part fitting does not make the two together fit.
 */
export function paramsMisfit(params: Record<string, unknown>): string | undefined {
  const r = paramsSchema.safeParse(params);
  return r.success ? undefined : (r.error.issues[0]?.message ?? "invalid");
}

/** Event deliveries remembered to drop a redelivery of the same message (QoS 1 may repeat). */
const SEEN_EVENTS = 10_000;

/**
 * The triggers that are not times: `event` (a message on `ax/v1/events/{name}` fires every job
 * listening, its payload merged into the job's params) and `after` (job B fires when an execution
 * of job A ends in one of the listed states, with A's outcome in B's params).
 */
export class EventTriggers implements FollowUps {
  private readonly seen = new Set<string>();
  private jobs: StoredJob[] | undefined;
  /** The jobs with an `after` trigger, by the job they follow (of {@link jobs}). */
  private followers: Map<string, StoredJob[]> | undefined;

  constructor(
    private readonly ctx: EngineContext,
    private readonly onCreated: () => void,
  ) {}

  /** Bumped by each {@link invalidate}: a read begun before one is not kept. */
  private generation = 0;

  /** Forget the cached job list (a job was added, changed or removed). */
  invalidate(): void {
    this.jobs = undefined;
    this.followers = undefined;
    this.generation++;
  }

  private async listening(): Promise<StoredJob[]> {
    if (this.jobs !== undefined) return this.jobs;
    const generation = this.generation;
    const jobs = await this.ctx.store.listListeningJobs();
    if (generation === this.generation) {
      this.jobs = jobs;
      const followers = new Map<string, StoredJob[]>();
      for (const j of jobs) {
        const t = j.definition.trigger;
        if (t.type !== "after") continue;
        const list = followers.get(t.job);
        if (list) list.push(j);
        else followers.set(t.job, [j]);
      }
      this.followers = followers;
    }
    return jobs;
  }

  /**
   * An event message: fires every unpaused job whose trigger names it, once. The store's event
   * ledger decides, job by job: a job it already holds for the message (a redelivery, also
   * after a restart, or a copy another coordinator read first) is not fired again here. Returns
   * how many jobs this call fired.
   */
  async onEvent(name: string, msgId: string, payload: Record<string, unknown>): Promise<number> {
    const key = `${name}\u0000${msgId}`;
    if (this.seen.has(key)) {
      await this.ctx.store.bumpCounter("duplicate_events");
      return 0;
    }
    const now = this.ctx.clock.wallNow();
    const fires: { jobId: string; executions: NewExecution[] }[] = [];
    const refused: { job: StoredJob; misfit: string }[] = [];
    for (const job of await this.listening()) {
      const t = job.definition.trigger;
      if (t.type !== "event" || t.name !== name || job.paused) continue;
      const params = { ...job.definition.params, ...payload };
      const misfit = paramsMisfit(params);
      // No agent could read its dispatch: it would fail undelivered, saying nothing.
      if (misfit !== undefined) refused.push({ job, misfit });
      else fires.push({ jobId: job.id, executions: jobExecutions(job, now, now, params) });
    }
    const { first, fired } = await this.ctx.store.recordEvent({
      name,
      msgId,
      fires,
      at: now,
      ...(this.ctx.coordinatorId === undefined ? {} : { by: this.ctx.coordinatorId }),
    });
    this.remember(key);
    // With several coordinators each reading every event (dispatch shared), another one's copy
    // is no duplicate the sender made; with one reader, a message not new is a redelivery.
    if (!first && this.ctx.share === undefined) {
      await this.ctx.store.bumpCounter("duplicate_events");
    }
    if (first) {
      for (const { job, misfit } of refused) {
        await this.ctx.store.bumpCounter("events_refused");
        this.ctx.log(
          "warn",
          `event "${name}" does not fire job "${job.id}": its payload merged into the job's params ${misfit}`,
          { jobId: job.id, event: name },
        );
      }
      if (fires.length === 0) await this.ctx.store.bumpCounter("events_without_jobs");
    }
    const firedNow = new Set(fired);
    for (const { jobId, executions } of fires) {
      if (!firedNow.has(jobId)) continue;
      for (const e of executions) {
        this.ctx.log("info", `job ${jobId} fired by event`, {
          jobId,
          executionId: e.id,
          event: name,
          msgId,
        });
      }
    }
    if (fired.length > 0) this.onCreated();
    return fired.length;
  }

  /** Remembers a message read, to drop its redelivery without asking the store. */
  private remember(key: string): void {
    this.seen.add(key);
    if (this.seen.size > SEEN_EVENTS) {
      const oldest = this.seen.values().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
  }

  /**
   * The jobs an event would fire whose params, merged with `payload`, no dispatch could carry,
   * each with why: the API refuses such an event before it fires anything.
   */
  async eventMisfits(
    name: string,
    payload: Record<string, unknown>,
  ): Promise<{ jobId: string; problem: string }[]> {
    const out: { jobId: string; problem: string }[] = [];
    for (const job of await this.listening()) {
      const t = job.definition.trigger;
      if (t.type !== "event" || t.name !== name || job.paused) continue;
      const problem = paramsMisfit({ ...job.definition.params, ...payload });
      if (problem !== undefined) out.push({ jobId: job.id, problem });
    }
    return out;
  }

  /**
   * The follow-ups of an execution that ends (FollowUps.plan): every unpaused job whose `after`
   * trigger names its job and lists the state it ends in, with its outcome in `params.after`.
   * They are recorded in the transition's own write, under the ledger key of the execution and
   * the state (followUpKey), so a crash cannot end it without them, nor fire them twice.
   */
  plan(exec: ExecutionRecord): EventFiring | undefined | Promise<EventFiring | undefined> {
    const jobId = exec.jobId;
    if (jobId === null || !TERMINAL_STATES.has(exec.state)) return undefined;
    if (this.followers !== undefined) return this.followUps(exec, this.followers.get(jobId));
    return this.listening().then((jobs) =>
      this.followUps(
        exec,
        jobs.filter(
          (j) => j.definition.trigger.type === "after" && j.definition.trigger.job === jobId,
        ),
      ),
    );
  }

  private followUps(
    exec: ExecutionRecord,
    watching: readonly StoredJob[] | undefined,
  ): EventFiring | undefined {
    const jobId = exec.jobId;
    if (jobId === null || watching === undefined) return undefined;
    const followers = watching.filter((j) => {
      const t = j.definition.trigger;
      return t.type === "after" && (t.states as string[]).includes(exec.state) && !j.paused;
    });
    if (followers.length === 0) return undefined;
    const now = this.ctx.clock.wallNow();
    const after = {
      jobId,
      executionId: exec.id,
      state: exec.state,
      // Always both keys (scheduling.md): null when the execution ended without one. The message
      // as the store keeps it.
      result: exec.result ?? null,
      message:
        exec.message === null || exec.message === undefined
          ? null
          : capUtf8(exec.message, this.ctx.config.maxErrorTextBytes).text,
    };
    const fires = followers.map((job) => {
      let params: Record<string, unknown> = { ...job.definition.params, after };
      if (paramsMisfit(params) !== undefined && after.result !== null) {
        // A large result of A's does not stop B: B gets the marker a handler's result too large
        // to report gets (handlers.md), with its size.
        const bytes = Buffer.byteLength(JSON.stringify(after.result));
        params = {
          ...job.definition.params,
          after: { ...after, result: { truncated: true, reason: "too_large", bytes } },
        };
      }
      return { jobId: job.id, executions: jobExecutions(job, now, now, params) };
    });
    return {
      ...followUpKey({ jobId, executionId: exec.id }, exec.state),
      fires,
      at: now,
      cause: { after: exec.id },
      ...(this.ctx.coordinatorId === undefined ? {} : { by: this.ctx.coordinatorId }),
    };
  }

  /** Follow-ups committed with their transition (FollowUps.fired). */
  fired(firing: EventFiring): void {
    for (const { jobId, executions } of firing.fires) {
      for (const e of executions) {
        this.ctx.log("info", `job ${jobId} fired by after`, {
          jobId,
          executionId: e.id,
          ...firing.cause,
        });
      }
    }
    this.onCreated();
  }
}
