/**
 * Over-the-air agent updates (docs/rollouts.md, "Agent updates"), on loopback: a coordinator
 * process (`ax coordinator start`, SQLite, the embedded broker in this process) and one real
 * agent process of the sensor-hub bundle in an A/B install, started by its launcher under a
 * supervisor that restarts it as systemd's `Restart=always` does (RestartSec 0.2 s instead of 2 s,
 * which this figure would otherwise be mostly made of). Bundles of two versions are built, signed
 * with the coordinator's key and published; the agent is updated from one to the other `--runs`
 * times, alternately.
 *
 * - **Update time**: from the command's creation to SUCCEEDED (the new version registered and
 *   reported it), and its parts from the agent's own log: download + verify + install + switch
 *   (the handler's start → its "switched" line), the restart (→ the new process's "agent started"),
 *   registration (→ "welcomed by the coordinator").
 * - **Idle RSS**: the agent process's `VmRSS`, the highest of one reading a second from 10 s to
 *   20 s after it registered, before the first update and after each.
 *
 *   npm run bench:ota [-- --runs 3]       (npm run bench:rollout runs it after the rollouts)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { makeBundle } from "../coordinator/bundle/make.js";
import { readSigningKey } from "../coordinator/bundle/signature.js";
import { parseCoordinatorConfig, secretsDir } from "../coordinator/config.js";
import { CHAOS_TOKEN, coordinatorProcess } from "../test/helpers/chaos/coordinator-process.js";
import { tempDir, waitFor } from "../test/helpers/env.js";
import { enrollBeforeStart } from "../test/helpers/identities.js";
import { abInstall, SupervisedAgent, writeJson } from "../test/helpers/ota.js";
import { finishRun, fmt, machineAtStart, mdTable, printTable, writeResults } from "./lib.js";

const { values: opts } = parseArgs({ options: { runs: { type: "string", default: "3" } } });
const RUNS = Number(opts.runs);
const TARGET_UPDATE_MS = 5_000;
const AGENT = "ota-bench-1";
const PROFILE = "sensor-hub";

const started = performance.now();
const machine = machineAtStart();
const tmp = tempDir("ax-bench-ota-");
const broker = await startEmbeddedBroker(0);
const prefix = `axota${Date.now().toString(36)}`;
const coord = await coordinatorProcess(tmp.dir, broker.url, prefix, { heartbeatMs: 1_000 });
const identities = await enrollBeforeStart(coord.config, [AGENT], tmp.dir);
await coord.start();
const api = <T>(method: string, path: string, body?: unknown) => coord.api<T>(method, path, body);

const key = readSigningKey(
  join(secretsDir(parseCoordinatorConfig(coord.config)), "bundle-signing.key"),
);
const versions = ["1.0.0-bench", "1.0.1-bench"];
const bundles: { version: string; sha256: string; bytes: number }[] = [];
let firstDir = "";
for (const version of versions) {
  const b = await makeBundle({
    profile: PROFILE,
    outDir: join(tmp.dir, `bundles-${version}`),
    signingKey: key,
    version,
  });
  if (!firstDir) firstDir = b.dir;
  const res = await fetch(`${coord.url}/api/bundles`, {
    method: "POST",
    headers: { authorization: `Bearer ${CHAOS_TOKEN}`, "content-type": "application/gzip" },
    body: readFileSync(b.archive),
  });
  const record = (await res.json()) as { sha256: string; bytes: number };
  if (res.status >= 300)
    throw new Error(`publish ${version}: ${res.status} ${JSON.stringify(record)}`);
  bundles.push({ version, sha256: record.sha256, bytes: record.bytes });
}

const root = join(tmp.dir, "opt-ax-agent");
abInstall(root, firstDir);
const configFile = join(tmp.dir, "agent.json");
writeJson(configFile, {
  agentId: AGENT,
  mqtt: { url: broker.url, prefix },
  identityFile: identities[AGENT],
  journal: { path: join(tmp.dir, "journal.sqlite") },
});
const logFile = join(tmp.dir, "agent.log");
const device = new SupervisedAgent(root, configFile, logFile);

async function onlineOn(version: string): Promise<void> {
  await waitFor(
    `the agent online on ${version}`,
    async () => {
      const a = await api<{ status: string; bundleVersion?: string }>(
        "GET",
        `/api/agents/${AGENT}`,
      ).catch(() => undefined);
      return a?.status === "online" && a.bundleVersion === version ? true : undefined;
    },
    60_000,
    50,
  );
}

function rssKb(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The highest VmRSS of one reading a second from 10 s to 20 s after now (it just registered). */
async function idleRssMiB(): Promise<number> {
  await new Promise((r) => setTimeout(r, 10_000));
  let max = 0;
  for (let i = 0; i <= 10; i++) {
    max = Math.max(max, rssKb(device.pid) ?? 0);
    await new Promise((r) => setTimeout(r, 1_000));
  }
  return max / 1024;
}

interface LogLine {
  time: string;
  msg: string;
}
function logLines(): LogLine[] {
  return readFileSync(logFile, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as LogLine);
}
/** The time of the first line at or after `from` whose msg starts with `msg`. */
function lineAt(lines: LogLine[], msg: string, from: number): number {
  const l = lines.find((x) => Date.parse(x.time) >= from && x.msg.startsWith(msg));
  return l ? Date.parse(l.time) : Number.NaN;
}

interface Run {
  from: string;
  to: string;
  state: string;
  createToSucceededMs: number;
  startToFinishedMs: number;
  downloadToSwitchMs: number;
  restartMs: number;
  registerMs: number;
  rssAfterMiB: number;
}

let rssBefore = 0;
const runs: Run[] = [];
try {
  device.start();
  await onlineOn(versions[0] as string);
  rssBefore = await idleRssMiB();
  for (let k = 0; k < RUNS; k++) {
    const from = versions[k % 2] as string;
    const target = bundles[(k + 1) % 2] as (typeof bundles)[number];
    const created = Date.now();
    const r = await api<{ executionIds: string[] }>("POST", "/api/commands", {
      agentId: AGENT,
      handler: "agent.update",
      params: { bundle: target.sha256, healthWindowMs: 30_000 },
      timeout: "5m",
    });
    const id = r.executionIds[0] as string;
    const e = await waitFor(
      `update ${id} to end`,
      async () => {
        const x = (
          await api<{
            execution: { state: string; createdAt: number; startedAt: number; finishedAt: number };
          }>("GET", `/api/executions/${id}`)
        ).execution;
        return ["SUCCEEDED", "FAILED", "TIMED_OUT", "EXPIRED", "CANCELED"].includes(x.state)
          ? x
          : undefined;
      },
      60_000,
      20,
    );
    if (e.state !== "SUCCEEDED") throw new Error(`update ${from} → ${target.version}: ${e.state}`);
    const lines = logLines();
    const begin = lineAt(lines, "downloading", created - 1_000);
    const switched = lineAt(lines, "switched", created);
    const newStart = lineAt(lines, "agent started", switched);
    const welcomed = lineAt(lines, "welcomed by the coordinator", newStart);
    const rssAfterMiB = await idleRssMiB();
    runs.push({
      from,
      to: target.version,
      state: e.state,
      createToSucceededMs: e.finishedAt - e.createdAt,
      startToFinishedMs: e.finishedAt - e.startedAt,
      downloadToSwitchMs: switched - begin,
      restartMs: newStart - switched,
      registerMs: welcomed - newStart,
      rssAfterMiB,
    });
    console.log(JSON.stringify(runs.at(-1)));
  }
} finally {
  await device.stop();
  await coord.stop();
  await broker.close();
  finishRun(machine, started);
}
const archiveBytes = bundles[0]?.bytes ?? 0;
tmp.cleanup();

// --- report ---------------------------------------------------------------------------------

const header = [
  "run",
  "from → to",
  "create → SUCCEEDED ms",
  "handler start → reported ms",
  "download + verify + install + switch ms",
  "restart ms",
  "register ms",
  "idle RSS after MiB",
];
const rows = runs.map((r, i) => [
  String(i + 1),
  `${r.from} → ${r.to}`,
  r.createToSucceededMs,
  r.startToFinishedMs,
  r.downloadToSwitchMs,
  r.restartMs,
  r.registerMs,
  r.rssAfterMiB,
]);
const worst = Math.max(...runs.map((r) => r.createToSucceededMs));
const met = runs.length === RUNS && worst <= TARGET_UPDATE_MS;
const rssAfter = runs.map((r) => r.rssAfterMiB).sort((a, b) => a - b);
const rssAfterMax = rssAfter[rssAfter.length - 1] ?? Number.NaN;
const rssAfterMedian = rssAfter[Math.floor(rssAfter.length / 2)] ?? Number.NaN;
/** How far the idle RSS moved: the median after the updates less the reading before them. */
const rssMove = rssAfterMedian - rssBefore;
/** Within this the readings of one version's starts already differ (see the text). */
const RSS_NOISE_MIB = 1;
const rssMet = rssMove <= RSS_NOISE_MIB;
printTable(header, rows);
console.log(
  `\nidle RSS before ${fmt(rssBefore)} MiB; worst update ${fmt(worst)} ms (target ≤ ${TARGET_UPDATE_MS}: ${met ? "met" : "NOT MET"})`,
);

writeResults(
  "ota",
  {
    profile: PROFILE,
    archiveBytes,
    runs,
    rssBeforeMiB: rssBefore,
    rssAfterMiB: rssAfter,
    rssAfterMaxMiB: rssAfterMax,
    rssMoveMiB: rssMove,
    rssMet,
    targetUpdateMs: TARGET_UPDATE_MS,
    met,
    machine,
  },
  `## Over-the-air update of the sensor-hub bundle

\`npm run bench:ota\` (\`tsx bench/ota.ts\`, \`--runs ${RUNS}\`; \`npm run bench:rollout\` runs it too) starts a
coordinator process (\`ax coordinator start\`, SQLite, messages authenticated) on the embedded broker,
builds the ${PROFILE} bundle at two versions (archive ${archiveBytes.toLocaleString("en-US")} bytes), signs them with the
coordinator's bundle key and publishes them, and installs the first into an A/B install
([rollouts.md](rollouts.md#the-device-side-an-ab-install)) run by one real agent process: its
launcher, \`node --max-old-space-size=32 launch.mjs\`, under a supervisor that starts it again
0.2 s after it exits (systemd's \`Restart=always\` with \`RestartSec=2\`, as the bundle's unit has it,
adds 1.8 s to each update's restart). Then it sends \`agent.update\` ${RUNS} times, to the other version each time, on
loopback. ${machine.cpus} cores (${machine.cpuModel}), shared by the coordinator, the broker and the agent.

- *Create → SUCCEEDED*: from the command's creation to its end as the coordinator recorded it,
  which is the new version registering and reporting it.
- *Handler start → reported*: the same from the handler's start on the agent.
- Its parts, from the agent's log: the handler's start (\`downloading\`) to \`switched\` (download,
  sha256, signature and file checks, the install into the other slot, the switch); from there to
  the new process's \`agent started\` (the old one stopping, the supervisor's 0.2 s, Node and the
  launcher starting); from there to \`welcomed by the coordinator\`.
- *Idle RSS*: the agent process's \`VmRSS\`, the highest of one reading a second from 10 s to 20 s
  after it registered.

${mdTable(header, rows)}

Download + verify + switch + re-register: at most ${fmt(worst)} ms from the command's creation; target ≤ ${fmt(TARGET_UPDATE_MS)} ms on loopback: ${met ? "met" : "**not met**"}.
Idle RSS before the first update: ${fmt(rssBefore)} MiB; after each update: ${rssAfter.map((v) => fmt(v)).join(", ")} MiB (median ${fmt(rssAfterMedian)}, ${rssMove >= 0 ? "+" : ""}${fmt(rssMove)} MiB); target: no growth, judged as the median within ${RSS_NOISE_MIB} MiB of the reading before, the spread between readings of fresh starts of one version: ${rssMet ? "met" : "**not met**"}. Each update is a new process (the old one exits, the launcher starts the new version), so nothing of the update stays in the agent that runs after it; what moves between runs is start-to-start variation of V8's heap.`,
);
process.exit(0);
