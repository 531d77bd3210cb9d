import { describe, expect, it } from "vitest";
import { nextOffsetChange, utcOffsetMs, wallTimeOf } from "./dst.js";

const ms = (iso: string): number => {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) throw new Error(`bad test time ${iso}`);
  return t;
};
const H = 3_600_000;
const M = 60_000;

/** What Intl itself prints for the zone's offset ("GMT-04:00", "GMT+10:30"; "GMT" as "GMT+00:00"). */
const intlOffset = (tz: string, t: number): string => {
  const name =
    new Intl.DateTimeFormat("en-US", { timeZone: tz, timeZoneName: "longOffset" })
      .formatToParts(t)
      .find((p) => p.type === "timeZoneName")?.value ?? "";
  return name === "GMT" ? "GMT+00:00" : name;
};

/** The local weekday, date and time of `t` in `tz`, e.g. "Sun 2026-04-05 01:30". */
const localDay = (tz: string, t: number): string => {
  const p = Object.fromEntries(
    new Intl.DateTimeFormat("en-US", {
      timeZone: tz,
      hourCycle: "h23",
      weekday: "short",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
    })
      .formatToParts(t)
      .map((x) => [x.type, x.value]),
  );
  return `${p.weekday} ${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
};

describe("utcOffsetMs", () => {
  it.each([
    ["UTC", "2026-07-01T00:00:00Z", 0],
    ["America/New_York", "2026-01-15T12:00:00Z", -5 * H],
    ["America/New_York", "2026-07-15T12:00:00Z", -4 * H],
    ["Europe/London", "2026-01-15T12:00:00Z", 0],
    ["Europe/London", "2026-07-15T12:00:00Z", H],
    ["Australia/Lord_Howe", "2026-07-15T12:00:00Z", 10 * H + 30 * M],
    ["Australia/Lord_Howe", "2026-01-15T12:00:00Z", 11 * H],
    ["Asia/Kolkata", "2026-01-15T12:00:00Z", 5 * H + 30 * M],
    ["Asia/Kathmandu", "2026-01-15T12:00:00Z", 5 * H + 45 * M],
    // POSIX sign: Etc/GMT+5 is five hours behind UTC.
    ["Etc/GMT+5", "2026-01-15T12:00:00Z", -5 * H],
  ])("%s at %s", (tz, iso, offset) => {
    expect(utcOffsetMs(tz, ms(iso))).toBe(offset);
  });

  it("takes the offset at the start of the instant's second, also for fractions", () => {
    const change = ms("2026-03-08T07:00:00Z");
    expect(utcOffsetMs("America/New_York", change - 0.5)).toBe(-5 * H);
    expect(utcOffsetMs("America/New_York", change + 999.9)).toBe(-4 * H);
  });

  it("wallTimeOf writes the local time as if it were UTC", () => {
    expect(
      new Date(wallTimeOf("Australia/Lord_Howe", ms("2026-10-03T15:30:00Z"))).toISOString(),
    ).toBe("2026-10-04T02:30:00.000Z");
  });
});

describe("nextOffsetChange: the 2026 changes, checked against Intl", () => {
  it.each([
    // zone, change instant (UTC), Intl's offset before, after
    ["America/New_York", "2026-03-08T07:00:00.000Z", "GMT-05:00", "GMT-04:00"],
    ["America/New_York", "2026-11-01T06:00:00.000Z", "GMT-04:00", "GMT-05:00"],
    ["Europe/London", "2026-03-29T01:00:00.000Z", "GMT+00:00", "GMT+01:00"],
    ["Europe/London", "2026-10-25T01:00:00.000Z", "GMT+01:00", "GMT+00:00"],
    // Lord_Howe: 02:00 LHDT back to 01:30 LHST on Sunday 5 April (local date).
    ["Australia/Lord_Howe", "2026-04-04T15:00:00.000Z", "GMT+11:00", "GMT+10:30"],
    // and 02:00 LHST forward to 02:30 LHDT on Sunday 4 October (local date).
    ["Australia/Lord_Howe", "2026-10-03T15:30:00.000Z", "GMT+10:30", "GMT+11:00"],
  ])("%s changes at %s (%s to %s)", (tz, iso, before, after) => {
    const change = ms(iso);
    expect(intlOffset(tz, change - 1)).toBe(before);
    expect(intlOffset(tz, change)).toBe(after);
    // Found to the millisecond from ten days before, and from just before.
    const from = change - 10 * 86_400_000;
    expect(nextOffsetChange(tz, from, change + H, utcOffsetMs(tz, from))).toBe(change);
    expect(nextOffsetChange(tz, change - 1, change, utcOffsetMs(tz, change - 1))).toBe(change);
    // Not found when the range ends just before it, nor from the change on.
    expect(nextOffsetChange(tz, from, change - 1, utcOffsetMs(tz, from))).toBeNull();
    expect(nextOffsetChange(tz, change, change + H, utcOffsetMs(tz, change))).toBeNull();
  });

  it("the local dates: Sundays; Lord_Howe's are the first Sundays of April and October", () => {
    expect(localDay("America/New_York", ms("2026-03-08T07:00:00Z"))).toBe("Sun 2026-03-08 03:00");
    expect(localDay("America/New_York", ms("2026-11-01T06:00:00Z"))).toBe("Sun 2026-11-01 01:00");
    expect(localDay("Europe/London", ms("2026-03-29T01:00:00Z"))).toBe("Sun 2026-03-29 02:00");
    expect(localDay("Europe/London", ms("2026-10-25T01:00:00Z"))).toBe("Sun 2026-10-25 01:00");
    expect(localDay("Australia/Lord_Howe", ms("2026-04-04T15:00:00Z"))).toBe(
      "Sun 2026-04-05 01:30",
    );
    expect(localDay("Australia/Lord_Howe", ms("2026-10-03T15:30:00Z"))).toBe(
      "Sun 2026-10-04 02:30",
    );
  });

  it("UTC and fixed-offset zones never change", () => {
    expect(nextOffsetChange("UTC", 0, ms("2030-01-01T00:00:00Z"), 0)).toBeNull();
    expect(
      nextOffsetChange(
        "Asia/Kolkata",
        ms("2026-01-01T00:00:00Z"),
        ms("2027-01-01T00:00:00Z"),
        5.5 * H,
      ),
    ).toBeNull();
  });

  it("a whole year of New York: the first change is in March", () => {
    const from = ms("2026-01-01T00:00:00Z");
    expect(nextOffsetChange("America/New_York", from, ms("2027-01-01T00:00:00Z"), -5 * H)).toBe(
      ms("2026-03-08T07:00:00Z"),
    );
  });
});
