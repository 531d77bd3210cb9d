import { type CronExpression, CronExpressionParser } from "cron-parser";
import { AxError } from "../../shared/errors.js";
import { nextOffsetChange, utcOffsetMs } from "./dst.js";
import type { Trigger } from "./job.js";

/** True when `tz` is an IANA time zone this runtime knows. */
export function isValidTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/**
 * Checks a cron expression: 5 fields (minute precision) or 6 (with seconds). cron-parser pads a
 * shorter expression silently, so the field count is checked here first.
 */
export function validateCron(expr: string, tz: string): string | undefined {
  const fields = expr.trim().split(/\s+/);
  if (fields.length < 5 || fields.length > 6) {
    return `must have 5 fields (minute hour day month weekday) or 6 (with seconds first), got ${fields.length}`;
  }
  if (!isValidTimeZone(tz)) return `time zone "${tz}" is not a known IANA time zone`;
  try {
    CronExpressionParser.parse(expr, { tz, currentDate: new Date(0) });
  } catch (err) {
    return `is not a valid cron expression: ${(err as Error).message}`;
  }
  return undefined;
}

/**
 * The first nominal fire time strictly after `afterMs` (UTC ms), or `null` when the trigger has
 * no time-based fire after it. Pure: the caller passes the time.
 *
 * - `cron`: the local times of the expression in `tz`. Around daylight-saving changes:
 *   - **fixed-time expressions** ({@link isFixedTimeCron}: `30 1 * * *`, `0 9-17 * * 1-5`): a
 *     time that does not exist locally (clocks jump over it) fires once, at the first instant
 *     after the gap (London `30 1 * * *` on 2026-03-29: 02:00 BST = 01:00Z; Lord_Howe
 *     `15 2 * * *` on 2026-10-04: 02:30 +11); several such times in one gap fire once together.
 *     A time that happens twice (clocks go back) fires once, at its first occurrence (New York
 *     `30 1 * * *` on 2026-11-01: 01:30 EDT = 05:30Z, not 01:30 EST).
 *   - **interval-like expressions** (`*\/15 * * * *`, `0 * * * *`, `*\/30 * * * * *`) follow
 *     the local clock: every real instant whose local time matches fires, so a repeated hour
 *     fires twice and a skipped slot not at all. No burst, and no real gap longer than the
 *     interval except where local slots do not exist or a local hour lasts 90 minutes
 *     (Lord_Howe's 30-minute changes: an hourly job has one 90-minute gap at each change).
 *
 *   `H` fields are hashed from the expression text, so they are the same on every call and every
 *   coordinator (cron-parser alone draws a new random value at each parse).
 * - `every`: `anchor + k × everyMs`.
 * - `at`: the instant, if it is after `afterMs`.
 * - `delay`, `event`, `after`, `manual`: always `null`. A delay's one fire is placed by
 *   {@link firstFireAt} when the job version is stored; the others are fired by a message, by
 *   another job's execution ending, or by an operator.
 */
export function nextFireAfter(trigger: Trigger, afterMs: number): number | null {
  switch (trigger.type) {
    case "cron":
      return nextCronFire(trigger.expr, trigger.tz, afterMs);
    case "every": {
      const anchor = trigger.anchor ?? 0;
      const n = Math.floor((afterMs - anchor) / trigger.everyMs) + 1;
      return anchor + Math.max(n, 0) * trigger.everyMs;
    }
    case "at":
      return trigger.at > afterMs ? trigger.at : null;
    case "delay":
    case "event":
    case "after":
    case "manual":
      return null;
  }
}

/**
 * The first fire time of a job version stored at `nowMs`, or `null` when it has none.
 *
 * - `delay`: `nowMs + delayMs`.
 * - `cron`, `every`: the first nominal fire time at or after `nowMs` (inclusive, unlike
 *   {@link nextFireAfter}: a definition stored exactly on a fire time fires at it).
 * - `at`: its instant, even one already past: a one-shot time that passed before its job was
 *   stored is a missed time like any other, and the job's misfire policy decides (FIRE_ONCE, the
 *   default, fires it at once; SKIP records it missed), rather than a job that silently never
 *   fires. Stored again with the same trigger, a job keeps its next fire time, so a jobs file
 *   re-applied at each start fires it once in all.
 * - `event`, `after`, `manual`: `null` (no time-based fires).
 */
export function firstFireAt(trigger: Trigger, nowMs: number): number | null {
  switch (trigger.type) {
    case "delay":
      return nowMs + trigger.delayMs;
    case "event":
    case "after":
    case "manual":
      return null;
    case "at":
      return trigger.at;
    case "cron":
    case "every": {
      let t = nextFireAfter(trigger, nowMs - 1);
      // Only with a fractional nowMs can the time found fall in (nowMs - 1, nowMs).
      while (t !== null && t < nowMs) t = nextFireAfter(trigger, t);
      return t;
    }
  }
}

/**
 * The next `count` nominal fire times after `afterMs`, each {@link nextFireAfter} the one before.
 * A `delay` trigger shows its one fire as if stored at `afterMs` (`afterMs + delayMs`); `event`,
 * `after` and `manual` triggers show none.
 */
export function preview(trigger: Trigger, afterMs: number, count: number): number[] {
  if (trigger.type === "delay") return count > 0 ? [afterMs + trigger.delayMs] : [];
  const out: number[] = [];
  let t = afterMs;
  for (let i = 0; i < count; i++) {
    const next = nextFireAfter(trigger, t);
    if (next === null) break;
    out.push(next);
    t = next;
  }
  return out;
}

/**
 * True when a cron expression names fixed times of day: no item of its time-of-day fields
 * (seconds in the 6-field form, minutes, hours) starts with `*` or `?`. This is Vixie cron's rule,
 * cron(8): only jobs "with '*' in the hour or minute specifier" are exempt from the DST handling,
 * and "are run based on the new time immediately". `30 1 * * *`, `0 9-17 * * 1-5` and
 * `0,30 2 * * *` are fixed-time; `*\/15 * * * *`, `0 * * * *` and `*\/30 * * * * *` are
 * interval-like.
 */
export function isFixedTimeCron(expr: string): boolean {
  const fields = expr.trim().split(/\s+/);
  const timeOfDay = fields.length === 6 ? fields.slice(0, 3) : fields.slice(0, 2);
  return !timeOfDay.some((f) => /(^|,)[*?]/.test(f));
}

/**
 * cron-parser runs in UTC over local wall times (where it is exact: no DST), and each wall time
 * is placed on the real time line with the zone's offset, from `Intl`. cron-parser's own time
 * zone handling is not used: 5.10 fires a skipped London 01:30 at 02:30 BST, and in
 * Australia/Lord_Howe's 30-minute changes skips whole days and drops slots that repeat.
 */
function nextCronFire(expr: string, tz: string, afterMs: number): number {
  try {
    const it = wallIterator(expr);
    if (tz === "UTC") return nextWallSlot(it, afterMs);
    const fixed = isFixedTimeCron(expr);
    // Search for the first fire after `cursor`, among instants from `from` on, where the offset
    // is `offset` until the next change.
    let cursor = afterMs;
    let from = afterMs;
    let offset = utcOffsetMs(tz, afterMs);
    for (let step = 0; step < MAX_STEPS; step++) {
      const wall = nextWallSlot(it, cursor + offset);
      const at = wall - offset;
      const change = nextOffsetChange(tz, from, at, offset);
      if (change === null) {
        if (fixed && isSecondOccurrence(tz, wall, at, offset)) {
          cursor = at;
          from = at;
          continue;
        }
        return at;
      }
      const after = utcOffsetMs(tz, change);
      // Clocks jump forward: wall times [change + offset, change + after) do not exist.
      if (fixed && after > offset && nextWallSlot(it, change + offset - 1) < change + after) {
        return change;
      }
      cursor = change - 1;
      from = change;
      offset = after;
    }
  } catch (err) {
    throw new AxError("AX_TRIGGER_INVALID", `cron "${expr}": ${(err as Error).message}`, {
      cause: err,
    });
  }
  throw new AxError("AX_TRIGGER_INVALID", `cron "${expr}" in ${tz}: no fire time found`);
}

/** Offset changes and repeated slots crossed in one search; far more than a real zone needs. */
const MAX_STEPS = 10_000;
const DAY_MS = 86_400_000;

/**
 * True when the wall time `wall`, at instant `at` (offset `offset`), already happened earlier:
 * clocks went back within the last day and `wall` falls in the repeated interval.
 */
function isSecondOccurrence(tz: string, wall: number, at: number, offset: number): boolean {
  const before = utcOffsetMs(tz, at - DAY_MS);
  if (before <= offset) return false;
  const earlier = wall - before;
  return earlier < at && utcOffsetMs(tz, earlier) === before;
}

/** The first cron slot strictly after the wall time `wallMs`. */
function nextWallSlot(it: CronExpression, wallMs: number): number {
  it.reset(new Date(wallMs));
  const next = it.next().getTime();
  // cron-parser resolves to whole seconds; never return a time at or before wallMs.
  return next > wallMs ? next : it.next().getTime();
}

const iterators = new Map<string, CronExpression>();

/**
 * A cron-parser iterator over wall times (run in UTC), cached by expression: parsing costs about
 * three times a step. Seeded with the expression, so `H` fields do not change between parses.
 */
function wallIterator(expr: string): CronExpression {
  let it = iterators.get(expr);
  if (!it) {
    it = CronExpressionParser.parse(expr, { tz: "UTC", hashSeed: expr });
    if (iterators.size >= 1_000) iterators.clear();
    iterators.set(expr, it);
  }
  return it;
}
