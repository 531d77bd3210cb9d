import { describe, expect, it } from "vitest";
import { AxError } from "../../shared/errors.js";
import type { Trigger } from "./job.js";
import { isValidTimeZone, nextFireAfter, preview, validateCron } from "./schedule.js";

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

describe("nextFireAfter: cron across DST in Europe/London (cron-parser 5.10)", () => {
  // 2026-03-29: at 01:00 GMT clocks jump to 02:00 BST, so local 01:30 does not exist that day.
  // cron-parser 5.10 does not skip the day: it fires at 01:30Z, i.e. 02:30 BST, one hour later
  // on the local clock than intended (the missing local time is shifted forward by the gap).
  // From the next day on 01:30 BST is 00:30Z.
  it("spring forward 2026-03-29: the missing 01:30 fires at 01:30Z (02:30 BST), once", () => {
    expect(
      preview(cron("30 1 * * *", "Europe/London"), ms("2026-03-27T12:00:00Z"), 4).map(iso),
    ).toEqual([
      "2026-03-28T01:30:00.000Z", // 01:30 GMT
      "2026-03-29T01:30:00.000Z", // 02:30 BST: the shifted firing
      "2026-03-30T00:30:00.000Z", // 01:30 BST
      "2026-03-31T00:30:00.000Z",
    ]);
  });

  // 2026-10-25: at 02:00 BST clocks go back to 01:00 GMT, so local 01:30 happens twice
  // (00:30Z BST and 01:30Z GMT). cron-parser 5.10 fires on the first only.
  it("fall back 2026-10-25: the doubled 01:30 fires once, at the first (00:30Z, BST)", () => {
    const t = cron("30 1 * * *", "Europe/London");
    expect(preview(t, ms("2026-10-23T12:00:00Z"), 4).map(iso)).toEqual([
      "2026-10-24T00:30:00.000Z", // 01:30 BST
      "2026-10-25T00:30:00.000Z", // 01:30 BST, the first of the two
      "2026-10-26T01:30:00.000Z", // 01:30 GMT
      "2026-10-27T01:30:00.000Z",
    ]);
    // Asked from between the two local 01:30s, it still does not fire at the second one.
    expect(iso(nextFireAfter(t, ms("2026-10-25T00:45:00Z"))!)).toBe("2026-10-26T01:30:00.000Z");
  });

  it("fall back: an hourly job fires in both local 01:00 hours (each UTC hour once)", () => {
    expect(
      preview(cron("0 * * * *", "Europe/London"), ms("2026-10-24T23:30:00Z"), 3).map(iso),
    ).toEqual(["2026-10-25T00:00:00.000Z", "2026-10-25T01:00:00.000Z", "2026-10-25T02:00:00.000Z"]);
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
