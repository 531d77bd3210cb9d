import type { StoredJob } from "../store/port.js";
import type { EngineContext } from "./context.js";
import type { EngineEvents } from "./events.js";
import { jobExecutions } from "./job-executions.js";

/** Event deliveries remembered to drop a redelivery of the same message (QoS 1 may repeat). */
const SEEN_EVENTS = 10_000;

/**
 * The triggers that are not times: `event` (a message on `ax/v1/events/{name}` fires every job
 * listening, its payload merged into the job's params) and `after` (job B fires when an execution
 * of job A ends in one of the listed states, with A's outcome in B's params).
 */
export class EventTriggers {
  private readonly seen = new Set<string>();
  private jobs: StoredJob[] | undefined;

  constructor(
    private readonly ctx: EngineContext,
    private readonly onCreated: () => void,
  ) {}

  /** Forget the cached job list (a job was added, changed or removed). */
  invalidate(): void {
    this.jobs = undefined;
  }

  private async listening(): Promise<StoredJob[]> {
    this.jobs ??= await this.ctx.store.listListeningJobs();
    return this.jobs;
  }

  /** An event message: fires every unpaused job whose trigger names it. Returns how many fired. */
  async onEvent(name: string, msgId: string, payload: Record<string, unknown>): Promise<number> {
    const key = `${name}\u0000${msgId}`;
    if (this.seen.has(key)) {
      await this.ctx.store.bumpCounter("duplicate_events");
      return 0;
    }
    this.seen.add(key);
    if (this.seen.size > SEEN_EVENTS) {
      const oldest = this.seen.values().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    let fired = 0;
    for (const job of await this.listening()) {
      const t = job.definition.trigger;
      if (t.type !== "event" || t.name !== name || job.paused) continue;
      await this.create(job, { ...job.definition.params, ...payload }, { event: name, msgId });
      fired++;
    }
    if (fired === 0) await this.ctx.store.bumpCounter("events_without_jobs");
    return fired;
  }

  /** A transition: an execution of a job ending in a listed state fires the jobs after it. */
  async onTransition(e: EngineEvents["transition"]): Promise<void> {
    if (e.jobId === null || e.from === e.to) return;
    const followers = (await this.listening()).filter((j) => {
      const t = j.definition.trigger;
      return (
        t.type === "after" &&
        t.job === e.jobId &&
        (t.states as string[]).includes(e.to) &&
        !j.paused
      );
    });
    if (followers.length === 0) return;
    const exec = await this.ctx.store.getExecution(e.executionId);
    const after = {
      jobId: e.jobId,
      executionId: e.executionId,
      state: e.to,
      // Always both keys (scheduling.md): null when the execution ended without one.
      result: exec?.result ?? null,
      message: exec?.message ?? null,
    };
    for (const job of followers) {
      await this.create(job, { ...job.definition.params, after }, { after: e.executionId });
    }
  }

  private async create(
    job: StoredJob,
    params: Record<string, unknown>,
    cause: Record<string, unknown>,
  ): Promise<void> {
    const now = this.ctx.clock.wallNow();
    for (const e of jobExecutions(job, now, now, params)) {
      await this.ctx.store.createExecution(e, now);
      this.ctx.log("info", `job ${job.id} fired by ${Object.keys(cause)[0]}`, {
        jobId: job.id,
        executionId: e.id,
        ...cause,
      });
    }
    this.onCreated();
  }
}
