/**
 * Fleet benchmark (issue 18): one coordinator against 1,000, 5,000 and 10,000 simulated agents on
 * the machine's Mosquitto. Per fleet size, a fresh coordinator process on a fresh store with the
 * agents enrolled and messages authenticated (its default), and the simulator
 * (bench/fleet-sim.ts) running all the agents in one process. Measured: the time to all online,
 * the coordinator's idle RSS and CPU with every agent heartbeating, a command by tag to all of
 * them (accepted, start skew, dispatches after fireAt, all SUCCEEDED), the time to all offline
 * after the simulator is killed with SIGKILL, and the simulator's own event-loop lag and CPU.
 *
 *   npm run bench:fleet                               # 1,000, 5,000 and 10,000; several minutes
 *   options: --agents 1000,5000  --idle 20 (s)  --settle 45 (s)  --lead 10000 (ms)
 *            (45 s of settling: a freshly connected agent asks for a clock sample in every
 *            heartbeat until its estimate is good or it holds 8, about 40 s at a 5 s heartbeat;
 *            the idle figures are of the fleet after that, as it runs for days)
 *            --host 127.0.0.1 --port 1883  --concurrency 200 (connects awaiting CONNACK)
 *            --broker-log FILE (Mosquitto's log, if readable: its notices that it dropped
 *            messages for the coordinator's connection are counted by phase)
 *            --broker own (instead of the broker at --host/--port, a Mosquitto of the bench's
 *            own on a free port, configured as docs/operations.md asks: set_tcp_nodelay, 100
 *            in flight and 100,000 queued per client; its results go to fleet-own-mosquitto)
 *            --idle-heartbeat 0 (the coordinator's idleHeartbeatMs, ms; default: its default, 60 s;
 *            0: every agent heartbeats every 5 s, idle or not; its results go to a section of
 *            their own, "-every-heartbeat")
 *            --read-window 50 (the coordinator's mqtt.readWindowMs, ms; default: its default;
 *            its results go to a section of their own, "-read-window-N")
 *            --death-trials 10 (also the per-agent death trials of bench/fleet-death.ts;
 *            --agents 0 runs those alone)  --keepalive 2 (their agents' keepalive, s)
 *
 * The npm script raises the soft limit of open files to the hard one first: 10,000 connections
 * need 10,000 sockets in the simulator.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { type BrokerProcess, brokerProcess } from "../test/helpers/chaos/broker-process.js";
import { tempDir } from "../test/helpers/env.js";
import { runDeathTrials } from "./fleet-death.js";
import { runScale, type ScaleResult } from "./fleet-scale.js";
import {
  bundleBenchEntry,
  finishRun,
  fmt,
  machineAtStart,
  mdTable,
  printTable,
  writeResults,
} from "./lib.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const DIST = join(ROOT, "dist", "bench");
const WORKER = join(DIST, "fleet-coordinator.mjs");
const SIM = join(DIST, "fleet-sim.mjs");

/** The issue's targets, judged at 10,000 agents. */
const TARGETS = {
  agents: 10_000,
  dispatchedAfterFireAt: 0,
  skewP99Ms: 5,
  idleRssMB: 200,
  idleCpuPct: 5,
  offlineMs: 2_000,
};

/** Measured before this bench existed, by hand, at 10,000 agents (issue 18). */
const BASELINE =
  "10,000 agents: start skew 2.3–3.7 s p50/p99, 65–80 % dispatched after fireAt, 13.7–14.5 % CPU idle with heartbeats, 35 s to connect (300/s), offline within 1.2 s of a kill";

const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "1000,5000,10000" },
    idle: { type: "string", default: "20" },
    settle: { type: "string", default: "45" },
    lead: { type: "string", default: "10000" },
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "1883" },
    concurrency: { type: "string", default: "200" },
    "death-trials": { type: "string", default: "0" },
    keepalive: { type: "string", default: "2" },
    "broker-log": { type: "string" },
    broker: { type: "string", default: "machine" },
    "idle-heartbeat": { type: "string" },
    "read-window": { type: "string" },
  },
  strict: true,
});
const num = (name: string, text: string, min: number) => {
  const n = Number(text);
  if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number ≥ ${min}`);
  return n;
};
const sizes = values.agents
  .split(",")
  .map((a) => num("agents", a, 0))
  .filter((n) => n > 0);
const deathTrials = num("death-trials", values["death-trials"], 0);
const ownBroker = ((b: string) => {
  if (b !== "machine" && b !== "own")
    throw new Error(`--broker must be machine or own, not "${b}"`);
  return b === "own";
})(values.broker);

/** The coordinator's idleHeartbeatMs, when given; undefined: its default (60 s). */
const idleHeartbeatMs =
  values["idle-heartbeat"] === undefined
    ? undefined
    : num("idle-heartbeat", values["idle-heartbeat"], 0);
/** The default's figures and those of every heartbeat at 5 s go to sections of their own. */
const everyHeartbeat = idleHeartbeatMs === 0;
/** The coordinator's mqtt.readWindowMs, when given; undefined: its default. */
const readWindowMs =
  values["read-window"] === undefined ? undefined : num("read-window", values["read-window"], 0);
/** What the run's results are filed under besides the broker: each variant has its own. */
const variant = `${everyHeartbeat ? "-every-heartbeat" : ""}${readWindowMs === undefined ? "" : `-read-window-${readWindowMs}`}`;

async function buildAll(): Promise<void> {
  mkdirSync(DIST, { recursive: true });
  for (const [entry, outfile] of [
    ["fleet-coordinator.ts", WORKER],
    ["fleet-sim.ts", SIM],
  ] as const) {
    await bundleBenchEntry(join(ROOT, "bench", entry), outfile);
  }
}

const ms = (v: number | null) => (v === null ? "—" : fmt(v));
const s = (v: number | null) => (v === null ? "—" : fmt(v / 1000));

function rowsOf(results: ScaleResult[]): (string | number)[][] {
  return results.map((r) => [
    r.agents.toLocaleString("en-US"),
    s(r.onlineMs),
    fmt(r.idle.coordinatorCpuPct),
    fmt(r.idle.coordinatorRssMB),
    ms(r.command.postMs),
    s(r.command.acceptedMs),
    `${fmt(r.command.skew.p50)} / ${fmt(r.command.skew.p99)} / ${fmt(r.command.skew.max)}`,
    `${r.command.dispatchedAfterFireAt} (${fmt(100 * r.command.dispatchedAfterFireAtShare)} %)`,
    s(r.command.succeededMs),
    `${ms(r.offlineMs)}${
      r.offlineReasons
        ? ` (${Object.entries(r.offlineReasons)
            .map(([k, n]) => `${k} ×${n}`)
            .join(", ")})`
        : ""
    }`,
    `${fmt(r.simFanout.lag.p99)} / ${fmt(r.simFanout.lag.max)}`,
    `${fmt(r.simStarts.uncertainty.p50)} / ${fmt(r.simStarts.uncertainty.p99)}`,
    `${fmt(r.simStarts.timerLate.p50)} / ${fmt(r.simStarts.timerLate.p99)}`,
    r.simStarts.hostLate
      ? `${fmt(r.simStarts.hostLate.min ?? Number.NaN)} / ${fmt(r.simStarts.hostLate.p50)} / ${fmt(r.simStarts.hostLate.p99)} / ${fmt(r.simStarts.hostLate.max)}`
      : "—",
    `${fmt(r.idle.simCpuPct)} / ${fmt(r.simFanout.cpuPct)}`,
    r.brokerDrops === null
      ? "—"
      : `${r.brokerDrops.connect} / ${r.brokerDrops.idle} / ${r.brokerDrops.command} / ${r.brokerDrops.death}`,
  ]);
}

const HEADER = [
  "agents",
  "all online s",
  "idle CPU %",
  "idle RSS MB",
  "POST ms",
  "all accepted s",
  "skew p50 / p99 / max ms",
  "dispatched after fireAt",
  "all SUCCEEDED s",
  "all offline ms (why)",
  "sim lag p99 / max ms",
  "uncertainty p50 / p99 ms",
  "sim late p50 / p99 ms",
  "host late min / p50 / p99 / max ms",
  "sim CPU % idle / fan-out",
  "broker drops connect / idle / command / death",
];

function verdicts(r: ScaleResult) {
  const rows: { target: string; figure: string; met: boolean }[] = [
    {
      target: `dispatched after fireAt = ${TARGETS.dispatchedAfterFireAt}`,
      figure: String(r.command.dispatchedAfterFireAt),
      met: r.command.dispatchedAfterFireAt <= TARGETS.dispatchedAfterFireAt,
    },
    {
      target: `start skew p99 ≤ ${TARGETS.skewP99Ms} ms`,
      figure: `${fmt(r.command.skew.p99)} ms`,
      met: r.command.skew.p99 <= TARGETS.skewP99Ms,
    },
    {
      target: `coordinator idle RSS ≤ ${TARGETS.idleRssMB} MB`,
      figure: `${fmt(r.idle.coordinatorRssMB)} MB`,
      met: r.idle.coordinatorRssMB <= TARGETS.idleRssMB,
    },
    {
      target: `coordinator idle CPU ≤ ${TARGETS.idleCpuPct} %`,
      figure: `${fmt(r.idle.coordinatorCpuPct)} %`,
      met: r.idle.coordinatorCpuPct <= TARGETS.idleCpuPct,
    },
    {
      target: `all offline ≤ ${fmt(TARGETS.offlineMs)} ms after the kill`,
      figure: r.offlineMs === null ? "never (60 s)" : `${fmt(r.offlineMs)} ms`,
      met: r.offlineMs !== null && r.offlineMs <= TARGETS.offlineMs,
    },
  ];
  return rows;
}

/** The command that runs this variant of the bench again. */
function reproduce(own: boolean): string {
  const flags = [
    own ? "--broker own" : "",
    everyHeartbeat ? "--idle-heartbeat 0" : "",
    readWindowMs === undefined ? "" : `--read-window ${readWindowMs}`,
  ].filter(Boolean);
  return `npm run bench:fleet${flags.length ? ` -- ${flags.join(" ")}` : ""}`;
}

function markdown(
  results: ScaleResult[],
  judged: ScaleResult | undefined,
  machine: Record<string, unknown>,
  own: boolean,
): string {
  const v = judged ? verdicts(judged) : [];
  const sim = results[results.length - 1];
  const broker = own
    ? "a Mosquitto of the bench's own on a free port, configured as docs/operations.md asks (`set_tcp_nodelay true`, `max_inflight_messages 100`, `max_queued_messages 100000`)"
    : `the broker at ${machine.broker} (the machine's Mosquitto 2, with its default settings: no \`set_tcp_nodelay\`, 20 messages in flight and 1,000 queued per client, where docs/operations.md asks for \`set_tcp_nodelay true\`, 100 and 100,000)`;
  return `## Fleet at scale: a coordinator and up to ${Math.max(...results.map((r) => r.agents)).toLocaleString("en-US")} simulated agents${own ? ", on a broker configured as docs/operations.md says" : ""}${everyHeartbeat ? ", every heartbeat 5 s apart" : ""}${readWindowMs === undefined ? "" : `, reads batched ${readWindowMs} ms apart`}

Reproduce with \`${reproduce(own)}\` (\`bench/fleet.ts\`; \`--agents 1000,5000,10000\` is the default). For each fleet size, one fresh coordinator process (\`bench/fleet-coordinator.ts\`: the real \`Coordinator\` and HTTP API, a fresh SQLite store, \`security.messages: "required"\`, the default heartbeat of 5 s, ${everyHeartbeat ? "and `idleHeartbeatMs: 0`, so that every agent heartbeats every 5 s, idle or not" : idleHeartbeatMs === undefined ? 'idle agents\' heartbeats a minute apart (`idleHeartbeatMs`, its default: docs/protocol.md, "Idle heartbeats")' : `\`idleHeartbeatMs: ${idleHeartbeatMs}\``}, ${readWindowMs === undefined ? "`mqtt.readWindowMs` at its default" : `\`mqtt.readWindowMs: ${readWindowMs}\``} (docs/config.md), \`--max-old-space-size=256\` as the systemd unit of docs/operations.md starts it) with every agent enrolled in bulk before it starts (tag \`fleet=sim\`), and one simulator process (\`bench/fleet-sim.ts\`) running all the agents, each on its own MQTT connection to ${broker}, under a topic prefix of the run's own. The simulator speaks protocol v1 as an agent does (sealed messages, clock exchange with \`heartbeat.time\`, outbox and acks, batches both ways) but keeps its journal in memory and has one instant handler, \`echo\`; its header comment lists what it simplifies. It opens at most ${machine.connectConcurrency} connections awaiting CONNACK at once. Measured on ${machine.cpus} cores (${machine.cpuModel}), load average ${(machine.loadavgAtStart as number[]).join(" / ")} at start and ${(machine.loadavgAtEnd as number[]).join(" / ")} at the end, **shared with other work** (Mosquitto, the simulator and the coordinator are on the same 2 cores, and other processes ran meanwhile): the figures are rough.

- **all online**: from spawning the simulator to the coordinator's agent events saying all N are online.
- **idle**: ${results[0]?.idle.windowS.toFixed(0) ?? "?"} s, ${machine.settleS} s after the last came online, every agent ${everyHeartbeat ? "heartbeating every 5 s" : "idle, heartbeating as its welcome allows"} and nothing else; the coordinator's CPU (user + system, \`/proc/PID/stat\`, % of one core) and RSS (\`VmRSS\`, MB of 10^6 bytes).
- **the command**: \`POST /api/commands\` with \`selector: { tags: { fleet: "sim" } }\`, handler \`echo\`, \`at\` ${fmt(Number(machine.leadMs) / 1000)} s after the POST. *All accepted*: from the POST until no execution is PENDING or DISPATCHED (the store, read-only, every 100 ms). *Skew*: \`startedAt − fireAt\` of every execution as stored (the simulator's start, on its estimate of the coordinator's clock). *Dispatched after fireAt*: executions whose stored \`dispatchedAt\` is after their \`fireAt\`. *All SUCCEEDED*: from the POST.
- **all offline**: from \`kill -9\` of the simulator (the kernel closes every socket, Mosquitto publishes every will) to the coordinator's event for the last agent.
- **sim lag, sim CPU**: the simulator's event-loop delay (\`monitorEventLoopDelay\`) from the POST to all SUCCEEDED, and its CPU in the idle window and in that fan-out.
- **all offline (why)**: with the reason of the coordinator's agent events: \`presence\` (the will) or the heartbeat rule (three missed, 15 s).
- **broker drops**: Mosquitto's notices (\`--broker-log\`; — when not read) that it began dropping messages for the coordinator's connection (its queue for one client, \`max_queued_messages\`, 1,000 by default, was full), by the phase the notice fell in. Mosquitto logs the first drop of a connection only, so a phase after the first with a notice may have dropped without one. A dropped report is re-sent by its agent when acks stall (three heartbeats, 15 s); a dropped hello, after 2 s; a dropped will leaves the agent to the heartbeat rule.
- **uncertainty, sim late**: the skew taken apart, per start, as the simulator saw it. An agent starts once its estimate of the coordinator's clock less the estimate's uncertainty reaches \`fireAt\` (rule 12), so a start is late by the uncertainty (half the round trip of its best clock sample, plus its age × 50 ppm) by design; *sim late* is how far past that moment the simulator's timer and loop actually started it. A skew made of these two is the clock exchange's and the simulator's, not the coordinator's; a dispatch that arrives after \`fireAt\` adds its own lateness to *sim late*.
- **host late**: when the simulator really ran each start, past \`fireAt\`, on the host's clock (\`Date.now()\`, whole milliseconds), which the coordinator stamps \`fireAt\` with (a *min* below 0 would be a start before \`fireAt\`). The skew is what the record says, on the agent's estimate of the coordinator's clock and the simulator's tick; this adds what the record cannot see: the simulator's own lag in reaching the start (its agents share one loop, which a fleet of devices does not) and the estimate's error within its bound.

${mdTable(HEADER, rowsOf(results))}

${
  judged
    ? `Targets at ${judged.agents.toLocaleString("en-US")} agents:

${mdTable(
  ["target", "figure", "verdict"],
  v.map((t) => [t.target, t.figure, t.met ? "met" : "**not met**"]),
)}`
    : `Targets (judged at ${TARGETS.agents.toLocaleString("en-US")} agents): not judged, this run had no ${TARGETS.agents.toLocaleString("en-US")}.`
}

Before this bench, measured by hand: ${BASELINE}.
${
  sim
    ? `
At ${sim.agents.toLocaleString("en-US")} the simulator held ${sim.simCommands.held.toLocaleString("en-US")} commands, ran ${sim.simCommands.runs.toLocaleString("en-US")} (${sim.simCommands.runTwice} twice), and counted ${sim.simCounters.refused ?? 0} refused and ${sim.simCounters.invalid ?? 0} invalid down messages, ${sim.simCounters.replays ?? 0} outbox replays and ${sim.simCounters.disconnects ?? 0} dropped connections; the coordinator logged ${sim.coordinatorLogs?.warn ?? "?"} warnings and ${sim.coordinatorLogs?.error ?? "?"} errors.`
    : ""
}`;
}

async function main(): Promise<void> {
  const started = performance.now();
  const machine = {
    ...machineAtStart(),
    connectConcurrency: num("concurrency", values.concurrency, 1),
    broker: ownBroker ? "own" : `${values.host}:${values.port}`,
    settleS: num("settle", values.settle, 0),
    idleS: num("idle", values.idle, 1),
    leadMs: num("lead", values.lead, 1000),
    idleHeartbeatMs: idleHeartbeatMs ?? "the coordinator's default",
    readWindowMs: readWindowMs ?? "the coordinator's default",
  };
  if (sizes.length > 0) {
    await buildAll();
    const results: ScaleResult[] = [];
    const brokerDir = ownBroker ? tempDir("ax-bench-fleet-broker-") : undefined;
    let broker: BrokerProcess | undefined;
    try {
      if (brokerDir) {
        broker = await brokerProcess(brokerDir.dir, "mosquitto");
        await broker.start();
      }
      for (const agents of sizes) {
        console.log(`\n${agents.toLocaleString("en-US")} simulated agents …`);
        results.push(
          await runScale({
            agents,
            host: broker ? "127.0.0.1" : values.host,
            port: broker ? broker.port : num("port", values.port, 1),
            workerFile: WORKER,
            simFile: SIM,
            idleS: machine.idleS,
            settleS: machine.settleS,
            leadMs: machine.leadMs,
            connectConcurrency: machine.connectConcurrency,
            idleHeartbeatMs,
            readWindowMs,
            brokerLog:
              brokerDir !== undefined
                ? join(brokerDir.dir, "mosquitto-broker.log")
                : values["broker-log"],
          }),
        );
      }
    } finally {
      await broker?.stop();
      brokerDir?.cleanup();
    }
    console.log("");
    printTable(HEADER, rowsOf(results));
    const judged = results.find((r) => r.agents === TARGETS.agents);
    if (judged) {
      console.log(`\ntargets at ${TARGETS.agents.toLocaleString("en-US")} agents`);
      printTable(
        ["target", "figure", "verdict"],
        verdicts(judged).map((t) => [t.target, t.figure, t.met ? "met" : "NOT MET"]),
      );
    }
    finishRun(machine, started);
    writeResults(
      `${ownBroker ? "fleet-own-mosquitto" : "fleet"}${variant}`,
      {
        machine,
        targets: TARGETS,
        baseline: BASELINE,
        verdicts: judged
          ? Object.fromEntries(
              verdicts(judged).map((t) => [t.target, { figure: t.figure, met: t.met }]),
            )
          : null,
        runs: results,
      },
      markdown(results, judged, machine, ownBroker),
    );
  }
  if (deathTrials > 0) await runDeathTrials(deathTrials, num("keepalive", values.keepalive, 1));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
