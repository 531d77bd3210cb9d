/**
 * What to do with nominal fire times that were missed — the coordinator was down or overloaded,
 * or the job was paused (DESIGN §3). Pure: the caller passes the time and the trigger's next-time
 * function, and records what it gets back. Every missed nominal time is returned, fired or not,
 * so none is silent.
 */

export type MisfirePolicy = "FIRE_ONCE" | "SKIP" | "CATCH_UP";

export interface MisfireOptions {
  policy: MisfirePolicy;
  /** CATCH_UP: at most this many missed times are fired. */
  maxCatchUp: number;
  /** CATCH_UP: only missed times within this window before now are fired. */
  windowMs: number;
  /** A fire this late or less is on time, not missed. */
  thresholdMs: number;
  /** At most this many missed times are listed; the rest are counted, not listed. */
  enumerateMax?: number;
}

export interface MisfirePlan {
  /** Nominal times to fire now (each becomes a fire with that identity). */
  fire: number[];
  /** Nominal times missed and not fired, oldest first (recorded as missed). */
  missed: number[];
  /** Missed times beyond `enumerateMax`, counted only. */
  missedUncounted: number;
  /** The job's next nominal time after this decision. */
  nextFireAt: number | null;
  /** True when `scheduledFor` was late enough to count as a misfire. */
  misfired: boolean;
}

/**
 * Plans the firing of `scheduledFor` at `now`. On time: fire it. Late by more than the threshold:
 * enumerate every nominal time up to now and apply the policy —
 * FIRE_ONCE fires the latest missed time once; SKIP fires none; CATCH_UP fires the latest
 * `maxCatchUp` within `windowMs`. The next fire time is the first nominal time after now.
 */
export function planMisfire(
  scheduledFor: number,
  now: number,
  next: (afterMs: number) => number | null,
  o: MisfireOptions,
): MisfirePlan {
  if (now - scheduledFor <= o.thresholdMs) {
    return {
      fire: [scheduledFor],
      missed: [],
      missedUncounted: 0,
      nextFireAt: next(scheduledFor),
      misfired: false,
    };
  }
  const cap = Math.max(0, o.enumerateMax ?? 100_000);
  // Only the latest times can be fired: FIRE_ONCE the last one, CATCH_UP the last maxCatchUp.
  const k =
    o.policy === "FIRE_ONCE"
      ? 1
      : o.policy === "CATCH_UP"
        ? Math.max(0, Math.floor(o.maxCatchUp))
        : 0;
  // Every nominal time up to now is counted, so none is silent; only the oldest `cap + k` (enough
  // to list `cap` unfired ones) and the latest `k` (the candidates to fire) are kept.
  const head: number[] = [];
  const ring: number[] = [];
  let total = 0;
  let t: number | null = scheduledFor;
  while (t !== null && t <= now) {
    if (head.length < cap + k) head.push(t);
    if (k > 0) ring[total % k] = t;
    total++;
    const n: number | null = next(t);
    if (n !== null && n <= t) throw new Error(`trigger did not advance past ${t}`);
    t = n;
  }
  const nextFireAt = t;
  const latest = k > 0 ? [...ring.slice(total % k), ...ring.slice(0, total % k)] : [];
  let fire: number[] = [];
  if (o.policy === "FIRE_ONCE") {
    fire = latest;
  } else if (o.policy === "CATCH_UP") {
    fire = latest.filter((x) => x >= now - o.windowMs);
  }
  const fired = new Set(fire);
  const missed = head.filter((x) => !fired.has(x)).slice(0, cap);
  return {
    fire,
    missed,
    missedUncounted: total - fire.length - missed.length,
    nextFireAt,
    misfired: true,
  };
}
