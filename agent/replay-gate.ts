import type { Clock, TimerHandle } from "../shared/clock.js";

/** Default of the least time between two replays of the outbox. */
export const REPLAY_MIN_INTERVAL_MS = 500;

/**
 * Rate-limits re-sending the outbox. A coordinator asks for a replay (`ack` with `replay: true`)
 * when it sees a gap; a burst of such requests (one per report beyond the gap, or a hostile
 * peer) must not make the agent re-send its whole outbox each time. A request inside the window
 * after a replay is not dropped: all of them together become one replay at the window's end, so
 * the last request is always answered with the outbox as it is then.
 */
export class ReplayGate {
  private lastAt = Number.NEGATIVE_INFINITY;
  private timer: TimerHandle | undefined;
  private closed = false;
  /** Replays run, and requests folded into a later one (for the agent's stats). */
  readonly counts = { replays: 0, coalesced: 0 };

  constructor(
    private readonly clock: Clock,
    private readonly replay: () => void,
    private readonly minIntervalMs = REPLAY_MIN_INTERVAL_MS,
  ) {}

  /** Replays now, or once at the end of the current window if one ran less than the interval ago. */
  request(): void {
    if (this.closed) return;
    if (this.timer !== undefined) {
      this.counts.coalesced++;
      return;
    }
    const wait = this.lastAt + this.minIntervalMs - this.clock.monoNow();
    if (wait <= 0) {
      this.run();
      return;
    }
    this.counts.coalesced++;
    this.timer = this.clock.setTimer(() => {
      this.timer = undefined;
      this.run();
    }, wait);
  }

  /** Notes a replay made outside the gate (on a welcome), so a request right after it waits. */
  ran(): void {
    this.lastAt = this.clock.monoNow();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timer = undefined;
  }

  private run(): void {
    if (this.closed) return;
    this.lastAt = this.clock.monoNow();
    this.counts.replays++;
    this.replay();
  }
}
