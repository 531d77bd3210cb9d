import { TimingWheel } from "../../shared/wheel.js";
import type { JobDefinition } from "../domain/job.js";
import { planMisfire } from "../domain/misfire.js";
import { nextFireAfter } from "../domain/schedule.js";
import type { EngineContext } from "./context.js";
import { jobExecutions } from "./job-executions.js";

interface PlannedFire {
  jobId: string;
  scheduledFor: number;
}

/**
 * Fires being recorded at once, at most; the wheel's others wait in a queue (a job id and a
 * time each) and fire, by their misfire policy, as slots free. Unbounded, a store slower than
 * the rate held every fire's job and executions in memory: at 5,000 fires/s on a PostgreSQL that
 * recorded 1,100 a second, the coordinator ran out of heap in seconds, and the fires took every
 * write slot from the dispatcher, so nothing was dispatched either.
 */
export const MAX_FIRES_IN_FLIGHT = 512;

/**
 * On PostgreSQL, fires are made on a grid of this many ms of the monotonic clock, up to that much
 * before they are due, so that the fires due close together are made in one turn: their jobs are
 * read by one statement, their fire rows written by one, and the dispatcher takes them in one
 * pass. Made one by one at their exact times, at 2,000 fires/s each wheel turn made about five,
 * and the jobs' reads were 37 to 39 % of the coordinator's statements; on the grid, one read per
 * 40 fires. The execution is still created its dispatch lead ahead (20 ms more at most), and its
 * agent still starts it at its fire time. On SQLite, whose reads and writes are calls in this
 * process, the grid saved nothing a bench could tell at 2,000/s and carried fewer at 5,000/s
 * (docs/benchmarks.md): there fires are made at their due time.
 */
export const FIRE_GRID_MS = 20;

/** `dueMono` brought forward onto a grid of `gridMs` (never later); as it is when 0. */
export function onFireGrid(dueMono: number, gridMs = FIRE_GRID_MS): number {
  return gridMs > 0 ? Math.floor(dueMono / gridMs) * gridMs : dueMono;
}

/**
 * Turns job triggers into executions. The store's indexed next fire time is the truth; a 100 ms
 * wheel holds only fires due within the look-ahead window and is rebuilt by a periodic scan, so a
 * restart loses nothing. Each fire is recorded exactly once by the store's compare-and-set.
 */
export class FiringLoop {
  private readonly wheel: TimingWheel<PlannedFire>;
  private readonly planned = new Map<string, number>();
  /**
   * Fires being recorded. A scan that reads the job before that commits still sees the time
   * unfired, and planning it again fired it a second time at once, which waited for the first's
   * row lock only to find it taken (harmless, the compare-and-set holds, but a second round of
   * reads and writes for every fire a scan overlapped).
   */
  private readonly firing = new Set<string>();
  /** Fires due while {@link MAX_FIRES_IN_FLIGHT} were being recorded, in their order. */
  private readonly waiting: (PlannedFire | undefined)[] = [];
  private waitingHead = 0;
  private scanTimer: ReturnType<EngineContext["clock"]["setTimer"]> | undefined;
  private scanning: Promise<void> | undefined;
  private pendingScan: Promise<void> | undefined;
  private closed = false;
  private started = false;
  /** Told after a job's fires were recorded, with the job's definition. */
  onFired: (def: JobDefinition) => void = () => {};
  /**
   * Whether this coordinator fires the job: all of them on a store of its own; among several
   * coordinators, its share (Membership.firesJob). Asked when a fire is planned and again when
   * it comes due, so a job whose owner moved meanwhile is left to the new one.
   */
  owns: (jobId: string) => boolean = () => true;

  /** The grid fires are made on: {@link FIRE_GRID_MS} on PostgreSQL, none on SQLite. */
  private readonly gridMs: number;

  constructor(private readonly ctx: EngineContext) {
    this.gridMs = ctx.config.store.url === undefined ? 0 : FIRE_GRID_MS;
    this.wheel = new TimingWheel<PlannedFire>((fire) => this.fire(fire), {
      clock: ctx.clock,
      tickMs: 100,
      slots: 600,
      onError: (err) => ctx.log("error", `firing wheel: ${(err as Error).message}`),
    });
  }

  /** Starts the periodic scan; a second call does nothing. */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.scheduleScan(0);
  }

  /** Re-reads due jobs now (after a job was added or changed). */
  async rescan(): Promise<void> {
    await this.scan();
  }

  /**
   * Fires a job's next nominal time now if it is already due (a job just resumed, whose next fire
   * time passed while it was paused), by the same path as the wheel; then rescans. Every nominal
   * time up to now goes to the job's misfire policy, however little it was missed by: the
   * threshold that lets a busy coordinator fire a time a few seconds late as on time is not for
   * a pause, whose times would otherwise fire one by one whatever the policy. Resolves once the
   * fire is recorded, so the job's next fire time is the one after now.
   */
  async fireIfDue(jobId: string): Promise<void> {
    const job = await this.ctx.store.getJob(jobId);
    if (
      job &&
      !job.paused &&
      job.nextFireAt !== null &&
      job.nextFireAt <= this.ctx.clock.wallNow()
    ) {
      await this.fireAsync({ jobId, scheduledFor: job.nextFireAt }, 0);
    }
    await this.scan();
  }

  private scheduleScan(delayMs: number): void {
    if (this.closed) return;
    this.scanTimer = this.ctx.clock.setTimer(() => {
      this.scan()
        .catch((err: unknown) =>
          this.ctx.log("error", `firing scan failed: ${(err as Error).message}`),
        )
        .finally(() => this.scheduleScan(this.ctx.config.lookAheadMs / 2));
    }, delayMs);
  }

  /**
   * Scans are coalesced: at most one runs, and callers arriving meanwhile share one more that
   * starts when it ends. (Chaining one scan per caller let scans pile up faster than they ran.)
   */
  private scan(): Promise<void> {
    if (this.pendingScan) return this.pendingScan;
    const run = (this.scanning ?? Promise.resolve()).then(() => {
      this.pendingScan = undefined;
      return this.scanOnce();
    });
    this.pendingScan = run;
    // Settled either way: the caller of `run` is told of a failure, and the next scan runs after
    // this one whether it failed or not. (`run.finally` alone rejected with `run`, unhandled,
    // which ended the process, and made the next scan fail with this one's error.)
    this.scanning = run
      .then(
        () => {},
        () => {},
      )
      .finally(() => {
        if (this.scanning === tracked) this.scanning = undefined;
      });
    const tracked = this.scanning;
    return run;
  }

  private async scanOnce(): Promise<void> {
    const { clock, config } = this.ctx;
    const wallNow = clock.wallNow();
    // Only ids and times: a definition is read when its fire comes, not for every job in view.
    const due = await this.ctx.store.listDueFires(
      wallNow + config.dispatchLeadMs + config.lookAheadMs,
    );
    const leads = new Map<string, number>();
    for (const l of await this.ctx.store.listLeadFires()) {
      leads.set(l.jobId, l.leadMs);
      if (l.nextFireAt - l.leadMs <= wallNow + config.lookAheadMs) {
        this.plan(l.jobId, l.nextFireAt, wallNow, l.leadMs);
      }
    }
    this.leads = leads;
    for (const d of due) {
      if (!leads.has(d.jobId)) this.plan(d.jobId, d.nextFireAt, wallNow);
    }
  }

  /** The jobs with a dispatch lead of their own, as the last scan found them. */
  private leads = new Map<string, number>();

  private plan(
    jobId: string,
    nextFireAt: number | null,
    wallNow: number,
    leadMs = this.leads.get(jobId) ?? this.ctx.config.dispatchLeadMs,
  ): void {
    // A scan or fire that was awaiting the store when the loop closed (stopped, or fenced) plans
    // nothing: the wheel is closed.
    if (nextFireAt === null || this.closed || !this.owns(jobId)) return;
    const key = `${jobId}\u0000${nextFireAt}`;
    if (this.planned.has(key) || this.firing.has(key)) return;
    // Fire `dispatchLead` early (the job's own, or the coordinator's): the execution is created
    // and dispatched ahead of its nominal time, and the agent starts it from its own wheel at
    // exactly `fireAt`.
    const dueWall = nextFireAt - leadMs;
    const dueMono = onFireGrid(this.ctx.clock.monoNow() + (dueWall - wallNow), this.gridMs);
    const handle = this.wheel.schedule(dueMono, { jobId, scheduledFor: nextFireAt });
    this.planned.set(key, handle);
  }

  private fire(p: PlannedFire): void {
    const key = `${p.jobId}\u0000${p.scheduledFor}`;
    this.planned.delete(key);
    if (!this.owns(p.jobId)) return;
    this.firing.add(key);
    if (this.firing.size - (this.waiting.length - this.waitingHead) > MAX_FIRES_IN_FLIGHT) {
      this.waiting.push(p);
      return;
    }
    this.record(p, key);
  }

  private record(p: PlannedFire, key: string): void {
    this.fireAsync(p)
      .catch((err: unknown) =>
        this.ctx.log("error", `firing ${p.jobId} failed: ${(err as Error).message}`, {
          jobId: p.jobId,
        }),
      )
      .finally(() => {
        this.firing.delete(key);
        const next = this.waiting[this.waitingHead];
        if (next === undefined || this.closed) return;
        this.waiting[this.waitingHead++] = undefined;
        if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waiting.length) {
          this.waiting.splice(0, this.waitingHead);
          this.waitingHead = 0;
        }
        this.record(next, `${next.jobId}\u0000${next.scheduledFor}`);
      });
  }

  /** Fires waiting for a slot (see {@link MAX_FIRES_IN_FLIGHT}). */
  get queuedFires(): number {
    return this.waiting.length - this.waitingHead;
  }

  private async fireAsync(
    p: PlannedFire,
    thresholdMs = this.ctx.config.misfireThresholdMs,
  ): Promise<void> {
    const { store, clock, config } = this.ctx;
    const job = await store.getJob(p.jobId);
    if (!job || job.nextFireAt !== p.scheduledFor || job.paused) return;
    const now = clock.wallNow();
    const def = job.definition;
    // The wheel fires `dispatchLead` early, so "late" is measured against the nominal time.
    const plan = planMisfire(
      p.scheduledFor,
      Math.max(now, p.scheduledFor),
      (t) => nextFireAfter(def.trigger, t),
      {
        policy: def.misfire.policy,
        maxCatchUp: def.misfire.maxCatchUp,
        windowMs: def.misfire.windowMs,
        thresholdMs,
        enumerateMax: 1000,
      },
    );
    const fires = plan.fire.map((scheduledFor) => {
      // A fire decided late fires now; one on time keeps its nominal time.
      const fireAt = plan.misfired ? now : scheduledFor;
      return { scheduledFor, executions: jobExecutions(job, fireAt, now) };
    });
    const missedCount = plan.missed.length + plan.missedUncounted;
    const missed =
      missedCount > 0
        ? {
            jobId: job.id,
            scheduledFor: plan.missed,
            uncounted: plan.missedUncounted,
            policy: def.misfire.policy,
            at: now,
          }
        : undefined;
    // Their alerts are written with the missed fires, so that neither is recorded without the other.
    const alerts = missed ? this.ctx.transitionAlerts?.missed(missed) : undefined;
    const recorded = await store.recordFires({
      jobId: job.id,
      expectedNext: p.scheduledFor,
      nextFireAt: plan.nextFireAt,
      fires,
      missed: plan.missed,
      at: now,
      ...(this.ctx.coordinatorId === undefined ? {} : { by: this.ctx.coordinatorId }),
      ...(alerts?.length ? { alerts } : {}),
      ...(missedCount > 0 ? { missedCount } : {}),
    });
    if (recorded) {
      for (const f of fires) {
        const first = f.executions[0];
        if (first) {
          this.ctx.events.emit("fired", {
            jobId: job.id,
            scheduledFor: f.scheduledFor,
            executionId: first.id,
            at: now,
            late: plan.misfired,
          });
        }
      }
      if (missed) {
        if (alerts?.length) store.afterCommit(() => this.ctx.transitionAlerts?.recorded(alerts));
        this.ctx.events.emit("missed", missed);
        this.ctx.log(
          "warn",
          `job ${job.id}: ${missedCount} fire(s) missed, policy ${def.misfire.policy}`,
          {
            jobId: job.id,
            fired: plan.fire.length,
          },
        );
      }
      if (fires.length > 0) this.onFired(def);
      // The job's next fire, if it is within the look-ahead, goes on the wheel now; the periodic
      // scan finds it otherwise. (Rescanning after every fire cost O(rate) per fire.)
      const wallNow = clock.wallNow();
      const lead = def.dispatchLead ?? config.dispatchLeadMs;
      if (plan.nextFireAt !== null && plan.nextFireAt - lead <= wallNow + config.lookAheadMs) {
        this.plan(job.id, plan.nextFireAt, wallNow, lead);
      }
    }
  }

  close(): void {
    this.closed = true;
    if (this.scanTimer !== undefined) this.ctx.clock.clearTimer(this.scanTimer);
    this.wheel.close();
  }
}
