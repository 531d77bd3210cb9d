/**
 * What message authentication costs the coordinator (issue 16, item 7, "Cost, measured"): runs at
 * the target rate with `security.messages` "required" (the default) against runs with it "off",
 * compared on the coordinator's CPU per fire and on start lateness.
 */
import { overheadPct } from "./auth.js";
import type { RateResult } from "./coordinator-run.js";
import { fmt, mdTable, percentile, printTable } from "./lib.js";

/** The issue's targets for authentication, at the target rate. */
export const AUTH_TARGETS = { cpuPerFireOverheadPct: 15, startP99MsWithAuth: 10 };

/** One variant's runs at the target rate. */
export interface AuthVariant {
  runs: number;
  /** Coordinator CPU (user + system, all threads) per nominal fire of the window, µs: median. */
  cpuUsPerFire: number;
  cpuUsPerFireRuns: number[];
  /** Start lateness p99, ms: the worst run, and each run. */
  startP99Ms: number;
  startP99MsRuns: number[];
  coresRuns: number[];
  lostRuns: number[];
  /** Runs where fewer than 90 % of the window's fires ran: their CPU per fire says little. */
  behind: number;
}

export interface AuthComparison {
  rate: number;
  on: AuthVariant;
  off: AuthVariant;
  /** (on − off) / off of the medians of CPU per fire, %. */
  cpuOverheadPct: number;
}

export interface AuthTargetRow {
  key: string;
  target: string;
  figure: string;
  value: number | null;
  met: boolean | null;
}

const median = (xs: number[]) => percentile(Float64Array.from(xs).sort(), 50);
const us = (v: number) => (Number.isFinite(v) ? `${fmt(v)} µs` : "–");
const ms = (v: number) => (Number.isFinite(v) ? `${fmt(v)} ms` : "–");
const signed = (v: number) => (Number.isFinite(v) ? `${v >= 0 ? "+" : ""}${v.toFixed(1)} %` : "–");

/** CPU µs per nominal fire of the window (RateResult.process keeps ms). */
export const cpuUsPerFire = (r: RateResult) => r.process.coordinatorCpuMsPerFire * 1000;

function variant(runs: RateResult[]): AuthVariant {
  const cpu = runs.map(cpuUsPerFire);
  const p99 = runs.map((r) => r.fires.start.p99);
  return {
    runs: runs.length,
    cpuUsPerFire: median(cpu),
    cpuUsPerFireRuns: cpu,
    startP99Ms: p99.some((v) => !Number.isFinite(v)) ? Number.NaN : Math.max(...p99),
    startP99MsRuns: p99,
    coresRuns: runs.map((r) => r.process.coordinatorCores),
    lostRuns: runs.map((r) => r.fires.lost),
    behind: runs.filter((r) => r.fires.ran < 0.9 * r.fires.expected).length,
  };
}

/** The comparison, or null when one of the variants did not run. */
export function compareAuth(on: RateResult[], off: RateResult[]): AuthComparison | null {
  const first = on[0];
  if (!first || off.length === 0) return null;
  const a = variant(on);
  const b = variant(off);
  return {
    rate: first.rate,
    on: a,
    off: b,
    cpuOverheadPct: overheadPct(a.cpuUsPerFire, b.cpuUsPerFire),
  };
}

/** CPU per fire compares only runs where (nearly) every fire of the window ran. */
const judgeable = (c: AuthComparison) => c.on.behind + c.off.behind === 0;

/** The two targets' rows; a variant that did not run leaves its row "not run". */
export function authTargetRows(on: RateResult[], off: RateResult[]): AuthTargetRow[] {
  const c = compareAuth(on, off);
  const each = (xs: number[], f: (v: number) => string) =>
    xs.length > 1 ? ` (each run: ${xs.map(f).join(", ")})` : "";
  const overhead: AuthTargetRow = c
    ? {
        key: "authCpuOverhead",
        target: `auth overhead on coordinator CPU per fire ≤ ${AUTH_TARGETS.cpuPerFireOverheadPct} %`,
        figure:
          `${signed(c.cpuOverheadPct)}: ${us(c.on.cpuUsPerFire)} on vs ${us(c.off.cpuUsPerFire)} off (medians; on${each(c.on.cpuUsPerFireRuns, fmt)}, off${each(c.off.cpuUsPerFireRuns, fmt)})` +
          (c.on.behind + c.off.behind > 0
            ? `; ${c.on.behind + c.off.behind} run(s) fell behind (under 90 % of fires ran)`
            : ""),
        value: c.cpuOverheadPct,
        // A coordinator that fell behind did less than a fire's work per fire: no verdict.
        met: judgeable(c)
          ? Number.isFinite(c.cpuOverheadPct) &&
            c.cpuOverheadPct <= AUTH_TARGETS.cpuPerFireOverheadPct
          : null,
      }
    : {
        key: "authCpuOverhead",
        target: `auth overhead on coordinator CPU per fire ≤ ${AUTH_TARGETS.cpuPerFireOverheadPct} %`,
        figure: "not run (needs --auth both)",
        value: null,
        met: null,
      };
  const v = on.length ? variant(on) : null;
  const p99: AuthTargetRow = v
    ? {
        key: "authStartP99",
        target: `start-lateness p99 at 2,000/s with auth ≤ ${AUTH_TARGETS.startP99MsWithAuth} ms`,
        figure: `${ms(v.startP99Ms)}, the worst run${each(v.startP99MsRuns, ms)}${c ? `; without auth ${ms(c.off.startP99Ms)}${each(c.off.startP99MsRuns, ms)}` : ""}`,
        value: Number.isFinite(v.startP99Ms) ? v.startP99Ms : null,
        met: Number.isFinite(v.startP99Ms) && v.startP99Ms <= AUTH_TARGETS.startP99MsWithAuth,
      }
    : {
        key: "authStartP99",
        target: `start-lateness p99 at 2,000/s with auth ≤ ${AUTH_TARGETS.startP99MsWithAuth} ms`,
        figure: "not run (--auth off)",
        value: null,
        met: null,
      };
  return [overhead, p99];
}

const HEADER = [
  "auth",
  "runs",
  "CPU µs/fire (median)",
  "each run",
  "coordinator cores, each run",
  "start p99 (worst)",
  "each run",
  "lost, each run",
];

function rows(c: AuthComparison): string[][] {
  const row = (name: string, v: AuthVariant) => [
    name,
    String(v.runs),
    us(v.cpuUsPerFire),
    v.cpuUsPerFireRuns.map(fmt).join(", "),
    v.coresRuns.map((x) => x.toFixed(2)).join(", "),
    ms(v.startP99Ms),
    v.startP99MsRuns.map(fmt).join(", "),
    v.lostRuns.map(String).join(", "),
  ];
  return [row("on (required)", c.on), row("off", c.off)];
}

export function printAuth(c: AuthComparison | null): void {
  if (!c) return;
  console.log(
    `\nauthentication at ${c.rate.toLocaleString("en-US")} fires/s: coordinator CPU per fire ${signed(c.cpuOverheadPct)} with it on`,
  );
  printTable(HEADER, rows(c));
}

/** The "Authentication" subsection of docs/benchmarks.md. */
export function authMarkdown(c: AuthComparison | null, durationS: number): string[] {
  const head = "### Authentication: what message MACs cost the coordinator";
  if (!c) {
    return [
      head,
      "Not compared in this run (`--auth on` or `--auth off`); `npm run bench:coordinator` runs both at 2,000/s.",
    ];
  }
  return [
    head,
    `Issue 16, item 7. At ${c.rate.toLocaleString("en-US")} fires/s, ${c.on.runs} run(s) with \`security.messages: "required"\` (the default: the worker enrols the bench's agents with \`coordinator.identities.enroll\` and writes each one's identity file, mode 0600, which its config names as \`identityFile\`; every message both ways carries an HMAC-SHA256 tag) and ${c.off.runs} with \`"off"\` (agents without identity), alternately, each a fresh store, broker, coordinator and agents, ${durationS} s windows. **CPU per fire**: the coordinator process's user + system time (all its threads, \`/proc/PID/stat\`) over the window, divided by the window's nominal fires; the overhead compares the medians. Reproduce with \`npm run bench:coordinator -- --rates 2000 --no-profile\` (\`--auth on|off|both\`, default both).`,
    mdTable(HEADER, rows(c)),
    `Coordinator CPU per fire with authentication: **${signed(c.cpuOverheadPct)}** (target ≤ ${AUTH_TARGETS.cpuPerFireOverheadPct} %: ${!judgeable(c) ? `no verdict: ${c.on.behind + c.off.behind} of ${c.on.runs + c.off.runs} runs fell behind (under 90 % of the window's fires ran), and a coordinator behind does less than a fire's work per nominal fire, so the figure is not a cost per fire` : Number.isFinite(c.cpuOverheadPct) && c.cpuOverheadPct <= AUTH_TARGETS.cpuPerFireOverheadPct ? "met" : "**not met**"}); start p99 with it, worst run: ${ms(c.on.startP99Ms)} (target ≤ ${AUTH_TARGETS.startP99MsWithAuth} ms: ${Number.isFinite(c.on.startP99Ms) && c.on.startP99Ms <= AUTH_TARGETS.startP99MsWithAuth ? "met" : "**not met**"}). The runs share 2 cores with whatever else the machine runs (the load averages above): the spread between runs of one variant says how far apart two runs of the same code land.`,
  ];
}
