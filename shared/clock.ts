/**
 * Clocks are injected everywhere time matters, so tests drive time by hand and a wall-clock jump
 * can be simulated. Wheels run on the monotonic clock; protocol timestamps are wall time.
 */

/** An opaque timer handle returned by {@link Clock.setTimer}. */
export type TimerHandle = { readonly __timer: unique symbol } | object;

/** Time and timers, injectable. */
export interface Clock {
  /** Monotonic milliseconds (fractions allowed); never jumps. */
  monoNow(): number;
  /** Wall-clock UTC milliseconds; may jump when the system clock is set. */
  wallNow(): number;
  /**
   * Calls `callback` once after at least about `delayMs` (Node may fire up to ~1 ms early), or
   * after 2^31 - 1 ms (24.8 days) for a longer delay: the caller checks the time when it fires.
   */
  setTimer(callback: () => void, delayMs: number): TimerHandle;
  /** Cancels a timer; `undefined` (no timer armed) is a no-op, so callers need not check. */
  clearTimer(timer: TimerHandle | undefined): void;
}

/** The real clocks: `performance.now()`, `Date.now()` and Node timers. */
export const systemClock: Clock = {
  monoNow: () => performance.now(),
  wallNow: () => Date.now(),
  // Node runs a delay past 2^31 - 1 ms (24.8 days) after 1 ms: such a timer fires at 24.8 days
  // instead, early, and its caller looks at the time again (the wheel re-arms).
  setTimer: (callback, delayMs) =>
    setTimeout(callback, Math.min(Math.max(0, delayMs), 2_147_483_647)) as TimerHandle,
  clearTimer: (timer) => clearTimeout(timer as unknown as NodeJS.Timeout),
};

interface FakeTimer {
  id: number;
  at: number;
  callback: () => void;
}

/**
 * A clock for tests: time moves only when {@link FakeClock.advance} is called, and timers fire in
 * order of their due time while it does. `jumpWall` moves the wall clock alone.
 */
export class FakeClock implements Clock {
  private mono: number;
  private wallOffset: number;
  private nextId = 1;
  private timers = new Map<number, FakeTimer>();

  constructor(options: { mono?: number; wall?: number } = {}) {
    this.mono = options.mono ?? 1000;
    this.wallOffset = (options.wall ?? 1_700_000_000_000) - this.mono;
  }

  monoNow(): number {
    return this.mono;
  }

  wallNow(): number {
    return this.mono + this.wallOffset;
  }

  setTimer(callback: () => void, delayMs: number): TimerHandle {
    const timer: FakeTimer = { id: this.nextId++, at: this.mono + Math.max(0, delayMs), callback };
    this.timers.set(timer.id, timer);
    return { id: timer.id };
  }

  clearTimer(timer: TimerHandle | undefined): void {
    if (timer !== undefined) this.timers.delete((timer as { id: number }).id);
  }

  /** Number of timers waiting. */
  get pendingTimers(): number {
    return this.timers.size;
  }

  /** Moves time forward by `ms`, firing every timer that comes due, earliest first. */
  advance(ms: number): void {
    const target = this.mono + ms;
    for (;;) {
      let next: FakeTimer | undefined;
      for (const t of this.timers.values()) {
        if (
          t.at <= target &&
          (next === undefined || t.at < next.at || (t.at === next.at && t.id < next.id))
        ) {
          next = t;
        }
      }
      if (next === undefined) break;
      this.timers.delete(next.id);
      this.mono = Math.max(this.mono, next.at);
      next.callback();
    }
    this.mono = target;
  }

  /** Moves the wall clock alone (a system clock change); the monotonic clock is untouched. */
  jumpWall(ms: number): void {
    this.wallOffset += ms;
  }
}
