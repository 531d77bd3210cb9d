/**
 * The coordinator child process of bench/coordinator.ts: the real Coordinator with the default
 * config, on the store the bench prefilled, connected to the bench's broker. bench/coordinator.ts
 * bundles it with esbuild (packages external) to dist/bench/coordinator-worker.mjs and runs it
 * with plain node, so its RSS and CPU in /proc are the coordinator's alone.
 *
 * Messages are authenticated unless `args.auth` is false: the worker enrols the bench's agents
 * (`coordinator.identities.enroll`) and writes their identity files before it says it started.
 *
 * argv[2]: WorkerArgs as JSON. stdout: one JSON line per WorkerLine. Stats (and the CPU profile,
 * when asked for) are written when the window ends, and the stats again on SIGTERM, after which
 * it exits at once: the figures are read from the store, whose commits are in its WAL already.
 *
 * A coordinator far behind can hold its event loop in one chain of microtasks for many seconds
 * (its firing scans did, chained one per fire, before they were coalesced), during which no timer
 * runs and no signal is handled. So the window's edges run on whichever comes first: a timer, or the first store call
 * after the edge (the store is the coordinator's own SqliteStore, passed in through
 * `deps.store` behind a Proxy that only looks at the clock). The inspector answers a session on
 * this thread synchronously, so the profile is started and stopped right there.
 */
import { appendFileSync, writeFileSync, writeSync } from "node:fs";
import { Session } from "node:inspector";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator, openStore } from "../coordinator/coordinator.js";
import type { Store } from "../coordinator/store/port.js";
import {
  identityPath,
  type WorkerArgs,
  type WorkerLine,
  type WorkerStats,
} from "./coordinator-params.js";
import { percentile } from "./lib.js";

const MiB = 1024 * 1024;
const TICK_MS = 10;

function emit(line: WorkerLine): void {
  // Synchronous, so the line is out even when process.exit() follows.
  writeSync(1, `${JSON.stringify(line)}\n`);
}

/** Actions due at wall times, run once each by a timer or by `check()`, whichever is first. */
class Edges {
  private readonly due: { at: number; run: () => void }[] = [];

  add(at: number, run: () => void): void {
    this.due.push({ at, run });
    this.due.sort((a, b) => a.at - b.at);
    setTimeout(() => this.check(), Math.max(0, at - Date.now())).unref();
  }

  check(): void {
    const first = this.due[0];
    if (first === undefined || first.at > Date.now()) return;
    this.due.shift();
    first.run();
    this.check();
  }
}

/**
 * Event-loop delay from a 10 ms interval timer: each turn's lateness, plus (when read) how long
 * the loop has been held since the last turn, which a loop held to the end would never report.
 */
class LoopMonitor {
  private last = 0;
  private late: number[] = [];
  private timer: NodeJS.Timeout | undefined;

  start(): void {
    this.late = [];
    this.last = performance.now();
    this.timer = setInterval(() => {
      const now = performance.now();
      this.late.push(Math.max(0, now - this.last - TICK_MS));
      this.last = now;
    }, TICK_MS);
    this.timer.unref();
  }

  read(): NonNullable<WorkerStats["loopDelay"]> {
    if (this.timer !== undefined) clearInterval(this.timer);
    const late = [...this.late, Math.max(0, performance.now() - this.last - TICK_MS)];
    const sorted = Float64Array.from(late).sort();
    return {
      p50: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      max: percentile(sorted, 100),
      mean: late.reduce((a, b) => a + b, 0) / late.length,
    };
  }
}

/** Durations of store calls, by method, while `on` (the window). */
class CallTimes {
  on = false;
  private readonly ms = new Map<string, number[]>();

  add(name: string, ms: number): void {
    if (!this.on) return;
    const list = this.ms.get(name);
    if (list) list.push(ms);
    else this.ms.set(name, [ms]);
  }

  read(): NonNullable<WorkerStats["storeLatency"]> {
    this.on = false;
    const out: NonNullable<WorkerStats["storeLatency"]> = {};
    for (const [name, list] of this.ms) {
      const sorted = Float64Array.from(list).sort();
      out[name] = {
        n: list.length,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        max: percentile(sorted, 100),
        totalMs: list.reduce((a, b) => a + b, 0),
      };
    }
    return out;
  }
}

/**
 * `store` behind a Proxy that runs `edges.check()` before every call and counts the calls; with
 * `times`, it also times each call that returns a promise, to its settling.
 */
function watched(
  store: Store,
  edges: Edges,
  calls: Record<string, number>,
  times?: CallTimes,
): Store {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== "function") return value;
      let fn = wrapped.get(prop);
      if (!fn) {
        const name = String(prop);
        fn = (...args: unknown[]) => {
          calls[name] = (calls[name] ?? 0) + 1;
          edges.check();
          if (times === undefined)
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          const started = performance.now();
          const result = (value as (...a: unknown[]) => unknown).apply(target, args);
          if (result instanceof Promise) {
            const done = () => times.add(name, performance.now() - started);
            result.then(done, done);
          }
          return result;
        };
        wrapped.set(prop, fn);
      }
      return fn;
    },
  });
}

async function main(args: WorkerArgs): Promise<void> {
  const stats: WorkerStats = {
    events: {
      fired: 0,
      missed: 0,
      dropped: 0,
      invalidMessages: 0,
      agentOffline: 0,
      transitions: 0,
    },
    logs: { debug: 0, info: 0, warn: 0, error: 0, samples: [] },
    loopDelay: null,
    memory: null,
    profile: null,
    storeCalls: null,
  };
  const calls: Record<string, number> = {};
  const pg = args.pg;
  const config = parseCoordinatorConfig(
    {
      ...(pg
        ? {
            store: { url: pg.url, schema: pg.schema },
            cluster: {
              id: pg.clusterId,
              ...(pg.leaseMs === undefined ? {} : { leaseMs: pg.leaseMs }),
              firing: pg.firing,
              ...(pg.dispatch === undefined ? {} : { dispatch: pg.dispatch }),
            },
            mqtt: { url: args.mqttUrl, prefix: args.prefix, clientId: pg.clientId },
          }
        : {
            store: { path: args.storePath },
            mqtt: { url: args.mqttUrl, prefix: args.prefix },
          }),
      // "required" is the default; said here so the two variants read alike.
      security: {
        messages: args.auth ? "required" : "off",
        ...(pg ? { dir: pg.secretsDir } : {}),
      },
    },
    "bench",
  );
  const edges = new Edges();
  const store = await openStore(config);
  const times = pg ? new CallTimes() : undefined;
  const coordinator = new Coordinator(config, {
    store: watched(store, edges, calls, times),
    log: (level, msg) => {
      stats.logs[level]++;
      // Warnings and errors also on stderr, which the bench quotes when a run fails.
      if (level === "warn" || level === "error") process.stderr.write(`${level}: ${msg}\n`);
      if ((level === "warn" || level === "error") && stats.logs.samples.length < 10) {
        stats.logs.samples.push(`${level}: ${msg.slice(0, 300)}`);
      }
    },
  });
  const ev = coordinator.events;
  ev.on("fired", () => {
    stats.events.fired++;
  });
  ev.on("missed", (m) => {
    stats.events.missed += m.scheduledFor.length + m.uncounted;
  });
  ev.on("dropped", () => {
    stats.events.dropped++;
  });
  ev.on("invalidMessage", () => {
    stats.events.invalidMessages++;
  });
  ev.on("transition", () => {
    stats.events.transitions++;
  });
  ev.on("agent", (a) => {
    if (a.status === "offline") stats.events.agentOffline++;
    emit({ t: "agent", agentId: a.agentId, status: a.status, reason: a.reason, at: a.at });
  });

  // Diagnosis: what the coordinator holds in memory, every 2 s, appended to the file named.
  const memoryLog = process.env.AX_BENCH_DEBUG_MEMORY;
  if (memoryLog) {
    // biome-ignore lint/suspicious/noExplicitAny: reads private fields, for diagnosis only
    const c = coordinator as any;
    setInterval(() => {
      const client = c.ctx?.link?.client;
      const queues = [...(c.inbound?.queues?.values() ?? [])] as { items: unknown[] }[];
      appendFileSync(
        memoryLog,
        `${JSON.stringify({
          heapMB: Math.round(process.memoryUsage().heapUsed / MiB),
          leases: coordinator.leases.size,
          inboundQueued: queues.reduce((a, q) => a + q.items.length, 0),
          mqttOutgoing: client ? Object.keys(client.outgoing ?? {}).length : -1,
          mqttQueue: client?.queue?.length ?? -1,
          // biome-ignore lint/suspicious/noExplicitAny: private field, for diagnosis only
          executionsCached: (store as any).executions?.size ?? -1,
          // biome-ignore lint/suspicious/noExplicitAny: private field, for diagnosis only
          checkpoints: (store as any).checkpointer?.stats,
        })}\n`,
      );
    }, 2_000).unref();
  }

  const loop = new LoopMonitor();
  const session = args.profilePath ? new Session() : undefined;
  let profileStartedAt = 0;
  let callsAtStart: Record<string, number> = {};
  edges.add(args.windowStart, () => {
    callsAtStart = { ...calls };
    if (times) times.on = true;
    loop.start();
    if (!session) return;
    session.connect();
    profileStartedAt = Date.now();
    session.post("Profiler.enable");
    session.post("Profiler.setSamplingInterval", { interval: 1000 });
    session.post("Profiler.start");
  });
  edges.add(args.windowEnd, () => {
    stats.loopDelay = loop.read();
    stats.storeCalls = Object.fromEntries(
      Object.entries(calls).map(([name, count]) => [name, count - (callsAtStart[name] ?? 0)]),
    );
    if (times) stats.storeLatency = times.read();
    const m = process.memoryUsage();
    // The bench runs this process with --expose-gc: a full collection tells live data from garbage
    // not yet collected (after the window's figures are taken).
    (globalThis as { gc?: () => void }).gc?.();
    stats.memory = {
      rss: m.rss / MiB,
      heapUsed: m.heapUsed / MiB,
      heapTotal: m.heapTotal / MiB,
      external: m.external / MiB,
      liveHeapAfterGc: process.memoryUsage().heapUsed / MiB,
    };
    if (session && args.profilePath) {
      const path = args.profilePath;
      // Answered synchronously on this thread: the callback has run when post() returns.
      session.post("Profiler.stop", (err, result) => {
        if (err) {
          stats.profile = { error: err.message };
          return;
        }
        writeFileSync(path, JSON.stringify(result.profile));
        stats.profile = { startedAt: profileStartedAt, stoppedAt: Date.now() };
      });
      session.disconnect();
    }
    emit({ t: "stats", stats });
  });

  const stop = () => {
    emit({ t: "stats", stats });
    process.exit(0);
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);

  // Several coordinators on one store: the role as it changes (a standby taking over).
  const role = () => coordinator.membershipView()?.role ?? "active";
  if (pg) {
    stats.roles = [];
    let last = "";
    setInterval(() => {
      const now = role();
      if (now === last) return;
      last = now;
      stats.roles?.push({ at: Date.now(), role: now });
      emit({ t: "role", role: now, at: Date.now() });
    }, 100).unref();
  }

  return enroll(coordinator, args)
    .then(() => coordinator.start())
    .then(() => emit({ t: "started", pid: process.pid, role: role() }));
}

/** Enrols the bench's agents and writes their identity files, when messages are authenticated. */
async function enroll(coordinator: Coordinator, args: WorkerArgs): Promise<void> {
  if (!args.auth || args.pg?.enroll === false) return;
  for (const agentId of args.agentIds) {
    const { file } = await coordinator.identities.enroll(agentId, { actor: "bench" });
    writeFileSync(identityPath(args.identityDir, agentId), JSON.stringify(file), { mode: 0o600 });
  }
}

main(JSON.parse(process.argv[2] ?? "{}") as WorkerArgs).catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
