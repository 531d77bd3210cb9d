import type { TimerHandle } from "../../shared/clock.js";
import type { EngineContext } from "./context.js";

/** Executions deleted per store call: each call is one short transaction. */
export const RETENTION_BATCH = 500;

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/**
 * Retention (DESIGN §6): purges finished executions, their timelines and old fire records once
 * they are `retentionDays` old, so the store never grows without bound. A pass runs every
 * min(1 h, retention / 24) and deletes in batches of {@link RETENTION_BATCH}, yielding to the clock
 * between batches until one comes back short, so a large backlog never holds up scheduling.
 */
export class RetentionLoop {
  private timer: TimerHandle | undefined;
  /** The yield between two batches, so that `close` can end it. */
  private pause: { timer: TimerHandle; resume: () => void } | undefined;
  private running: Promise<number> | undefined;
  private closed = false;

  constructor(private readonly ctx: EngineContext) {}

  /** How long between passes. */
  get intervalMs(): number {
    return Math.min(HOUR_MS, (this.ctx.config.retentionDays * DAY_MS) / 24);
  }

  /** Runs a pass now (a restart may follow a long outage), then one every {@link intervalMs}. */
  start(): void {
    this.arm(0);
  }

  /**
   * Purges everything past the retention age as of now; returns how many executions went. A call
   * during a pass joins it. After `close` it stops at the next batch boundary.
   */
  runOnce(): Promise<number> {
    this.running ??= this.purge().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** Resolves when the pass in progress, if any, has ended (its outcome is the caller's). */
  async idle(): Promise<void> {
    await this.running?.catch(() => {});
  }

  private arm(delayMs: number): void {
    if (this.closed) return;
    this.timer = this.ctx.clock.setTimer(() => {
      this.timer = undefined;
      this.runOnce()
        .catch((err: unknown) =>
          this.ctx.log("error", `retention pass failed: ${(err as Error).message}`),
        )
        .finally(() => this.arm(this.intervalMs));
    }, delayMs);
  }

  private async purge(): Promise<number> {
    const { clock, config, store } = this.ctx;
    // One cutoff for the whole pass, so it ends even while new executions keep finishing.
    const cutoff = clock.wallNow() - config.retentionDays * DAY_MS;
    let total = 0;
    while (!this.closed) {
      const deleted = await store.purgeFinishedBefore(cutoff, RETENTION_BATCH);
      total += deleted;
      if (deleted < RETENTION_BATCH) break;
      await this.yieldToClock();
    }
    if (total > 0) {
      this.ctx.log("info", `retention purged ${total} executions`, { purged: total, cutoff });
    }
    return total;
  }

  /** Lets timers and I/O due meanwhile run before the next batch (setImmediate on the real clock). */
  private yieldToClock(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = this.ctx.clock.setTimer(() => {
        this.pause = undefined;
        resolve();
      }, 0);
      this.pause = { timer, resume: resolve };
    });
  }

  /** Stops the loop: clears its timer and ends a pass in progress at its next batch boundary. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.ctx.clock.clearTimer(this.timer);
    this.timer = undefined;
    if (this.pause !== undefined) {
      this.ctx.clock.clearTimer(this.pause.timer);
      this.pause.resume();
      this.pause = undefined;
    }
  }
}
