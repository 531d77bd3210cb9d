/** Tables, targets and the docs/benchmarks.md section of bench/coordinator.ts. */

import { MAX_IN_FLIGHT, MAX_INBOUND_BACKLOG } from "../coordinator/link/mqtt-link.js";
import { type AuthComparison, authMarkdown } from "./coordinator-auth.js";
import {
  COORDINATOR_HEAP_MB,
  JOBS,
  LOOP_GAP_MS,
  SETUP_MS,
  WARMUP_MS,
} from "./coordinator-params.js";
import type { ProfileRow, ProfileSummary } from "./coordinator-profile.js";
import type { RateResult } from "./coordinator-run.js";
import { LATE_MS, STALL_MS } from "./coordinator-store.js";
import { fmt, mdTable, printTable } from "./lib.js";

/** The rate the issue's targets are stated at. */
export const TARGET_RATE = 2_000;

/** How long a rate's drain took after its window, and whether it was cut short. */
export function drainText(r: Pick<RateResult, "drain">): string {
  return `${(r.drain.ms / 1000).toFixed(1)} s${r.drain.complete ? "" : ", stopped"}`;
}

export const TARGETS = { startP99Ms: 10, early: 0, lost: 0, duplicated: 0, rssMB: 300 };

export interface TargetRow {
  key: string;
  target: string;
  figure: string;
  value: number | null;
  /** null when the target rate was not run, or nothing ran to judge it by. */
  met: boolean | null;
}

const n = (v: number) => v.toLocaleString("en-US");
const ms = (v: number) => (Number.isFinite(v) ? fmt(v) : "–");
const pct = (v: number) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} %` : "–");
const share = (part: number, whole: number) => pct(whole > 0 ? (100 * part) / whole : Number.NaN);
const dup = (r: RateResult) => r.fires.duplicated + r.fires.duplicateExecutions;

/**
 * The targets, judged over every run at the target rate (the rates' run and its repeats): a target
 * is met only if every run met it; the figure is the worst run's, with each run's where they vary.
 */
export function targetRows(results: RateResult[], repeats: RateResult[] = []): TargetRow[] {
  const first = results.find((x) => x.rate === TARGET_RATE);
  const runs = first ? [first, ...repeats] : [];
  const each = (f: (r: RateResult) => string) =>
    runs.length > 1 ? ` (each run: ${runs.map(f).join(", ")})` : "";
  const row = (
    key: string,
    target: string,
    value: (r: RateResult) => number,
    figure: (worst: RateResult, v: number) => string,
    ok: (v: number) => boolean,
    needsRuns = false,
  ): TargetRow => {
    if (runs.length === 0) return { key, target, figure: "not run", value: null, met: null };
    // The worst run: the one whose figure misses, or the highest.
    const worst = runs.reduce((a, b) => {
      const va = value(a);
      const vb = value(b);
      if (!Number.isFinite(vb)) return b;
      return Number.isFinite(va) && vb > va ? b : a;
    });
    const v = value(worst);
    if (needsRuns && runs.every((r) => r.fires.ran === 0)) {
      return { key, target, figure: `${n(v)}, but no fire of the window ran`, value: v, met: null };
    }
    // A lateness over no fires at all (NaN, or null once read back from JSON) meets nothing.
    const met = runs.every((r) => {
      const x = value(r);
      return Number.isFinite(x) && ok(x);
    });
    return { key, target, figure: figure(worst, v), value: v, met };
  };
  return [
    row(
      "startP99",
      `start lateness p99 ≤ ${TARGETS.startP99Ms} ms`,
      (x) => x.fires.start.p99,
      (x, v) =>
        (x.fires.ran === 0
          ? "no fire of the window ran"
          : x.fires.ran < x.fires.expected
            ? `${ms(v)} ms (over the ${n(x.fires.ran)} of ${n(x.fires.expected)} that ran)`
            : `${ms(v)} ms`) + each((r) => `${ms(r.fires.start.p99)} ms`),
      (v) => v <= TARGETS.startP99Ms,
    ),
    row(
      "early",
      "0 started early",
      (x) => x.fires.start.early,
      (x, v) => `${n(v)} of ${n(x.fires.start.n)} that ran${each((r) => n(r.fires.start.early))}`,
      (v) => v === 0,
      true,
    ),
    row(
      "lost",
      "0 lost",
      (x) => x.fires.lost,
      (x, v) =>
        `${n(v)} of ${n(x.fires.expected)} (${share(v, x.fires.expected)})${each((r) => n(r.fires.lost))}`,
      (v) => v === 0,
    ),
    row(
      "duplicated",
      "0 duplicated",
      (x) => dup(x),
      (_x, v) => `${n(v)}${each((r) => n(dup(r)))}`,
      (v) => v === 0,
      true,
    ),
    row(
      "rss",
      `coordinator RSS ≤ ${TARGETS.rssMB} MB`,
      (x) => x.process.coordinatorRssMaxMB,
      (x, v) =>
        `${fmt(v)} MB, the highest sampled in a window (peak over that whole run ${fmt(x.process.coordinatorPeakMB)} MB)${each((r) => `${fmt(r.process.coordinatorRssMaxMB)} MB`)}`,
      (v) => v <= TARGETS.rssMB,
    ),
  ];
}

const TIMING = [
  "rate/s",
  "start p50",
  "p99",
  "max",
  "early",
  "agents' offsets [min, max] ± (true: 0)",
  "trigger p50",
  "p99",
  "max",
  "e2e p50",
  "p99",
];

/** The agents' stored clock-offset estimates: `[min, max] ±largest uncertainty`, ms. */
function offsets(r: RateResult): string {
  const a = r.fires.agents;
  if (a.length === 0) return "–";
  const off = a.map((x) => x.clockOffsetMs);
  const unc = Math.max(...a.map((x) => x.clockUncertaintyMs));
  return `[${fmt(Math.min(...off))}, ${fmt(Math.max(...off))}] ±${fmt(unc)}`;
}

const timingRow = (r: RateResult) => {
  const f = r.fires;
  return [
    n(r.rate),
    ms(f.start.p50),
    ms(f.start.p99),
    ms(f.start.max),
    `${n(f.start.early)} (${pct(f.start.earlyPct)})`,
    offsets(r),
    ms(f.trigger.p50),
    ms(f.trigger.p99),
    ms(f.trigger.max),
    ms(f.endToEnd.p50),
    ms(f.endToEnd.p99),
  ];
};

const FIRES = [
  "rate/s",
  "nominal in window",
  "ran",
  "lost",
  "ran twice (on 2 agents)",
  "redispatched",
  "fired/s",
  "succeeded/s",
  "drain",
];
const firesRow = (r: RateResult) => {
  const f = r.fires;
  return [
    n(r.rate),
    n(f.expected),
    n(f.ran),
    `${n(f.lost)} (${share(f.lost, f.expected)})`,
    `${n(dup(r))} (${n(f.duplicatedAcrossAgents)})`,
    n(f.redispatched),
    fmt(f.throughput.firedPerSec),
    fmt(f.throughput.succeededPerSec),
    drainText(r),
  ];
};

const PROCESS = [
  "rate/s",
  "coord CPU",
  "CPU ms/fire",
  "RSS idle",
  "RSS end",
  "RSS max",
  "live heap",
  "loop delay p99",
  "max",
  "main thread: CPU / queue / asleep",
  "broker CPU",
  "agents CPU",
  "others",
];
const processRow = (r: RateResult) => {
  const p = r.process;
  const loop = r.worker?.loopDelay;
  const live = r.worker?.memory?.liveHeapAfterGc;
  return [
    n(r.rate),
    p.coordinatorCores.toFixed(2),
    // Per nominal fire, so only where (nearly) all of them ran.
    r.fires.ran >= 0.9 * r.fires.expected ? fmt(p.coordinatorCpuMsPerFire) : "–",
    fmt(p.coordinatorIdleRssMB),
    fmt(p.coordinatorRssMB),
    fmt(p.coordinatorRssMaxMB),
    live === undefined ? "–" : fmt((live * 1024 * 1024) / 1e6),
    loop ? ms(loop.p99) : "–",
    loop ? ms(loop.max) : "–",
    [p.mainThread.onCpu, p.mainThread.waitingForCpu, p.mainThread.asleep]
      .map((v) => v.toFixed(2))
      .join(" / "),
    p.brokerCores.toFixed(2),
    p.agentCores.toFixed(2),
    p.otherCores.toFixed(2),
  ];
};

/** Fires that started very late, and when: a stall, not a steady state. */
function stallLine(r: RateResult): string | undefined {
  const st = r.fires.stalled;
  if (!st || r.fires.ran < r.fires.expected / 2) return undefined;
  return `${n(r.rate)}/s: ${n(st.count)} of ${n(r.fires.ran)} fires started more than ${STALL_MS} ms late, with nominal times from ${st.fromS.toFixed(1)} s to ${st.toS.toFixed(1)} s into the window.`;
}

const DIAGNOSIS = [
  "rate/s",
  "broker → agent p50",
  "p99",
  "max",
  "at agent vs nominal p99",
  "max",
  "starts > 10 ms late",
  "of them arrived late",
  "agent thread on CPU",
  "waiting for CPU",
  "agent loop held > 10 ms",
  "longest",
];

function diagnosisRow(r: RateResult): string[] {
  const d = r.fires.diagnosis;
  const a = r.process.agentMainThreads;
  return [
    n(r.rate),
    ms(d.delivery.p50),
    ms(d.delivery.p99),
    ms(d.delivery.max),
    ms(d.arrival.p99),
    ms(d.arrival.max),
    n(d.late.count),
    n(d.late.arrivedLate),
    pct(100 * a.onCpu),
    pct(100 * a.waitingForCpu),
    n(d.loopGaps.count),
    ms(d.loopGaps.maxMs),
  ];
}

/** Where the late starts came from: the dispatch's delivery, or the agent holding it. */
function diagnosisLine(r: RateResult): string | undefined {
  const d = r.fires.diagnosis;
  if (!d || d.delivery.n === 0) return undefined;
  const g = d.loopGaps;
  return (
    `${n(r.rate)}/s: broker → agent p50 ${fmt(d.delivery.p50)} / p99 ${fmt(d.delivery.p99)} / max ${fmt(d.delivery.max)} ms; ` +
    `dispatch at the agent vs nominal p99 ${fmt(d.arrival.p99)}, max ${fmt(d.arrival.max)} ms; ` +
    `${n(d.late.count)} started over ${LATE_MS} ms late (${n(d.late.arrivedLate)} arrived after their time, ${n(d.late.arrivedAhead)} before); ` +
    `agents' loops held > ${LOOP_GAP_MS} ms ${n(g.count)} times (${n(g.over50)} over 50 ms, longest ${fmt(g.maxMs)} ms, ${fmt(g.totalMs)} ms in all); ` +
    `an agent's main thread on a CPU ${pct(100 * r.process.agentMainThreads.onCpu)}, waiting for one ${pct(100 * r.process.agentMainThreads.waitingForCpu)} of the time; ` +
    `journal checkpoints ${n(d.agentCheckpoints?.checkpoints ?? 0)} on their thread, ${n(d.agentCheckpoints?.finishedInline ?? 0)} finished by the agent itself (${fmt(d.agentCheckpoints?.inlineMs ?? 0)} ms in all, longest ${fmt(d.agentCheckpoints?.inlineMaxMs ?? 0)} ms).`
  );
}

function lostLine(r: RateResult): string | undefined {
  if (r.fires.lost === 0) return undefined;
  const b = r.fires.lostBreakdown;
  const parts = [
    b.missed ? `${n(b.missed)} recorded missed by the misfire policy` : "",
    b.notFired ? `${n(b.notFired)} never fired` : "",
    ...Object.entries(b.byState).map(([s, c]) => `${n(c)} fired and left ${s}`),
  ].filter(Boolean);
  return `${n(r.rate)}/s: ${n(r.fires.lost)} lost: ${parts.join(", ")}.`;
}

/** Store calls per second of the window, by method: the most called methods over all runs. */
function callsTable(results: RateResult[]): [string[], string[][]] {
  const totals = new Map<string, number>();
  for (const r of results) {
    for (const [name, count] of Object.entries(r.worker?.storeCalls ?? {})) {
      totals.set(name, (totals.get(name) ?? 0) + count);
    }
  }
  const names = [...totals]
    .filter(([, c]) => c > 0)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 8)
    .map(([name]) => name);
  const rows = results.map((r) => {
    const seconds = r.durationMs / 1000;
    const calls = r.worker?.storeCalls;
    return [n(r.rate), ...names.map((name) => (calls ? fmt((calls[name] ?? 0) / seconds) : "–"))];
  });
  return [["rate/s", ...names], rows];
}

/** Store calls per second of the window for `method`, or NaN when not counted. */
const callsPerSec = (r: RateResult, method: string) =>
  r.worker?.storeCalls ? (r.worker.storeCalls[method] ?? 0) / (r.durationMs / 1000) : Number.NaN;

/** Prints the three tables for the given runs. */
export function printRates(results: RateResult[]): void {
  console.log(
    "lateness, ms from the nominal time (start: echo entered, host clock; trigger: dispatch at the broker; e2e: SUCCEEDED stored)",
  );
  printTable(TIMING, results.map(timingRow));
  printTable(FIRES, results.map(firesRow));
  console.log("coordinator process over the window (CPU in cores, memory in MB)");
  printTable(PROCESS, results.map(processRow));
  console.log("store calls per second of the window");
  printTable(...callsTable(results));
  for (const r of results) {
    for (const line of [lostLine(r), stallLine(r), diagnosisLine(r)]) {
      if (line) console.log(`  ${line}`);
    }
  }
}

const profileRows = (rows: ProfileRow[], top: number) =>
  rows.slice(0, top).map((r) => [r.name, fmt(r.ms), pct(r.pct)]);

export function printProfile(p: ProfileSummary): void {
  console.log(
    `CPU profile of the window (${fmt(p.sampledMs)} ms sampled; idle ${pct(p.idlePct)}, GC ${pct(p.gcPct)})`,
  );
  printTable(["top self time: function (file)", "ms", "share"], profileRows(p.topSelf, 15));
  printTable(["self time by file", "ms", "share"], profileRows(p.byFile, 10));
  printTable(["inclusive: function (file)", "ms", "share"], profileRows(p.topInclusive, 15));
}

export interface ReportInput {
  results: RateResult[];
  /** Further runs at the target rate, after the rates' own. */
  repeats: RateResult[];
  profiles: RateResult[];
  targets: TargetRow[];
  machine: {
    cpus: number;
    cpuModel: string;
    loadavgAtStart: number[];
    loadavgAtEnd: number[];
    runSeconds: number;
    source: { commit: string; modified: boolean };
  };
  o: {
    durationS: number;
    profileDurationS: number;
    agentSyncStart: boolean;
    agents: number;
    coordinatorNice: number;
    auth: "on" | "off" | "both";
  };
  /** Authentication on vs off at the target rate, when both ran. */
  auth: AuthComparison | null;
}

/**
 * What a profile's time went to, by function label (`name (file)`): inclusive time of the engine's
 * entry points, and the self time of SQLite's commits. A label a later change renames is left out.
 */
const ACTIVITIES: { what: string; label: string; self?: boolean }[] = [
  {
    what: "recording fires (`FiringLoop.fireAsync`)",
    label: "fireAsync (coordinator/engine/firing.ts)",
  },
  { what: "firing scans (`scanOnce`)", label: "scanOnce (coordinator/engine/firing.ts)" },
  {
    what: "execution-loop passes (`ExecutionLoop.pass`)",
    label: "pass (coordinator/engine/execution-loop.ts)",
  },
  { what: "agents' reports (`Inbound.report`)", label: "report (coordinator/engine/inbound.ts)" },
  {
    what: "state transitions (`applyEvent`, within the passes and reports)",
    label: "applyEvent (coordinator/engine/transitions.ts)",
  },
  {
    what: "SQLite commits (`run` of better-sqlite3's transaction wrapper: BEGIN and COMMIT)",
    label: "run (native) ← sqliteTransaction (node_modules/better-sqlite3)",
    self: true,
  },
  {
    what: "socket writes (`writev`)",
    label: "writev (native) ← writevGeneric (node:internal)",
    self: true,
  },
];

function activities(p: ProfileSummary): string {
  const parts = ACTIVITIES.flatMap((a) => {
    const v = (a.self ? p.selfMs : p.inclusiveMs)[a.label];
    return v === undefined ? [] : [`${a.what} ${share(v, p.sampledMs)}`];
  });
  return [...parts, `GC ${pct(p.gcPct)}`, `idle ${pct(p.idlePct)}`].join("; ");
}

/** The findings, from this run's figures. */
function findings(x: ReportInput): string[] {
  const out: string[] = [];
  const rows = x.results.map((r) => {
    const f = r.fires;
    const held = r.worker?.loopDelay?.max ?? 0;
    return `${n(r.rate)}/s: ${n(f.ran)} of ${n(f.expected)} ran${f.ran ? ` (start p50 ${ms(f.start.p50)} ms, p99 ${ms(f.start.p99)} ms)` : ""}; it recorded ${fmt(f.throughput.firedPerSec)} fires/s and stored ${fmt(f.throughput.succeededPerSec)} SUCCEEDED/s; ${r.process.coordinatorCores.toFixed(2)} cores${held > 1_000 ? `; its event loop was held for ${fmt(held / 1000)} s at a stretch` : ""}`;
  });
  out.push(
    `**Throughput.** The coordinator is one thread, so about one core is its ceiling. ${rows.join(". ")}. A rate it cannot keep up with does not degrade gently: fires are recorded (or not) on time while dispatches fall behind in fire-time order, so the window's fires wait behind the backlog and run late or, within this run's drain, not at all.`,
  );
  // Late starts with every dispatch out ahead of its fire: the lateness is the agents' own.
  for (const r of x.results) {
    const t = r.fires.trigger;
    const d = r.fires.diagnosis;
    if (r.fires.ran === 0 || !(t.max < 0) || r.fires.start.p99 <= 10) continue;
    const a = r.process.agentMainThreads;
    out.push(
      `**At ${n(r.rate)}/s the late starts are the agents'.** Every dispatch reached the broker ahead of its fire time (trigger p99 ${ms(t.p99)} ms, max ${ms(t.max)} ms) and the agent ahead of it too (p99 ${ms(d.arrival.p99)} ms, max ${ms(d.arrival.max)} ms), yet start p99 was ${ms(r.fires.start.p99)} ms: ${n(d.late.count)} starts were more than ${LATE_MS} ms late, each held by its own agent. ` +
        `The agents (${n(r.agents)} processes, ${n(r.rate / r.agents)} commands/s each, ${fmt(r.process.agentCores)} cores together) share the 2 cores with the coordinator (${fmt(r.process.coordinatorCores)} cores) and the broker (${fmt(r.process.brokerCores)}), ${fmt(r.process.agentCores + r.process.coordinatorCores + r.process.brokerCores + r.process.otherCores)} cores of 2 in all: an agent's main thread was on a CPU ${pct(100 * a.onCpu)} of the time and runnable but waiting for one ${pct(100 * a.waitingForCpu)}, and its event loop was held more than ${LOOP_GAP_MS} ms ${n(d.loopGaps.count)} times (longest ${ms(d.loopGaps.maxMs)} ms). So what is left is the machine's CPU, not the agent's timing: a start waits whenever the agent cannot get a core at its moment.`,
    );
  }
  // Late starts whose dispatches were late too: the coordinator's thread did not keep up.
  const behind = [...x.results, ...x.repeats].filter(
    (r) => r.fires.ran >= r.fires.expected && r.fires.trigger.max > 0 && r.fires.start.p99 > 10,
  );
  if (behind.length) {
    const run = (r: RateResult) =>
      x.repeats.includes(r) ? `run ${x.repeats.indexOf(r) + 2}` : "the rates' run";
    const each = behind.map((r) => {
      const d = r.fires.diagnosis;
      const m = r.process.mainThread;
      return `${n(r.rate)}/s, ${run(r)}: ${n(d.late.arrivedLate)} of the ${n(d.late.count)} starts more than ${LATE_MS} ms late had their dispatch reach the agent after the fire time (trigger p99 ${ms(r.fires.trigger.p99)} ms, max ${ms(r.fires.trigger.max)} ms); ${fmt(r.process.coordinatorCpuMsPerFire)} ms of CPU per fire, ${fmt(r.process.coordinatorCores)} cores, its main thread on a CPU ${pct(100 * m.onCpu)} and waiting for one ${pct(100 * m.waitingForCpu)} of the window, its event loop held up to ${ms(r.worker?.loopDelay?.max ?? 0)} ms; agents ${fmt(r.process.agentCores)} cores, broker ${fmt(r.process.brokerCores)}`;
    });
    out.push(
      `**The coordinator fell behind at times.** Where its work stretched past the 500 ms dispatch lead, starts waited for it: ${each.join("; ")}. Sharing 2 cores with the agents and the broker, its main thread was on a CPU ${pct((100 * behind.reduce((a, r) => a + r.process.mainThread.onCpu, 0)) / behind.length)} of the time on average in these runs, while its work asked for about ${fmt(behind.reduce((a, r) => a + r.process.coordinatorCores, 0) / behind.length)} cores (all its threads).`,
    );
  }
  // Past its ceiling the coordinator falls behind; what matters then is that it stays up.
  for (const r of x.results) {
    if (r.fires.ran >= r.fires.expected || r.worker?.memory == null) continue;
    out.push(
      `**Overloaded at ${n(r.rate)}/s, it falls behind but its memory stays bounded.** Live heap ${fmt((r.worker.memory.liveHeapAfterGc * 1024 * 1024) / 1e6)} MB at the window's end, RSS at most ${fmt(r.process.coordinatorRssMaxMB)} MB: the MQTT link stops reading while ${n(MAX_INBOUND_BACKLOG)} received messages await handling (the rest wait in the broker and in the agents' outboxes), and the dispatcher leaves executions PENDING while ${n(MAX_IN_FLIGHT)} publishes await the broker's acknowledgement. (Without those bounds it ran out of its 256 MB heap within a minute at 5,000/s: 100,000 messages queued unread, 42,000 publishes held.)`,
    );
  }
  const lagging = x.results.filter(
    (r) =>
      r.fires.throughput.firedPerSec > 0.9 * r.rate &&
      (r.fires.ran < r.fires.expected || r.fires.start.p50 > 1_000),
  );
  if (lagging.length) {
    out.push(
      `**Where it stops: fires are recorded on time, dispatches fall behind.** Store calls per second: ${lagging
        .map(
          (r) =>
            `at ${n(r.rate)}/s ${fmt(callsPerSec(r, "recordFires"))} \`recordFires\` and ${fmt(callsPerSec(r, "applyTransition"))} \`applyTransition\` (${fmt(r.process.coordinatorCores)} cores)`,
        )
        .join(
          "; ",
        )}. The firing wheel records each fire in its turn; the dispatcher, the agents' reports and the fires then share one thread, which past about one core of work cannot dispatch what it records, so the backlog is PENDING executions in fire-time order.`,
    );
  }
  for (const r of x.profiles) {
    if (!r.profile) continue;
    const t = r.process.mainThread;
    // Asleep but not idle in the event loop: blocked inside a call.
    const blocked = t.asleep - r.profile.idlePct / 100;
    out.push(
      `**Where the time goes at ${n(r.rate)}/s** (profile below; ${n(r.fires.ran)} of ${n(r.fires.expected)} ran): ${activities(r.profile)}. Its main thread was on a CPU ${pct(100 * t.onCpu)} of the time, waiting for one ${pct(100 * t.waitingForCpu)} and asleep ${pct(100 * t.asleep)}` +
        (blocked > 0.05
          ? `, but idle in the event loop only ${pct(r.profile.idlePct)}: about ${pct(100 * blocked)} of the time it was blocked inside calls, which on this thread are SQLite's writes (a WAL checkpoint writes pages back and fsyncs) and socket writes.`
          : `, and idle in the event loop ${pct(r.profile.idlePct)} (the profile's own count).`),
    );
  }
  // The busiest rate it (nearly) kept up with: at low rates fixed costs (passes every 100 ms,
  // heartbeats, periodic scans) dominate the cost per fire.
  const busiest = [...x.results].reverse().find((r) => r.fires.ran >= 0.9 * r.fires.expected);
  if (busiest) {
    const perFire = busiest.process.coordinatorCpuMsPerFire;
    out.push(
      `**A fire costs about ${fmt(perFire)} ms of coordinator CPU** at ${n(busiest.rate)}/s (all threads; ${x.results
        .filter((r) => r.fires.ran >= 0.9 * r.fires.expected)
        .map((r) => `${fmt(r.process.coordinatorCpuMsPerFire)} ms at ${n(r.rate)}/s`)
        .join(
          ", ",
        )}), from creating it to storing its result. Writes are grouped: at most one SQLite commit per 10 ms holds everything written since the last, and what tells an agent about a write (a dispatch, an ack) waits for it. Per fire that is the fire (job advanced, fire row, execution, timeline row), the dispatch, \`accepted\`, and \`started\` with \`finished\` (folded into one write when they arrive in one burst), each an UPDATE by key and a timeline row; the executions just written are read back from memory. At that cost one core carries about ${n(Math.floor(1000 / perFire))} fires/s, and the agents and the broker share the same 2 cores.`,
    );
  }
  const dupRun = [...x.results].sort((a, b) => dup(b) - dup(a))[0];
  if (dupRun && dup(dupRun) > 0) {
    out.push(
      `**Fires ran twice.** At ${n(dupRun.rate)}/s, ${n(dup(dupRun))} of ${n(dupRun.fires.expected)} nominal times ran twice, ${n(dupRun.fires.duplicatedAcrossAgents)} of them on two different agents (${n(dupRun.fires.redispatched)} executions redispatched, \`stale_reports\` ${n(dupRun.fires.counters.stale_reports ?? 0)}, end-to-end p50 ${ms(dupRun.fires.endToEnd.p50)} ms).`,
    );
  } else {
    out.push(
      "**No nominal time ran twice.** (Before commit 1b73930 a redispatch after `dispatchTimeout` went round robin to another agent while the first still held the dispatch: a development run of this bench at 100/s, with reports waiting 7–10 s, ran 1,750 of 2,000 nominal times twice, each on two agents. Rounds now stay with the first agent while it is live.)",
    );
  }
  const ran = x.results.filter((r) => r.fires.ran > 0 && r.fires.agents.length > 0);
  if (ran.length) {
    const early = ran.filter((r) => r.fires.start.early > 0);
    out.push(
      `**Clocks.** All processes share this machine's clock, so every agent's true offset is 0; their estimates were ${ran.map((r) => `${offsets(r)} ms at ${n(r.rate)}/s`).join(", ")} (last heartbeat, ± uncertainty). ` +
        (early.length
          ? `Fires started early at ${early.map((r) => `${n(r.rate)}/s (${n(r.fires.start.early)}, by up to ${ms(-r.fires.start.min)} ms)`).join(", ")}: the agent never starts before \`fireAt\` on its own estimate, so an early start is the estimate's error. An agent that must never start before the true time would wait out its uncertainty (start at \`fireAt\` + uncertainty).`
          : "No fire started early.") +
        " (Before the embedded broker set TCP_NODELAY, delayed ACKs put these estimates tens of ms off: −18.6 to +15.6 ms, ±22 ms, with up to 69 % of fires early at 50/s in this bench.)",
    );
  }
  const withMem = x.results.filter((r) => r.worker?.memory);
  if (withMem.length) {
    const live = withMem.map((r) => ((r.worker?.memory?.liveHeapAfterGc ?? 0) * 1024 * 1024) / 1e6);
    out.push(
      `**RSS is garbage, not data.** Idle with the store loaded, the coordinator holds ${fmt(Math.min(...x.results.map((r) => r.process.coordinatorIdleRssMB)))} MB; under load ${withMem.map((r) => `${fmt(r.process.coordinatorRssMaxMB)} MB at ${n(r.rate)}/s`).join(", ")}, while a full GC at the window's end leaves ${fmt(Math.min(...live))}–${fmt(Math.max(...live))} MB of live heap: the rest is garbage V8 has not collected yet under its heap cap (\`--max-old-space-size=${COORDINATOR_HEAP_MB}\`, as the coordinator's systemd unit sets it; without it the heap grew to ~500 MB at 2,000/s), SQLite's page cache (up to 64 MiB) and code.`,
    );
  }
  return out;
}

/** The highest rates with nothing lost or duplicated, and also on time, in a sentence. */
function bestRate(results: RateResult[]): string {
  const whole = results.filter((r) => r.fires.lost === 0 && dup(r) === 0);
  const best = whole[whole.length - 1];
  const onTime = whole.filter((r) => r.fires.start.p99 <= TARGETS.startP99Ms).pop();
  if (!best) return "No rate of this run finished with nothing lost or duplicated.";
  const stall = best.fires.stalled;
  return (
    `Nothing was lost or run twice up to **${n(best.rate)}/s** (start p99 ${ms(best.fires.start.p99)} ms${stall ? `, ${n(stall.count)} fires more than ${STALL_MS} ms late between ${stall.fromS.toFixed(1)} and ${stall.toS.toFixed(1)} s into the window` : ""}, end-to-end p99 ${ms(best.fires.endToEnd.p99)} ms, ${best.process.coordinatorCores.toFixed(2)} cores); ` +
    (onTime
      ? `start p99 was within ${TARGETS.startP99Ms} ms up to **${n(onTime.rate)}/s** (${ms(onTime.fires.start.p99)} ms, ${n(onTime.fires.start.early)} started early, end-to-end p99 ${ms(onTime.fires.endToEnd.p99)} ms).`
      : `start p99 was over ${TARGETS.startP99Ms} ms at every rate.`)
  );
}

/** The largest |Date.now() − hostNow()| any agent measured in any run, ms. */
function alignment(x: ReportInput): number {
  const runs = [...x.results, ...x.profiles];
  return Math.max(...runs.map((r) => Math.abs(r.fires.agentClockAlignmentMs)));
}

/** The docs/benchmarks.md section. */
export function renderMarkdown(x: ReportInput): string {
  const m = x.machine;
  const rates = x.results.map((r) => n(r.rate)).join(", ");
  const src = `commit ${m.source.commit}${m.source.modified ? " with uncommitted changes under coordinator/, agent/ or shared/" : ""}`;
  const out: string[] = [
    `## Coordinator: fire lateness, lost and duplicated fires, RSS and CPU${x.o.coordinatorNice === 0 ? "" : `, the coordinator at nice ${x.o.coordinatorNice}`}`,
    `Reproduce with \`npm run bench:coordinator\` (\`tsx bench/coordinator.ts\`; Linux, it reads \`/proc\`). **This run: ${x.o.durationS} s per rate** at ${rates} fires/s${x.o.durationS < 60 ? " (the default, to finish in a few minutes; `npm run bench:coordinator -- --duration 60` runs the issue's full 60 s per rate)" : ""}, plus ${x.profiles.length ? `${x.profiles.length} profiled run(s) of ${x.o.profileDurationS} s` : "no profiled run"}; ${m.runSeconds} s in all; ${src}. ${n(JOBS)} jobs in the store, ${x.o.agents} agents. Measured on ${m.cpus} cores (${m.cpuModel}), load average ${m.loadavgAtStart.join(" / ")} at start and ${m.loadavgAtEnd.join(" / ")} at the end; coordinator, broker and agents share the ${m.cpus} cores ("others" is every other process). One run per rate${x.repeats.length ? `, and ${n(x.repeats.length + 1)} at ${n(TARGET_RATE)}/s` : ""}, so maxima are noisy.`,
    `### Targets at ${n(TARGET_RATE)} fires/s`,
    mdTable(
      ["target", "measured", "verdict"],
      x.targets.map((t) => [
        t.target,
        t.figure,
        t.met === null ? "n/a" : t.met ? "met" : "**not met**",
      ]),
    ),
    ...(x.repeats.length
      ? [
          `Every run at ${n(TARGET_RATE)} fires/s (the rates' run first, then ${n(x.repeats.length)} repeat(s), each a fresh store, broker, coordinator and agents): one run's tail is at the mercy of what else the 2 cores do in that minute, so the targets above are judged over all of them.`,
          mdTable(
            TIMING,
            [...x.results.filter((r) => r.rate === TARGET_RATE), ...x.repeats].map(timingRow),
          ),
          mdTable(
            DIAGNOSIS,
            [...x.results.filter((r) => r.rate === TARGET_RATE), ...x.repeats].map(diagnosisRow),
          ),
        ]
      : []),
    ...authMarkdown(x.auth, x.o.durationS),
    "### Findings",
    bestRate(x.results),
    findings(x)
      .map((f, i) => `${i + 1}. ${f}`)
      .join("\n"),
    "### Per rate",
    "Lateness in ms from the nominal fire time. **start**: the agent's `echo` handler entered (host clock); **early**: started before the nominal time; **agents' offsets**: the clock offsets the agents estimated (coordinator time − their own), as their last heartbeat stored them, ± the largest uncertainty; all share this machine's clock, so the true offset is 0 and each estimate is its own error, by which that agent's starts move; **trigger**: the dispatch arrived at the broker (negative: ahead of time, by up to `dispatchLead`, 500 ms); **e2e**: the execution stored SUCCEEDED (the coordinator's time of that transition). Percentiles are over the fires that got that far; a rate where few did says so in the next table.",
    mdTable(TIMING, x.results.map(timingRow)),
    "**nominal in window**: nominal times the job definitions put in the window; **ran**: of those, how many had their handler entered at least once (from the agents' own logs); **lost**: never ran by the end of the drain; **ran twice**: handler entered more than once for one nominal time, any agent or round (in brackets: on two different agents), plus nominal times with more than one execution row; **redispatched**: executions sent more than once (`dispatch_timeout`, round + 1); **fired/s**, **succeeded/s**: fire records and SUCCEEDED transitions the store got per second of the window, whatever their nominal time; **drain**: time after the window until every nominal time of the window was recorded and none of its executions open (at most 15 s; stopped early when the store had not moved for 3 s).",
    mdTable(FIRES, x.results.map(firesRow)),
    [
      ...x.results.flatMap((r) => [lostLine(r), stallLine(r)]).filter((l) => l !== undefined),
      ...x.results
        .filter((r) => r.stop !== "exit code 0")
        .map((r) => `${n(r.rate)}/s: the coordinator did not handle SIGTERM in 5 s (${r.stop}).`),
    ].join("\n"),
    "Coordinator process (its own node process) over the window, from `/proc`: **CPU** in cores (all its threads) and ms per nominal fire of the window (where at least 90 % of them ran); **main thread**: shares of wall time its JavaScript thread was on a CPU, runnable but waiting for one (the 2 cores are shared), and asleep (idle, or blocked in a call), from `/proc/PID/schedstat`; **RSS** in MB (10⁶ bytes): **idle** once the agents were welcomed (store loaded, nothing due yet), at the window's **end**, **max** sampled in it (every 0.5 s); **live heap**: `heapUsed` after a full `gc()` at the window's end; **loop delay**: how late each turn of a 10 ms interval timer ran in the coordinator, plus at the end how long the loop had been held since its last turn. **broker CPU**: the bench process (the aedes broker, the dispatch observer, the sampler); **agents CPU**: the agents together.",
    mdTable(PROCESS, x.results.map(processRow)),
    "Store calls per second of the window, by method (counted by the Proxy around the coordinator's store; the most called methods).",
    mdTable(...callsTable(x.results)),
    `**Where late starts came from.** **broker → agent**: from the dispatch reaching the broker to the agent's executor taking it (after decoding), ms; **at agent vs nominal**: that moment minus the nominal time (negative: ahead); **starts > ${LATE_MS} ms late**, and how many of those reached their agent after their nominal time (the rest were held by the agent itself); **agent thread on CPU / waiting for CPU**: an agent's main thread on a CPU, and runnable but waiting for one, as shares of the window (from \`/proc/PID/schedstat\`, averaged over the agents); **agent loop held**: gaps of more than ${LOOP_GAP_MS} ms between turns of a ${LOOP_GAP_MS} ms interval timer in each agent, counted over all agents, and the longest.`,
    mdTable(DIAGNOSIS, x.results.map(diagnosisRow)),
  ];
  for (const r of x.profiles) {
    const p = r.profile;
    if (!p) {
      out.push(
        `### CPU profile at ${n(r.rate)}/s\n\nNo profile was written (${JSON.stringify(r.worker?.profile ?? null)}).`,
      );
      continue;
    }
    out.push(
      `### CPU profile at ${n(r.rate)}/s`,
      `The coordinator's main thread over a ${x.o.profileDurationS} s window (a separate run, same setup, 1 ms sampling through \`node:inspector\`; ${fmt(p.sampledMs)} ms sampled, idle ${pct(p.idlePct)}, GC ${pct(p.gcPct)}); that run: ${n(r.fires.ran)} of ${n(r.fires.expected)} ran, start p99 ${ms(r.fires.start.p99)} ms, ${r.process.coordinatorCores.toFixed(2)} cores. Self time: a native call (SQLite's \`all\`/\`run\`/\`get\`, \`JSON.parse\`, a socket write) is shown with the function that called it (\`←\`); an anonymous function is named after its nearest named caller (\`(anonymous in listJobsDueBy)\`: the store's callback that runs the query). Inclusive time counts the synchronous part of each call, so an \`async\` function resumed after an \`await\` is counted from there.`,
      mdTable(["top self time: function (file)", "ms", "share"], profileRows(p.topSelf, 10)),
      mdTable(["inclusive: function (file)", "ms", "share"], profileRows(p.topInclusive, 10)),
    );
  }
  out.push(
    "### How it is measured",
    [
      `- **Store**: for each rate a fresh SQLite file, created by \`SqliteStore\` (its migrations) and filled with plain SQL with ${n(JOBS)} jobs: \`echo\`, trigger \`every\` P = ${n(JOBS)} / rate seconds (50 s at 2,000/s), anchors spread evenly over one period, so nominal times come evenly at the rate; all active; every other field at its default (overlap SKIP, misfire FIRE_ONCE, dispatchTimeout 5 s, one attempt).`,
      `- **Coordinator**: the real \`Coordinator\`, default config (dispatchLeadMs 500, pollMs 100, lookAheadMs 5000, heartbeatMs 5000, misfireThresholdMs 5000, ${x.o.auth === "off" ? 'but `security.messages: "off"` (--auth off)' : '`security.messages: "required"`: the bench\'s agents enrolled, every message MACed'}), ` +
        "alone in a node process (`bench/coordinator-worker.ts`, bundled with esbuild, packages external, run with `--expose-gc`" +
        (x.o.coordinatorNice === 0
          ? ", at the same CPU priority as the agents"
          : `, at nice ${x.o.coordinatorNice} (--coordinator-nice), below the agents`) +
        "). Its store is its own `SqliteStore`, passed in through `deps.store` behind a Proxy that, before each call, runs the window's start and end actions if they are due (event-loop monitor, memory reading, profile): a coordinator far behind can hold its event loop in one chain of microtasks for many seconds, running no timer and handling no signal, but it keeps calling its store.",
      "- **Broker**: the embedded aedes broker (`startEmbeddedBroker`) on port 0 in the bench process, which otherwise only samples `/proc` and notes when each dispatch arrives (the trigger figure; nominal times and broker are on the same machine clock).",
      `- **Agents**: ${x.o.agents} node processes of the real \`Agent\` (\`bench/coordinator-agent.ts\`, bundled like \`buildAgentBundle\`), concurrency 256, queue 10,000, maxPending 100,000, journal in a temp dir, \`synchronous\` NORMAL, \`syncStart\` ${x.o.agentSyncStart ? "on (the agent's default)" : "off (fast agents: a durable start costs one fsync on the agent's thread per start, measured in the journal section; `--agent-sync-start` turns it on)"}. Their \`echo\` returns what the built-in one does and also notes \`performance.timeOrigin + performance.now()\` as it is entered; that clock and \`Date.now()\`, the coordinator's, were at most ${fmt(alignment(x))} ms apart (\`Date.now() − hostNow()\` measured at each agent's start and stop), so start lateness is on the coordinator's clock to within that, and a start "early" by less is within the measurement's error. On SIGTERM each agent stops and writes its log.`,
      `- **Timeline per rate**: prefill (about ${fmt((x.results[0]?.setup.prefillMs ?? 0) / 1000)} s), coordinator, agents once it listens; first nominal time ${SETUP_MS / 1000} s after the prefill began; ${WARMUP_MS / 1000} s warm-up at the full rate, not counted (a cold coordinator ran late for its first 5–8 s at 2,000/s: JIT, caches, heap sizing); the coordinator runs with \`--max-old-space-size=${COORDINATOR_HEAP_MB}\`, as its systemd unit in docs/operations.md starts it; the window; the drain; SIGTERM (then SIGKILL after 5 s) to the coordinator, then the agents; then the store (read-only) and the agents' logs are read and every nominal time of the window accounted for.`,
    ].join("\n"),
    "### For scale",
    "Figures quoted in the issue, not measured here: an xxl-job production write-up reports start p99 232 ms at 2,000 fires per **minute** (33/s); BullMQ delayed jobs at 1,000/s reach p99 ≈ 95 ms, ≈ 16 ms with Redis `hz 100`.",
  );
  return out.join("\n\n");
}
