/** Parameters and message shapes shared by bench/coordinator.ts and its child processes. */

/** MQTT topic prefix of every run. */
export const PREFIX = "axbench";
/** Jobs in the store, every run. */
export const JOBS = 100_000;
/**
 * Agents (bundled child processes) executing the fires, by default. Two: on 2 cores every further
 * process brings its own timers, heartbeats and garbage collector to compete for the same CPUs
 * (`--agents 4` measures that).
 */
export const AGENTS = 2;
/**
 * From the start of the store prefill to the first nominal time: prefill, coordinator, agents.
 * 8 s was enough on an idle machine; on one at load average 10 the prefill alone took 4.5–6.4 s
 * and the agents were not welcomed in time. It comes before the warm-up, so it changes no figure.
 */
export const SETUP_MS = 15_000;
/**
 * Nominal times in this first stretch fire but are not counted: the processes' JIT, caches and
 * heaps settle to the load (a cold coordinator ran late for its first 5–8 s at 2,000/s).
 */
export const WARMUP_MS = 10_000;
/** The coordinator's heap cap, as its systemd unit sets it (docs/operations.md). */
export const COORDINATOR_HEAP_MB = 256;
/** After the window, at most this long for the window's fires to finish… */
export const DRAIN_MAX_MS = 15_000;
/** …and no longer once the store has not moved for this long (a coordinator stuck for good). */
export const DRAIN_STALL_MS = 3_000;
/**
 * How long the coordinator worker may take to exit after SIGTERM before it is killed. A worker far
 * behind handles the signal late; its stats and profile were written at the window's end.
 */
export const STOP_GRACE_MS = 5_000;
/** /proc sampling period. */
export const SAMPLE_MS = 500;

/** The high-resolution host clock: the realtime clock at process start plus monotonic time. */
export function hostNow(): number {
  return performance.timeOrigin + performance.now();
}

/** What bench/coordinator.ts passes to the coordinator worker (argv[2], JSON). */
export interface WorkerArgs {
  storePath: string;
  mqttUrl: string;
  prefix: string;
  /** Measured window on the wall clock (UTC ms): the event-loop histogram covers it. */
  windowStart: number;
  windowEnd: number;
  /** When set, a CPU profile of the window is written here (.cpuprofile JSON). */
  profilePath?: string;
  /**
   * Messages authenticated (`security.messages: "required"`, the default): the worker enrols
   * `agentIds` before it starts and writes each one's identity file into `identityDir`, as
   * {@link identityPath} names it. Off: `security.messages: "off"`, agents without identity.
   */
  auth: boolean;
  agentIds: string[];
  identityDir: string;
  /**
   * On PostgreSQL instead of the SQLite file at `storePath`: a schema that several workers share,
   * each with its own `cluster.id` and MQTT client id and the same secrets folder. Only the first
   * worker enrols the agents (`enroll`); the others start as standbys. Store calls are timed.
   */
  pg?: PgWorkerArgs;
}

/** A worker on a PostgreSQL store (WorkerArgs.pg). */
export interface PgWorkerArgs {
  url: string;
  schema: string;
  clusterId: string;
  clientId: string;
  secretsDir: string;
  /** Enrol `agentIds` (the first worker); the others find the enrolments in the store. */
  enroll: boolean;
  /** `cluster.leaseMs`, when not the coordinator's default. */
  leaseMs?: number;
  /** `cluster.firing`. */
  firing: "active" | "shared";
  /** `cluster.dispatch`. @default "active" */
  dispatch?: "active" | "shared";
}

/** Where the worker writes an agent's identity file (mode 0600), for its config's identityFile. */
export function identityPath(dir: string, agentId: string): string {
  return `${dir}/${agentId}.identity.json`;
}

/** Engine events, logs and the event loop as the worker saw them. */
export interface WorkerStats {
  events: {
    fired: number;
    missed: number;
    dropped: number;
    invalidMessages: number;
    agentOffline: number;
    transitions: number;
  };
  logs: { debug: number; info: number; warn: number; error: number; samples: string[] };
  /**
   * Event-loop delay over the window, ms: how late each turn of a 10 ms interval timer ran, and
   * at the window's end how long the loop had been held since its last turn.
   */
  loopDelay: { p50: number; p99: number; max: number; mean: number } | null;
  /** Store calls over the window, by method (listExecutionsInStates ≈ dispatcher passes). */
  storeCalls: Record<string, number> | null;
  /**
   * Store calls over the window, by method: how long each took from call to settled promise,
   * ms (PostgreSQL runs only; with SQLite the calls are not timed).
   */
  storeLatency?: Record<
    string,
    { n: number; p50: number; p99: number; max: number; totalMs: number }
  >;
  /** The membership role at start and each change after it, with the wall time (PostgreSQL). */
  roles?: { at: number; role: string }[];
  /** When the profile was started and stopped (wall ms), or why it was not written. */
  profile: { startedAt: number; stoppedAt: number } | { error: string } | null;
  /** process.memoryUsage() at the end of the window, and heapUsed after a full GC then, MiB. */
  memory: {
    rss: number;
    heapUsed: number;
    heapTotal: number;
    external: number;
    liveHeapAfterGc: number;
  } | null;
}

/** One JSON line on the worker's stdout. */
export type WorkerLine =
  | { t: "started"; pid: number; role: string }
  | { t: "role"; role: string; at: number }
  | { t: "agent"; agentId: string; status: "online" | "offline"; reason: string; at: number }
  | { t: "stats"; stats: WorkerStats };

/** What the bench agent writes when it stops: every handler start it saw. */
export interface AgentLog {
  agentId: string;
  /**
   * Date.now() (the coordinator's clock) − hostNow() (the echo's), measured at a millisecond tick
   * at start and at stop, ms: a few µs when the two agree.
   */
  clockAlignment: [number, number];
  /** [executionId, round, hostNow() as the echo handler was entered]. */
  runs: [string, number, number][];
  /** [executionId, hostNow() as the agent's executor took the dispatch]: the first of each id. */
  received: [string, number][];
  /**
   * Stretches when the agent's event loop was held: [hostNow() at the end, length in ms] of every
   * gap over LOOP_GAP_MS between turns of an interval timer of that period (beyond its period).
   */
  loopGaps: [number, number][];
  /** The journal's checkpoint figures at stop (shared/wal-checkpoint.ts), when it has them. */
  checkpoints?: Record<string, number>;
}

/** A held event loop shorter than this is not listed in AgentLog.loopGaps. */
export const LOOP_GAP_MS = 10;
