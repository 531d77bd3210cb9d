import { CronExpressionParser } from "cron-parser";
import { describe, expect, it } from "vitest";
import type { Trigger } from "./job.js";
import { isFixedTimeCron, nextFireAfter, preview } from "./schedule.js";

/*
 * Cron around the 2026 daylight-saving changes (dates checked with Intl in dst.test.ts):
 *   America/New_York     2026-03-08 02:00 EST → 03:00 EDT (07:00Z)   2026-11-01 02:00 EDT → 01:00 EST (06:00Z)
 *   Europe/London        2026-03-29 01:00 GMT → 02:00 BST (01:00Z)   2026-10-25 02:00 BST → 01:00 GMT (01:00Z)
 *   Australia/Lord_Howe  2026-10-04 02:00 +10:30 → 02:30 +11 (10-03T15:30Z)
 *                        2026-04-05 02:00 +11 → 01:30 +10:30 (04-04T15:00Z)
 * Expected fire times are written as ISO 8601 instants in the zone's local time with its offset
 * (exact instants, and readable), and compared both as instants and as that local rendering.
 */

const ms = (iso: string): number => {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) throw new Error(`bad test time ${iso}`);
  return t;
};
const cron = (expr: string, tz: string): Trigger => ({ type: "cron", expr, tz });
const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

const formats = new Map<string, Intl.DateTimeFormat>();

function localParts(tz: string, t: number): Record<string, string> {
  let f = formats.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: tz,
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      timeZoneName: "longOffset",
    });
    formats.set(tz, f);
  }
  return Object.fromEntries(f.formatToParts(t).map((p) => [p.type, p.value]));
}

/** `t` as local ISO 8601 with offset, e.g. `2026-03-08T03:00:00-04:00`. */
function localIso(tz: string, t: number): string {
  const p = localParts(tz, t);
  const offset = p.timeZoneName === "GMT" ? "+00:00" : p.timeZoneName?.slice(3);
  return `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}:${p.second}${offset}`;
}

/** Local wall time of `t` written as UTC ms (the test's own, not dst.ts's). */
function wallOf(tz: string, t: number): number {
  const p = localParts(tz, t);
  return Date.UTC(
    Number(p.year),
    Number(p.month) - 1,
    Number(p.day),
    Number(p.hour),
    Number(p.minute),
    Number(p.second),
  );
}

interface Golden {
  expr: string;
  from: string;
  fires: string[];
}

function checkGolden(tz: string, { expr, from, fires }: Golden): void {
  const got = preview(cron(expr, tz), ms(from), fires.length);
  expect(got.map((t) => localIso(tz, t))).toEqual(fires);
  expect(got).toEqual(fires.map(ms));
}

describe("cron DST golden times: America/New_York", () => {
  const tz = "America/New_York";
  it.each<Golden>([
    // Fixed times in the skipped hour (02:00-02:59 on 03-08) fire once, at 03:00 EDT.
    {
      expr: "30 2 * * *",
      from: "2026-03-06T12:00:00Z",
      fires: [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
      ],
    },
    {
      expr: "0 2 * * *",
      from: "2026-03-06T12:00:00Z",
      fires: [
        "2026-03-07T02:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
      ],
    },
    {
      expr: "0 30 2 * * *",
      from: "2026-03-06T12:00:00Z",
      fires: [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
      ],
    },
    // Two fixed times in the gap: one fire between them.
    {
      expr: "0,30 2 * * *",
      from: "2026-03-06T12:00:00Z",
      fires: [
        "2026-03-07T02:00:00-05:00",
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
      ],
    },
    // The gap's fire (for 02:30) and 03:30 both happen on the change day.
    {
      expr: "30 2,3 * * *",
      from: "2026-03-06T12:00:00Z",
      fires: [
        "2026-03-07T02:30:00-05:00",
        "2026-03-07T03:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:30:00-04:00",
        "2026-03-09T02:30:00-04:00",
      ],
    },
    // Fixed times in the repeated hour (01:00-01:59 on 11-01) fire once, the first (EDT).
    {
      expr: "30 1 * * *",
      from: "2026-10-30T12:00:00Z",
      fires: [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
      ],
    },
    {
      expr: "0 1 * * *",
      from: "2026-10-31T12:00:00Z",
      fires: ["2026-11-01T01:00:00-04:00", "2026-11-02T01:00:00-05:00"],
    },
    {
      expr: "0 2 * * *",
      from: "2026-10-31T12:00:00Z",
      fires: ["2026-11-01T02:00:00-05:00", "2026-11-02T02:00:00-05:00"],
    },
    // Interval-like: every real 15 minutes; the skipped hour has no slots.
    {
      expr: "*/15 * * * *",
      from: "2026-03-08T06:20:00Z",
      fires: [
        "2026-03-08T01:30:00-05:00",
        "2026-03-08T01:45:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:15:00-04:00",
        "2026-03-08T03:30:00-04:00",
      ],
    },
    {
      expr: "0 * * * *",
      from: "2026-03-08T04:30:00Z",
      fires: [
        "2026-03-08T00:00:00-05:00",
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T04:00:00-04:00",
      ],
    },
    // Interval-like, repeated hour: both 01:xx hours fire.
    {
      expr: "*/15 * * * *",
      from: "2026-11-01T05:20:00Z",
      fires: [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:45:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:15:00-05:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T01:45:00-05:00",
        "2026-11-01T02:00:00-05:00",
      ],
    },
    {
      expr: "0 * * * *",
      from: "2026-11-01T03:30:00Z",
      fires: [
        "2026-11-01T00:00:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
      ],
    },
    {
      expr: "*/30 * * * * *",
      from: "2026-03-08T06:58:50Z",
      fires: [
        "2026-03-08T01:59:00-05:00",
        "2026-03-08T01:59:30-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:00:30-04:00",
      ],
    },
    {
      expr: "*/30 * * * * *",
      from: "2026-11-01T05:58:50Z",
      fires: [
        "2026-11-01T01:59:00-04:00",
        "2026-11-01T01:59:30-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:00:30-05:00",
      ],
    },
    // A wildcard minute makes the expression interval-like (Vixie): 02:xx on 03-08 is skipped.
    {
      expr: "*/15 2 * * *",
      from: "2026-03-07T12:00:00Z",
      fires: ["2026-03-09T02:00:00-04:00", "2026-03-09T02:15:00-04:00"],
    },
  ])("$expr from $from", (golden) => {
    checkGolden(tz, golden);
  });
});

describe("cron DST golden times: Europe/London", () => {
  const tz = "Europe/London";
  it.each<Golden>([
    // 01:30 does not exist on 03-29: it fires at 02:00 BST (01:00Z), an hour before
    // cron-parser 5.10's own answer (02:30 BST).
    {
      expr: "30 1 * * *",
      from: "2026-03-27T12:00:00Z",
      fires: [
        "2026-03-28T01:30:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T01:30:00+01:00",
        "2026-03-31T01:30:00+01:00",
      ],
    },
    {
      expr: "0 1 * * *",
      from: "2026-03-27T12:00:00Z",
      fires: [
        "2026-03-28T01:00:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T01:00:00+01:00",
      ],
    },
    {
      expr: "0 2 * * *",
      from: "2026-03-27T12:00:00Z",
      fires: [
        "2026-03-28T02:00:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T02:00:00+01:00",
      ],
    },
    // 01:30 happens twice on 10-25 (BST, then GMT): once, the first.
    {
      expr: "30 1 * * *",
      from: "2026-10-23T12:00:00Z",
      fires: [
        "2026-10-24T01:30:00+01:00",
        "2026-10-25T01:30:00+01:00",
        "2026-10-26T01:30:00+00:00",
        "2026-10-27T01:30:00+00:00",
      ],
    },
    // Asked between the two 01:30s, it does not fire at the second.
    {
      expr: "30 1 * * *",
      from: "2026-10-25T00:45:00Z",
      fires: ["2026-10-26T01:30:00+00:00"],
    },
    {
      expr: "*/15 * * * *",
      from: "2026-03-29T00:20:00Z",
      fires: [
        "2026-03-29T00:30:00+00:00",
        "2026-03-29T00:45:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-29T02:15:00+01:00",
      ],
    },
    {
      expr: "0 * * * *",
      from: "2026-03-28T23:30:00Z",
      fires: [
        "2026-03-29T00:00:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-29T03:00:00+01:00",
      ],
    },
    {
      expr: "0 * * * *",
      from: "2026-10-24T22:30:00Z",
      fires: [
        "2026-10-25T00:00:00+01:00",
        "2026-10-25T01:00:00+01:00",
        "2026-10-25T01:00:00+00:00",
        "2026-10-25T02:00:00+00:00",
      ],
    },
    {
      expr: "*/30 * * * * *",
      from: "2026-03-29T00:58:50Z",
      fires: [
        "2026-03-29T00:59:00+00:00",
        "2026-03-29T00:59:30+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-29T02:00:30+01:00",
      ],
    },
    {
      expr: "*/30 * * * * *",
      from: "2026-10-25T00:58:50Z",
      fires: [
        "2026-10-25T01:59:00+01:00",
        "2026-10-25T01:59:30+01:00",
        "2026-10-25T01:00:00+00:00",
        "2026-10-25T01:00:30+00:00",
      ],
    },
  ])("$expr from $from", (golden) => {
    checkGolden(tz, golden);
  });
});

describe("cron DST golden times: Australia/Lord_Howe (30-minute changes)", () => {
  const tz = "Australia/Lord_Howe";
  it.each<Golden>([
    // 02:00-02:29 do not exist on 10-04: fixed times there fire at 02:30 +11.
    {
      expr: "15 2 * * *",
      from: "2026-10-02T00:00:00Z",
      fires: [
        "2026-10-03T02:15:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:15:00+11:00",
        "2026-10-06T02:15:00+11:00",
      ],
    },
    {
      expr: "0 2 * * *",
      from: "2026-10-02T00:00:00Z",
      fires: [
        "2026-10-03T02:00:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:00:00+11:00",
      ],
    },
    {
      expr: "30 2 * * *",
      from: "2026-10-02T00:00:00Z",
      fires: [
        "2026-10-03T02:30:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:30:00+11:00",
      ],
    },
    {
      expr: "0,15 2 * * *",
      from: "2026-10-02T00:00:00Z",
      fires: [
        "2026-10-03T02:00:00+10:30",
        "2026-10-03T02:15:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:00:00+11:00",
        "2026-10-05T02:15:00+11:00",
      ],
    },
    // 01:30-01:59 happen twice on 04-05 (+11, then +10:30): once, the first.
    {
      expr: "45 1 * * *",
      from: "2026-04-03T00:00:00Z",
      fires: [
        "2026-04-04T01:45:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-06T01:45:00+10:30",
      ],
    },
    {
      expr: "30 1 * * *",
      from: "2026-04-03T00:00:00Z",
      fires: [
        "2026-04-04T01:30:00+11:00",
        "2026-04-05T01:30:00+11:00",
        "2026-04-06T01:30:00+10:30",
      ],
    },
    {
      expr: "0 2 * * *",
      from: "2026-04-03T00:00:00Z",
      fires: [
        "2026-04-04T02:00:00+11:00",
        "2026-04-05T02:00:00+10:30",
        "2026-04-06T02:00:00+10:30",
      ],
    },
    {
      expr: "*/15 * * * *",
      from: "2026-10-03T14:50:00Z",
      fires: [
        "2026-10-04T01:30:00+10:30",
        "2026-10-04T01:45:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:45:00+11:00",
        "2026-10-04T03:00:00+11:00",
      ],
    },
    {
      expr: "*/15 * * * *",
      from: "2026-04-04T14:20:00Z",
      fires: [
        "2026-04-05T01:30:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:45:00+10:30",
        "2026-04-05T02:00:00+10:30",
      ],
    },
    // Hourly: the local hour across each change is 90 real minutes long.
    {
      expr: "0 * * * *",
      from: "2026-04-04T12:20:00Z",
      fires: [
        "2026-04-05T00:00:00+11:00",
        "2026-04-05T01:00:00+11:00",
        "2026-04-05T02:00:00+10:30",
        "2026-04-05T03:00:00+10:30",
      ],
    },
    {
      expr: "0 * * * *",
      from: "2026-10-03T13:00:00Z",
      fires: [
        "2026-10-04T00:00:00+10:30",
        "2026-10-04T01:00:00+10:30",
        "2026-10-04T03:00:00+11:00",
        "2026-10-04T04:00:00+11:00",
      ],
    },
    {
      expr: "*/30 * * * * *",
      from: "2026-10-03T15:28:50Z",
      fires: [
        "2026-10-04T01:59:00+10:30",
        "2026-10-04T01:59:30+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:30:30+11:00",
      ],
    },
    {
      expr: "*/30 * * * * *",
      from: "2026-04-04T14:58:50Z",
      fires: [
        "2026-04-05T01:59:00+11:00",
        "2026-04-05T01:59:30+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:30:30+10:30",
      ],
    },
  ])("$expr from $from", (golden) => {
    checkGolden(tz, golden);
  });
});

describe("cron DST: the brief's examples in UTC", () => {
  it.each([
    ["Europe/London", "30 1 * * *", "2026-03-28T12:00:00Z", "2026-03-29T01:00:00.000Z"],
    ["Australia/Lord_Howe", "15 2 * * *", "2026-10-03T00:00:00Z", "2026-10-03T15:30:00.000Z"],
    ["America/New_York", "30 2 * * *", "2026-03-07T12:00:00Z", "2026-03-08T07:00:00.000Z"],
    ["America/New_York", "30 1 * * *", "2026-10-31T12:00:00Z", "2026-11-01T05:30:00.000Z"],
  ])("%s %j after %s → %s", (tz, expr, from, expected) => {
    expect(new Date(nextFireAfter(cron(expr, tz), ms(from)) ?? 0).toISOString()).toBe(expected);
  });
});

const CHANGES: [string, string][] = [
  ["America/New_York", "2026-03-08T07:00:00Z"],
  ["America/New_York", "2026-11-01T06:00:00Z"],
  ["Europe/London", "2026-03-29T01:00:00Z"],
  ["Europe/London", "2026-10-25T01:00:00Z"],
  ["Australia/Lord_Howe", "2026-04-04T15:00:00Z"],
  ["Australia/Lord_Howe", "2026-10-03T15:30:00Z"],
];

const gaps = (times: number[]): number[] => times.slice(1).map((t, i) => t - (times[i] as number));

describe("cron DST: interval-like expressions keep their real interval", () => {
  it.each(CHANGES)("%s, change at %s: */15 every 15 real minutes for 4 days", (tz, change) => {
    const times = preview(cron("*/15 * * * *", tz), ms(change) - 2 * DAY, 4 * 96);
    expect(new Set(gaps(times))).toEqual(new Set([15 * MIN]));
  });

  it.each(CHANGES)("%s, change at %s: */30 s every 30 real seconds for 2 hours", (tz, change) => {
    const times = preview(cron("*/30 * * * * *", tz), ms(change) - HOUR, 240);
    expect(new Set(gaps(times))).toEqual(new Set([30_000]));
  });

  it.each(CHANGES)(
    "%s, change at %s: hourly, one real hour apart but at the change",
    (tz, change) => {
      const times = preview(cron("0 * * * *", tz), ms(change) - 2 * DAY, 96);
      const g = gaps(times);
      // Whole-hour changes keep hourly exact; Lord_Howe's local hour across a change is 90 minutes.
      const across = tz === "Australia/Lord_Howe" ? 90 * MIN : HOUR;
      expect(g.filter((x) => x !== HOUR)).toEqual(across === HOUR ? [] : [across]);
    },
  );
});

describe("cron DST: fixed daily times fire once per local day", () => {
  const hm = [0, 1, 2, 3].flatMap((h) => [0, 15, 30, 45].map((m) => [h, m] as const));
  it.each(CHANGES)("%s, change at %s: each of 00:00..03:45", (tz, change) => {
    for (const [h, m] of hm) {
      const times = preview(cron(`${m} ${h} * * *`, tz), ms(change) - 3 * DAY, 6);
      const days = times.map((t) => localIso(tz, t).slice(0, 10));
      expect(new Set(days).size, `${m} ${h}`).toBe(6);
      for (const t of times) {
        const time = localIso(tz, t).slice(11, 16);
        const wanted = `${String(h).padStart(2, "0")}:${String(m).padStart(2, "0")}`;
        // At the wanted local time, or (when that did not exist) exactly at the change.
        if (time !== wanted) expect(t, `${m} ${h} at ${localIso(tz, t)}`).toBe(ms(change));
      }
    }
  });
});

/** Real time from `start - step` to `end` in steps, with the local wall time at each. */
interface Walk {
  start: number;
  step: number;
  walls: number[];
}

function walk(tz: string, start: number, end: number, step: number): Walk {
  const walls: number[] = [];
  for (let t = start - step; t <= end; t += step) walls.push(wallOf(tz, t));
  return { start, step, walls };
}

/**
 * The rules written directly, by walking real time in steps and reading the local clock:
 * interval-like: fire whenever the local time is a slot; fixed-time: fire when it is a slot not
 * seen before in the walk, and, when the clock jumps forward over a slot, at the first step after.
 */
function oracle(expr: string, walk: Walk): number[] {
  const { start, step, walls } = walk;
  const fixed = isFixedTimeCron(expr);
  const it = CronExpressionParser.parse(expr, {
    tz: "UTC",
    currentDate: new Date(walls[0]! - DAY),
  });
  const slots: number[] = [];
  for (let s = it.next().getTime(); s <= walls[walls.length - 1]! + DAY; s = it.next().getTime()) {
    slots.push(s);
  }
  const isSlot = new Set(slots);
  let next = 0; // index of the first slot after the previous step's wall
  const seen = new Set<number>([walls[0]!]);
  const out: number[] = [];
  for (let i = 1; i < walls.length; i++) {
    const w = walls[i]!;
    const prev = walls[i - 1]!;
    const t = start + (i - 1) * step;
    let fire: boolean;
    while (next < slots.length && (slots[next] as number) <= prev) next++;
    if (fixed) {
      const skipped = w - prev > step && next < slots.length && (slots[next] as number) < w;
      fire = skipped || (isSlot.has(w) && !seen.has(w));
    } else {
      fire = isSlot.has(w);
    }
    seen.add(w);
    if (fire) out.push(t);
  }
  return out;
}

describe("cron DST: nextFireAfter agrees with the rules walked minute by minute", () => {
  const minuteExprs = [
    "30 1 * * *",
    "0 2 * * *",
    "15 2 * * *",
    "0,30 2 * * *",
    "45 1 * * *",
    "59 1 * * *",
    "30 2,3 * * *",
    "0 9-17 * * *",
    "20 1-3 * * 0",
    "*/15 * * * *",
    "0 * * * *",
    "15 * * * *",
    "*/7 * * * *",
    "0 */2 * * *",
    "* 2 * * *",
    "*/20 1-3 * * *",
  ];
  it.each(CHANGES)("%s, change at %s: 36 hours either side", (tz, change) => {
    const start = ms(change) - 36 * HOUR;
    const end = ms(change) + 36 * HOUR;
    const w = walk(tz, start, end, MIN);
    for (const expr of minuteExprs) {
      const want = oracle(expr, w);
      const got = preview(cron(expr, tz), start - 1, want.length + 1).filter((t) => t <= end);
      expect(
        got.map((t) => localIso(tz, t)),
        expr,
      ).toEqual(want.map((t) => localIso(tz, t)));
    }
  });

  const secondExprs = ["*/30 * * * * *", "0 30 2 * * *", "10,40 15 2 * * *", "15 */10 * * * *"];
  it.each(CHANGES)("%s, change at %s: second by second, an hour either side", (tz, change) => {
    const start = ms(change) - HOUR;
    const end = ms(change) + HOUR;
    const w = walk(tz, start, end, 1000);
    for (const expr of secondExprs) {
      const want = oracle(expr, w);
      const got = preview(cron(expr, tz), start - 1, want.length + 1).filter((t) => t <= end);
      expect(
        got.map((t) => localIso(tz, t)),
        expr,
      ).toEqual(want.map((t) => localIso(tz, t)));
    }
  });
});
