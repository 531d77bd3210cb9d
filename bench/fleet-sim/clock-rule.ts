import { ClockSync } from "../../shared/clock-sync.js";
import type { ClockSample } from "../../shared/protocol/session.js";

/** Samples an estimate needs before it stops asking (docs/protocol.md, "How often a sample"). */
const MIN_SAMPLES = 4;
/** Age of the estimate's sample at which its bound has aged by 1 ms (50 ppm) and it asks again. */
const MAX_SAMPLE_AGE_MS = 20_000;

/**
 * A {@link ClockSync} plus the reference agent's rule for `heartbeat.time`: ask while it holds
 * fewer than 4 samples, while a sample it set aside waits to be confirmed or refuted, and once the
 * estimate's sample is 20 s old. ClockSync does not say which sample it chose or set aside, so
 * this works it out from the sample's own offset: the estimate moved to it (chosen), it agrees
 * with the estimate (kept as a candidate), or neither (set aside).
 */
export class SimClock {
  readonly sync = new ClockSync();
  /** Offset each stamped message was sent with, by sentAt, as ClockSync keeps it. */
  private readonly stamped = new Map<number, number>();
  private estimateAt = Number.NEGATIVE_INFINITY;
  private setAside = false;

  get offsetMs(): number {
    return this.sync.offsetMs;
  }

  get uncertaintyMs(): number {
    return this.sync.uncertaintyMs;
  }

  stamp(sentAt: number): void {
    this.sync.stamp(sentAt);
    this.stamped.set(sentAt, this.sync.offsetMs);
    if (this.stamped.size > 8) {
      const oldest = this.stamped.keys().next().value;
      if (oldest !== undefined) this.stamped.delete(oldest);
    }
  }

  /** Adds a welcome's or time's sample received at local time `localT3`. */
  addSample(clock: ClockSample, localT3: number): void {
    const offsetAtT0 = this.stamped.get(clock.t0);
    this.stamped.delete(clock.t0);
    if (!this.sync.addSample(clock, localT3) || offsetAtT0 === undefined) return;
    const localT0 = clock.t0 - offsetAtT0;
    const offset = (clock.t1 - localT0 + (clock.t2 - localT3)) / 2;
    const halfRtt = Math.max(0, localT3 - localT0 - (clock.t2 - clock.t1)) / 2;
    if (this.sync.offsetMs === offset) {
      this.estimateAt = localT3;
      this.setAside = false;
    } else {
      this.setAside = Math.abs(offset - this.sync.offsetMs) > halfRtt + this.sync.uncertaintyMs + 1;
    }
  }

  /** Whether the next heartbeat should say `time: true`. */
  wantsSample(localNow: number): boolean {
    return (
      this.sync.sampleCount < MIN_SAMPLES ||
      this.setAside ||
      localNow - this.estimateAt >= MAX_SAMPLE_AGE_MS
    );
  }
}
