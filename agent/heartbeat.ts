/**
 * When the heartbeat after a welcome's comes (docs/protocol.md, rule 12): at a random point of
 * the next period, between a tenth of `heartbeatMs` and the whole of it, drawn once per welcome;
 * every later one a whole period after the one before. A fleet welcomed together (after a broker
 * or coordinator restart) would otherwise heartbeat in step for as long as it stays connected:
 * the coordinator read each period's heartbeats in one burst, and a clock sample taken in a
 * burst waits behind the rest of it, which widens the bound on every start (at 10,000 simulated
 * agents the bound's p99 was 6–14 ms in step and 2.4–2.9 ms spread; docs/benchmarks.md). Never
 * later than a period, so presence (three heartbeats missed) and leases are unchanged.
 *
 * `u` is a number in [0, 1), Math.random() in use; a test passes its own.
 */
export function heartbeatAfterWelcome(heartbeatMs: number, u: number): number {
  return heartbeatMs * (0.1 + 0.9 * u);
}
