import { CronExpressionParser } from "cron-parser";
import { AxError } from "../../shared/errors.js";
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
 * The first nominal fire time strictly after `afterMs` (UTC ms), or `null` when the trigger will
 * never fire again. Pure: the caller passes the time.
 */
export function nextFireAfter(trigger: Trigger, afterMs: number): number | null {
  switch (trigger.type) {
    case "cron": {
      try {
        const it = CronExpressionParser.parse(trigger.expr, {
          tz: trigger.tz,
          currentDate: new Date(afterMs),
        });
        const next = it.next().getTime();
        // cron-parser resolves to whole seconds; never return a time at or before afterMs.
        return next > afterMs ? next : it.next().getTime();
      } catch (err) {
        throw new AxError(
          "AX_TRIGGER_INVALID",
          `cron "${trigger.expr}": ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
    }
    case "every": {
      const anchor = trigger.anchor ?? 0;
      const n = Math.floor((afterMs - anchor) / trigger.everyMs) + 1;
      return anchor + Math.max(n, 0) * trigger.everyMs;
    }
    case "at":
      return trigger.at > afterMs ? trigger.at : null;
  }
}

/** The next `count` nominal fire times after `afterMs`. */
export function preview(trigger: Trigger, afterMs: number, count: number): number[] {
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
