/** Exponential backoff with full jitter: a whole number of ms in [0, min(cap, base·2^(n-1))). */
export function backoffMs(
  attempt: number,
  options: { baseMs: number; capMs: number },
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(options.capMs, options.baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(random() * ceiling);
}
