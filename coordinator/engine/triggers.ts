import { paramsSchema } from "../domain/job.js";
import type { StoredJob } from "../store/port.js";
import type { EngineContext } from "./context.js";
import type { EngineEvents } from "./events.js";
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
      const params = { ...job.definition.params, ...payload };
      const misfit = paramsMisfit(params);
      if (misfit !== undefined) {
        // No agent could read its dispatch: it would fail undelivered, saying nothing.
        await this.ctx.store.bumpCounter("events_refused");
        this.ctx.log(
          "warn",
          `event "${name}" does not fire job "${job.id}": its payload merged into the job's params ${misfit}`,
          { jobId: job.id, event: name },
        );
        continue;
      }
      await this.create(job, params, { event: name, msgId });
      fired++;
    }
    if (fired === 0) await this.ctx.store.bumpCounter("events_without_jobs");
    return fired;
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
      await this.create(job, params, { after: e.executionId });
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
