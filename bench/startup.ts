/**
 * Start-up costs of the shipped CLI (issue 17): `ax --help` and `ax --version` (wall time and
 * peak RSS of the whole process, measured by GNU time), and `ax coordinator start` from spawn to
 * the first answered GET /api/health, on a new store (migrations, secrets) and on an existing one.
 * Runs the compiled CLI (bin/ax.js → dist/), so build first: `npm run build`.
 *
 *   npm run bench:startup [-- --runs N]
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { fmt, mdTable, percentile, printTable, writeResults } from "./lib.js";

const AX = fileURLToPath(new URL("../bin/ax.js", import.meta.url));
const TIME = "/usr/bin/time";
const runsFlag = process.argv.indexOf("--runs");
const RUNS = runsFlag > 0 ? Number(process.argv[runsFlag + 1]) : 20;
const TARGETS = { helpMs: 150, helpRssMb: 60, readyMs: 500 };

if (!existsSync(fileURLToPath(new URL("../dist/ax.js", import.meta.url)))) {
  throw new Error("dist/ is missing: run `npm run build` first");
}
if (!existsSync(TIME)) throw new Error(`${TIME} (GNU time) is needed to measure peak RSS`);

interface Sample {
  ms: number;
  rssMb: number;
}

/** One run of `ax ARGS`: wall time around the spawn, peak RSS as GNU time reports it. */
function runCli(args: string[]): Sample {
  const started = performance.now();
  const r = spawnSync(TIME, ["-f", "%M", process.execPath, AX, ...args], { encoding: "utf8" });
  const ms = performance.now() - started;
  if (r.status !== 0) throw new Error(`ax ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
  const kb = Number(r.stderr.trim().split("\n").pop());
  return { ms, rssMb: (kb * 1024) / 1e6 };
}

function summarise(samples: Sample[]) {
  const ms = samples.map((s) => s.ms).sort((a, b) => a - b);
  const rss = samples.map((s) => s.rssMb).sort((a, b) => a - b);
  return {
    medianMs: percentile(ms, 50),
    p95Ms: percentile(ms, 95),
    maxRssMb: rss[rss.length - 1] as number,
  };
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Spawns `ax coordinator start`; resolves with ms to the first 200 from /api/health, and RSS then. */
async function coordinatorReady(dir: string, mqttUrl: string): Promise<Sample> {
  const port = await freePort();
  const config = join(dir, "coordinator.json");
  writeFileSync(
    config,
    JSON.stringify({
      store: { path: join(dir, "ax.sqlite") },
      mqtt: { url: mqttUrl, persistentSession: false },
      http: { port },
    }),
  );
  const started = performance.now();
  const child = spawn(process.execPath, [AX, "coordinator", "start", "--config", config], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr += String(d);
  });
  try {
    for (;;) {
      if (child.exitCode !== null)
        throw new Error(`coordinator exited ${child.exitCode}: ${stderr}`);
      if (performance.now() - started > 10_000) throw new Error(`not ready in 10 s: ${stderr}`);
      const ok = await fetch(`http://127.0.0.1:${port}/api/health`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    const ms = performance.now() - started;
    const status = readFileSync(`/proc/${child.pid}/status`, "utf8");
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
    return { ms, rssMb: (kb * 1024) / 1e6 };
  } finally {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }
}

const help = summarise(Array.from({ length: RUNS }, () => runCli(["--help"])));
const version = summarise(Array.from({ length: RUNS }, () => runCli(["--version"])));

const broker = await startEmbeddedBroker(0);
const mqttUrl = `mqtt://127.0.0.1:${broker.port}`;
const fresh: Sample[] = [];
const warm: Sample[] = [];
try {
  for (let i = 0; i < Math.max(3, Math.round(RUNS / 2)); i++) {
    const dir = mkdtempSync(join(tmpdir(), "ax-bench-start-"));
    try {
      fresh.push(await coordinatorReady(dir, mqttUrl));
      warm.push(await coordinatorReady(dir, mqttUrl));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
} finally {
  await broker.close();
}
const first = summarise(fresh);
const again = summarise(warm);

const rows: (string | number)[][] = [
  [
    "ax --help",
    help.medianMs,
    help.p95Ms,
    help.maxRssMb,
    `≤ ${TARGETS.helpMs} ms, ≤ ${TARGETS.helpRssMb} MB`,
  ],
  ["ax --version", version.medianMs, version.p95Ms, version.maxRssMb, "—"],
  [
    "coordinator start → HTTP ready, new store",
    first.medianMs,
    first.p95Ms,
    first.maxRssMb,
    `≤ ${TARGETS.readyMs} ms`,
  ],
  [
    "coordinator start → HTTP ready, existing store",
    again.medianMs,
    again.p95Ms,
    again.maxRssMb,
    `≤ ${TARGETS.readyMs} ms`,
  ],
];
const header = ["what", "median ms", "p95 ms", "RSS MB (peak / at ready)", "target"];
printTable(header, rows);

const met = {
  help: help.p95Ms <= TARGETS.helpMs && help.maxRssMb <= TARGETS.helpRssMb,
  ready: first.p95Ms <= TARGETS.readyMs && again.p95Ms <= TARGETS.readyMs,
};
writeResults(
  "startup",
  {
    runs: RUNS,
    targets: TARGETS,
    help,
    version,
    readyNewStore: first,
    readyExistingStore: again,
    met,
  },
  `## Start-up: \`ax --help\` and coordinator start → HTTP ready

\`npm run bench:startup\` runs the compiled CLI (\`bin/ax.js\` → \`dist/\`) as a user's shell does:
\`ax --help\` and \`ax --version\` ${RUNS} times each (wall time around the spawn; peak RSS of the
process from GNU time's \`%M\`), and \`ax coordinator start\` against an embedded broker from spawn to
the first 200 from \`GET /api/health\` (RSS read from /proc at that moment), on a new store (schema
migrations, secrets created) and again on the same store.

${mdTable(header, rows)}

Targets ${met.help ? "met" : "NOT met"} for \`ax --help\` (p95 ${fmt(help.p95Ms)} ms, ${fmt(help.maxRssMb)} MB) and ${met.ready ? "met" : "NOT met"} for start → ready (p95 ${fmt(Math.max(first.p95Ms, again.p95Ms))} ms). Before the compiled distribution (commit b8f7ef1: the TypeScript sources through tsx at run
time), \`ax --help\` took 0.65–0.90 s and 113–124 MB on the same machine (\`/usr/bin/time\`, 5 runs).`,
);
