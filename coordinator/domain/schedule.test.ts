import { describe, expect, it } from "vitest";
import { AxError } from "../../shared/errors.js";
import type { Trigger } from "./job.js";
import {
  firstFireAt,
  isFixedTimeCron,
  isValidTimeZone,
  nextFireAfter,
  preview,
  validateCron,
} from "./schedule.js";

const ms = (iso: string): number => {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) throw new Error(`bad test time ${iso}`);
  return t;
};
const iso = (t: number): string => new Date(t).toISOString();
const cron = (expr: string, tz = "UTC"): Trigger => ({ type: "cron", expr, tz });

const FIELD_COUNT = (n: number) =>
  `must have 5 fields (minute hour day month weekday) or 6 (with seconds first), got ${n}`;

describe("isValidTimeZone", () => {
  it.each(["UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Etc/GMT+5"])(
    "accepts %s",
    (tz) => {
      expect(isValidTimeZone(tz)).toBe(true);
    },
  );

  it.each(["Mars/Olympus", "Europe/Londn", "", "+02:00x"])("rejects %j", (tz) => {
    expect(isValidTimeZone(tz)).toBe(false);
  });
});

describe("validateCron", () => {
  it.each([
    ["0 9 * * *"],
    ["*/5 * * * 1-5"],
    ["  0 9 * * *  "],
    ["*/2 * * * * *"],
    ["30 0 12 1 * *"],
  ])("accepts %j", (expr) => {
    expect(validateCron(expr, "UTC")).toBeUndefined();
  });

  it.each([
    ["* * * *", 4],
    ["0 0 9 * * * 2026", 7],
    ["", 1],
    ["*", 1],
  ])("rejects %j by its field count", (expr, n) => {
    expect(validateCron(expr, "UTC")).toBe(FIELD_COUNT(n));
  });

  it("rejects an unknown time zone", () => {
    expect(validateCron("0 9 * * *", "Mars/Olympus")).toBe(
      'time zone "Mars/Olympus" is not a known IANA time zone',
    );
  });

  it("checks the field count before the time zone", () => {
    expect(validateCron("* * * *", "Mars/Olympus")).toBe(FIELD_COUNT(4));
  });

  it("passes on cron-parser's reason for an out-of-range field (cron-parser 5.10 wording)", () => {
    expect(validateCron("61 * * * *", "UTC")).toBe(
      "is not a valid cron expression: Constraint error, got value 61 expected range 0-59",
    );
  });
});

describe("nextFireAfter: cron", () => {
  it("5 fields: minute precision, strictly after the given time", () => {
    const t = cron("*/15 * * * *");
    expect(iso(nextFireAfter(t, ms("2026-01-01T10:07:00Z"))!)).toBe("2026-01-01T10:15:00.000Z");
    // Exactly on a fire time: the next one, never the same.
    expect(iso(nextFireAfter(t, ms("2026-01-01T10:15:00Z"))!)).toBe("2026-01-01T10:30:00.000Z");
    // One millisecond before a fire time: that fire time.
    expect(iso(nextFireAfter(t, ms("2026-01-01T10:29:59.999Z"))!)).toBe("2026-01-01T10:30:00.000Z");
  });

  it("6 fields: seconds precision", () => {
    const t = cron("*/2 * * * * *");
    expect(preview(t, ms("2026-01-01T00:00:00.500Z"), 3).map(iso)).toEqual([
      "2026-01-01T00:00:02.000Z",
      "2026-01-01T00:00:04.000Z",
      "2026-01-01T00:00:06.000Z",
    ]);
    expect(iso(nextFireAfter(t, ms("2026-01-01T00:00:01.999Z"))!)).toBe("2026-01-01T00:00:02.000Z");
    expect(iso(nextFireAfter(t, ms("2026-01-01T00:00:02.000Z"))!)).toBe("2026-01-01T00:00:04.000Z");
  });

  it("every second, from a time with a fraction of a millisecond", () => {
    expect(nextFireAfter(cron("* * * * * *"), 999.5)).toBe(1000);
    expect(nextFireAfter(cron("* * * * * *"), 1000)).toBe(2000);
  });

  it("a time zone other than UTC: 09:00 New York is 14:00Z in winter (EST) and 13:00Z in summer (EDT)", () => {
    const t = cron("0 9 * * *", "America/New_York");
    expect(iso(nextFireAfter(t, ms("2026-01-15T00:00:00Z"))!)).toBe("2026-01-15T14:00:00.000Z");
    expect(iso(nextFireAfter(t, ms("2026-07-15T00:00:00Z"))!)).toBe("2026-07-15T13:00:00.000Z");
  });

  it("UTC unless told: 09:00 UTC all year", () => {
    const t = cron("0 9 * * *");
    expect(iso(nextFireAfter(t, ms("2026-07-15T00:00:00Z"))!)).toBe("2026-07-15T09:00:00.000Z");
  });

  it("H fields are hashed from the expression: the same minute on every call", () => {
    const t = cron("H * * * *");
    const times = preview(t, ms("2026-01-01T00:00:00Z"), 3).map(iso);
    // Pinned: cron-parser 5.10.6 with the expression as hashSeed picks minute 47.
    expect(times).toEqual([
      "2026-01-01T00:47:00.000Z",
      "2026-01-01T01:47:00.000Z",
      "2026-01-01T02:47:00.000Z",
    ]);
  });

  it("throws AX_TRIGGER_INVALID for an expression cron-parser refuses", () => {
    let caught: unknown;
    try {
      nextFireAfter(cron("61 * * * *"), 0);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(AxError);
    expect((caught as AxError).code).toBe("AX_TRIGGER_INVALID");
    expect((caught as AxError).message).toBe(
      'cron "61 * * * *": Constraint error, got value 61 expected range 0-59',
    );
  });
});

describe("nextFireAfter: every", () => {
  it("without an anchor: multiples of every since the epoch, strictly after", () => {
    const t: Trigger = { type: "every", everyMs: 1000 };
    expect(nextFireAfter(t, 0)).toBe(1000);
    expect(nextFireAfter(t, 1500)).toBe(2000);
    expect(nextFireAfter(t, 1999.9)).toBe(2000);
    expect(nextFireAfter(t, 2000)).toBe(3000);
  });

  it("with an anchor: anchor + k·every", () => {
    const t: Trigger = { type: "every", everyMs: 1000, anchor: 250 };
    expect(nextFireAfter(t, 1500)).toBe(2250);
    expect(nextFireAfter(t, 2250)).toBe(3250);
    expect(nextFireAfter(t, 2249)).toBe(2250);
  });

  it("before the anchor: the anchor itself is the first fire time", () => {
    const t: Trigger = { type: "every", everyMs: 60_000, anchor: ms("2026-06-01T12:00:00Z") };
    expect(iso(nextFireAfter(t, ms("2026-06-01T11:59:59.999Z"))!)).toBe("2026-06-01T12:00:00.000Z");
    expect(iso(nextFireAfter(t, ms("2026-01-01T00:00:00Z"))!)).toBe("2026-06-01T12:00:00.000Z");
    expect(iso(nextFireAfter(t, ms("2026-06-01T12:00:00Z"))!)).toBe("2026-06-01T12:01:00.000Z");
  });

  it("for many times: on the grid, strictly after, and no grid point skipped", () => {
    const anchor = 1_000_003;
    const everyMs = 7_919;
    const t: Trigger = { type: "every", everyMs, anchor };
    for (let after = anchor - 3 * everyMs; after < anchor + 50 * everyMs; after += 1_237) {
      const next = nextFireAfter(t, after)!;
      expect(next).toBeGreaterThan(after);
      expect((next - anchor) % everyMs).toBe(0);
      expect(next >= anchor).toBe(true);
      // The grid point before it (if any) is not after `after`.
      if (next > anchor) expect(next - everyMs).toBeLessThanOrEqual(after);
    }
  });
});

describe("nextFireAfter: at", () => {
  const t: Trigger = { type: "at", at: ms("2026-05-01T12:00:00Z") };

  it("fires once, then never", () => {
    expect(nextFireAfter(t, ms("2026-05-01T11:59:59.999Z"))).toBe(ms("2026-05-01T12:00:00Z"));
    expect(nextFireAfter(t, ms("2026-05-01T12:00:00Z"))).toBeNull();
    expect(nextFireAfter(t, ms("2026-06-01T00:00:00Z"))).toBeNull();
  });

  it("preview holds the one time only", () => {
    expect(preview(t, 0, 5)).toEqual([ms("2026-05-01T12:00:00Z")]);
    expect(preview(t, ms("2026-05-01T12:00:00Z"), 5)).toEqual([]);
  });
});

describe("nextFireAfter: delay, event, after, manual", () => {
  it.each<[string, Trigger]>([
    ["delay", { type: "delay", delayMs: 5_000 }],
    ["event", { type: "event", name: "door.opened" }],
    ["after", { type: "after", job: "extract", states: ["SUCCEEDED"] }],
    ["manual", { type: "manual" }],
  ])("%s: no time-based next fire", (_name, t) => {
    expect(nextFireAfter(t, 0)).toBeNull();
    expect(nextFireAfter(t, ms("2026-05-01T12:00:00Z"))).toBeNull();
  });
});

describe("firstFireAt", () => {
  const now = ms("2026-05-01T12:00:00Z");

  it("delay: now + delayMs (0 fires at once)", () => {
    expect(firstFireAt({ type: "delay", delayMs: 90_000 }, now)).toBe(now + 90_000);
    expect(firstFireAt({ type: "delay", delayMs: 0 }, now)).toBe(now);
  });

  it.each<[string, Trigger]>([
    ["event", { type: "event", name: "door.opened" }],
    ["after", { type: "after", job: "extract", states: ["FAILED"] }],
    ["manual", { type: "manual" }],
  ])("%s: null", (_name, t) => {
    expect(firstFireAt(t, now)).toBeNull();
  });

  it("cron: the first fire time at or after now (inclusive)", () => {
    const t = cron("0 12 * * *");
    expect(iso(firstFireAt(t, now)!)).toBe("2026-05-01T12:00:00.000Z");
    expect(iso(firstFireAt(t, now + 1)!)).toBe("2026-05-02T12:00:00.000Z");
    expect(iso(firstFireAt(t, now - 1)!)).toBe("2026-05-01T12:00:00.000Z");
    // nextFireAfter stays strict.
    expect(iso(nextFireAfter(t, now)!)).toBe("2026-05-02T12:00:00.000Z");
  });

  it("at: its instant, past or not (a past one goes to the misfire policy)", () => {
    expect(firstFireAt({ type: "at", at: now + 60_000 }, now)).toBe(now + 60_000);
    expect(firstFireAt({ type: "at", at: now }, now)).toBe(now);
    expect(firstFireAt({ type: "at", at: now + 1 }, now)).toBe(now + 1);
    expect(firstFireAt({ type: "at", at: now - 1 }, now)).toBe(now - 1);
    expect(firstFireAt({ type: "at", at: now - 60_000 }, now)).toBe(now - 60_000);
    // nextFireAfter stays strict: after its instant there is none.
    expect(nextFireAfter({ type: "at", at: now - 60_000 }, now - 60_000)).toBeNull();
  });

  it("cron: a fractional now never gives a time before it", () => {
    expect(firstFireAt(cron("* * * * * *"), 1000)).toBe(1000);
    expect(firstFireAt(cron("* * * * * *"), 1000.5)).toBe(2000);
    expect(firstFireAt(cron("* * * * * *"), 999.5)).toBe(1000);
  });

  it("every: on the grid at or after now", () => {
    expect(firstFireAt({ type: "every", everyMs: 1000 }, 2000)).toBe(2000);
    expect(firstFireAt({ type: "every", everyMs: 1000 }, 2001)).toBe(3000);
    expect(firstFireAt({ type: "every", everyMs: 1000, anchor: 5000 }, 0)).toBe(5000);
  });
});

describe("isFixedTimeCron", () => {
  it.each([
    ["30 1 * * *", true],
    ["0 9-17 * * 1-5", true],
    ["0,30 2 * * *", true],
    ["0 30 2 * * *", true],
    ["15 2/6 * * *", true],
    ["H H * * *", true],
    ["*/15 * * * *", false],
    ["0 * * * *", false],
    ["*/15 2 * * *", false],
    ["? 2 * * *", false],
    ["5,*/20 2 * * *", false],
    ["*/30 * * * * *", false],
    ["*/10 30 2 * * *", false],
    ["0 */10 2 * * *", false],
  ])("%j → %s", (expr, fixed) => {
    expect(isFixedTimeCron(expr)).toBe(fixed);
  });
});

describe("preview", () => {
  it.each<[string, Trigger]>([
    ["cron 5 fields", cron("*/7 * * * *")],
    ["cron 6 fields", cron("*/3 * * * * *")],
    ["cron in a time zone", cron("0 9 * * 1-5", "America/New_York")],
    ["every", { type: "every", everyMs: 2_500 }],
    ["every with anchor", { type: "every", everyMs: 90_000, anchor: ms("2026-01-01T00:00:30Z") }],
  ])("%s: n strictly increasing times, the first strictly after the start", (_name, t) => {
    const start = ms("2026-03-01T08:00:00.250Z");
    const times = preview(t, start, 25);
    expect(times).toHaveLength(25);
    expect(times[0]).toBeGreaterThan(start);
    for (let i = 1; i < times.length; i++) {
      expect(times[i]).toBeGreaterThan(times[i - 1]!);
    }
    // Each is what nextFireAfter gives after the one before.
    expect(times[1]).toBe(nextFireAfter(t, times[0]!));
  });

  it("count 0 gives nothing", () => {
    expect(preview(cron("* * * * *"), 0, 0)).toEqual([]);
    expect(preview({ type: "delay", delayMs: 1 }, 0, 0)).toEqual([]);
  });

  it("delay: its one fire as if stored at the start", () => {
    expect(preview({ type: "delay", delayMs: 60_000 }, 1_000, 5)).toEqual([61_000]);
  });

  it.each<[string, Trigger]>([
    ["event", { type: "event", name: "door.opened" }],
    ["after", { type: "after", job: "extract", states: ["SUCCEEDED"] }],
    ["manual", { type: "manual" }],
  ])("%s: nothing", (_name, t) => {
    expect(preview(t, 0, 5)).toEqual([]);
  });

  it("weekdays 09:00 New York skips the weekend", () => {
    const times = preview(
      cron("0 9 * * 1-5", "America/New_York"),
      ms("2026-01-09T15:00:00Z"), // Friday, after 09:00 EST
      2,
    );
    expect(times.map(iso)).toEqual(["2026-01-12T14:00:00.000Z", "2026-01-13T14:00:00.000Z"]);
  });
});
