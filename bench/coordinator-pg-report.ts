/**
 * Tables, targets and the docs/benchmarks.md section ("Coordinator on PostgreSQL") of
 * `npm run bench:coordinator -- --store postgres`: one cell per coordinator count × rate.
 */
import { JOBS, SETUP_MS, WARMUP_MS } from "./coordinator-params.js";
import { drainText, TARGET_RATE } from "./coordinator-report.js";
import type { RateResult } from "./coordinator-run.js";
import { fmt, mdTable, printTable } from "./lib.js";

/** The issue's targets on PostgreSQL. */
export const PG_TARGETS = { startP99Ms: 10, lost: 0, duplicated: 0, scaleOut: 1.5 };

/** One cell: the runs of one coordinator count at one rate (more than one at the target rate with --repeat). */
export interface Cell {
  coordinators: number;
  rate: number;
  runs: RateResult[];
}

export interface PgTargetRow {
  key: string;
  target: string;
  figure: string;
  met: boolean | null;
}

const n = (v: number) => v.toLocaleString("en-US");
const ms = (v: number) => (Number.isFinite(v) ? fmt(v) : "–");
const pct = (v: number) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} %` : "–");
const dup = (r: RateResult) => r.fires.duplicated + r.fires.duplicateExecutions;
const coordinatorsOf = (r: RateResult) => r.pg?.coordinators ?? [];

/** A run that met the lateness, lost and duplicated targets. */
const onTarget = (r: RateResult) =>
  r.fires.ran > 0 &&
  Number.isFinite(r.fires.start.p99) &&
  r.fires.start.p99 <= PG_TARGETS.startP99Ms &&
  r.fires.lost === 0 &&
  dup(r) === 0;

/** The highest rate every run of which met the targets, for one coordinator count (0: none). */
export function carriedRate(cells: Cell[], coordinators: number): number {
  const ok = cells.filter((c) => c.coordinators === coordinators && c.runs.every(onTarget));
  return ok.reduce((m, c) => Math.max(m, c.rate), 0);
}

export function pgTargetRows(cells: Cell[]): PgTargetRow[] {
  const rows: PgTargetRow[] = [];
  for (const c of cells.filter((x) => x.rate === TARGET_RATE)) {
    const worst = c.runs.reduce((a, b) => (b.fires.start.p99 > a.fires.start.p99 ? b : a));
    rows.push({
      key: `target${c.coordinators}`,
      target: `${n(TARGET_RATE)} fires/s on PostgreSQL, ${c.coordinators} coordinator(s): start p99 ≤ ${PG_TARGETS.startP99Ms} ms, 0 lost, 0 duplicated`,
      figure:
        `p99 ${ms(worst.fires.start.p99)} ms, ${n(Math.max(...c.runs.map((r) => r.fires.lost)))} lost, ` +
        `${n(Math.max(...c.runs.map(dup)))} duplicated` +
        (c.runs.length > 1 ? ` (worst of ${c.runs.length} runs)` : ""),
      met: c.runs.every(onTarget),
    });
  }
  const counts = [...new Set(cells.map((c) => c.coordinators))].sort((a, b) => a - b);
  const one = carriedRate(cells, 1);
  for (const k of counts.filter((x) => x > 1)) {
    const many = carriedRate(cells, k);
    const fired = cells
      .filter((c) => c.coordinators === k)
      .flatMap((c) => c.runs)
      .flatMap((r) => coordinatorsOf(r).slice(1))
      .reduce((a, w) => a + (w.worker?.events.fired ?? 0), 0);
    rows.push({
      key: `scaleOut${k}`,
      target: `${k} coordinators carry at least ${PG_TARGETS.scaleOut}× the rate of one at the same p99 (≤ ${PG_TARGETS.startP99Ms} ms, 0 lost, 0 duplicated)`,
      figure:
        counts.includes(1) && one > 0
          ? `${n(many)}/s with ${k} against ${n(one)}/s with 1 (${fmt(many / one)}×, of the rates run); the standbys fired ${n(fired)} times in all`
          : `${n(many)}/s with ${k}; no rate with 1 coordinator met the p99 to compare with; the standbys fired ${n(fired)} times in all`,
      // With firing `active` the standbys carry no fires; with `shared` they fire their share,
      // and dispatching and reports stay with the active one.
      met: counts.includes(1) && one > 0 ? many >= PG_TARGETS.scaleOut * one : false,
    });
  }
  return rows;
}

const HEADER = [
  "coord.",
  "rate/s",
  "start p50",
  "p99",
  "max",
  "lost",
  "dup.",
  "fired/s",
  "coord. CPU ms/fire (active / standbys)",
  "coord. cores",
  "DB CPU ms/fire",
  "DB % of a core",
  "RSS max MB (each)",
  "drain",
];

/** One row per run. */
function row(r: RateResult): string[] {
  const cs = coordinatorsOf(r);
  const f = r.fires;
  const db = r.pg?.database;
  return [
    n(cs.length),
    n(r.rate),
    ms(f.start.p50),
    ms(f.start.p99),
    ms(f.start.max),
    n(f.lost),
    n(dup(r)),
    fmt(f.throughput.firedPerSec),
    cs.map((c) => fmt(c.cpuMsPerFire)).join(" / "),
    cs.map((c) => c.cores.toFixed(2)).join(" / "),
    db ? fmt(db.cpuMsPerFire) : "–",
    db ? pct(100 * db.cores) : "–",
    cs.map((c) => fmt(c.rssMaxMB)).join(" / "),
    drainText(r),
  ];
}

const SHARE_HEADER = [
  "coord.",
  "rate/s",
  "active coord.",
  "standbys",
  "PostgreSQL",
  "broker (bench)",
  "agents",
  "others",
  "sum of 2 cores",
];

/** How the 2 cores were shared over the window, in cores. */
function shareRow(r: RateResult): string[] {
  const p = r.process;
  const cs = coordinatorsOf(r);
  const standbys = cs.slice(1).reduce((a, c) => a + c.cores, 0);
  const db = r.pg?.database.cores ?? 0;
  const sum = p.coordinatorCores + standbys + db + p.brokerCores + p.agentCores + p.otherCores;
  return [
    n(cs.length),
    n(r.rate),
    p.coordinatorCores.toFixed(2),
    standbys.toFixed(3),
    db.toFixed(2),
    p.brokerCores.toFixed(2),
    p.agentCores.toFixed(2),
    p.otherCores.toFixed(2),
    sum.toFixed(2),
  ];
}

/** The active coordinator's slowest store calls over the window: p50 / p99 / max ms, by method. */
function latencyTable(runs: RateResult[]): [string[], string[][]] {
  const totals = new Map<string, number>();
  for (const r of runs) {
    for (const [name, l] of Object.entries(r.worker?.storeLatency ?? {})) {
      totals.set(name, (totals.get(name) ?? 0) + l.totalMs);
    }
  }
  const names = [...totals]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([name]) => name);
  return [
    ["coord.", "rate/s", ...names.map((x) => `${x} (calls/s; p50 / p99 / max ms)`)],
    runs.map((r) => [
      n(coordinatorsOf(r).length),
      n(r.rate),
      ...names.map((name) => {
        const l = r.worker?.storeLatency?.[name];
        return l
          ? `${fmt(l.n / (r.durationMs / 1000))}; ${ms(l.p50)} / ${ms(l.p99)} / ${ms(l.max)}`
          : "–";
      }),
    ]),
  ];
}

/** Warnings and errors the coordinators logged, and role changes after start, one line each. */
function workerNotes(runs: RateResult[]): string[] {
  const out: string[] = [];
  for (const r of runs) {
    for (const c of coordinatorsOf(r)) {
      const logs = c.worker?.logs;
      const changes = (c.worker?.roles ?? []).slice(1);
      const where = `${coordinatorsOf(r).length} coord. at ${n(r.rate)}/s, ${c.clusterId} (${c.roleAtStart})`;
      if (logs && logs.warn + logs.error > 0) {
        out.push(
          `${where}: ${n(logs.warn)} warnings, ${n(logs.error)} errors logged; first: ${logs.samples
            .slice(0, 3)
            .map((x) => `\`${x.replace(/`/g, "'").slice(0, 200)}\``)
            .join("; ")}`,
        );
      }
      if (changes.length) {
        out.push(`${where}: role changed to ${changes.map((x) => x.role).join(", then ")}`);
      }
      if (c.stop !== "exit code 0") out.push(`${where}: stopped with ${c.stop}`);
    }
  }
  return out;
}

export function printPg(runs: RateResult[]): void {
  console.log(
    "start lateness ms from the nominal time; CPU per nominal fire of the window; DB: all PostgreSQL server processes",
  );
  printTable(HEADER, runs.map(row));
  console.log("cores over the window");
  printTable(SHARE_HEADER, runs.map(shareRow));
  console.log("the active coordinator's store calls over the window");
  printTable(...latencyTable(runs));
  for (const line of workerNotes(runs)) console.log(`  ${line}`);
}

export interface PgReportInput {
  cells: Cell[];
  targets: PgTargetRow[];
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
    agents: number;
    auth: boolean;
    repeat: number;
    /** `cluster.firing` of every coordinator. */
    firing: "active" | "shared";
    /** `cluster.dispatch` of every coordinator. @default "active" */
    dispatch?: "active" | "shared";
  };
  server: string;
  command: string;
}

/** The findings, from the figures. */
function findings(x: PgReportInput): string[] {
  const runs = x.cells.flatMap((c) => c.runs);
  const out: string[] = [];
  const counts = [...new Set(x.cells.map((c) => c.coordinators))].sort((a, b) => a - b);
  out.push(
    `**Carried rate** (the highest rate run with start p99 ≤ ${PG_TARGETS.startP99Ms} ms, 0 lost, 0 duplicated): ${counts.map((k) => `${k} coordinator(s) ${n(carriedRate(x.cells, k))}/s`).join(", ")} (0: none of the rates run).`,
  );
  const many = runs.filter((r) => coordinatorsOf(r).length > 1);
  if (many.length) {
    const standbyCpu = many.flatMap((r) => coordinatorsOf(r).slice(1));
    const fired = standbyCpu.reduce((a, c) => a + (c.worker?.events.fired ?? 0), 0);
    const allFired = many
      .flatMap((r) => coordinatorsOf(r))
      .reduce((a, c) => a + (c.worker?.events.fired ?? 0), 0);
    out.push(
      x.o.dispatch === "shared"
        ? `**Every coordinator works its share** (\`cluster.dispatch: "shared"\`, with firing shared): each fires, routes and dispatches the jobs that hash to it and takes the reports of the agents that hash to it. Over ${n(many.length)} runs with several, the coordinators after the first recorded ${n(fired)} of the ${n(allFired)} fires (${fmt((100 * fired) / Math.max(1, allFired))} %), using ${fmt(Math.min(...standbyCpu.map((c) => c.cores)))}–${fmt(Math.max(...standbyCpu.map((c) => c.cores)))} cores each (${fmt(Math.min(...standbyCpu.map((c) => c.cpuMsPerFire)))}–${fmt(Math.max(...standbyCpu.map((c) => c.cpuMsPerFire)))} ms per fire of the window), RSS ${fmt(Math.min(...standbyCpu.map((c) => c.rssMaxMB)))}–${fmt(Math.max(...standbyCpu.map((c) => c.rssMaxMB)))} MB. Each coordinator also receives, and passes over, the messages of the others' agents; and on 2 shared cores every coordinator takes CPU from the same PostgreSQL, broker and agents.`
        : x.o.firing === "shared"
          ? `**The standbys fire their share** (\`cluster.firing: "shared"\`): over ${n(many.length)} runs with standbys they recorded ${n(fired)} of the ${n(allFired)} fires (${fmt((100 * fired) / Math.max(1, allFired))} %), using ${fmt(Math.min(...standbyCpu.map((c) => c.cores)))}–${fmt(Math.max(...standbyCpu.map((c) => c.cores)))} cores each (${fmt(Math.min(...standbyCpu.map((c) => c.cpuMsPerFire)))}–${fmt(Math.max(...standbyCpu.map((c) => c.cpuMsPerFire)))} ms per fire of the window), RSS ${fmt(Math.min(...standbyCpu.map((c) => c.rssMaxMB)))}–${fmt(Math.max(...standbyCpu.map((c) => c.rssMaxMB)))} MB. The active one still dispatches every execution and takes every report, which is most of a fire's work (the transitions), so the firing moved off it is the smaller part; and on 2 shared cores every coordinator takes CPU from the same PostgreSQL, broker and agents.`
          : `**Standbys carry nothing, by design** (\`cluster.firing: "active"\`). One coordinator is active (the oldest live member) and the others only renew their membership lease one coordinator is active (the oldest live member) and the others only renew their membership lease (every ${"⅓"} of \`cluster.leaseMs\`, 3 s) and wait to take over; so adding coordinators adds availability, not rate. Over ${n(many.length)} runs with standbys they fired ${n(fired)} times and used ${fmt(Math.min(...standbyCpu.map((c) => c.cores)))}–${fmt(Math.max(...standbyCpu.map((c) => c.cores)))} cores each (${fmt(Math.min(...standbyCpu.map((c) => c.cpuMsPerFire)))}–${fmt(Math.max(...standbyCpu.map((c) => c.cpuMsPerFire)))} ms per fire of the active one's), RSS ${fmt(Math.min(...standbyCpu.map((c) => c.rssMaxMB)))}–${fmt(Math.max(...standbyCpu.map((c) => c.rssMaxMB)))} MB. What they cost the active one is their share of the 2 cores and of PostgreSQL: compare the rows with 1 and with ${n(Math.max(...counts))} at the same rate.`,
    );
  }
  const takeovers = runs.filter((r) =>
    coordinatorsOf(r).some(
      (c) => (c.worker?.roles ?? []).length > 1 || c.roleAtEnd !== c.roleAtStart,
    ),
  );
  if (takeovers.length) {
    out.push(
      `**Roles changed during ${n(takeovers.length)} run(s)**: ${takeovers
        .map(
          (r) =>
            `${coordinatorsOf(r).length} coord. at ${n(r.rate)}/s: ${coordinatorsOf(r)
              .map((c) => `${c.clusterId} ${c.roleAtStart} → ${c.roleAtEnd}`)
              .join(", ")}`,
        )
        .join(
          "; ",
        )}. A coordinator fences itself when its last renewal is \`cluster.leaseMs\` (3 s by default) less a margin old on its own clock, and the store refuses its writes once the lease has lapsed. \`renewMembership\` (and the \`listCoordinators\` and \`clockNow\` reads after it) go through the same pool (\`store.poolMax\`, 10) as the fires and transitions, first come first served: once the fires queue for seconds there (the store-call table below), the renewal waits with them, the lease lapses, and the coordinator stops firing; a standby, where there is one, takes over the same backlog and meets the same fate.`,
    );
  }
  const db = runs.filter((r) => r.pg);
  if (db.length) {
    out.push(
      `**PostgreSQL's CPU** (every server process: the coordinators' backends, WAL writer, checkpointer, autovacuum): ${db
        .map(
          (r) =>
            `${fmt(r.pg?.database.cpuMsPerFire ?? Number.NaN)} ms per fire, ${pct(100 * (r.pg?.database.cores ?? Number.NaN))} of a core at ${n(r.rate)}/s with ${coordinatorsOf(r).length}`,
        )
        .join("; ")}.`,
    );
  }
  return out;
}

/** The docs/benchmarks.md section. */
export function renderPgMarkdown(x: PgReportInput): string {
  const m = x.machine;
  const runs = x.cells.flatMap((c) => c.runs);
  const src = `commit ${m.source.commit}${m.source.modified ? " with uncommitted changes under coordinator/, agent/ or shared/" : ""}`;
  const notes = workerNotes(runs);
  return [
    "## Coordinator on PostgreSQL",
    `Reproduce with \`${x.command}\` (\`tsx bench/coordinator.ts --store postgres\`; Linux, it reads \`/proc\`; \`--pg-url\`, else \`AX_BENCH_PG_URL\`, else \`AX_TEST_PG_URL\`, else \`postgres://postgres@127.0.0.1:5432/test\`). **This run: ${x.o.durationS} s windows**, ${m.runSeconds} s in all; ${src}; ${x.server}. ${n(JOBS)} jobs, ${x.o.agents} agents, messages ${x.o.auth ? "authenticated (the default)" : "not authenticated (`--auth off`)"}; each cell a fresh schema, broker, coordinator(s) and agents, one run per cell${x.o.repeat > 1 ? ` (${x.o.repeat} at ${n(TARGET_RATE)}/s)` : ""}, so maxima and p99 are noisy. Measured on ${m.cpus} cores (${m.cpuModel}), load average ${m.loadavgAtStart.join(" / ")} at start and ${m.loadavgAtEnd.join(" / ")} at the end. **Everything shares those 2 cores**: the coordinator(s), PostgreSQL, the broker (in the bench process) and the agents, so every figure is of the whole machine under this load, not of the store alone.`,
    "### Targets",
    mdTable(
      ["target", "measured", "verdict"],
      x.targets.map((t) => [
        t.target,
        t.figure,
        t.met === null ? "n/a" : t.met ? "met" : "**not met**",
      ]),
    ),
    x.o.dispatch === "shared"
      ? 'How the work is shared (`coordinator/engine/membership.ts`): with `cluster.dispatch: "shared"` (and firing shared) no coordinator stands by; each fires, routes and dispatches the jobs that hash to it, and handles the agents that hash to it (their reports, their commands, the leases of what they hold). In the tables below "active" is the first coordinator and "standbys" the others, all of them working.'
      : x.o.firing === "shared"
        ? 'How the work is shared in this version (`coordinator/engine/membership.ts`): with `cluster.firing: "shared"` every coordinator fires the jobs that hash to it, and the active one (the oldest live member) dispatches every execution and takes every report; the others take over when its lease lapses. Dispatching and reports are not shared out in this mode (they are with `--dispatch shared`), so what several coordinators add is the firing\'s share of the work.'
        : 'The scale-out target is **not met by design** with `cluster.firing: "active"`: one coordinator is active and the standbys take over when its lease lapses, but fire nothing meanwhile, so the rate a cluster carries is the rate one coordinator carries, less what the standbys\' renewals take from the shared cores.',
    "### Findings",
    findings(x)
      .map((f, i) => `${i + 1}. ${f}`)
      .join("\n"),
    "### Per cell",
    "**start**: the agent's `echo` handler entered (host clock) minus the nominal time, ms; **lost**: nominal times of the window never run by the end of the drain; **dup.**: nominal times run more than once, plus those with more than one execution row; **fired/s**: fires recorded per second of the window; **coord. CPU ms/fire**: each coordinator process's user + system time (`/proc/PID/stat`) over the window per nominal fire of the window, the active one first, then the standbys; **coord. cores**: the same in cores; **DB**: the CPU time of every PostgreSQL server process (the postmaster and its children, found by name and parent in `/proc`; a backend that ended keeps what it used, one that started counts from 0) over the window, per fire and as a share of one core; **RSS max**: each coordinator's highest VmRSS sampled in the window (every 0.5 s), MB (10⁶ bytes).",
    mdTable(HEADER, runs.map(row)),
    "How the 2 cores were shared over the window, in cores: the active coordinator, the standbys together, PostgreSQL, the bench process (the embedded broker, the dispatch observer and the `/proc` sampler), the agents together, and every other process on the machine (from `/proc/stat`).",
    mdTable(SHARE_HEADER, runs.map(shareRow)),
    "The active coordinator's store calls over the window (the methods with the most time in all): calls per second, and p50 / p99 / max ms from the call to its promise settling (measured in the coordinator, so it includes waiting for the pool and the event loop, not only the query).",
    mdTable(...latencyTable(runs)),
    ...(notes.length
      ? [
          "Warnings and errors the coordinators logged, role changes and unclean stops:",
          notes.map((l) => `- ${l}`).join("\n"),
        ]
      : [
          "No coordinator logged a warning or an error, changed role after start, or failed to stop cleanly.",
        ]),
    "### How it is measured",
    [
      `- **Store**: for each cell a fresh schema (\`ax_b_\` + 12 hex digits), created and migrated by the real \`PgStore.open\`, then filled by plain SQL (one transaction, INSERT … SELECT FROM unnest of arrays, 10,000 rows a statement, then ANALYZE) with the same ${n(JOBS)} jobs as the SQLite bench (\`echo\`, trigger \`every\` ${n(JOBS)} / rate seconds, anchors spread evenly, every other field at its default), the columns \`putJob\` fills (trigger type, dispatch lead, next fire time) and version 1 of each; about ${fmt((runs[0]?.setup.prefillMs ?? 0) / 1000)} s. Dropped after the cell.`,
      "- **Coordinators**: the real `Coordinator` (default config, `store.url`/`schema`, pool of 10) in its own node process each (`bench/coordinator-worker.ts`), each with its own `cluster.id` and MQTT client id and the same secrets folder. The first is started and reported active before the others start, so it is the oldest member and the others are standbys; only it enrols the agents. Store calls are timed by the Proxy the worker puts around the store. At the end the standbys are stopped first, so none takes over while the active one goes.",
      `- **Timeline per cell**: prefill, coordinators, agents; first nominal time ${SETUP_MS / 1000} s after the prefill began; ${WARMUP_MS / 1000} s warm-up not counted; the ${x.o.durationS} s window; the drain (at most 15 s); then the schema is read back with the SQLite bench's queries and every nominal time of the window accounted for, as in the section above.`,
      "- **Database CPU** needs the server on this machine and otherwise idle: any other client's work on it is counted too.",
    ].join("\n"),
  ].join("\n\n");
}
