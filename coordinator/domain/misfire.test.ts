import { describe, expect, it } from "vitest";
import { seededRandom } from "../../test/helpers/random.js";
import { type MisfireOptions, type MisfirePlan, planMisfire } from "./misfire.js";

const M = 60_000;
/** A whole minute, so the every-60s trigger's nominal times are T0 + k·M. */
const T0 = 28_333_334 * M;
const at = (minutes: number, ms = 0): number => T0 + minutes * M + ms;
/** `at` over a range of whole minutes, inclusive. */
const minutes = (from: number, to: number): number[] =>
  Array.from({ length: to - from + 1 }, (_, i) => at(from + i));

const every60s = (t: number): number | null => (Math.floor(t / M) + 1) * M;
const oneShot = (): number | null => null;

const opts = (o: Partial<MisfireOptions> = {}): MisfireOptions => ({
  policy: "FIRE_ONCE",
  maxCatchUp: 3,
  windowMs: 24 * 60 * M,
  thresholdMs: 5_000,
  ...o,
});

const plan = (
  fire: number[],
  missed: number[],
  nextFireAt: number | null,
  misfired: boolean,
  missedUncounted = 0,
): MisfirePlan => ({ fire, missed, missedUncounted, nextFireAt, misfired });

interface Case {
  name: string;
  scheduledFor: number;
  now: number;
  next: (afterMs: number) => number | null;
  o: MisfireOptions;
  want: MisfirePlan;
}

const cases: Case[] = [
  // On time: fire the nominal time whatever the policy; the next one follows it.
  ...(["FIRE_ONCE", "SKIP", "CATCH_UP"] as const).flatMap((policy): Case[] => [
    {
      name: `${policy}: exactly on time`,
      scheduledFor: at(0),
      now: at(0),
      next: every60s,
      o: opts({ policy }),
      want: plan([at(0)], [], at(1), false),
    },
    {
      name: `${policy}: 3 s late, within the threshold`,
      scheduledFor: at(0),
      now: at(0, 3_000),
      next: every60s,
      o: opts({ policy }),
      want: plan([at(0)], [], at(1), false),
    },
    {
      name: `${policy}: late by exactly the threshold is on time`,
      scheduledFor: at(0),
      now: at(0, 5_000),
      next: every60s,
      o: opts({ policy }),
      want: plan([at(0)], [], at(1), false),
    },
    {
      name: `${policy}: one-shot on time`,
      scheduledFor: at(0),
      now: at(0, 1_000),
      next: oneShot,
      o: opts({ policy }),
      want: plan([at(0)], [], null, false),
    },
  ]),
  {
    name: "threshold 0: on time only at the nominal instant",
    scheduledFor: at(0),
    now: at(0),
    next: every60s,
    o: opts({ thresholdMs: 0 }),
    want: plan([at(0)], [], at(1), false),
  },
  {
    name: "threshold 0: 1 ms late is a misfire",
    scheduledFor: at(0),
    now: at(0, 1),
    next: every60s,
    o: opts({ policy: "SKIP", thresholdMs: 0 }),
    want: plan([], [at(0)], at(1), true),
  },

  // One past the threshold: a misfire with a single nominal time.
  {
    name: "FIRE_ONCE: 1 ms past the threshold fires the one missed time",
    scheduledFor: at(0),
    now: at(0, 5_001),
    next: every60s,
    o: opts(),
    want: plan([at(0)], [], at(1), true),
  },
  {
    name: "SKIP: 1 ms past the threshold records it missed",
    scheduledFor: at(0),
    now: at(0, 5_001),
    next: every60s,
    o: opts({ policy: "SKIP" }),
    want: plan([], [at(0)], at(1), true),
  },
  {
    name: "CATCH_UP: 1 ms past the threshold fires it",
    scheduledFor: at(0),
    now: at(0, 5_001),
    next: every60s,
    o: opts({ policy: "CATCH_UP" }),
    want: plan([at(0)], [], at(1), true),
  },

  // Late by 10 minutes: nominal times at(0)..at(10), 11 of them.
  {
    name: "FIRE_ONCE: 10 min late fires only the latest, the other 10 missed",
    scheduledFor: at(0),
    now: at(10),
    next: every60s,
    o: opts(),
    want: plan([at(10)], minutes(0, 9), at(11), true),
  },
  {
    name: "FIRE_ONCE: 10 min 30 s late",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts(),
    want: plan([at(10)], minutes(0, 9), at(11), true),
  },
  {
    name: "FIRE_ONCE: 1 ms short of 10 min late, 9 missed",
    scheduledFor: at(0),
    now: at(10, -1),
    next: every60s,
    o: opts(),
    want: plan([at(9)], minutes(0, 8), at(10), true),
  },
  {
    name: "SKIP: 10 min late fires none, all 11 missed",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts({ policy: "SKIP" }),
    want: plan([], minutes(0, 10), at(11), true),
  },
  {
    name: "CATCH_UP maxCatchUp 3: fires the 3 latest",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 3 }),
    want: plan(minutes(8, 10), minutes(0, 7), at(11), true),
  },
  {
    name: "CATCH_UP maxCatchUp above the count: fires every missed time",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 50 }),
    want: plan(minutes(0, 10), [], at(11), true),
  },
  {
    name: "CATCH_UP window 2.5 min (< outage): only the 3 inside, though maxCatchUp is 5",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    // now - window = at(8): inclusive, so at(8), at(9), at(10).
    o: opts({ policy: "CATCH_UP", maxCatchUp: 5, windowMs: 150_000 }),
    want: plan(minutes(8, 10), minutes(0, 7), at(11), true),
  },
  {
    name: "CATCH_UP window 2.5 min - 1 ms: the time on the window's edge is out",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 5, windowMs: 149_999 }),
    want: plan(minutes(9, 10), minutes(0, 8), at(11), true),
  },
  {
    name: "CATCH_UP window 5.5 min holds 6, maxCatchUp 3 fires the 3 latest",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 3, windowMs: 330_000 }),
    want: plan(minutes(8, 10), minutes(0, 7), at(11), true),
  },
  {
    name: "CATCH_UP window with no nominal time inside fires none",
    scheduledFor: at(0),
    now: at(10, 45_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 3, windowMs: 30_000 }),
    want: plan([], minutes(0, 10), at(11), true),
  },
  {
    name: "CATCH_UP maxCatchUp 0 fires none",
    scheduledFor: at(0),
    now: at(10, 30_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 0 }),
    want: plan([], minutes(0, 10), at(11), true),
  },

  // A one-shot `at` that was missed.
  {
    name: "one-shot FIRE_ONCE: fires it",
    scheduledFor: at(0),
    now: at(60),
    next: oneShot,
    o: opts(),
    want: plan([at(0)], [], null, true),
  },
  {
    name: "one-shot SKIP: records it missed",
    scheduledFor: at(0),
    now: at(60),
    next: oneShot,
    o: opts({ policy: "SKIP" }),
    want: plan([], [at(0)], null, true),
  },
  {
    name: "one-shot CATCH_UP inside the window: fires it",
    scheduledFor: at(0),
    now: at(60),
    next: oneShot,
    o: opts({ policy: "CATCH_UP", windowMs: 61 * M }),
    want: plan([at(0)], [], null, true),
  },
  {
    name: "one-shot CATCH_UP outside the window: records it missed",
    scheduledFor: at(0),
    now: at(60),
    next: oneShot,
    o: opts({ policy: "CATCH_UP", windowMs: 10 * M }),
    want: plan([], [at(0)], null, true),
  },

  // enumerateMax: the oldest are listed, the rest counted; the latest are still the ones fired.
  // Outage of 1000 min + 7 s: nominal times at(0)..at(1000), 1001 of them.
  {
    name: "huge outage FIRE_ONCE, enumerateMax 5: 5 listed + 995 counted + 1 fired",
    scheduledFor: at(0),
    now: at(1000, 7_000),
    next: every60s,
    o: opts({ enumerateMax: 5 }),
    want: plan([at(1000)], minutes(0, 4), at(1001), true, 995),
  },
  {
    name: "huge outage SKIP, enumerateMax 5: 5 listed + 996 counted",
    scheduledFor: at(0),
    now: at(1000, 7_000),
    next: every60s,
    o: opts({ policy: "SKIP", enumerateMax: 5 }),
    want: plan([], minutes(0, 4), at(1001), true, 996),
  },
  {
    name: "huge outage CATCH_UP 3, enumerateMax 5: 5 listed + 993 counted + 3 fired",
    scheduledFor: at(0),
    now: at(1000, 7_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 3, enumerateMax: 5 }),
    want: plan(minutes(998, 1000), minutes(0, 4), at(1001), true, 993),
  },
  {
    name: "huge outage, enumerateMax 0: nothing listed, all counted",
    scheduledFor: at(0),
    now: at(1000, 7_000),
    next: every60s,
    o: opts({ enumerateMax: 0 }),
    want: plan([at(1000)], [], at(1001), true, 1000),
  },
  {
    name: "enumerateMax 5 with 6 times, FIRE_ONCE: the 5 unfired all listed",
    scheduledFor: at(0),
    now: at(5, 10_000),
    next: every60s,
    o: opts({ enumerateMax: 5 }),
    want: plan([at(5)], minutes(0, 4), at(6), true),
  },
  {
    name: "enumerateMax 5 with 7 times, CATCH_UP 3: the 4 unfired all listed",
    scheduledFor: at(0),
    now: at(6, 10_000),
    next: every60s,
    o: opts({ policy: "CATCH_UP", maxCatchUp: 3, enumerateMax: 5 }),
    want: plan(minutes(4, 6), minutes(0, 3), at(7), true),
  },
  {
    name: "enumerateMax 5 with 7 times, SKIP: 5 listed, 2 counted",
    scheduledFor: at(0),
    now: at(6, 10_000),
    next: every60s,
    o: opts({ policy: "SKIP", enumerateMax: 5 }),
    want: plan([], minutes(0, 4), at(7), true, 2),
  },
];

describe("planMisfire", () => {
  it.each(cases)("$name", ({ scheduledFor, now, next, o, want }) => {
    expect(planMisfire(scheduledFor, now, next, o)).toEqual(want);
  });

  it("a huge outage: listed + uncounted + fired = nominal times up to now", () => {
    // A week at one per minute.
    const now = at(7 * 24 * 60, 42_000);
    const nominal = 7 * 24 * 60 + 1;
    for (const policy of ["FIRE_ONCE", "SKIP", "CATCH_UP"] as const) {
      const p = planMisfire(at(0), now, every60s, opts({ policy, maxCatchUp: 4, enumerateMax: 5 }));
      expect(p.missed).toEqual(minutes(0, 4));
      expect(p.missed.length + p.missedUncounted + p.fire.length).toBe(nominal);
      expect(p.nextFireAt).toBe(at(7 * 24 * 60 + 1));
      expect(p.nextFireAt).toBeGreaterThan(now);
      expect(p.misfired).toBe(true);
    }
  });

  it("rejects a trigger that does not advance instead of looping forever", () => {
    expect(() => planMisfire(at(0), at(10), () => at(0), opts())).toThrow(
      `trigger did not advance past ${at(0)}`,
    );
  });

  it("does not call next past the first time after now", () => {
    const seen: number[] = [];
    const next = (t: number): number | null => {
      seen.push(t);
      return every60s(t);
    };
    planMisfire(at(0), at(3, 30_000), next, opts());
    expect(seen).toEqual(minutes(0, 3));
  });
});

describe("planMisfire invariants on random inputs", () => {
  const rand = seededRandom(0xa5c0ffee);
  const int = (lo: number, hi: number): number => lo + Math.floor(rand() * (hi - lo + 1));
  const MIN_GAP = 1_000;

  interface Trigger {
    kind: string;
    first: number;
    next: (t: number) => number | null;
  }

  function randomTrigger(): Trigger {
    const kind = int(0, 2);
    if (kind === 0) {
      const period = int(MIN_GAP, 10 * M);
      const offset = int(0, period - 1);
      const first = offset + period * int(1_000, 100_000);
      return {
        kind: `every ${period} ms + ${offset}`,
        first,
        next: (t) => offset + (Math.floor((t - offset) / period) + 1) * period,
      };
    }
    if (kind === 1) return { kind: "one-shot", first: int(0, 1e12), next: () => null };
    // Irregular and finite: a sorted list of times at least MIN_GAP apart.
    const times: number[] = [int(0, 1e12)];
    const n = int(1, 400);
    for (let i = 1; i < n; i++) times.push((times.at(-1) ?? 0) + int(MIN_GAP, 5 * M));
    return {
      kind: `irregular ×${n}`,
      first: times[0] ?? 0,
      next: (t) => times.find((x) => x > t) ?? null,
    };
  }

  it("holds for 2000 random plans", () => {
    for (let i = 0; i < 2000; i++) {
      const trig = randomTrigger();
      // A nominal time of the trigger, on time or late by up to a few hundred periods.
      const scheduledFor = trig.first;
      const now = scheduledFor + (rand() < 0.2 ? int(0, MIN_GAP) : int(0, 3 * 60 * M));
      const policy = (["FIRE_ONCE", "SKIP", "CATCH_UP"] as const)[int(0, 2)] ?? "FIRE_ONCE";
      const o: MisfireOptions = {
        policy,
        maxCatchUp: int(0, 6),
        windowMs: int(0, 60 * M),
        // Below the smallest gap, so an on-time fire's next time is after now as well.
        thresholdMs: int(0, MIN_GAP - 1),
      };
      if (rand() < 0.5) o.enumerateMax = int(0, 20);
      const ctx = JSON.stringify({ i, trig: trig.kind, scheduledFor, now, o });
      const p = planMisfire(scheduledFor, now, trig.next, o);

      // Brute force: every nominal time from scheduledFor up to now.
      const nominal: number[] = [];
      for (let t: number | null = scheduledFor; t !== null && t <= now; t = trig.next(t)) {
        nominal.push(t);
      }

      const isNominal = new Set(nominal);
      const all = [...p.fire, ...p.missed].sort((a, b) => a - b);
      expect(new Set(all).size, ctx).toBe(all.length);
      for (const list of [p.fire, p.missed]) {
        expect(list, ctx).toEqual([...list].sort((a, b) => a - b));
        expect(new Set(list).size, ctx).toBe(list.length);
      }
      const outOfRange = all.filter((x) => x > now || x < scheduledFor || !isNominal.has(x));
      expect(outOfRange, ctx).toEqual([]);
      if (p.nextFireAt !== null) expect(p.nextFireAt, ctx).toBeGreaterThan(now);
      expect(p.nextFireAt, ctx).toBe(trig.next(nominal.at(-1) ?? scheduledFor));
      expect(p.missedUncounted, ctx).toBeGreaterThanOrEqual(0);

      const misfired = now - scheduledFor > o.thresholdMs;
      expect(p.misfired, ctx).toBe(misfired);
      if (!misfired) {
        expect(p, ctx).toEqual(plan([scheduledFor], [], trig.next(scheduledFor), false));
        continue;
      }
      // None silent: every nominal time is fired, listed or counted.
      expect(p.fire.length + p.missed.length + p.missedUncounted, ctx).toBe(nominal.length);
      if (o.enumerateMax !== undefined) {
        expect(p.missed.length, ctx).toBeLessThanOrEqual(o.enumerateMax);
      }
      // Missed are the oldest unfired ones.
      const fired = new Set(p.fire);
      const unfired = nominal.filter((x) => !fired.has(x));
      expect(p.missed, ctx).toEqual(unfired.slice(0, p.missed.length));
      if (policy === "FIRE_ONCE") expect(p.fire, ctx).toEqual(nominal.slice(-1));
      if (policy === "SKIP") expect(p.fire, ctx).toEqual([]);
      if (policy === "CATCH_UP") {
        const inWindow = nominal.filter((x) => x >= now - o.windowMs);
        expect(p.fire, ctx).toEqual(o.maxCatchUp > 0 ? inWindow.slice(-o.maxCatchUp) : []);
      }
    }
  });
});
