/**
 * The fleet API at scale (issue 18, item 4): a coordinator that knows N agents (written to its
 * store and loaded as at a start, so they are offline: no simulator needed for what this measures)
 * answers `GET /api/agents` (one page of 1,000, and a filtered search) and
 * `POST /api/commands` by tag to all N of them, each timed twice: from a client in this process
 * (which shares the coordinator's event loop) and from one in a process of its own
 * (bench/fleet-api-peer.ts), as an operator's is. Then the fan-out of a command to N online
 * agents, twice: with the broker and the answering agents in this process, and with them in
 * processes of their own (a Mosquitto of the bench's own when one is installed, else the embedded
 * broker in a child process), as a deployment has them.
 *
 *   npm run bench:fleet-api [-- --agents N --runs R]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import mqtt, { type MqttClient } from "mqtt";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator } from "../coordinator/coordinator.js";
import { startHttpServer } from "../coordinator/http/server.js";
import {
  type BrokerProcess,
  brokerProcess,
  mosquittoInstalled,
} from "../test/helpers/chaos/broker-process.js";
import { endChild } from "../test/helpers/chaos/children.js";
import { answerDispatches } from "./fleet-api-answer.js";
import { knownOfflineAgents } from "./known-agents.js";
import {
  callApi,
  finishRun,
  fmt,
  machineAtStart,
  mdTable,
  percentile,
  printTable,
  writeResults,
} from "./lib.js";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const machine = machineAtStart();
const benchStarted = performance.now();
const AGENTS = arg("agents", 10_000);
const RUNS = arg("runs", 5);
const TARGET_POST_MS = 100;

const PEER = fileURLToPath(new URL("./fleet-api-peer.ts", import.meta.url));

/** bench/fleet-api-peer.ts in a child process of its own. */
function peer(args: string[]): ChildProcess {
  return spawn(process.execPath, ["--import", "tsx", PEER, ...args], {
    stdio: ["pipe", "pipe", "inherit"],
  });
}

/** The lines `child` prints, one at a time: each call resolves with the next. */
function linesOf(child: ChildProcess): () => Promise<string> {
  const queued: string[] = [];
  const waiting: { resolve: (line: string) => void; reject: (err: Error) => void }[] = [];
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
    const w = waiting.shift();
    if (w) w.resolve(line);
    else queued.push(line);
  });
  child.once("exit", (code) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`fleet-api-peer exited (${code})`));
  });
  return () => {
    const line = queued.shift();
    if (line !== undefined) return Promise.resolve(line);
    return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
  };
}

/**
 * A started coordinator on a fresh store in a temp folder, and its broker: the embedded one in
 * this process, or `external` (a broker in another process).
 */
async function freshCoordinator(name: string, external?: { url: string; prefix: string }) {
  const dir = mkdtempSync(join(tmpdir(), `ax-bench-${name}-`));
  const broker = external === undefined ? await startEmbeddedBroker(0) : undefined;
  const coordinator = new Coordinator(
    parseCoordinatorConfig({
      store: { path: join(dir, "ax.sqlite") },
      mqtt: {
        url: external?.url ?? `mqtt://127.0.0.1:${broker?.port}`,
        prefix: external?.prefix ?? "ax",
        persistentSession: false,
      },
      security: { messages: "off" },
    }),
  );
  await coordinator.start();
  return { dir, broker, coordinator };
}

const { dir, broker, coordinator } = await freshCoordinator("fleet-api");
const http = await startHttpServer(coordinator, { port: 0 });
const token = readFileSync(join(dir, "ax-secrets", "admin.token"), "utf8").trim();

await knownOfflineAgents(
  coordinator,
  Array.from({ length: AGENTS }, (_, i) => `sim-${String(i).padStart(5, "0")}`),
  (i) => ({
    profile: i % 10 === 0 ? "gateway" : "sensor-hub",
    handlers: ["mqtt.publish", "file.write"],
    tags: { site: `site-${i % 100}`, fleet: "all" },
  }),
);

async function call(method: string, path: string, body?: unknown) {
  const { ms, text } = await callApi(http.url, token, method, path, body);
  return { ms, bytes: Buffer.byteLength(text), json: JSON.parse(text) as Record<string, unknown> };
}

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: percentile(s, 50), max: s[s.length - 1] as number };
};

const pages: number[] = [];
const searches: number[] = [];
const posts: number[] = [];
/** The same requests from a client in a process of its own. */
const extPages: number[] = [];
const extSearches: number[] = [];
const extPosts: number[] = [];
let pageBytes = 0;
let postBytes = 0;
let targets = 0;
/** CPU of this process, % of a core, while commands wait for offline agents (see below). */
let queuedIdleCpuPct = Number.NaN;
const QUEUED_IDLE_MS = 5_000;
const commandBody = () => ({
  selector: { tags: { fleet: "all" } },
  handler: "file.write",
  params: { path: "/sys/class/gpio/gpio17/value", value: "1" },
  at: Date.now() + 3_600_000,
  deadline: Date.now() + 3_660_000,
});
const PAGE = "/api/agents";
const SEARCH = "/api/agents?tag=site%3Dsite-7&q=sim-0&limit=100";
const client = peer(["client", http.url, token]);
const clientLine = linesOf(client);
/** One request made by the client process; its time as that process measured it. */
async function external(method: string, path: string, body?: unknown): Promise<number> {
  const answer = clientLine();
  client.stdin?.write(`${JSON.stringify({ method, path, body })}\n`);
  const r = JSON.parse(await answer) as { ms: number; status: number; error: string | null };
  if (r.error !== null) throw new Error(`${method} ${path}: ${r.status} ${r.error}`);
  return r.ms;
}
try {
  // Each round makes its requests from this process, then the same from the client process,
  // so both meet a store of about the same size (each POST adds N executions).
  for (let r = 0; r < RUNS; r++) {
    const page = await call("GET", PAGE);
    pages.push(page.ms);
    pageBytes = page.bytes;
    searches.push((await call("GET", SEARCH)).ms);
    const post = await call("POST", "/api/commands", commandBody());
    posts.push(post.ms);
    postBytes = post.bytes;
    targets = (post.json.targets as unknown[]).length;
    // Let the dispatch pass that the POST kicked end first, as a client elsewhere would not
    // have waited for it either way.
    await new Promise((res) => setTimeout(res, 200));
    extPages.push(await external("GET", PAGE));
    extSearches.push(await external("GET", SEARCH));
    extPosts.push(await external("POST", "/api/commands", commandBody()));
    await new Promise((res) => setTimeout(res, 200));
  }
  // The commands just sent wait PENDING for agents that are offline: what does holding them
  // cost a coordinator with nothing else to do? (This process is the coordinator, its broker
  // and this client; only the coordinator has work while it waits.)
  await new Promise((res) => setTimeout(res, 1_000));
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  await new Promise((res) => setTimeout(res, QUEUED_IDLE_MS));
  const cpu = process.cpuUsage(cpu0);
  queuedIdleCpuPct = (100 * (cpu.user + cpu.system)) / 1000 / (performance.now() - wall0);
} finally {
  client.stdin?.end();
  await endChild(client);
  await http.close();
  await coordinator.close();
  await broker?.close();
  rmSync(dir, { recursive: true, force: true });
}

/** Where the fan-out's broker and agents run. */
type FanOutPlace = "this process" | "own processes";

/**
 * Fan-out: the same command to N agents that are online (each said hello, as N devices would),
 * timed from the POST to the last of its N dispatches leaving (DISPATCHED: written and handed to
 * the MQTT client). One MQTT client answers every dispatch `accepted`, as the agents would, since
 * the dispatcher paces itself by its answers. A fresh coordinator, so the executions created
 * above do not join in. `place`: the broker and that client in this process (the embedded broker),
 * or each in a process of its own (a Mosquitto of the bench's own, configured as
 * docs/operations.md asks, when one is installed; else the embedded broker in a child process).
 */
async function fanOut(place: FanOutPlace): Promise<{ runs: number[]; broker: string }> {
  const prefix = `fan${process.pid}`;
  const brokerDir = place === "own processes" ? mkdtempSync(join(tmpdir(), "ax-fan-")) : undefined;
  let brokerChild: BrokerProcess | undefined;
  if (brokerDir !== undefined) {
    brokerChild = await brokerProcess(brokerDir, mosquittoInstalled() ? "mosquitto" : "embedded");
    await brokerChild.start();
  }
  const {
    dir: fanDir,
    broker: fanBroker,
    coordinator: c,
  } = await freshCoordinator(
    "fan-out",
    brokerChild === undefined ? undefined : { url: brokerChild.url, prefix },
  );
  const out: number[] = [];
  let answerer: MqttClient | undefined;
  let agentsChild: ChildProcess | undefined;
  try {
    for (let i = 0; i < AGENTS; i++) {
      const id = `sim-${String(i).padStart(5, "0")}`;
      await c.fleet.hello(
        {
          v: 1,
          type: "hello",
          msgId: `m-${id}`,
          sentAt: Date.now(),
          agentId: id,
          instanceId: id,
          journalId: id,
          lastSeq: 0,
          profile: "sensor-hub",
          bundle: { version: "0.1.0", sha256: "dev" },
          handlers: ["echo"],
          capacity: { concurrency: 2, queue: 16 },
          tags: { fleet: "all" },
          batchBytes: 65_536,
        },
        Date.now(),
      );
    }
    await c.store.flush();
    // The agents' side, as little of it as the fan-out needs: every dispatch is answered
    // `accepted` (the dispatcher paces itself by its answers), from one MQTT client.
    if (brokerChild !== undefined) {
      agentsChild = peer(["agents", brokerChild.url, prefix]);
      const ready = await linesOf(agentsChild)();
      if (ready !== "ready") throw new Error(`fleet-api-peer agents: ${ready}`);
    } else {
      answerer = await mqtt.connectAsync(`mqtt://127.0.0.1:${fanBroker?.port}`, {
        clientId: "fan-out-agents",
      });
      await answerDispatches(answerer, "ax");
    }
    let dispatched = 0;
    let lastAt = 0;
    c.events.on("transition", (e) => {
      if (e.to !== "DISPATCHED") return;
      dispatched++;
      lastAt = performance.now();
    });
    for (let r = 0; r < Math.min(RUNS, 3); r++) {
      dispatched = 0;
      const t0 = performance.now();
      await c.sendCommands({
        selector: { fleet: "all" },
        handler: "echo",
        at: Date.now() + 10_000,
      });
      const end = Date.now() + 30_000;
      while (dispatched < AGENTS && Date.now() < end)
        await new Promise((res) => setTimeout(res, 2));
      if (dispatched < AGENTS)
        throw new Error(`only ${dispatched} of ${AGENTS} dispatched in 30 s`);
      out.push(lastAt - t0);
      // Let the broker's acknowledgements drain before the next round.
      await new Promise((res) => setTimeout(res, 500));
    }
  } finally {
    await answerer?.endAsync();
    await endChild(agentsChild);
    await c.close();
    await fanBroker?.close();
    await brokerChild?.stop();
    rmSync(fanDir, { recursive: true, force: true });
    if (brokerDir !== undefined) rmSync(brokerDir, { recursive: true, force: true });
  }
  return {
    runs: out,
    broker:
      brokerChild === undefined
        ? "embedded, in this process"
        : brokerChild.kind === "mosquitto"
          ? "Mosquitto, own process"
          : "embedded, child process",
  };
}
const inProcess = await fanOut("this process");
const separate = await fanOut("own processes");
const fan = stats(inProcess.runs);
const fanSeparate = stats(separate.runs);
const TARGET_FAN_OUT_MS = 2_000;

const page = stats(pages);
const search = stats(searches);
const post = stats(posts);
const extPage = stats(extPages);
const extSearch = stats(extSearches);
const extPost = stats(extPosts);
const header = ["request", "client", "p50 ms", "max ms", "note"];
const HERE = "this process";
const APART = "own process";
const rows: (string | number)[][] = [
  [
    "GET /api/agents (first page)",
    HERE,
    page.p50,
    page.max,
    `${fmt(pageBytes / 1e6)} MB, 1,000 of ${AGENTS}`,
  ],
  ["GET /api/agents (first page)", APART, extPage.p50, extPage.max, ""],
  ["GET /api/agents?tag=…&q=…&limit=100", HERE, search.p50, search.max, "filtered search"],
  ["GET /api/agents?tag=…&q=…&limit=100", APART, extSearch.p50, extSearch.max, ""],
  [
    `POST /api/commands to ${targets} agents`,
    HERE,
    post.p50,
    post.max,
    `target ≤ ${TARGET_POST_MS} ms`,
  ],
  [`POST /api/commands to ${targets} agents`, APART, extPost.p50, extPost.max, ""],
  [
    `idle, ${(targets * RUNS * 2).toLocaleString("en-US")} commands waiting for offline agents`,
    "—",
    "—",
    "—",
    `${fmt(queuedIdleCpuPct)} % of a core over ${QUEUED_IDLE_MS / 1000} s`,
  ],
  [
    `command to ${AGENTS} online agents: POST → last dispatch out`,
    `broker ${inProcess.broker}; agents in this process`,
    fan.p50,
    fan.max,
    `target ≤ ${TARGET_FAN_OUT_MS} ms`,
  ],
  [
    `command to ${AGENTS} online agents: POST → last dispatch out`,
    `broker ${separate.broker}; agents in their own process`,
    fanSeparate.p50,
    fanSeparate.max,
    `target ≤ ${TARGET_FAN_OUT_MS} ms`,
  ],
];
printTable(header, rows);
finishRun(machine, benchStarted);
const verdict = (met: boolean) => (met ? "met" : "**not met**");
writeResults(
  "fleet-api",
  {
    agents: AGENTS,
    runs: RUNS,
    getPage: page,
    getPageOwnProcess: extPage,
    pageBytes,
    search,
    searchOwnProcess: extSearch,
    post,
    postOwnProcess: extPost,
    postRunsMs: posts,
    postOwnProcessRunsMs: extPosts,
    targets,
    targetPostMs: TARGET_POST_MS,
    queuedCommands: targets * RUNS * 2,
    queuedIdleCpuPct,
    fanOutMs: fan,
    fanOutRunsMs: inProcess.runs,
    fanOutBroker: inProcess.broker,
    fanOutOwnProcessesMs: fanSeparate,
    fanOutOwnProcessesRunsMs: separate.runs,
    fanOutOwnProcessesBroker: separate.broker,
    targetFanOutMs: TARGET_FAN_OUT_MS,
    machine,
  },
  `## Fleet API at ${AGENTS.toLocaleString("en-US")} agents

\`npm run bench:fleet-api\` (\`bench/fleet-api.ts\`, with \`bench/fleet-api-peer.ts\` for the
other side) gives a coordinator ${AGENTS.toLocaleString("en-US")} known agents (written to its store and
loaded as at a start; offline, which changes nothing of what is measured here) and times ${RUNS} rounds of
the listing's first page, a filtered search, and a device command by tag to all of them, each
request made twice a round: by a client in the coordinator's own process, and by one in a process
of its own, as an operator's is (each POST creates ${targets.toLocaleString("en-US")} more executions, so both meet a store of
about the same size). Measured on ${machine.cpus} cores (${machine.cpuModel.trim()}), load average ${machine.loadavgAtStart.join(" / ")} at start and ${machine.loadavgAtEnd.join(" / ")} at the end.

${mdTable(header, rows)}

**\`POST /api/commands\`** to ${targets.toLocaleString("en-US")} agents, as a client in a process of its own
sees it (from the request to the whole answer read): p50 ${fmt(extPost.p50)} ms, max ${fmt(extPost.max)} ms, target ≤ ${TARGET_POST_MS} ms
at p50: ${verdict(extPost.p50 <= TARGET_POST_MS)}; at the slowest round: ${verdict(extPost.max <= TARGET_POST_MS)}. A client in the coordinator's process measures ${fmt(post.p50)} ms p50: there
the client's own work (reading and parsing the ${fmt(postBytes / 1e3)} kB answer) and the dispatch pass
that the new commands kick, which the coordinator runs once the answer is written, share the one
event loop, and both count in the time that client sees. The first row is the figure this bench
reported before 2026-12-04. Before paging, the listing answered the whole fleet (4.1 MB at 10,000).
The command's executions are created in one write (\`createExecutions\`); with one write per
target the same POST took 332 ms p50 on an earlier machine. The rows of a fan-out differ only in
their id and agent, so they are inserted by two statements over a JSON array of those pairs, with
what they share bound once. What remains is mostly SQLite's own work on the rows and their
indexes: timed inside the coordinator on 2026-12-04, \`createExecutions\` took 55–87 ms of a
POST (its two INSERT statements about 40 ms of that in a CPU profile, the rest caching the new
records), the commit 5–10 ms, and choosing the targets and making their ids about 10 ms.

**Commands waiting for offline agents.** After the rounds above, ${(targets * RUNS * 2).toLocaleString("en-US")} commands wait
\`PENDING\` for agents that are offline; that row is this process's CPU over
${QUEUED_IDLE_MS / 1000} s with nothing else to do. A pass that nothing kicked reads pending work at most once a
second while the last read found none (every pass of the dispatcher, ten a second, read past
each of them to find none: 17.4 % of a core at 50,000 before).

**Fan-out.** The last rows are a fresh coordinator whose ${AGENTS.toLocaleString("en-US")} agents each said hello (online, reading
batches of commands), whose dispatches one MQTT client answers \`accepted\` (the dispatcher keeps
at most 1,000 unanswered, so the answers pace it): the time from the command's creation to the
last of its ${AGENTS.toLocaleString("en-US")} dispatches leaving (written \`DISPATCHED\` and handed to the MQTT client),
${inProcess.runs.length} rounds each; target ≤ ${TARGET_FAN_OUT_MS} ms at the slowest round. With the broker and the answering client in the
coordinator's process (the embedded broker; the figure this bench reported before 2026-12-04):
${verdict(fan.max <= TARGET_FAN_OUT_MS)} (${inProcess.runs.map((x) => fmt(x)).join(", ")} ms). With each in a process of its own, as a deployment
has them (${separate.broker}${separate.broker.startsWith("Mosquitto") ? ", configured as docs/operations.md asks" : ""}; the agents' client in a child process): ${verdict(fanSeparate.max <= TARGET_FAN_OUT_MS)}
(${separate.runs.map((x) => fmt(x)).join(", ")} ms). In one process the broker routes every dispatch and every answer, and the
client decodes and answers each, on the coordinator's own event loop: a third of that process's
CPU in a profile. The first round of each is the slowest: the coordinator's code is not yet
compiled hot, and its first 1,000 dispatches leave before any answer comes back.`,
);
