/**
 * The dispatcher beside a backlog (issue 18: a fleet too big for one process): a coordinator
 * holding N device commands PENDING for agents that are offline, while one agent in reach runs a
 * command and reports its progress R times a second. Each report is applied, acknowledged and
 * runs a dispatch pass, as a fleet's reports do. Prints the coordinator process's CPU at each
 * rate (the embedded broker and the reporting client share the process; at these rates they
 * cost little).
 *
 *   npm run bench:backlog [-- --commands 100000 --rates 0,10,20,50 --seconds 5]
 *   npm run bench:backlog -- --store postgres [--pg-url URL]   # a fresh schema, dropped after
 *
 * With `--store postgres` (URL: --pg-url, else AX_TEST_PG_URL, else the local server's database
 * `test`) the store is PostgreSQL in a schema of its own, and the server's CPU (every process of
 * its postmaster, from /proc) is measured beside the coordinator's; results go to
 * dispatch-backlog-postgres.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import mqtt from "mqtt";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator, openStore } from "../coordinator/coordinator.js";
import { envelope } from "../shared/message.js";
import { decodeAll, encode, topics } from "../shared/protocol/index.js";
import { helloBody } from "../test/helpers/hello.js";
import { dropSchema } from "./coordinator-store-pg.js";
import { knownOfflineAgents } from "./known-agents.js";
import { finishRun, fmt, machineAtStart, mdTable, printTable, writeResults } from "./lib.js";
import { allProcStats, GroupCpu, postgresProcesses } from "./proc-stat.js";

const { values } = parseArgs({
  options: {
    commands: { type: "string", default: "100000" },
    rates: { type: "string", default: "0,10,20,50" },
    seconds: { type: "string", default: "5" },
    store: { type: "string", default: "sqlite" },
    "pg-url": { type: "string" },
  },
  strict: true,
});
if (values.store !== "sqlite" && values.store !== "postgres") {
  console.error(`--store: expected sqlite or postgres, got ${JSON.stringify(values.store)}`);
  process.exit(2);
}
const PG = values.store === "postgres";
const PG_URL =
  values["pg-url"] ?? process.env.AX_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const PG_SCHEMA = `ax_bench_backlog_${process.pid}`;
const COMMANDS = Number(values.commands);
const RATES = (values.rates as string).split(",").map(Number);
const SECONDS = Number(values.seconds);
const OFFLINE_AGENTS = 10_000;
const machine = machineAtStart();
const started = performance.now();

const dir = mkdtempSync(join(tmpdir(), "ax-bench-backlog-"));
const broker = await startEmbeddedBroker(0);
const config = parseCoordinatorConfig({
  store: PG ? { url: PG_URL, schema: PG_SCHEMA } : { path: join(dir, "ax.sqlite") },
  mqtt: { url: `mqtt://127.0.0.1:${broker.port}`, persistentSession: false },
  security: { messages: "off", dir: join(dir, "secrets") },
});
const coordinator = new Coordinator(config, PG ? { store: await openStore(config) } : {});
await coordinator.start();
const rows: (string | number)[][] = [];
const figures: {
  reportsPerS: number;
  cpuPct: number;
  reportsSent: number;
  /** PostgreSQL's CPU over the window, % of a core (with --store postgres). */
  dbCpuPct?: number;
}[] = [];
let reporter: mqtt.MqttClient | undefined;
/** Median ms of one read of pending work, each way (see below). */
const pendingRead = { skipMs: 0, onlyMs: 0 };
try {
  await knownOfflineAgents(
    coordinator,
    Array.from({ length: OFFLINE_AGENTS }, (_, i) => `away-${String(i).padStart(5, "0")}`),
    () => ({ profile: "sensor-hub", handlers: ["echo"], tags: { fleet: "away" } }),
  );
  for (let made = 0; made < COMMANDS; made += OFFLINE_AGENTS) {
    await coordinator.sendCommands({
      selector: { fleet: "away" },
      handler: "echo",
      at: Date.now() + 3_600_000,
      deadline: Date.now() + 7_200_000,
    });
  }

  // One read of pending work, as the dispatcher makes it, both ways: passing over the agents out
  // of reach (skipTargets), and reading the commands of the one in reach (onlyTargets), which is
  // what the dispatcher asks for when fewer agents are in reach than out.
  const away = coordinator.fleet.unreachable();
  const readMs = async (
    options: { skipTargets: readonly string[] } | { onlyTargets: string[] },
  ) => {
    const times: number[] = [];
    for (let i = 0; i < 21; i++) {
      const t0 = performance.now();
      const now = Date.now();
      await coordinator.store.listDue(now, now + 3_600_000, 500, {
        commandsBy: now + 7_200_000,
        ...options,
      });
      times.push(performance.now() - t0);
    }
    return times.sort((a, b) => a - b)[10] as number;
  };
  pendingRead.skipMs = await readMs({ skipTargets: away });
  pendingRead.onlyMs = await readMs({ onlyTargets: ["near-1"] });

  // The agent in reach: hello, a command it accepts and starts, then progress reports.
  const t = topics();
  const agentId = "near-1";
  const client = await mqtt.connectAsync(`mqtt://127.0.0.1:${broker.port}`, { clientId: agentId });
  reporter = client;
  let seq = 0;
  const up = (body: Record<string, unknown>) =>
    client.publishAsync(t.up(agentId), encode(envelope(body as never, Date.now())), { qos: 1 });
  const dispatched = new Promise<{ executionId: string; round: number }>((resolve) => {
    client.on("message", (topic, payload) => {
      for (const d of decodeAll(topic, payload)) {
        if (d.ok && d.value.channel === "down" && d.value.message.type === "dispatch") {
          resolve({ executionId: d.value.message.executionId, round: d.value.message.round });
        }
      }
    });
  });
  await client.subscribeAsync(t.down(agentId), { qos: 1 });
  await up(helloBody(agentId));
  for (let i = 0; i < 100 && coordinator.fleet.get(agentId)?.status !== "online"; i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  await coordinator.sendCommand({ agentId, handler: "echo", deadline: Date.now() + 3_600_000 });
  const ref = await dispatched;
  await up({ type: "accepted", ...ref, seq: ++seq });
  await up({ type: "started", ...ref, seq: ++seq, startedAt: Date.now(), lateMs: 0 });
  await new Promise((r) => setTimeout(r, 2_000));

  for (const rate of RATES) {
    let sent = 0;
    const timer =
      rate > 0
        ? setInterval(() => {
            sent++;
            void up({ type: "progress", ...ref, seq: ++seq, percent: 50 });
          }, 1000 / rate)
        : undefined;
    const heartbeat = setInterval(
      () =>
        void up({
          type: "heartbeat",
          instanceId: `i-${agentId}`,
          running: [ref],
          queued: 0,
          scheduled: 0,
          load: 0,
          clockOffset: { offsetMs: 0, uncertaintyMs: 1 },
          journal: { depth: 1, outboxDepth: 0 },
        }),
      1_000,
    );
    await new Promise((r) => setTimeout(r, 500));
    const db = new GroupCpu();
    if (PG) db.add(postgresProcesses(allProcStats()));
    const cpu0 = process.cpuUsage();
    const wall0 = performance.now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    const cpu = process.cpuUsage(cpu0);
    const wallMs = performance.now() - wall0;
    const cpuPct = (100 * (cpu.user + cpu.system)) / 1000 / wallMs;
    if (timer) clearInterval(timer);
    clearInterval(heartbeat);
    if (PG) {
      db.add(postgresProcesses(allProcStats()));
      const dbCpuPct = (100 * db.ms()) / wallMs;
      figures.push({ reportsPerS: rate, cpuPct, reportsSent: sent, dbCpuPct });
      rows.push([String(rate), cpuPct, dbCpuPct]);
    } else {
      figures.push({ reportsPerS: rate, cpuPct, reportsSent: sent });
      rows.push([String(rate), cpuPct]);
    }
  }
} finally {
  await reporter?.endAsync();
  await coordinator.close();
  await broker.close();
  if (PG) await dropSchema(PG_URL, PG_SCHEMA);
  rmSync(dir, { recursive: true, force: true });
}
finishRun(machine, started);
const header = [
  "progress reports/s",
  "coordinator process CPU % of a core",
  ...(PG ? ["PostgreSQL CPU % of a core"] : []),
];
printTable(header, rows);
writeResults(
  PG ? "dispatch-backlog-postgres" : "dispatch-backlog",
  {
    store: PG ? "postgres" : "sqlite",
    commands: COMMANDS,
    offlineAgents: OFFLINE_AGENTS,
    seconds: SECONDS,
    rates: figures,
    pendingReadMs: pendingRead,
    machine,
  },
  `## The dispatcher beside a backlog for agents out of reach${PG ? ", on PostgreSQL" : ""}

\`npm run bench:backlog${PG ? " -- --store postgres" : ""}\` (\`bench/dispatch-backlog.ts\`): a coordinator on ${PG ? "PostgreSQL (the local server, a schema of its own; its CPU is every process of its postmaster, from `/proc`)" : "SQLite"} holding
${COMMANDS.toLocaleString("en-US")} device commands \`PENDING\` for ${OFFLINE_AGENTS.toLocaleString("en-US")} agents that are offline, while one agent in
reach runs a command and sends \`progress\` reports at each rate (every one applied,
acknowledged, and running a dispatch pass), plus a heartbeat a second. The process's CPU over
${SECONDS} s per rate (the embedded broker and the reporting client are in it too). Measured on
${machine.cpus} cores (${machine.cpuModel.trim()}), load average ${machine.loadavgAtStart.join(" / ")} at start and ${machine.loadavgAtEnd.join(" / ")} at the end.

${mdTable(header, rows)}

One read of pending work (the store's \`listDue\`, median of 21) that passes over every command
waiting for an agent out of reach (\`skipTargets\`): ${fmt(pendingRead.skipMs)} ms; one that reads
the commands of the agents in reach through an index by target (\`onlyTargets\`, what the
dispatcher asks for when fewer agents are in reach than out): ${fmt(pendingRead.onlyMs)} ms. A pass
that a report runs reads pending work again only when the last read found some, once a second,
or when something added pending work (a new execution, an agent back in reach, an execution made
pending again).`,
);
console.log(
  `one read of pending work: ${fmt(pendingRead.skipMs)} ms passing over the agents out of reach, ${fmt(pendingRead.onlyMs)} ms by the agents in reach`,
);
console.log(
  `(reports sent: ${figures.map((f) => `${f.reportsPerS}/s → ${f.reportsSent}`).join(", ")}; ${fmt(machine.runSeconds)} s)`,
);
