/**
 * Agent benchmark: fire lateness of the agent's timing wheel against one setTimeout per command
 * (idle and under ~50 % CPU load), bytes per pending entry, and the bundled agent's RSS and
 * journaled dispatch rate over MQTT. Run: `npm run bench:agent` (about 2 minutes on 2 cores).
 *
 * Every lateness and memory scenario runs in a fresh node process (bench/agent-worker.ts bundled
 * with esbuild), one at a time; the RSS scenario runs the bundled agent as a child process.
 */
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import type { LatenessResult, MemoryResult } from "./agent-params.js";
import { renderMarkdown, TARGETS, targetRows } from "./agent-report.js";
import { measureAgentRss } from "./agent-rss.js";
import { printTable, writeResults } from "./lib.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const DIST = join(ROOT, "dist", "bench");
const WORKER = join(DIST, "agent-worker.mjs");

const SIZES = [1_000, 10_000, 100_000];
const MEMORY_N = 100_000;
const MEMORY_IMPLS = ["wheel", "wheel-presized", "timeout", "timeout-int"];
const RSS_COMMANDS = 10_000;
const PACED_WINDOW = 100;
/** Runs of each dispatch mode with authentication on, and as many off (issue 16, item 7). */
const AUTH_REPEATS = 3;

async function buildWorker(): Promise<void> {
  mkdirSync(DIST, { recursive: true });
  await build({
    entryPoints: [join(ROOT, "bench", "agent-worker.ts")],
    outfile: WORKER,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "silent",
  });
}

/** Runs the worker in a fresh node process and parses the JSON line it prints. */
function runWorker<T>(nodeFlags: string[], args: string[], timeoutMs = 60_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeFlags, WORKER, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => {
      out += c;
    });
    child.stderr.setEncoding("utf8").on("data", (c: string) => {
      err += c;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        reject(new Error(`worker ${args.join(" ")} ended ${code ?? signal}: ${err.trim()}`));
        return;
      }
      try {
        resolve(JSON.parse(out.trim().split("\n").pop() ?? "") as T);
      } catch (e) {
        reject(new Error(`worker ${args.join(" ")} printed no JSON: ${out} ${err}`, { cause: e }));
      }
    });
  });
}

async function main(): Promise<void> {
  const started = performance.now();
  const round = (v: number) => Math.round(v * 100) / 100;
  const machine = {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "?",
    loadavgAtStart: loadavg().map(round),
    loadavgAtEnd: [] as number[],
  };
  console.log(
    `agent bench: ${machine.cpus} cores, load average ${machine.loadavgAtStart.join(" ")}`,
  );
  await buildWorker();

  console.log(`\nbytes per pending entry (${MEMORY_N.toLocaleString("en-US")} entries)`);
  const memory: MemoryResult[] = [];
  for (const impl of MEMORY_IMPLS) {
    memory.push(await runWorker<MemoryResult>(["--expose-gc"], ["memory", impl, String(MEMORY_N)]));
  }
  printTable(
    ["structure", "entries", "bytes/entry", "pending at reading"],
    memory.map((m) => [m.impl, m.n, m.bytesPerEntry, m.pending]),
  );

  console.log("\nfire lateness (ms, performance.now() at callback - due)");
  const lateness: LatenessResult[] = [];
  for (const load of [false, true]) {
    for (const n of SIZES) {
      for (const impl of ["wheel", "timeout"] as const) {
        const args = ["lateness", impl, String(n), load ? "load" : "idle"];
        const r = await runWorker<LatenessResult>([], args);
        lateness.push(r);
        console.log(
          `  ${impl.padEnd(7)} n=${String(n).padStart(6)} ${load ? "load" : "idle"}  p99 ${r.p99.toFixed(3)}  early ${r.early}  other processes ${r.otherCores.toFixed(2)} cores`,
        );
      }
    }
  }
  printTable(
    ["timer", "pending", "cpu", "p50", "p99", "p99.9", "max", "early %", "fired", "duty", "others"],
    lateness.map((r) => [
      r.impl,
      r.n,
      r.load ? "~50% load" : "idle",
      r.p50,
      r.p99,
      r.p999,
      r.max,
      r.earlyPct,
      r.fired,
      r.load ? `${(r.loadDuty * 100).toFixed(0)}%` : "-",
      r.otherCores,
    ]),
  );

  console.log(`\nagent RSS and journaled dispatches (${RSS_COMMANDS.toLocaleString("en-US")})`);
  const rss = await measureAgentRss({
    outfile: join(DIST, "agent.mjs"),
    commands: RSS_COMMANDS,
    idleWaitMs: 3_000,
    settleMs: 2_000,
    window: PACED_WINDOW,
    repeats: AUTH_REPEATS,
  });
  printTable(
    [
      "run",
      "auth",
      "idle RSS kB",
      "10k RSS kB",
      "peak kB",
      "accepted",
      "dispatch/s",
      "agent CPU ms",
      "µs/dispatch",
      "dup reports",
      "unverified",
    ],
    rss.runs.map((r) => [
      r.mode === "burst" ? "burst" : `paced (≤ ${r.window} outstanding)`,
      r.auth ? "on" : "off",
      r.idleRssKb,
      r.loadedRssKb,
      r.peakRssKb,
      r.accepted,
      r.dispatchesPerSec,
      r.agentCpuMs,
      r.agentCpuUsPerDispatch,
      r.duplicateReports,
      r.auth ? r.unverified : "-",
    ]),
  );
  console.log(`bare node process RSS: ${rss.bareNodeRssKb} kB`);
  console.log("\nauthentication: agent CPU per dispatch, median of the runs (µs)");
  printTable(
    ["dispatches", "auth off", "auth on", "overhead"],
    [rss.auth.burst, rss.auth.paced].map((c) => [
      c.mode,
      c.offUs,
      c.onUs,
      `${c.overheadPct.toFixed(1)} %`,
    ]),
  );
  console.log(
    `idle RSS (highest of the runs): auth on ${rss.auth.idleRssKbOn} kB, off ${rss.auth.idleRssKbOff} kB`,
  );

  machine.loadavgAtEnd = loadavg().map(round);
  const targets = targetRows(lateness, memory, rss);
  console.log("\ntargets");
  printTable(
    ["target", "figure", "verdict"],
    targets.map((t) => [t.target, t.figure, t.met ? "met" : "NOT MET"]),
  );

  const runSeconds = (performance.now() - started) / 1_000;
  const figures = {
    machine: { ...machine, runSeconds: Math.round(runSeconds) },
    targets: TARGETS,
    verdicts: Object.fromEntries(targets.map((t) => [t.key, { figure: t.value, met: t.met }])),
    lateness,
    memory,
    agent: rss,
  };
  writeResults("agent", figures, renderMarkdown({ lateness, memory, rss, targets, machine }));
  console.log(`done in ${runSeconds.toFixed(0)} s`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
