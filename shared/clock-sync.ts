import type { ClockSample } from "./protocol/session.js";

/** One NTP-style measurement: the offset to add to local time, and the round trip it took. */
export interface OffsetSample {
  offsetMs: number;
  rttMs: number;
}

/**
 * Estimates the offset from the agent's local timeline to the coordinator's clock from the four
 * NTP timestamps, keeping the minimum-round-trip sample of a sliding window (the one least
 * disturbed by queueing). Until the first sample the offset is 0 (rule 4).
 */
export class ClockSync {
  private readonly window: OffsetSample[] = [];
  /** The offset each outgoing message was stamped with, keyed by its `sentAt` (rule 12). */
  private readonly stamped = new Map<number, number>();
  private best: OffsetSample | undefined;

  constructor(private readonly windowSize = 8) {}

  /** The current offset estimate (coordinator time = local time + offset). */
  get offsetMs(): number {
    return this.best?.offsetMs ?? 0;
  }

  /** Half the round trip of the sample in use: the true offset lies within ± this. */
  get uncertaintyMs(): number {
    return this.best ? this.best.rttMs / 2 : 0;
  }

  get sampleCount(): number {
    return this.window.length;
  }

  /** Notes that a message stamped `sentAt` (coordinator time) was sent with the current offset. */
  stamp(sentAt: number): void {
    this.stamped.set(sentAt, this.offsetMs);
    if (this.stamped.size > 64) {
      const oldest = this.stamped.keys().next().value;
      if (oldest !== undefined) this.stamped.delete(oldest);
    }
  }

  /**
   * Adds a sample from a welcome or time answer received at local time `localT3`. Returns false
   * when t0 matches no message this process stamped (a stale or foreign answer).
   */
  addSample(clock: ClockSample, localT3: number): boolean {
    const offsetAtT0 = this.stamped.get(clock.t0);
    if (offsetAtT0 === undefined) return false;
    this.stamped.delete(clock.t0);
    const localT0 = clock.t0 - offsetAtT0;
    const rttMs = Math.max(0, localT3 - localT0 - (clock.t2 - clock.t1));
    const offsetMs = (clock.t1 - localT0 + (clock.t2 - localT3)) / 2;
    this.window.push({ offsetMs, rttMs });
    if (this.window.length > this.windowSize) this.window.shift();
    this.best = this.window.reduce((a, b) => (b.rttMs < a.rttMs ? b : a));
    return true;
  }
}
