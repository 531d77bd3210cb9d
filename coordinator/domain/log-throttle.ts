/**
 * Says whether a log line about something may be written now: once a period per key (a source and
 * a reason), so that a flood of refusals from one client cannot flood the log, while a new source
 * or reason is still told at once. Remembers at most `maxKeys` keys; past that it starts afresh.
 */
export class LogThrottle {
  private readonly last = new Map<string, number>();

  constructor(
    private readonly periodMs = 60_000,
    private readonly maxKeys = 10_000,
  ) {}

  /** True (and remembered) when nothing about `key` was allowed in the last period before `now`. */
  allow(key: string, now: number): boolean {
    const last = this.last.get(key);
    if (last !== undefined && now - last < this.periodMs) return false;
    if (last === undefined && this.last.size >= this.maxKeys) this.last.clear();
    this.last.set(key, now);
    return true;
  }
}
