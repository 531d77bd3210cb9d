/**
 * The floor under the coordinator's idle CPU (issue 18, item 3): what receiving heartbeats costs a
 * process that does nothing else. A subscriber process (mqtt.js, a QoS 1 subscription to every
 * agent's up topic, as the coordinator's link has) receives sealed protocol-v1 heartbeats at QoS
 * 0 from a publisher process, 2,000 a second by default (10,000 agents at a 5 s heartbeat), and
 * does one of three things with each:
 *
 *   receive  nothing: the MQTT client's receive path alone;
 *   verify   also unseals it and checks its HMAC (shared/protocol/mac.ts);
 *   decode   also decodes it as the coordinator does (decodeAll with its compiled schemas).
 *
 * The heartbeats come either spread evenly over each second (a fleet out of step, as rule 12 of
 * docs/protocol.md has it) or all of a 5 s period's at once (a fleet in step). The subscriber's CPU
 * (user + system, /proc/self/stat) over a 20 s window after 5 s of warm-up, per message received.
 *
 * With `--batch-ms N` the subscriber reads its connection as the coordinator does with
 * `mqtt.readWindowMs: N` (coordinator/link/batch-reads.ts): after a small read it stops reading
 * for N ms. Each row also counts the subscriber's wake-ups (its main thread's voluntary context
 * switches, /proc/self/task/PID/status).
 *
 *   npm run bench:mqtt-floor                     # the machine's broker at 127.0.0.1:1883
 *   options: --host 127.0.0.1 --port 1883 --rate 2000 --batch-ms 0
 *
 * It prints a table and writes bench/results/mqtt-floor.json (another rate: mqtt-floor-RATE.json;
 * reads batched: mqtt-floor[-RATE]-batch-N.json);
 * docs/benchmarks.md quotes it by hand
 * ("Findings at 10,000 simulated agents").
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import mqtt from "mqtt";
import { type BatchableSocket, batchReads } from "../coordinator/link/batch-reads.js";
import { COMPILED_SCHEMAS } from "../coordinator/link/compiled-schemas.js";
import { envelope } from "../shared/message.js";
import { decodeAll, encode, topics } from "../shared/protocol/index.js";
import { seal, unseal, verifyTag } from "../shared/protocol/mac.js";
import { idleHeartbeat } from "../test/helpers/env.js";
import { finishRun, fmt, machineAtStart, printTable } from "./lib.js";

const SELF = fileURLToPath(import.meta.url);
const AGENTS = 10_000;
const WARMUP_MS = 5_000;
const WINDOW_MS = 20_000;
const KEY = Buffer.alloc(32, 7);

type Work = "receive" | "verify" | "decode";
type Pattern = "spread" | "burst";

const { values, positionals } = parseArgs({
  options: {
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "1883" },
    rate: { type: "string", default: "2000" },
    prefix: { type: "string", default: `floor${process.pid}` },
    "batch-ms": { type: "string", default: "0" },
  },
  allowPositionals: true,
  strict: true,
});
const url = `mqtt://${values.host}:${values.port}`;
const rate = Number(values.rate);
if (!Number.isInteger(rate) || rate < 1 || rate > 100_000) {
  throw new Error(
    `--rate must be a whole number of messages a second, 1 to 100000 (got "${values.rate}")`,
  );
}
const batchMs = Number(values["batch-ms"]);
if (!Number.isInteger(batchMs) || batchMs < 0 || batchMs > 1000) {
  throw new Error(
    `--batch-ms must be a whole number of ms, 0 to 1000 (got "${values["batch-ms"]}")`,
  );
}
const t = topics(values.prefix);

function wakeups(): number {
  const m = /voluntary_ctxt_switches:\s+(\d+)/.exec(
    readFileSync(`/proc/self/task/${process.pid}/status`, "utf8"),
  );
  return Number(m?.[1] ?? 0);
}

function cpuTicks(): number {
  const f = readFileSync("/proc/self/stat", "utf8").split(") ")[1]?.split(" ") ?? [];
  return Number(f[11]) + Number(f[12]);
}

/** The subscriber: counts, and works on, what arrives; reports its CPU over the window. */
async function subscriber(work: Work): Promise<void> {
  const client = await mqtt.connectAsync(url, { clientId: `${values.prefix}-sub`, keepalive: 10 });
  let n = 0;
  if (batchMs > 0) batchReads(client.stream as unknown as BatchableSocket, batchMs);
  const options = { prefix: values.prefix, maxBytes: 65_536, schemas: COMPILED_SCHEMAS };
  client.on("message", (topic, payload) => {
    n++;
    if (work === "receive") return;
    const sealed = unseal(payload);
    if (typeof sealed === "string" || !verifyTag(sealed, topic, KEY)) throw new Error("bad MAC");
    if (work === "verify") return;
    for (const r of decodeAll(topic, sealed.body, options)) if (!r.ok) throw new Error("bad body");
  });
  await client.subscribeAsync(t.allUp, { qos: 1 });
  process.send?.({ t: "ready" });
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  const [c0, n0, w0] = [cpuTicks(), n, wakeups()];
  await new Promise((r) => setTimeout(r, WINDOW_MS));
  const [c1, n1, w1] = [cpuTicks(), n, wakeups()];
  // Clock ticks are 10 ms: CPU % of one core = ticks per second.
  const cpuPct = (c1 - c0) / (WINDOW_MS / 1000);
  process.send?.({
    t: "done",
    messages: n1 - n0,
    cpuPct,
    wakeupsPerSecond: (w1 - w0) / (WINDOW_MS / 1000),
    usPerMessage: ((c1 - c0) * 10_000) / (n1 - n0),
  });
  await client.endAsync();
}

/** The publisher: sealed heartbeats of 10,000 agents, spread over each second or in bursts. */
async function publisher(pattern: Pattern): Promise<void> {
  const client = await mqtt.connectAsync(url, { clientId: `${values.prefix}-pub` });
  const payloads = Array.from({ length: AGENTS }, (_, i) => {
    const agentId = `a${i}`;
    const body = encode(
      envelope(
        { ...idleHeartbeat(`i-${randomBytes(6).toString("hex")}`), time: false },
        Date.now(),
      ),
    );
    return { topic: t.up(agentId), payload: seal(body, t.up(agentId), KEY, 1, Date.now()) };
  });
  let next = 0;
  const send = (count: number) => {
    for (let k = 0; k < count; k++) {
      const p = payloads[next++ % AGENTS] as { topic: string; payload: Buffer };
      client.publish(p.topic, p.payload, { qos: 0 });
    }
  };
  if (pattern === "burst") {
    send(rate * 5);
    setInterval(() => send(rate * 5), 5_000);
  } else {
    // Every millisecond, what is due by the clock: evenly spread whatever the timer's jitter.
    const start = performance.now();
    setInterval(() => send(Math.floor(((performance.now() - start) * rate) / 1000) - next), 1);
  }
  process.send?.({ t: "ready" });
}

function child(role: string, arg: string): ChildProcess {
  return spawn(
    process.execPath,
    [
      ...process.execArgv,
      SELF,
      role,
      arg,
      "--host",
      values.host,
      "--port",
      values.port,
      "--rate",
      String(rate),
      "--prefix",
      values.prefix,
      "--batch-ms",
      String(batchMs),
    ],
    {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    },
  );
}

const nextMessage = (c: ChildProcess, type: string) =>
  new Promise<Record<string, number>>((resolve, reject) => {
    c.on("message", (m: { t: string }) => {
      if (m.t === type) resolve(m as unknown as Record<string, number>);
    });
    c.on("exit", (code) => reject(new Error(`child exited with ${code} before "${type}"`)));
  });

async function main(): Promise<void> {
  const started = performance.now();
  const machine = machineAtStart();
  const rows: {
    pattern: Pattern;
    work: Work;
    messages: number;
    cpuPct: number;
    wakeupsPerSecond: number;
    usPerMessage: number;
  }[] = [];
  for (const pattern of ["spread", "burst"] as const) {
    for (const work of ["receive", "verify", "decode"] as const) {
      const sub = child("sub", work);
      await nextMessage(sub, "ready");
      const pub = child("pub", pattern);
      const done = await nextMessage(sub, "done");
      pub.kill();
      rows.push({
        pattern,
        work,
        messages: done.messages ?? 0,
        cpuPct: done.cpuPct ?? 0,
        wakeupsPerSecond: done.wakeupsPerSecond ?? 0,
        usPerMessage: done.usPerMessage ?? 0,
      });
      console.log(
        `${pattern} ${work}: ${fmt(done.cpuPct ?? 0)} % of a core, ${fmt(done.wakeupsPerSecond ?? 0)} wake-ups/s, ${fmt(done.usPerMessage ?? 0)} µs a message`,
      );
    }
  }
  finishRun(machine, started);
  printTable(
    ["heartbeats", "work", "messages in 20 s", "CPU % of a core", "wake-ups/s", "µs per message"],
    rows.map((r) => [
      r.pattern,
      r.work,
      r.messages,
      fmt(r.cpuPct),
      fmt(r.wakeupsPerSecond),
      fmt(r.usPerMessage),
    ]),
  );
  // Another rate than the default's, or reads batched, go to a file of their own, so that all
  // stay on record.
  const name = `mqtt-floor${rate === 2000 ? "" : `-${rate}`}${batchMs > 0 ? `-batch-${batchMs}` : ""}`;
  const json = fileURLToPath(new URL(`./results/${name}.json`, import.meta.url));
  writeFileSync(
    json,
    `${JSON.stringify({ name, date: new Date().toISOString(), node: process.version, figures: { rate, batchMs, machine, rows } }, null, 2)}\n`,
  );
  console.log(`wrote ${json}`);
}

const [role, arg] = positionals;
if (role === "sub") await subscriber(arg as Work);
else if (role === "pub") await publisher(arg as Pattern);
else await main();
