import { z } from "zod";

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Parses `250ms`, `2s`, `5m`, `1h`, `1d` (or a number of milliseconds). */
export function parseDuration(value: string | number): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) && value >= 0 ? value : undefined;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(value.trim());
  if (!m) return undefined;
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

/** A duration in a definition: milliseconds, or a string such as `2s`; resolves to milliseconds. */
export const durationSchema = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const ms = parseDuration(value);
  if (ms === undefined) {
    ctx.addIssue({
      code: "custom",
      message: `must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got ${JSON.stringify(value)})`,
    });
    return z.NEVER;
  }
  return ms;
});

/** The longest run timeout (protocol.md, `timeoutMs`): a timer's longest delay, about 24.8 days. */
export const MAX_TIMEOUT_MS = 2_147_483_647;

/**
 * A duration an agent is given as a whole number of milliseconds from 1 to {@link MAX_TIMEOUT_MS}
 * (a run's `timeoutMs`): 0, a fraction or more would be accepted here and refused by every agent
 * it was dispatched to.
 */
export const positiveDurationSchema = durationSchema.pipe(
  z
    .number()
    .int("must be a whole number of milliseconds")
    .min(1, "must be at least 1ms")
    .max(MAX_TIMEOUT_MS, "must be at most 2147483647 ms (about 24.8 days)"),
);
