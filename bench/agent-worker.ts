/**
 * The child process of bench/agent.ts: one scenario per fresh process, parameters in argv, one
 * JSON line on stdout. bench/agent.ts bundles it with esbuild to dist/bench/agent-worker.mjs and
 * runs it with plain node, so no TypeScript loader (or its hooks thread) shares the process.
 *
 *   lateness <wheel|timeout> <n> <idle|load>
 *   memory <wheel|wheel-presized|timeout|timeout-int> <n>     (run with --expose-gc)
 */
import { readFileSync } from "node:fs";
import { systemClock } from "../shared/clock.js";
import { TimingWheel } from "../shared/wheel.js";
import {
  type LatenessResult,
  LEAD_MS,
  MEMORY_LEAD_MS,
  type MemoryResult,
  SLOTS,
  SPREAD_MS,
  TICK_MS,
} from "./agent-params.js";
import { percentile } from "./lib.js";

/** A small seeded PRNG (mulberry32), so every run and both timer kinds see the same due times. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Due times uniform over [start, start + SPREAD_MS), in the (random) order they are scheduled. */
function dueTimes(n: number, start: number): Float64Array {
  const next = rng(0xa6e47 + n);
  const due = new Float64Array(n);
  for (let i = 0; i < n; i++) due[i] = start + next() * SPREAD_MS;
  return due;
}

/**
 * ~50 % CPU on this thread: a timer callback busy-spins on performance.now() for 1 ms, then
 * re-arms itself with setTimeout(…, 1), which yields the thread for 1–2 ms (Node's timer
 * resolution is 1 ms). The spun fraction of wall time is measured and reported.
 */
class SpinLoad {
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private startedAt = 0;
  private spunMs = 0;
  private turns = 0;

  start(): void {
    this.running = true;
    this.startedAt = performance.now();
    this.timer = setTimeout(this.turn, 0);
  }

  private readonly turn = (): void => {
    this.timer = undefined;
    if (!this.running) return;
    const t0 = performance.now();
    let t = t0;
    while (t - t0 < 1) t = performance.now();
    this.spunMs += t - t0;
    this.turns++;
    this.timer = setTimeout(this.turn, 1);
  };

  /** Stops it and returns the fraction of wall time spent spinning. */
  stop(): { duty: number; turns: number } {
    this.running = false;
    if (this.timer !== undefined) clearTimeout(this.timer);
    const elapsed = performance.now() - this.startedAt;
    return { duty: elapsed > 0 ? this.spunMs / elapsed : 0, turns: this.turns };
  }
}

/** Busy CPU ticks (USER_HZ, 100/s on Linux) of the whole machine, from /proc/stat. */
function machineBusyTicks(): number {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
    // cpu  user nice system idle iowait irq softirq steal …
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    return (f[0] ?? 0) + (f[1] ?? 0) + (f[2] ?? 0) + (f[5] ?? 0) + (f[6] ?? 0) + (f[7] ?? 0);
  } catch {
    return Number.NaN;
  }
}

/** Measures how many cores other processes kept busy between `start()` and `stop()`. */
function contention(): { stop(): number } {
  const ticks0 = machineBusyTicks();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  return {
    stop() {
      const busyMs = (machineBusyTicks() - ticks0) * 10;
      const cpu = process.cpuUsage(cpu0);
      const ownMs = (cpu.user + cpu.system) / 1000;
      return Math.max(0, busyMs - ownMs) / (performance.now() - t0);
    },
  };
}

async function lateness(
  impl: "wheel" | "timeout",
  n: number,
  load: boolean,
): Promise<LatenessResult> {
  // Due times are placed relative to a start estimated to follow setup; setup of 100k entries
  // takes well under LEAD_MS, which `setupOverran` checks.
  const due = dueTimes(n, performance.now() + LEAD_MS);
  const late = new Float64Array(n).fill(Number.NaN);
  let fired = 0;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  const record = (i: number): void => {
    late[i] = performance.now() - (due[i] as number);
    if (++fired === n) resolveDone();
  };

  let wheel: TimingWheel<number> | undefined;
  const handles: NodeJS.Timeout[] = [];
  const t0 = performance.now();
  if (impl === "wheel") {
    wheel = new TimingWheel<number>((i) => record(i), {
      clock: systemClock,
      tickMs: TICK_MS,
      slots: SLOTS,
    });
    for (let i = 0; i < n; i++) wheel.schedule(due[i] as number, i);
  } else {
    for (let i = 0; i < n; i++) {
      handles.push(setTimeout(() => record(i), (due[i] as number) - performance.now()));
    }
  }
  const scheduled = performance.now();
  let firstDue = Number.POSITIVE_INFINITY;
  for (const d of due) if (d < firstDue) firstDue = d;

  const others = contention();
  const spin = load ? new SpinLoad() : undefined;
  spin?.start();
  const guard = setTimeout(resolveDone, LEAD_MS + SPREAD_MS + 5_000);
  await done;
  clearTimeout(guard);
  const duty = spin?.stop().duty ?? 0;
  const otherCores = others.stop();
  wheel?.close();
  for (const h of handles) clearTimeout(h);

  // An entry that never fired (the guard ended the wait) has no lateness; `fired` tells.
  const sorted = late.filter((v) => !Number.isNaN(v)).sort();
  let early = 0;
  for (const v of sorted) {
    if (v < 0) early++;
    else break;
  }
  return {
    impl,
    n,
    load,
    fired,
    scheduleMs: scheduled - t0,
    setupOverran: scheduled > firstDue,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    p999: percentile(sorted, 99.9),
    max: percentile(sorted, 100),
    min: percentile(sorted, 0),
    early,
    earlyPct: (100 * early) / n,
    loadDuty: duty,
    otherCores,
  };
}

function measure(gc: () => void): number {
  for (let k = 0; k < 4; k++) gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

function memory(impl: string, n: number): MemoryResult {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error("run with node --expose-gc");
  // The params (due times, payload ids) exist before the baseline: only the structure is counted.
  const due = dueTimes(n, performance.now() + MEMORY_LEAD_MS);
  let fired = 0;
  const onFire = (): void => {
    fired++;
  };
  const before = measure(gc);
  let pending: () => number;
  let cleanup: () => void;
  if (impl === "wheel" || impl === "wheel-presized") {
    const wheel = new TimingWheel<number>(onFire, {
      clock: systemClock,
      tickMs: TICK_MS,
      slots: SLOTS,
      ...(impl === "wheel-presized" ? { initialCapacity: n } : {}),
    });
    for (let i = 0; i < n; i++) wheel.schedule(due[i] as number, i);
    pending = () => wheel.size;
    cleanup = () => wheel.close();
  } else {
    // One timer per command, its handle kept so it can be cancelled, as an agent would.
    const handles: NodeJS.Timeout[] = [];
    const round = impl === "timeout-int";
    for (let i = 0; i < n; i++) {
      const delay = (due[i] as number) - performance.now();
      handles.push(setTimeout(() => onFire(), round ? Math.ceil(delay) : delay));
    }
    pending = () => n - fired;
    cleanup = () => {
      for (const h of handles) clearTimeout(h);
    };
  }
  const after = measure(gc);
  // `due` is read here so it stays alive through both measurements (else the second one would
  // see its 8 bytes per entry freed).
  const result = {
    impl,
    n,
    before,
    after,
    bytesPerEntry: (after - before) / n,
    pending: pending(),
    paramsBytes: due.byteLength,
  };
  cleanup();
  return result;
}

async function main(argv: string[]): Promise<void> {
  const [kind, impl, nText, loadText] = argv;
  const n = Number(nText);
  if (!Number.isInteger(n) || n < 1) throw new Error(`bad n: ${nText}`);
  let out: LatenessResult | MemoryResult;
  if (kind === "lateness" && (impl === "wheel" || impl === "timeout")) {
    out = await lateness(impl, n, loadText === "load");
  } else if (kind === "memory" && impl !== undefined) {
    out = memory(impl, n);
  } else {
    throw new Error(`usage: lateness <wheel|timeout> <n> <idle|load> | memory <impl> <n>`);
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = 1;
});
