import { describe, expect, it } from "vitest";
import { seededRandom } from "../test/helpers/random.js";
import { type Clock, FakeClock, systemClock, type TimerHandle } from "./clock.js";
import { TimingWheel, type WheelOptions } from "./wheel.js";

interface Fire<T> {
  payload: T;
  due: number;
  now: number;
  /** What the clock said inside the callback (checks the `now` the wheel passes). */
  clockNow: number;
  /** Which timer turn fired it (counted by the {@link TestClock}). */
  turn: number;
}

/**
 * A FakeClock wrapper that counts timer turns, tracks how many timers are armed at once, and can
 * make timers fire early or late by rewriting their delay.
 */
class TestClock implements Clock {
  turns = 0;
  timersSet = 0;
  maxArmed = 0;
  constructor(
    readonly fake: FakeClock,
    private readonly mapDelay: (delayMs: number) => number = (d) => d,
  ) {}
  monoNow(): number {
    return this.fake.monoNow();
  }
  wallNow(): number {
    return this.fake.wallNow();
  }
  setTimer(callback: () => void, delayMs: number): TimerHandle {
    this.timersSet++;
    const handle = this.fake.setTimer(() => {
      this.turns++;
      callback();
    }, this.mapDelay(delayMs));
    this.maxArmed = Math.max(this.maxArmed, this.fake.pendingTimers);
    return handle;
  }
  clearTimer(timer: TimerHandle | undefined): void {
    this.fake.clearTimer(timer);
  }
}

function setup<T = number>(
  options: Partial<WheelOptions> = {},
  mapDelay?: (delayMs: number) => number,
) {
  const fake = new FakeClock();
  const clock = new TestClock(fake, mapDelay);
  const fires: Fire<T>[] = [];
  const wheel = new TimingWheel<T>(
    (payload, due, now) => {
      fires.push({ payload, due, now, clockNow: clock.monoNow(), turn: clock.turns });
    },
    { ...options, clock },
  );
  return { fake, clock, fires, wheel };
}

function expectAscendingDue<T>(fires: Fire<T>[]): void {
  for (let k = 1; k < fires.length; k++) {
    expect(fires[k]?.due).toBeGreaterThanOrEqual(fires[k - 1]?.due ?? Number.NaN);
  }
}

function expectNeverEarly<T>(fires: Fire<T>[]): void {
  expect(fires.filter((f) => f.now < f.due || f.clockNow < f.due)).toEqual([]);
  expect(fires.filter((f) => f.now !== f.clockNow)).toEqual([]);
}

describe("TimingWheel timing", () => {
  it("fires at due and never before, while time moves in small steps", () => {
    const { fake, clock, fires, wheel } = setup<string>();
    const start = fake.monoNow();
    const dues = [5, 20.5, 33, 39.999, 40, 41, 100, 999, 1000.25].map((d) => start + d);
    for (const d of dues) wheel.schedule(d, `at ${d}`);
    expect(wheel.size).toBe(dues.length);
    for (let t = 0; t < 1100; t += 0.25) {
      fake.advance(0.25);
      const now = fake.monoNow();
      // Everything due by now has fired, and nothing else.
      expect(fires.length).toBe(dues.filter((d) => d <= now).length);
      expect(clock.fake.pendingTimers).toBeLessThanOrEqual(1);
    }
    expect(fires.map((f) => f.due)).toEqual(dues);
    expectNeverEarly(fires);
    // FakeClock fires timers at their exact time, so each entry fired exactly at its due.
    for (const f of fires) expect(f.now).toBe(f.due);
    expect(wheel.size).toBe(0);
  });

  it("is precise to the due time, not to the tick", () => {
    const { fake, fires, wheel } = setup({ tickMs: 100 });
    const due = fake.monoNow() + 137.5;
    wheel.schedule(due, 1);
    fake.advance(137);
    expect(fires).toHaveLength(0);
    fake.advance(0.5);
    expect(fires.map((f) => [f.payload, f.due, f.now])).toEqual([[1, due, due]]);
  });

  it.each([
    { lateBy: 0, turns: 200 },
    { lateBy: 50, turns: 1 },
  ])(
    "fires many entries of one slot in due order (timers late by $lateBy ms)",
    ({ lateBy, turns }) => {
      const { fake, clock, fires, wheel } = setup({ tickMs: 20 }, (d) => d + lateBy);
      const rnd = seededRandom(1);
      const base = fake.monoNow() + 200; // one slot: [base, base + 20)
      const dues = Array.from({ length: 200 }, (_, k) => base + (k + rnd()) / 10);
      dues.sort(() => rnd() - 0.5);
      for (const d of dues) wheel.schedule(d, d);
      fake.advance(300);
      expect(fires).toHaveLength(200);
      expectNeverEarly(fires);
      expect(fires.map((f) => f.due)).toEqual([...dues].sort((a, b) => a - b));
      expect(clock.turns).toBe(turns);
    },
  );

  it("catches up after a big advance, in due order", () => {
    const { fake, fires, wheel } = setup({ tickMs: 20, slots: 16 });
    const rnd = seededRandom(2);
    const dues = Array.from({ length: 500 }, () => fake.monoNow() + rnd() * 20_000);
    for (const d of dues) wheel.schedule(d, d);
    fake.advance(25_000);
    expect(fires).toHaveLength(500);
    expectAscendingDue(fires);
    expectNeverEarly(fires);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
  });

  it("catches up after a blocked event loop: every slot passed, one sorted batch", () => {
    // Timers fire 30 s late, as if the event loop had been blocked that long.
    const { fake, clock, fires, wheel } = setup({ tickMs: 20, slots: 16 }, (d) => d + 30_000);
    const rnd = seededRandom(3);
    const start = fake.monoNow();
    // Spans many revolutions (one is 320 ms), so some entries sit in overflow.
    const dues = Array.from({ length: 300 }, () => start + rnd() * 10_000);
    dues.push(start - 5, start);
    for (const d of dues) wheel.schedule(d, d);
    fake.advance(29_999);
    expect(fires).toHaveLength(0);
    fake.advance(1);
    expect(fires).toHaveLength(dues.length);
    expect(new Set(fires.map((f) => f.turn)).size).toBe(1);
    expectAscendingDue(fires);
    expectNeverEarly(fires);
    expect(clock.turns).toBe(1);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
  });

  it("never fires early when setTimer fires 2 ms early", () => {
    // Like Node: up to 2 ms early, but never less than 1 ms after being set.
    const { fake, clock, fires, wheel } = setup({ tickMs: 20, slots: 8 }, (d) =>
      Math.max(1, d - 2),
    );
    const rnd = seededRandom(4);
    const start = fake.monoNow();
    const dues = Array.from({ length: 100 }, () => start + rnd() * 2_000);
    for (const d of dues) wheel.schedule(d, d);
    for (let t = 0; t < 2_100; t += 0.5) fake.advance(0.5);
    expect(fires).toHaveLength(100);
    expectNeverEarly(fires);
    expectAscendingDue(fires);
    // Late only by the wrapper's 1 ms minimum delay for the remainder.
    for (const f of fires) expect(f.now - f.due).toBeLessThanOrEqual(1);
    // The early timers really happened: the wheel had to re-arm for the remainder.
    expect(clock.timersSet).toBeGreaterThan(100);
    expect(fake.pendingTimers).toBe(0);
  });

  it("fires entries already due on the next turn, never inside schedule()", () => {
    const { fake, clock, fires, wheel } = setup<string>();
    const now = fake.monoNow();
    wheel.schedule(now - 1_000, "past");
    wheel.schedule(now, "now");
    wheel.schedule(now - 0.5, "just past");
    expect(fires).toHaveLength(0);
    expect(wheel.size).toBe(3);
    expect(fake.pendingTimers).toBe(1);
    fake.advance(0);
    expect(fires.map((f) => f.payload)).toEqual(["past", "just past", "now"]);
    expect(clock.turns).toBe(1);
    expectNeverEarly(fires);
    expect(fake.pendingTimers).toBe(0);
  });
});

describe("TimingWheel overflow", () => {
  it.each([
    { slots: 8, tickMs: 20 },
    { slots: 512, tickMs: 20 },
    { slots: 64, tickMs: 100 },
  ])(
    "fires entries 3, 10 and 50 revolutions ahead exactly at due ($slots × $tickMs ms)",
    ({ slots, tickMs }) => {
      const { fake, clock, fires, wheel } = setup<number>({ slots, tickMs });
      const rev = slots * tickMs;
      const start = fake.monoNow();
      const dues = [3, 10, 50].map((n) => start + n * rev + 7.25);
      const handles = dues.map((d, k) => wheel.schedule(d, k));
      expect(wheel.size).toBe(3);
      expect(wheel.nextDue()).toBe(dues[0]);
      for (const h of handles) expect(wheel.has(h)).toBe(true);
      const step = rev / 40;
      for (let t = 0; t < 51 * rev; t += step) {
        fake.advance(step);
        const now = fake.monoNow();
        expect(fires.length).toBe(dues.filter((d) => d <= now).length);
      }
      expect(fires.map((f) => f.payload)).toEqual([0, 1, 2]);
      expectNeverEarly(fires);
      for (const f of fires) expect(f.now - f.due).toBeLessThan(1e-6);
      // Far entries do not wake the process every tick: a few turns per entry, not 50 revolutions'
      // worth of ticks.
      expect(clock.turns).toBeLessThan(20);
      expect(clock.maxArmed).toBe(1);
      expect(fake.pendingTimers).toBe(0);
    },
  );

  it("cancels an overflow entry", () => {
    const { fake, fires, wheel } = setup<string>({ slots: 8, tickMs: 20 });
    const start = fake.monoNow();
    const far = wheel.schedule(start + 10 * 160, "far");
    const farther = wheel.schedule(start + 20 * 160, "farther");
    expect(wheel.size).toBe(2);
    expect(wheel.cancel(far)).toBe(true);
    expect(wheel.cancel(far)).toBe(false);
    expect(wheel.has(far)).toBe(false);
    expect(wheel.size).toBe(1);
    fake.advance(15 * 160);
    expect(fires).toHaveLength(0);
    expect(wheel.cancel(farther)).toBe(true);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
    fake.advance(30 * 160);
    expect(fires).toHaveLength(0);
  });

  it("mixes overflow and wheel entries scheduled over time", () => {
    const { fake, fires, wheel } = setup({ slots: 8, tickMs: 20 });
    const rnd = seededRandom(5);
    const expected: number[] = [];
    for (let round = 0; round < 200; round++) {
      for (let k = 0; k < 5; k++) {
        const d = fake.monoNow() + rnd() * 5_000;
        expected.push(d);
        wheel.schedule(d, d);
      }
      fake.advance(rnd() * 50);
    }
    fake.advance(6_000);
    expect(fires.map((f) => f.due).sort((a, b) => a - b)).toEqual(expected.sort((a, b) => a - b));
    expectNeverEarly(fires);
    for (const f of fires) expect(f.now).toBeCloseTo(f.due, 6);
  });
});

describe("TimingWheel cancel and handles", () => {
  it("cancel before fire: never fires, size drops, second cancel is false", () => {
    const { fake, fires, wheel } = setup<string>();
    const now = fake.monoNow();
    const a = wheel.schedule(now + 50, "a");
    const b = wheel.schedule(now + 50, "b");
    expect(Number.isSafeInteger(a) && a > 0).toBe(true);
    expect(a).not.toBe(b);
    expect(wheel.size).toBe(2);
    expect(wheel.cancel(a)).toBe(true);
    expect(wheel.size).toBe(1);
    expect(wheel.has(a)).toBe(false);
    expect(wheel.cancel(a)).toBe(false);
    fake.advance(100);
    expect(fires.map((f) => f.payload)).toEqual(["b"]);
    expect(wheel.cancel(b)).toBe(false);
    expect(wheel.has(b)).toBe(false);
  });

  it("a stale handle never cancels the entry that reused its slot", () => {
    const { fake, fires, wheel } = setup<string>({ initialCapacity: 1 });
    const now = fake.monoNow();
    const old = wheel.schedule(now + 10, "old");
    expect(wheel.cancel(old)).toBe(true);
    const reused = wheel.schedule(now + 10, "new");
    expect(reused).not.toBe(old);
    expect(wheel.cancel(old)).toBe(false);
    expect(wheel.has(old)).toBe(false);
    expect(wheel.has(reused)).toBe(true);
    fake.advance(10);
    expect(fires.map((f) => f.payload)).toEqual(["new"]);
    // A fired entry's handle goes stale too.
    const again = wheel.schedule(now + 20, "again");
    expect(wheel.cancel(reused)).toBe(false);
    expect(wheel.has(again)).toBe(true);
    fake.advance(10);
    expect(fires.map((f) => f.payload)).toEqual(["new", "again"]);
  });

  it("rejects handles that were never issued", () => {
    const { fake, wheel } = setup();
    const h = wheel.schedule(fake.monoNow() + 10, 1);
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, h + 1, 2 ** 60, 3]) {
      expect(wheel.cancel(bad)).toBe(false);
      expect(wheel.has(bad)).toBe(false);
    }
    expect(wheel.size).toBe(1);
  });

  it("reports nextDue over wheel and overflow", () => {
    const { fake, wheel } = setup({ slots: 8, tickMs: 20 });
    expect(wheel.nextDue()).toBeUndefined();
    const now = fake.monoNow();
    const far = wheel.schedule(now + 5_000, 1);
    expect(wheel.nextDue()).toBe(now + 5_000);
    const near = wheel.schedule(now + 30, 2);
    expect(wheel.nextDue()).toBe(now + 30);
    wheel.cancel(near);
    expect(wheel.nextDue()).toBe(now + 5_000);
    wheel.cancel(far);
    expect(wheel.nextDue()).toBeUndefined();
  });
});

describe("TimingWheel turns", () => {
  it("splits a big batch across turns with maxBatch", () => {
    const { fake, clock, fires, wheel } = setup({ maxBatch: 10 });
    const due = fake.monoNow() + 100;
    for (let k = 0; k < 35; k++) wheel.schedule(due, k);
    fake.advance(100);
    expect(new Set(fires.map((f) => f.payload)).size).toBe(35);
    const sizes = [...new Set(fires.map((f) => f.turn))].map(
      (turn) => fires.filter((f) => f.turn === turn).length,
    );
    expect(sizes).toEqual([10, 10, 10, 5]);
    expect(clock.turns).toBe(4);
    // The continuation turns ran at once (delay 0), not a tick later.
    for (const f of fires) expect(f.now).toBe(due);
    expect(fake.pendingTimers).toBe(0);
  });

  it("fires at most maxBatch per turn when the loop was late", () => {
    const { fake, clock, fires, wheel } = setup({ maxBatch: 10 }, (d) =>
      // Late by a second, except the delay-0 continuation turns.
      d > 0 ? d + 1_000 : d,
    );
    const now = fake.monoNow();
    for (let k = 34; k >= 0; k--) wheel.schedule(now + 100 + k, k);
    fake.advance(2_000);
    expect(fires.map((f) => f.payload)).toEqual(Array.from({ length: 35 }, (_, k) => k));
    const sizes = [...new Set(fires.map((f) => f.turn))].map(
      (turn) => fires.filter((f) => f.turn === turn).length,
    );
    expect(sizes).toEqual([10, 10, 10, 5]);
    expect(clock.turns).toBe(4);
    expect(fake.pendingTimers).toBe(0);
  });

  it("reports a throwing callback to onError and keeps firing", () => {
    const errors: unknown[] = [];
    const fake = new FakeClock();
    const fired: string[] = [];
    const wheel = new TimingWheel<string>(
      (name) => {
        fired.push(name);
        if (name.startsWith("bad")) throw new Error(name);
      },
      { clock: fake, onError: (err) => errors.push(err) },
    );
    const now = fake.monoNow();
    wheel.schedule(now + 10, "a");
    wheel.schedule(now + 10, "bad1");
    wheel.schedule(now + 10, "b");
    wheel.schedule(now + 30, "bad2");
    wheel.schedule(now + 40, "c");
    fake.advance(50);
    expect(fired).toEqual(["a", "bad1", "b", "bad2", "c"]);
    expect(errors.map((e) => (e as Error).message)).toEqual(["bad1", "bad2"]);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
  });

  it("survives an onError that throws", () => {
    const fake = new FakeClock();
    const fired: number[] = [];
    const wheel = new TimingWheel<number>(
      (n) => {
        fired.push(n);
        throw new Error("callback");
      },
      {
        clock: fake,
        onError: () => {
          throw new Error("reporter");
        },
      },
    );
    wheel.schedule(fake.monoNow() + 1, 1);
    wheel.schedule(fake.monoNow() + 2, 2);
    fake.advance(5);
    expect(fired).toEqual([1, 2]);
  });

  it("lets callbacks schedule and cancel re-entrantly", () => {
    const fake = new FakeClock();
    const clock = new TestClock(fake);
    const log: { name: string; turn: number; now: number; due: number }[] = [];
    const handles = new Map<string, number>();
    const cancelResults: boolean[] = [];
    const wheel: TimingWheel<string> = new TimingWheel<string>(
      (name, due, now) => {
        log.push({ name, turn: clock.turns, now, due });
        if (name === "a") {
          // Same batch, not fired yet: must not fire.
          cancelResults.push(wheel.cancel(handles.get("c") ?? -1));
          // Itself: already fired.
          cancelResults.push(wheel.cancel(handles.get("a") ?? -1));
          // Due now: fires on the next turn, not inside this one.
          handles.set("d", wheel.schedule(now, "d"));
          handles.set("e", wheel.schedule(now + 5, "e"));
          handles.set("f", wheel.schedule(now + 100_000, "f"));
          expect(wheel.has(handles.get("b") ?? -1)).toBe(true);
        }
        if (name === "d") cancelResults.push(wheel.cancel(handles.get("f") ?? -1));
      },
      { clock },
    );
    const now = fake.monoNow();
    for (const name of ["a", "b", "c"]) handles.set(name, wheel.schedule(now + 10, name));
    expect(wheel.size).toBe(3);
    fake.advance(10);
    expect(log.map((l) => l.name)).toEqual(["a", "b", "d"]);
    expect(log[0]?.turn).toBe(log[1]?.turn);
    expect(log[2]?.turn).toBe((log[0]?.turn ?? 0) + 1);
    expect(cancelResults).toEqual([true, false, true]);
    expect(wheel.size).toBe(1);
    fake.advance(10);
    expect(log.map((l) => l.name)).toEqual(["a", "b", "d", "e"]);
    for (const l of log) expect(l.now).toBeGreaterThanOrEqual(l.due);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
    fake.advance(200_000);
    expect(log).toHaveLength(4);
  });

  it("can be closed from a callback", () => {
    const fake = new FakeClock();
    const fired: number[] = [];
    const wheel: TimingWheel<number> = new TimingWheel<number>(
      (n) => {
        fired.push(n);
        if (n === 2) wheel.close();
      },
      { clock: fake },
    );
    for (let n = 1; n <= 4; n++) wheel.schedule(fake.monoNow() + 10, n);
    fake.advance(10);
    expect(fired).toEqual([1, 2]);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
  });
});

describe("TimingWheel timers and lifecycle", () => {
  it("arms no timer while empty, exactly one while not", () => {
    const { fake, clock, wheel } = setup({ slots: 8 });
    expect(fake.pendingTimers).toBe(0);
    const now = fake.monoNow();
    const a = wheel.schedule(now + 50, 1);
    expect(fake.pendingTimers).toBe(1);
    wheel.schedule(now + 20, 2);
    wheel.schedule(now + 10_000, 3);
    expect(fake.pendingTimers).toBe(1);
    wheel.cancel(a);
    expect(fake.pendingTimers).toBe(1);
    fake.advance(20_000);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
    const b = wheel.schedule(fake.monoNow() + 10_000, 4);
    expect(fake.pendingTimers).toBe(1);
    wheel.cancel(b);
    expect(fake.pendingTimers).toBe(0);
    expect(clock.maxArmed).toBe(1);
  });

  it("restarts cleanly after being idle for a long time", () => {
    const { fake, fires, wheel } = setup<string>({ slots: 8, tickMs: 20 });
    wheel.schedule(fake.monoNow() + 5, "first");
    fake.advance(1_000_000);
    const due = fake.monoNow() + 33;
    wheel.schedule(due, "second");
    fake.advance(33);
    expect(fires.map((f) => [f.payload, f.now === f.due])).toEqual([
      ["first", true],
      ["second", true],
    ]);
  });

  it("close() clears the timer and drops pending entries", () => {
    const { fake, fires, wheel } = setup({ slots: 8 });
    const h = wheel.schedule(fake.monoNow() + 10, 1);
    wheel.schedule(fake.monoNow() + 100_000, 2);
    wheel.close();
    expect(fake.pendingTimers).toBe(0);
    expect(wheel.size).toBe(0);
    expect(wheel.has(h)).toBe(false);
    expect(wheel.cancel(h)).toBe(false);
    expect(wheel.nextDue()).toBeUndefined();
    fake.advance(200_000);
    expect(fires).toHaveLength(0);
    expect(() => wheel.schedule(fake.monoNow() + 1, 3)).toThrow(/close/);
  });

  it("validates options and due times", () => {
    const clock = new FakeClock();
    const noop = (): void => {};
    expect(() => new TimingWheel(noop, { clock, tickMs: 0 })).toThrow(RangeError);
    expect(() => new TimingWheel(noop, { clock, tickMs: Number.NaN })).toThrow(RangeError);
    expect(() => new TimingWheel(noop, { clock, slots: 0 })).toThrow(RangeError);
    expect(() => new TimingWheel(noop, { clock, slots: 1.5 })).toThrow(RangeError);
    expect(() => new TimingWheel(noop, { clock, initialCapacity: 0 })).toThrow(RangeError);
    expect(() => new TimingWheel(noop, { clock, maxBatch: 0 })).toThrow(RangeError);
    const wheel = new TimingWheel(noop, { clock });
    expect(() => wheel.schedule(Number.NaN, 1)).toThrow(RangeError);
    expect(() => wheel.schedule(Number.POSITIVE_INFINITY, 1)).toThrow(RangeError);
    expect(wheel.size).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it("works with one slot and with fractional ticks", () => {
    for (const options of [{ slots: 1, tickMs: 20 }, { tickMs: 0.1 }, { tickMs: 0.3, slots: 7 }]) {
      const { fake, fires, wheel } = setup(options);
      const rnd = seededRandom(6);
      const dues = Array.from({ length: 200 }, () => fake.monoNow() + rnd() * 500);
      for (const d of dues) wheel.schedule(d, d);
      for (let t = 0; t < 600; t += 0.7) fake.advance(0.7);
      expect(fires).toHaveLength(200);
      expectNeverEarly(fires);
      expectAscendingDue(fires);
      expect(fake.pendingTimers).toBe(0);
    }
  });
});

describe("TimingWheel pool", () => {
  it("grows past initialCapacity: 10k random entries each fire once, in order", () => {
    const { fake, fires, wheel } = setup({ initialCapacity: 16, tickMs: 20, slots: 64 });
    const rnd = seededRandom(7);
    const start = fake.monoNow();
    const handles: number[] = [];
    const dues: number[] = [];
    for (let k = 0; k < 10_000; k++) {
      const d = start + rnd() * 60_000;
      dues.push(d);
      handles.push(wheel.schedule(d, k));
    }
    expect(new Set(handles).size).toBe(10_000);
    expect(wheel.size).toBe(10_000);
    // Cancel every tenth; they must not fire.
    for (let k = 0; k < 10_000; k += 10) expect(wheel.cancel(handles[k] ?? -1)).toBe(true);
    expect(wheel.size).toBe(9_000);
    for (let t = 0; t < 61_000; t += 97) fake.advance(97);
    expect(fires).toHaveLength(9_000);
    const seen = new Set(fires.map((f) => f.payload));
    expect(seen.size).toBe(9_000);
    for (const k of seen) expect(k % 10).not.toBe(0);
    for (const f of fires) expect(f.due).toBe(dues[f.payload]);
    expectAscendingDue(fires);
    expectNeverEarly(fires);
    expect(wheel.size).toBe(0);
    expect(fake.pendingTimers).toBe(0);
  });

  it("reuses released entries instead of growing", () => {
    const { fake, fires, wheel } = setup({ initialCapacity: 4 });
    for (let round = 0; round < 100; round++) {
      const hs = [1, 2, 3, 4].map((n) => wheel.schedule(fake.monoNow() + n, n));
      expect(new Set(hs).size).toBe(4);
      fake.advance(5);
    }
    expect(fires).toHaveLength(400);
  });
});

describe("TimingWheel on the system clock", () => {
  it("fires ~50 entries 5–150 ms ahead, none early", async () => {
    const fires: { due: number; now: number; real: number }[] = [];
    const rnd = seededRandom(8);
    const count = 50;
    let resolveDone: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      resolveDone = resolve;
    });
    const wheel = new TimingWheel<number>(
      (_n, due, now) => {
        fires.push({ due, now, real: performance.now() });
        if (fires.length === count) resolveDone();
      },
      { clock: systemClock },
    );
    const start = systemClock.monoNow();
    for (let k = 0; k < count; k++) wheel.schedule(start + 5 + rnd() * 145, k);
    let guard: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      guard = setTimeout(resolve, 10_000);
    });
    await Promise.race([done, timeout]);
    clearTimeout(guard);
    wheel.close();
    expect(fires).toHaveLength(count);
    for (const f of fires) {
      expect(f.now).toBeGreaterThanOrEqual(f.due);
      expect(f.real).toBeGreaterThanOrEqual(f.due);
    }
    expect(fires.map((f) => f.due)).toEqual(fires.map((f) => f.due).sort((a, b) => a - b));
  });
});

describe("TimingWheel on the real clock: an entry past a timer's longest delay", () => {
  it("waits quietly for an entry 30 days ahead (Node ran a longer timer after 1 ms, every ms)", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    const fired: number[] = [];
    let arms = 0;
    const counting: Clock = {
      ...systemClock,
      setTimer: (cb, ms) => {
        arms++;
        return systemClock.setTimer(cb, ms);
      },
    };
    const wheel = new TimingWheel<number>((n) => fired.push(n), { clock: counting });
    try {
      wheel.schedule(systemClock.monoNow() + 30 * 86_400_000, 1);
      await new Promise((r) => setTimeout(r, 200));
      expect(fired).toEqual([]);
      // Armed once, not re-armed every millisecond.
      expect(arms).toBeLessThanOrEqual(2);
      expect(warnings).not.toContain("TimeoutOverflowWarning");
    } finally {
      wheel.close();
      process.off("warning", onWarning);
    }
  });
});
