import type { Clock } from "../shared/clock.js";
import type { ClockSync } from "../shared/clock-sync.js";

/**
 * The agent's idea of coordinator time. It is built on the monotonic clock, anchored to the wall
 * clock once at start, plus the NTP-style offset estimate: a later jump of the device's wall
 * clock (an NTP step, a user setting the date) moves nothing, so a command never fires early or
 * late because of it. Only the offset estimate moves it, when a better clock sample comes.
 */
export class AgentTime {
  /** Local time = monoNow() + base (wall time as it was at start, advancing monotonically). */
  private readonly base: number;

  constructor(
    private readonly clock: Clock,
    private readonly sync: ClockSync,
  ) {
    this.base = clock.wallNow() - clock.monoNow();
  }

  /** This agent's local time: monotonic, anchored to the wall clock at start. */
  localNow(): number {
    return this.clock.monoNow() + this.base;
  }

  /** Coordinator time now, as estimated (rule 4). */
  coordNow(): number {
    return this.localNow() + this.sync.offsetMs;
  }

  /** The monotonic time at which the coordinator's clock will read `coordTime`. */
  toMono(coordTime: number): number {
    return coordTime - this.base - this.sync.offsetMs;
  }
}
