/**
 * UTC offsets of IANA time zones, from `Intl.DateTimeFormat` (the runtime's ICU data), so that
 * cron fire times can be placed on the real time line around daylight-saving changes.
 *
 * A "wall time" here is a local date and time written as if it were UTC milliseconds:
 * `wall = instant + offset`. Wall times are what a cron expression's fields describe.
 */

const DAY_MS = 86_400_000;

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: tz,
      // h23, not hour12: false, which prints midnight as 24 in some ICU versions.
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    formatters.set(tz, f);
  }
  return f;
}

/**
 * The offset of `tz` from UTC at `instantMs`, in milliseconds (east positive: +3_600_000 for
 * BST). Whole seconds: the instant is taken at the start of its second.
 */
export function utcOffsetMs(tz: string, instantMs: number): number {
  if (tz === "UTC") return 0;
  const at = Math.floor(instantMs / 1000) * 1000;
  const p: Record<string, number> = {};
  for (const part of formatter(tz).formatToParts(at)) {
    if (part.type !== "literal") p[part.type] = Number(part.value);
  }
  const wall = Date.UTC(
    p.year ?? 1970,
    (p.month ?? 1) - 1,
    p.day ?? 1,
    p.hour ?? 0,
    p.minute ?? 0,
    p.second ?? 0,
  );
  return wall - at;
}

/** The local wall time of `instantMs` in `tz`, as UTC milliseconds (see the file comment). */
export function wallTimeOf(tz: string, instantMs: number): number {
  return instantMs + utcOffsetMs(tz, instantMs);
}

/**
 * The first instant in `(fromMs, toMs]` at which the offset of `tz` is no longer `offsetMs`
 * (the offset in effect at `fromMs`), or `null` if it stays the same.
 *
 * Samples once a day and bisects to the millisecond where the offset differs, so two changes
 * less than a day apart that cancel out would be missed; the tz database has none since 1970.
 */
export function nextOffsetChange(
  tz: string,
  fromMs: number,
  toMs: number,
  offsetMs: number,
): number | null {
  if (tz === "UTC") return null;
  let lo = fromMs;
  while (lo < toMs) {
    const hi = Math.min(lo + DAY_MS, toMs);
    if (utcOffsetMs(tz, hi) !== offsetMs) return bisect(tz, lo, hi, offsetMs);
    lo = hi;
  }
  return null;
}

/** Smallest whole millisecond in `(lo, hi]` whose offset is not `offsetMs`; `hi`'s is not. */
function bisect(tz: string, lo: number, hi: number, offsetMs: number): number {
  let a = Math.floor(lo);
  let b = hi;
  while (b - a > 1) {
    const mid = Math.floor((a + b) / 2);
    if (utcOffsetMs(tz, mid) === offsetMs) a = mid;
    else b = mid;
  }
  return b;
}
