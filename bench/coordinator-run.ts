/**
 * One run of bench/coordinator.ts at one aggregate rate: a fresh store of JOBS jobs, the embedded
 * broker in this process, the coordinator worker and `agents` bench agents as child processes.
 * On PostgreSQL (`RunOptions.pg`) the store is a fresh schema, and there are `coordinators`
 * workers on it: the first is started and active before the others start, as standbys.
 *
 * Steps: prefill → broker → coordinator(s) → agents → (first nominal time) → warm-up → window →
 * drain → stop coordinator(s) (standbys first) → stop agents → read the store and the agents'
 * logs (→ drop the schema).
 */

import { type ChildProcess, spawn } from "node:child_process";
import {
  appendFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { setPriority, tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { stopProcess } from "../test/helpers/device.js";
import {
  type AgentLog,
  COORDINATOR_HEAP_MB,
  DRAIN_MAX_MS,
  DRAIN_STALL_MS,
  hostNow,
  identityPath,
  JOBS,
  PREFIX,
  SAMPLE_MS,
  SETUP_MS,
  STOP_GRACE_MS,
  WARMUP_MS,
  type WorkerArgs,
  type WorkerLine,
  type WorkerStats,
} from "./coordinator-params.js";
import { type ProfileSummary, summariseProfile } from "./coordinator-profile.js";
import { pgRunStore, sqliteRunStore } from "./coordinator-run-store.js";
import { expectedFires, type FireFigures } from "./coordinator-store.js";
import { benchSchema } from "./coordinator-store-pg.js";
import { allProcStats, GroupCpu, postgresProcesses } from "./proc-stat.js";

export interface RunOptions {
  rate: number;
  durationMs: number;
  workerFile: string;
  agentFile: string;
  /** Run the coordinator under --cpu-prof and summarise the profile. */
  profile: boolean;
  /** Agent processes sharing the rate. */
  agents: number;
  /** The agents' journal.syncStart (the agent's default is true). */
  agentSyncStart: boolean;
  /** The coordinator process's nice value (0: the same priority as the agents). */
  coordinatorNice: number;
  /**
   * Messages authenticated (the default): the coordinator requires a MAC, the agents are enrolled
   * and hold identities. Off: `security.messages: "off"`, agents without identity.
   */
  auth: boolean;
  /** On PostgreSQL: the database, and how many coordinators share the run's schema. */
  pg?: {
    url: string;
    coordinators: number;
    leaseMs?: number;
    firing: "active" | "shared";
    dispatch?: "active" | "shared";
  };
}

/** One coordinator process of a PostgreSQL run, over the window. */
export interface CoordinatorFigures {
  clusterId: string;
  /** Its role when it said it started, and at the window's end. */
  roleAtStart: string;
  roleAtEnd: string;
  cores: number;
  /** Its CPU time over the window per nominal fire of the window, ms. */
  cpuMsPerFire: number;
  rssIdleMB: number;
  rssMB: number;
  rssMaxMB: number;
  stop: string;
  worker: WorkerStats | null;
}

/** What a PostgreSQL run adds to RateResult. */
export interface PgFigures {
  schema: string;
  coordinators: CoordinatorFigures[];
  /**
   * PostgreSQL's server processes (the postmaster and its children: the coordinators' backends,
   * checkpointer, WAL writer, autovacuum…) over the window: their CPU time (utime + stime), per
   * nominal fire and in cores; and how many such processes were seen during the run.
   */
  database: { cpuMs: number; cores: number; cpuMsPerFire: number; processes: number };
}

/** Process figures over the window (from /proc, sampled every SAMPLE_MS). */
export interface ProcessFigures {
  coordinatorCores: number;
  coordinatorCpuMsPerFire: number;
  /** VmRSS once the agents were welcomed, before the first fire (store loaded, no work), MB. */
  coordinatorIdleRssMB: number;
  /** VmRSS at the last sample of the window, and the highest in it, MB (10^6 bytes). */
  coordinatorRssMB: number;
  coordinatorRssMaxMB: number;
  /** The larger of VmHWM when the drain ended and every VmRSS sample, MB. */
  coordinatorPeakMB: number;
  /** This process: the broker, the dispatch observer and the sampler. */
  brokerCores: number;
  agentCores: number;
  /** Every other process on the machine, from /proc/stat. */
  otherCores: number;
  /**
   * The coordinator's main (JavaScript) thread, as shares of wall time, from /proc/PID/schedstat:
   * on a CPU, runnable but waiting for one, and asleep (idle in the event loop, or blocked in a
   * call such as SQLite's writes and fsyncs).
   */
  mainThread: { onCpu: number; waitingForCpu: number; asleep: number };
  /**
   * The agents' main threads, the same shares averaged over the agents: a start held up while
   * its agent was runnable but had no CPU shows as waiting.
   */
  agentMainThreads: { onCpu: number; waitingForCpu: number; asleep: number };
}

export interface RateResult {
  rate: number;
  durationMs: number;
  jobs: number;
  periodMs: number;
  agents: number;
  agentSyncStart: boolean;
  coordinatorNice: number;
  /** Messages authenticated (RunOptions.auth). */
  auth: boolean;
  /** Prefill time, and how long before the first nominal time the last agent was welcomed. */
  setup: { prefillMs: number; agentsReadyAheadMs: number };
  drain: { ms: number; complete: boolean };
  /** How the coordinator worker ended. */
  stop: string;
  fires: FireFigures;
  process: ProcessFigures;
  worker: WorkerStats | null;
  profile: ProfileSummary | null;
  /** PostgreSQL runs: each coordinator, and the database's CPU. */
  pg?: PgFigures;
}

/** The bench's agent ids: bench-agent-1, bench-agent-2, … */
const agentIdOf = (n: number) => `bench-agent-${n}`;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** CPU time (user + system) of a process, ms, from /proc/PID/stat (USER_HZ 100). */
export function cpuMs(pid: number): number {
  try {
    const fields = (readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1] ?? "").split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return Number.NaN;
  }
}

/** Main-thread time on a CPU and waiting for one, ns, from /proc/PID/schedstat. */
function schedNs(pid: number): [number, number] {
  try {
    const [run, wait] = readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ").map(Number);
    return [run ?? Number.NaN, wait ?? Number.NaN];
  } catch {
    return [Number.NaN, Number.NaN];
  }
}

export function statusKb(pid: number, field: "VmRSS" | "VmHWM"): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(
      readFileSync(`/proc/${pid}/status`, "utf8"),
    );
    return m ? Number(m[1]) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** Busy CPU time of the whole machine, ms, from /proc/stat. */
function machineBusyMs(): number {
  const f = (readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "")
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  return ((f[0] ?? 0) + (f[1] ?? 0) + (f[2] ?? 0) + (f[5] ?? 0) + (f[6] ?? 0) + (f[7] ?? 0)) * 10;
}

interface Sample {
  at: number;
  coord: number;
  /** PostgreSQL runs: every coordinator's CPU (the first is `coord`) and RSS, and the database's CPU since the first sample, ms. */
  coords: number[];
  coordRssKb: number[];
  db: number;
  /** Coordinator main thread on a CPU, and waiting for one, ns. */
  runNs: number;
  waitNs: number;
  rssKb: number;
  agents: number;
  /** The agents' main threads on a CPU, and waiting for one, ns, summed. */
  agentRunNs: number;
  agentWaitNs: number;
  self: number;
  machine: number;
}

function takeSample(
  coordPid: number,
  agentPids: number[],
  pg?: { coordPids: number[]; db: GroupCpu },
): Sample {
  const u = process.cpuUsage();
  const [runNs, waitNs] = schedNs(coordPid);
  pg?.db.add(postgresProcesses(allProcStats()));
  return {
    at: hostNow(),
    coord: cpuMs(coordPid),
    coords: pg ? pg.coordPids.map(cpuMs) : [],
    coordRssKb: pg ? pg.coordPids.map((pid) => statusKb(pid, "VmRSS")) : [],
    db: pg ? pg.db.ms() : Number.NaN,
    runNs,
    waitNs,
    rssKb: statusKb(coordPid, "VmRSS"),
    agents: agentPids.reduce((sum, pid) => sum + cpuMs(pid), 0),
    agentRunNs: agentPids.reduce((sum, pid) => sum + schedNs(pid)[0], 0),
    agentWaitNs: agentPids.reduce((sum, pid) => sum + schedNs(pid)[1], 0),
    self: (u.user + u.system) / 1000,
    machine: machineBusyMs(),
  };
}

/** Keeps the last `max` characters a stream wrote, for error messages. */
function tail(child: ChildProcess, max = 4_000): () => string {
  let text = "";
  child.stderr?.setEncoding("utf8").on("data", (c: string) => {
    text = (text + c).slice(-max);
  });
  return () => text.trim();
}

/** The coordinator worker `n` (1, 2, …) of a run: its cluster id and MQTT client id. */
const clusterIdOf = (n: number) => `bench-coordinator-${n}`;

/** A coordinator worker process and what it said on stdout. */
interface Worker {
  n: number;
  child: ChildProcess;
  pid: number;
  err: () => string;
  seen: {
    started?: Extract<WorkerLine, { t: "started" }>;
    stats: WorkerStats | null;
    role: string;
  };
}

export async function runRate(o: RunOptions): Promise<RateResult> {
  const dir = mkdtempSync(join(tmpdir(), "ax-bench-coordinator-"));
  const workers: Worker[] = [];
  const agentChildren: ChildProcess[] = [];
  const broker = await startEmbeddedBroker(0);
  const storePath = join(dir, "ax.sqlite");
  const schema = o.pg ? benchSchema() : undefined;
  const store =
    o.pg && schema !== undefined ? pgRunStore(o.pg.url, schema) : sqliteRunStore(storePath);
  try {
    // Dispatches as the broker receives them: the moment the coordinator published each one.
    const dispatches = new Map<string, number>();
    const marker = Buffer.from('"type":"dispatch"');
    const idKey = Buffer.from('"executionId":"');
    const quote = 0x22;
    broker.broker.on("publish", (packet, client) => {
      if (client === null || !packet.topic.endsWith("/down")) return;
      const payload = packet.payload;
      if (typeof payload === "string" || payload.indexOf(marker) < 0) return;
      const at = hostNow();
      // The id without parsing the whole message: this process is the broker too, and its CPU
      // is taken from the processes measured.
      const start = payload.indexOf(idKey) + idKey.length;
      const id = payload.toString("utf8", start, payload.indexOf(quote, start));
      if (!dispatches.has(id)) dispatches.set(id, at);
    });

    const t0 = Date.now();
    const firstAt = t0 + SETUP_MS;
    const schedule = await store.prefill({ rate: o.rate, firstAt, now: t0 });
    const prefillMs = Date.now() - t0;
    const window = { start: firstAt + WARMUP_MS, end: firstAt + WARMUP_MS + o.durationMs };
    const expected = expectedFires(schedule, window.start, window.end);

    // The coordinator(s).
    const profilePath = join(dir, "coordinator.cpuprofile");
    const agentErr: (() => string)[] = [];
    const online = new Set<string>();
    const alive = (what: string) => {
      for (const w of workers) {
        if (w.child.exitCode !== null || w.child.signalCode !== null) {
          throw new Error(`coordinator worker ${w.n} ended while ${what}: ${w.err()}`);
        }
      }
    };
    const until = async (what: string, deadline: number, cond: () => boolean) => {
      while (!cond()) {
        alive(what);
        if (Date.now() > deadline) {
          throw new Error(
            `timed out ${what}; coordinators' stderr: ${workers.map((w) => w.err() || "(none)").join(" | ")}; agents' stderr: ${agentErr.map((e) => e() || "(none)").join(" | ")}`,
          );
        }
        await sleep(20);
      }
    };
    const startWorker = (n: number): Worker => {
      const args: WorkerArgs = {
        storePath,
        mqttUrl: broker.url,
        prefix: PREFIX,
        windowStart: window.start,
        windowEnd: window.end,
        ...(o.profile && n === 1 ? { profilePath } : {}),
        auth: o.auth,
        agentIds: Array.from({ length: o.agents }, (_, i) => agentIdOf(i + 1)),
        identityDir: dir,
        ...(o.pg && schema !== undefined
          ? {
              pg: {
                url: o.pg.url,
                schema,
                clusterId: clusterIdOf(n),
                clientId: clusterIdOf(n),
                secretsDir: join(dir, "ax-secrets"),
                enroll: n === 1,
                ...(o.pg.leaseMs === undefined ? {} : { leaseMs: o.pg.leaseMs }),
                firing: o.pg.firing,
                ...(o.pg.dispatch === undefined ? {} : { dispatch: o.pg.dispatch }),
              },
            }
          : {}),
      };
      // With the heap cap the coordinator's systemd unit gives it (docs/operations.md): without
      // one, V8 lets the heap grow to hundreds of MB of garbage under load.
      const child = spawn(
        process.execPath,
        [
          "--expose-gc",
          `--max-old-space-size=${COORDINATOR_HEAP_MB}`,
          o.workerFile,
          JSON.stringify(args),
        ],
        {
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      // As `Nice=` in its systemd unit would (docs/operations.md: an agent on the same machine).
      if (o.coordinatorNice !== 0) setPriority(child.pid as number, o.coordinatorNice);
      const w: Worker = {
        n,
        child,
        pid: child.pid as number,
        err: tail(child),
        seen: { stats: null, role: "" },
      };
      workers.push(w);
      // Diagnosis: every coordinator's stderr (its warnings and errors), kept after the run.
      const logDir = process.env.AX_BENCH_WORKER_LOG_DIR;
      if (logDir) {
        const file = join(logDir, `coordinator-${n}-of-${o.pg?.coordinators ?? 1}-${o.rate}.log`);
        child.stderr?.on("data", (c: Buffer | string) => appendFileSync(file, c));
      }
      let buffered = "";
      child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
        buffered += chunk;
        for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
          const line = JSON.parse(buffered.slice(0, nl)) as WorkerLine;
          buffered = buffered.slice(nl + 1);
          if (line.t === "started") {
            w.seen.started = line;
            w.seen.role = line.role;
          } else if (line.t === "role") w.seen.role = line.role;
          else if (line.t === "agent") {
            if (line.status === "online") online.add(line.agentId);
            else online.delete(line.agentId);
          } else w.seen.stats = line.stats;
        }
      });
      return w;
    };
    // The first, and (PostgreSQL) the standbys once it is active: the oldest member is the active one.
    const first = startWorker(1);
    await until(
      "waiting for the coordinator to start",
      firstAt,
      () => first.seen.started !== undefined,
    );
    if (o.pg) {
      if (first.seen.role !== "active") {
        throw new Error(`the first coordinator started as ${first.seen.role}, not active`);
      }
      const standbys: Worker[] = [];
      for (let n = 2; n <= o.pg.coordinators; n++) standbys.push(startWorker(n));
      await until("waiting for the standbys to start", firstAt - 2_000, () =>
        standbys.every((w) => w.seen.started !== undefined),
      );
      const roles = standbys.map((w) => w.seen.role);
      // With dispatch shared every coordinator is active for its share from its start.
      const expected = o.pg.dispatch === "shared" ? "active" : "standby";
      if (roles.some((r) => r !== expected)) {
        throw new Error(`the other coordinators started as ${roles.join(", ")}, not ${expected}`);
      }
    }

    // The agents, once the coordinator listens (a hello before that waits 2 s for its retry).
    const agentPids: number[] = [];
    for (let n = 1; n <= o.agents; n++) {
      const agentId = agentIdOf(n);
      const configFile = join(dir, `${agentId}.json`);
      writeFileSync(
        configFile,
        JSON.stringify({
          agentId,
          mqtt: { url: broker.url, prefix: PREFIX },
          capacity: { concurrency: 256, queue: 10_000, maxPending: 100_000 },
          journal: {
            path: join(dir, `${agentId}.journal.sqlite`),
            synchronous: "NORMAL",
            syncStart: o.agentSyncStart,
          },
          shutdownGraceMs: 2_000,
          // Written by the worker as it enrolled the agent.
          ...(o.auth ? { identityFile: identityPath(dir, agentId) } : {}),
        }),
      );
      const child = spawn(
        process.execPath,
        [
          // Diagnosis: a CPU profile of every agent, written into this folder on exit.
          ...(process.env.AX_BENCH_AGENT_PROFILE_DIR
            ? ["--cpu-prof", `--cpu-prof-dir=${process.env.AX_BENCH_AGENT_PROFILE_DIR}`]
            : []),
          o.agentFile,
          configFile,
          join(dir, `${agentId}.log.json`),
        ],
        { stdio: ["ignore", "ignore", "pipe"] },
      );
      agentChildren.push(child);
      agentErr.push(tail(child));
      agentPids.push(child.pid as number);
    }
    // Dispatches go out dispatchLead (500 ms) before the first nominal time.
    await until("waiting for the agents to be welcomed", firstAt - 600, () => {
      const dead = agentChildren.findIndex((c) => c.exitCode !== null);
      if (dead >= 0) throw new Error(`agent ${dead + 1} ended: ${agentErr[dead]?.() ?? ""}`);
      return online.size === o.agents;
    });
    const agentsReadyAheadMs = firstAt - Date.now();
    const idleRssKb = workers.map((w) => statusKb(w.pid, "VmRSS"));

    // The window, sampled.
    const coordPid = first.pid;
    const samples: Sample[] = [];
    const pgSampling = o.pg
      ? { coordPids: workers.map((w) => w.pid), db: new GroupCpu() }
      : undefined;
    const sampler = setInterval(
      () => samples.push(takeSample(coordPid, agentPids, pgSampling)),
      SAMPLE_MS,
    );
    try {
      await until("the window ran", window.end + SAMPLE_MS, () => Date.now() >= window.end);
      // Drain: the window's nominal times all recorded, and none of their executions open.
      const drainStart = Date.now();
      let complete = false;
      let last = "";
      let movedAt = drainStart;
      while (Date.now() - drainStart < DRAIN_MAX_MS && Date.now() - movedAt < DRAIN_STALL_MS) {
        alive("draining");
        const p = await store.drainProgress(window.start, window.end);
        if (p.recorded >= expected && p.open === 0) {
          complete = true;
          break;
        }
        if (`${p.recorded}/${p.open}` !== last) {
          last = `${p.recorded}/${p.open}`;
          movedAt = Date.now();
        }
        await sleep(500);
      }
      await store.endDrain();
      const drainMs = Date.now() - drainStart;
      const peakKb = statusKb(coordPid, "VmHWM");
      clearInterval(sampler);

      // Standbys first, so none takes over from the active one as it goes.
      const stops = new Map<Worker, string>();
      await Promise.all(
        workers.slice(1).map(async (w) => stops.set(w, await stopProcess(w.child, STOP_GRACE_MS))),
      );
      stops.set(first, await stopProcess(first.child, STOP_GRACE_MS));
      await Promise.all(agentChildren.map((c) => stopProcess(c, 10_000)));
      const logs: AgentLog[] = [];
      for (let n = 1; n <= o.agents; n++) {
        const path = join(dir, `${agentIdOf(n)}.log.json`);
        try {
          logs.push(JSON.parse(readFileSync(path, "utf8")) as AgentLog);
        } catch (err) {
          throw new Error(
            `agent ${n} left no log (${(err as Error).message}): ${agentErr[n - 1]?.()}`,
          );
        }
      }

      const fires = await store.analyze(schedule, window, { dispatches, logs });
      const proc = windowFigures(
        samples,
        window,
        fires.expected,
        peakKb,
        idleRssKb[0] ?? Number.NaN,
        o.agents,
      );
      let profile: ProfileSummary | null = null;
      if (o.profile && existsSync(profilePath)) {
        profile = summariseProfile(profilePath, o.workerFile);
      }
      return {
        rate: o.rate,
        durationMs: o.durationMs,
        jobs: JOBS,
        periodMs: schedule.periodMs,
        agents: o.agents,
        agentSyncStart: o.agentSyncStart,
        coordinatorNice: o.coordinatorNice,
        auth: o.auth,
        setup: { prefillMs, agentsReadyAheadMs },
        drain: { ms: drainMs, complete },
        stop: stops.get(first) ?? "",
        fires,
        process: proc,
        worker: first.seen.stats,
        profile,
        ...(o.pg && schema !== undefined
          ? {
              pg: pgFigures(samples, window, fires.expected, {
                schema,
                workers,
                idleRssKb,
                stops,
                processes: pgSampling?.db.processes ?? 0,
              }),
            }
          : {}),
      };
    } finally {
      clearInterval(sampler);
    }
  } finally {
    await store.close().catch((err: unknown) => {
      console.error(`closing the run's store failed: ${(err as Error).message}`);
    });
    await Promise.all(
      [...workers.map((w) => w.child), ...agentChildren].map((c) => stopProcess(c, 2_000)),
    );
    await broker.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The window's samples nearest its edges, and its length between them, ms. */
function windowEdges(samples: Sample[], window: { start: number; end: number }) {
  const inside = samples.filter((s) => s.at >= window.start && s.at <= window.end);
  const a = inside[0];
  const b = inside[inside.length - 1];
  if (!a || !b || a === b) throw new Error("too few /proc samples in the window");
  return { inside, a, b, wall: b.at - a.at };
}

/** Each coordinator's and the database's figures over the window (PostgreSQL runs). */
function pgFigures(
  samples: Sample[],
  window: { start: number; end: number },
  fires: number,
  x: {
    schema: string;
    workers: Worker[];
    idleRssKb: number[];
    stops: Map<Worker, string>;
    processes: number;
  },
): PgFigures {
  const { inside, a, b, wall } = windowEdges(samples, window);
  const perFire = (ms: number) => (ms / wall) * ((window.end - window.start) / Math.max(1, fires));
  const MB = (kb: number) => (kb * 1024) / 1e6;
  const db = b.db - a.db;
  return {
    schema: x.schema,
    coordinators: x.workers.map((w, i) => {
      const cpu = (b.coords[i] ?? Number.NaN) - (a.coords[i] ?? Number.NaN);
      return {
        clusterId: clusterIdOf(w.n),
        roleAtStart: w.seen.started?.role ?? "",
        roleAtEnd: w.seen.role,
        cores: cpu / wall,
        cpuMsPerFire: perFire(cpu),
        rssIdleMB: MB(x.idleRssKb[i] ?? Number.NaN),
        rssMB: MB(b.coordRssKb[i] ?? Number.NaN),
        rssMaxMB: MB(inside.reduce((m, s) => Math.max(m, s.coordRssKb[i] ?? 0), 0)),
        stop: x.stops.get(w) ?? "",
        worker: w.seen.stats,
      };
    }),
    database: { cpuMs: db, cores: db / wall, cpuMsPerFire: perFire(db), processes: x.processes },
  };
}

/** CPU over the window from the samples nearest its edges; RSS at its end and highest in it. */
function windowFigures(
  samples: Sample[],
  window: { start: number; end: number },
  fires: number,
  peakKb: number,
  idleRssKb: number,
  agents: number,
): ProcessFigures {
  const { inside, a, b, wall } = windowEdges(samples, window);
  const cores = (x: number, y: number) => (y - x) / wall;
  const coord = b.coord - a.coord;
  // PostgreSQL runs: the standbys and the database are not "others" either.
  const standbys = b.coords.slice(1).reduce((sum, v, i) => sum + v - (a.coords[i + 1] ?? v), 0);
  const database = Number.isFinite(b.db) ? b.db - a.db : 0;
  const MB = (kb: number) => (kb * 1024) / 1e6;
  return {
    coordinatorCores: cores(a.coord, b.coord),
    coordinatorCpuMsPerFire: (coord / wall) * ((window.end - window.start) / Math.max(1, fires)),
    coordinatorIdleRssMB: MB(idleRssKb),
    coordinatorRssMB: MB(b.rssKb),
    coordinatorRssMaxMB: MB(inside.reduce((m, s) => Math.max(m, s.rssKb), 0)),
    // VmHWM is updated lazily, so a sample may be above it.
    coordinatorPeakMB: MB(samples.reduce((m, s) => Math.max(m, s.rssKb), peakKb)),
    brokerCores: cores(a.self, b.self),
    agentCores: cores(a.agents, b.agents),
    mainThread: {
      onCpu: (b.runNs - a.runNs) / 1e6 / wall,
      waitingForCpu: (b.waitNs - a.waitNs) / 1e6 / wall,
      asleep: 1 - (b.runNs - a.runNs + b.waitNs - a.waitNs) / 1e6 / wall,
    },
    agentMainThreads: {
      onCpu: (b.agentRunNs - a.agentRunNs) / 1e6 / wall / agents,
      waitingForCpu: (b.agentWaitNs - a.agentWaitNs) / 1e6 / wall / agents,
      asleep:
        1 - (b.agentRunNs - a.agentRunNs + b.agentWaitNs - a.agentWaitNs) / 1e6 / wall / agents,
    },
    otherCores: Math.max(
      0,
      cores(a.machine, b.machine) -
        cores(a.coord, b.coord) -
        cores(a.self, b.self) -
        cores(a.agents, b.agents) -
        (standbys + database) / wall,
    ),
  };
}
