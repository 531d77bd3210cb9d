/**
 * One run of bench/fleet.ts at N simulated agents: a fresh store and coordinator process
 * (bench/fleet-coordinator.ts), the simulator process (bench/fleet-sim.ts), both on the broker
 * given (the machine's Mosquitto by default), under a topic prefix of the run's own.
 *
 * Steps: enrol N and start the coordinator → start the simulator → all N online → settle →
 * idle window (heartbeats only) → a command by tag to all N, fireAt 10 s ahead → all accepted →
 * all SUCCEEDED → SIGKILL the simulator → all N offline → clear the retained presences.
 */
import { type ChildProcess, spawn } from "node:child_process";
import {
  closeSync,
  fstatSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
} from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { DISCONNECT_PACKET, encodeConnect, encodePublish } from "../agent/link/mqtt-codec.js";
import { stopProcess } from "../test/helpers/device.js";
import { COORDINATOR_HEAP_MB } from "./coordinator-params.js";
import { cpuMs, statusKb } from "./coordinator-run.js";
import type { FleetWorkerArgs, FleetWorkerLine } from "./fleet-coordinator.js";
import type { FleetSimArgs, LagFigures, SimLine, Spread } from "./fleet-sim.js";
import { callApi, percentile } from "./lib.js";

export interface ScaleOptions {
  agents: number;
  host: string;
  port: number;
  workerFile: string;
  simFile: string;
  /** Idle window with every agent heartbeating, s. */
  idleS: number;
  /** Before the idle window, once all are online: the first heartbeats ask for clock samples. */
  settleS: number;
  /** How far ahead of the POST the command's fireAt is, ms. */
  leadMs: number;
  connectConcurrency: number;
  /** The coordinator's idleHeartbeatMs; undefined: its default. */
  idleHeartbeatMs?: number | undefined;
  /** The coordinator's mqtt.readWindowMs; undefined: its default. */
  readWindowMs?: number | undefined;
  /**
   * Mosquitto's log file, when it can be read: the run counts its notices that it is dropping
   * messages for the coordinator's connection (its queue for one client is full), by phase.
   */
  brokerLog?: string | undefined;
}

export interface ScaleResult {
  agents: number;
  prefix: string;
  enrollMs: number;
  /** Simulator spawned → the coordinator's agent events say all N online. */
  onlineMs: number;
  /** Simulator spawned → its own last welcome. */
  simWelcomedMs: number | null;
  idle: {
    windowS: number;
    coordinatorCpuPct: number;
    coordinatorRssMB: number;
    coordinatorRssMaxMB: number;
    simCpuPct: number;
    simRssMB: number;
  };
  command: {
    postMs: number;
    targets: number;
    /** POST sent → every execution SCHEDULED or later. */
    acceptedMs: number | null;
    /** POST sent → every execution SUCCEEDED. */
    succeededMs: number | null;
    states: Record<string, number>;
    /** startedAt − fireAt over the executions that started, ms. */
    skew: { p50: number; p99: number; max: number; min: number; started: number };
    dispatchedAfterFireAt: number;
    dispatchedAfterFireAtShare: number;
    /** dispatchedAt − fireAt, ms: how far ahead (negative) of the fire the dispatch went out. */
    dispatchLead: { p50: number; p99: number; max: number };
  };
  /** The simulator during the fan-out (POST → all SUCCEEDED). */
  simFanout: { lag: LagFigures; cpuPct: number; lagTotal: LagFigures };
  /**
   * The simulator's account of the starts: the estimates' uncertainty, its own lateness, and
   * the lateness on the host's clock (when the handler really ran).
   */
  simStarts: { uncertainty: Spread; timerLate: Spread; hostLate: Spread };
  simCounters: Record<string, number>;
  simCommands: { held: number; runs: number; runTwice: number };
  /** SIGKILL of the simulator → the coordinator's agent events say all N offline. */
  offlineMs: number | null;
  /** Why the coordinator took each agent offline after the kill (its agent events' reason). */
  offlineReasons: Record<string, number> | null;
  coordinatorLogs: { warn: number; error: number; samples: string[] } | null;
  /**
   * The broker's notices that it is dropping messages for the coordinator, by phase; null without
   * a broker log to read. Mosquitto logs the first drop of a connection, not every one, so after
   * the first phase with a notice the others may have had drops it did not log.
   */
  brokerDrops: Record<"connect" | "idle" | "command" | "death", number> | null;
}

/** The broker log's size now, to read only what this run adds to it. */
function logSize(path: string | undefined): number {
  if (path === undefined) return 0;
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Times (ms) of the broker's "dropped for client" notices about `clientId` since `from` bytes. */
function dropNotices(path: string, from: number, clientId: string): number[] {
  let text: string;
  try {
    const fd = openSync(path, "r");
    try {
      const size = fstatSync(fd).size;
      const buf = Buffer.alloc(Math.max(0, size - from));
      readSync(fd, buf, 0, buf.length, from);
      text = buf.toString("utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const line of text.split("\n")) {
    // "1796147575: Outgoing messages are being dropped for client ax-c-946c413be4267364."
    if (!line.includes(`dropped for client ${clientId}.`)) continue;
    const at = Number(line.slice(0, line.indexOf(":")));
    if (Number.isFinite(at)) out.push(at * 1000);
  }
  return out;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const MB = (kb: number) => (kb * 1024) / 1e6;

/** Reads a child's stdout as JSON lines. */
function lines<T>(child: ChildProcess, on: (line: T) => void): void {
  let buffered = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      const text = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (text.startsWith("{")) on(JSON.parse(text) as T);
    }
  });
}

function tail(child: ChildProcess, max = 4_000): () => string {
  let text = "";
  child.stderr?.setEncoding("utf8").on("data", (c: string) => {
    text = (text + c).slice(-max);
  });
  return () => text.trim();
}

function stats(xs: number[]) {
  const s = Float64Array.from(xs).sort();
  return {
    p50: percentile(s, 50),
    p99: percentile(s, 99),
    max: percentile(s, 100),
    min: s.length > 0 ? (s[0] as number) : Number.NaN,
  };
}

/**
 * Publishes an empty retained message on every agent's presence topic (MQTT 3.1.1 §3.3.1.3: it
 * removes the retained one), so the run leaves nothing on a shared broker.
 */
async function clearRetained(host: string, port: number, topics: string[]): Promise<void> {
  await new Promise<void>((resolve) => {
    const socket = connect({ host, port });
    // Read (and drop) what the broker sends: a paused socket never sees the broker close it.
    socket.resume();
    socket.on("error", () => resolve());
    socket.on("close", () => resolve());
    socket.on("connect", () => {
      socket.write(
        encodeConnect({ clientId: `ax-bench-clear-${process.pid}`, keepaliveS: 30, clean: true }),
      );
      for (const topic of topics) {
        socket.write(encodePublish({ topic, payload: Buffer.alloc(0), qos: 0, retain: true }));
      }
      socket.end(DISCONNECT_PACKET);
    });
  });
}

export async function runScale(o: ScaleOptions): Promise<ScaleResult> {
  const dir = mkdtempSync(join(tmpdir(), "ax-bench-fleet-"));
  const prefix = `axsim${Date.now().toString(36)}`;
  const agentIds = Array.from(
    { length: o.agents },
    (_, i) => `sim-${String(i + 1).padStart(5, "0")}`,
  );
  const tags = { fleet: "sim" };
  const children: ChildProcess[] = [];
  const storePath = join(dir, "ax.sqlite");
  let db: Database.Database | undefined;
  const logFrom = logSize(o.brokerLog);
  try {
    const workerArgs: FleetWorkerArgs = {
      storePath,
      mqttUrl: `mqtt://${o.host}:${o.port}`,
      prefix,
      agentIds,
      tags,
      keysFile: join(dir, "keys.json"),
      ...(o.idleHeartbeatMs === undefined ? {} : { idleHeartbeatMs: o.idleHeartbeatMs }),
      ...(o.readWindowMs === undefined ? {} : { readWindowMs: o.readWindowMs }),
    };
    // AX_BENCH_PROFILE_DIR: a CPU profile of the coordinator's whole run, written as it exits.
    const profileDir = process.env.AX_BENCH_PROFILE_DIR;
    const profile = profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [];
    // The heap cap docs/operations.md's systemd unit starts the coordinator with.
    const heap = [`--max-old-space-size=${COORDINATOR_HEAP_MB}`];
    const worker = spawn(
      process.execPath,
      [...heap, ...profile, o.workerFile, JSON.stringify(workerArgs)],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    children.push(worker);
    const workerErr = tail(worker);
    const seen: {
      started?: Extract<FleetWorkerLine, { t: "started" }>;
      allOnlineAt?: number;
      allOfflineAt?: number;
      offlineReasons?: Record<string, number>;
      logs?: Extract<FleetWorkerLine, { t: "logs" }>;
    } = {};
    lines<FleetWorkerLine>(worker, (line) => {
      if (line.t === "started") seen.started = line;
      else if (line.t === "online" && line.online === o.agents) seen.allOnlineAt = line.at;
      else if (line.t === "offline") {
        seen.allOfflineAt = line.at;
        seen.offlineReasons = line.reasons;
      } else if (line.t === "logs") seen.logs = line;
    });
    const until = async (what: string, timeoutMs: number, cond: () => boolean) => {
      const end = Date.now() + timeoutMs;
      while (!cond()) {
        if (worker.exitCode !== null || worker.signalCode !== null) {
          throw new Error(`the coordinator ended while ${what}: ${workerErr()}`);
        }
        if (Date.now() > end) throw new Error(`timed out ${what}; coordinator: ${workerErr()}`);
        await sleep(20);
      }
    };
    await until("starting", 120_000, () => seen.started !== undefined);
    const started = seen.started as Extract<FleetWorkerLine, { t: "started" }>;
    const coordPid = started.pid;
    const token = readFileSync(join(dir, "ax-secrets", "admin.token"), "utf8").trim();
    const api = async (method: string, path: string, body?: unknown) =>
      JSON.parse((await callApi(started.httpUrl, token, method, path, body)).text) as Record<
        string,
        unknown
      >;

    // The simulator.
    const simArgs: FleetSimArgs = {
      host: o.host,
      port: o.port,
      prefix,
      keysFile: workerArgs.keysFile,
      tags,
      connectConcurrency: o.connectConcurrency,
    };
    const simStart = Date.now();
    const sim = spawn(process.execPath, [o.simFile, JSON.stringify(simArgs)], {
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    children.push(sim);
    const simErr = tail(sim);
    const simPid = sim.pid as number;
    let simWelcomedAt: number | undefined;
    // A holder, so that control flow does not narrow what the message handler sets.
    const answer: { status?: Extract<SimLine, { t: "status" }> } = {};
    sim.on("message", (m: SimLine) => {
      if (m.t === "welcomed") simWelcomedAt = m.at;
      else if (m.t === "status") answer.status = m;
    });
    const simStatus = async () => {
      delete answer.status;
      sim.send({ cmd: "status" });
      await until("asking the simulator", 30_000, () => {
        if (sim.exitCode !== null) throw new Error(`the simulator ended: ${simErr()}`);
        return answer.status !== undefined;
      });
      const latest = (): Extract<SimLine, { t: "status" }> | undefined => answer.status;
      const got = latest();
      if (got === undefined) throw new Error("the simulator did not answer");
      return got;
    };
    const onlineTimeout = Math.max(120_000, o.agents * 30);
    await until(`waiting for ${o.agents} agents online`, onlineTimeout, () => {
      if (sim.exitCode !== null) throw new Error(`the simulator ended: ${simErr()}`);
      return seen.allOnlineAt !== undefined;
    });
    const onlineMs = (seen.allOnlineAt as number) - simStart;
    const idleFrom = Date.now();
    console.log(`  ${o.agents} online in ${(onlineMs / 1000).toFixed(1)} s`);

    // Idle: every agent heartbeating, nothing else.
    await sleep(o.settleS * 1000);
    const rss: number[] = [];
    const c0 = cpuMs(coordPid);
    const s0 = cpuMs(simPid);
    const t0 = Date.now();
    while (Date.now() - t0 < o.idleS * 1000) {
      rss.push(statusKb(coordPid, "VmRSS"));
      await sleep(1_000);
    }
    const idleWall = Date.now() - t0;
    const idle = {
      windowS: idleWall / 1000,
      coordinatorCpuPct: (100 * (cpuMs(coordPid) - c0)) / idleWall,
      coordinatorRssMB: MB(statusKb(coordPid, "VmRSS")),
      coordinatorRssMaxMB: MB(Math.max(...rss)),
      simCpuPct: (100 * (cpuMs(simPid) - s0)) / idleWall,
      simRssMB: MB(statusKb(simPid, "VmRSS")),
    };
    console.log(
      `  idle ${idle.windowS.toFixed(0)} s: coordinator ${idle.coordinatorCpuPct.toFixed(1)} % CPU, ${idle.coordinatorRssMB.toFixed(0)} MB; simulator ${idle.simCpuPct.toFixed(1)} % CPU`,
    );

    // The command, by tag, to all of them.
    db = new Database(storePath, { readonly: true, fileMustExist: true });
    const countStates = db.prepare(
      "SELECT state, COUNT(*) AS n FROM executions WHERE kind = 'command' GROUP BY state",
    );
    const states = () =>
      Object.fromEntries(
        (countStates.all() as { state: string; n: number }[]).map((r) => [r.state, r.n]),
      );
    sim.send({ cmd: "lag-start" });
    const sc0 = cpuMs(simPid);
    const postStart = Date.now();
    const fireAt = postStart + o.leadMs;
    const post = await api("POST", "/api/commands", {
      selector: { tags },
      handler: "echo",
      params: { bench: "fleet" },
      at: fireAt,
      deadline: fireAt + 120_000,
    });
    const postMs = Date.now() - postStart;
    const targets = (post.targets as unknown[]).length;
    let acceptedMs: number | null = null;
    let succeededMs: number | null = null;
    const doneBy = fireAt + 120_000;
    let last: Record<string, number> = {};
    while (Date.now() < doneBy) {
      last = states();
      const early = (last.PENDING ?? 0) + (last.DISPATCHED ?? 0);
      if (acceptedMs === null && early === 0 && Object.keys(last).length > 0) {
        acceptedMs = Date.now() - postStart;
      }
      if ((last.SUCCEEDED ?? 0) === targets) {
        succeededMs = Date.now() - postStart;
        break;
      }
      const open = early + (last.SCHEDULED ?? 0) + (last.RUNNING ?? 0) + (last.RETRY_WAITING ?? 0);
      if (open === 0) break; // ended, not all SUCCEEDED
      await sleep(100);
    }
    const fanoutWall = Date.now() - postStart;
    const status = await simStatus();
    const simFanout = {
      lag: status.lag,
      lagTotal: status.lagTotal,
      cpuPct: (100 * (cpuMs(simPid) - sc0)) / fanoutWall,
    };
    const rows = db
      .prepare("SELECT fire_at, started_at, dispatched_at FROM executions WHERE kind = 'command'")
      .all() as { fire_at: number; started_at: number | null; dispatched_at: number | null }[];
    db.close();
    db = undefined;
    const skews: number[] = [];
    const leads: number[] = [];
    let after = 0;
    for (const r of rows) {
      if (r.started_at !== null) skews.push(r.started_at - r.fire_at);
      if (r.dispatched_at !== null) {
        leads.push(r.dispatched_at - r.fire_at);
        if (r.dispatched_at > r.fire_at) after++;
      }
    }
    const skew = { ...stats(skews), started: skews.length };
    const lead = stats(leads);
    console.log(
      `  command: accepted in ${acceptedMs ?? "—"} ms, all SUCCEEDED in ${succeededMs ?? "—"} ms; skew p50 ${skew.p50.toFixed(1)} / p99 ${skew.p99.toFixed(1)} / max ${skew.max.toFixed(1)} ms; ${after} dispatched after fireAt; simulator lag p99 ${simFanout.lag.p99.toFixed(1)} ms, uncertainty p99 ${status.starts.uncertainty.p99.toFixed(1)} ms, own lateness p99 ${status.starts.timerLate.p99.toFixed(1)} ms; on the host's clock p50 ${status.starts.hostLate.p50.toFixed(1)} / p99 ${status.starts.hostLate.p99.toFixed(1)} ms`,
    );

    // Death of the whole fleet at once.
    const killAt = Date.now();
    sim.kill("SIGKILL");
    let offlineMs: number | null = null;
    try {
      await until("waiting for all offline", 60_000, () => seen.allOfflineAt !== undefined);
      offlineMs = (seen.allOfflineAt as number) - killAt;
    } catch (err) {
      console.log(`  ${(err as Error).message.slice(0, 200)}`);
    }
    console.log(
      `  all offline ${offlineMs ?? "—"} ms after SIGKILL (${JSON.stringify(seen.offlineReasons ?? {})})`,
    );
    await stopProcess(worker, 10_000);
    // After the coordinator is gone: it would refuse each empty message as unsigned.
    await clearRetained(
      o.host,
      o.port,
      agentIds.map((id) => `${prefix}/v1/agents/${id}/presence`),
    );
    let brokerDrops: ScaleResult["brokerDrops"] = null;
    if (o.brokerLog !== undefined) {
      brokerDrops = { connect: 0, idle: 0, command: 0, death: 0 };
      // The log's times are whole seconds: a notice is put in the phase its second began in.
      for (const at of dropNotices(o.brokerLog, logFrom, `ax-bench-${prefix}`)) {
        const phase =
          at < idleFrom - 1000
            ? "connect"
            : at < postStart - 1000
              ? "idle"
              : at < killAt - 1000
                ? "command"
                : "death";
        brokerDrops[phase]++;
      }
      console.log(`  broker dropped messages for the coordinator: ${JSON.stringify(brokerDrops)}`);
    }
    return {
      agents: o.agents,
      prefix,
      enrollMs: started.enrollMs,
      onlineMs,
      simWelcomedMs: simWelcomedAt === undefined ? null : simWelcomedAt - simStart,
      idle,
      command: {
        postMs,
        targets,
        acceptedMs,
        succeededMs,
        states: last,
        skew,
        dispatchedAfterFireAt: after,
        dispatchedAfterFireAtShare: rows.length > 0 ? after / rows.length : Number.NaN,
        dispatchLead: { p50: lead.p50, p99: lead.p99, max: lead.max },
      },
      simFanout,
      simStarts: status.starts,
      simCounters: { ...status.counters },
      simCommands: status.commands,
      offlineMs,
      offlineReasons: seen.offlineReasons ?? null,
      coordinatorLogs: seen.logs ?? null,
      brokerDrops,
    };
  } finally {
    db?.close();
    await Promise.all(children.map((c) => stopProcess(c, 5_000)));
    rmSync(dir, { recursive: true, force: true });
  }
}
