/**
 * The store side of bench/coordinator.ts: a SQLite file created by the real SqliteStore (so the
 * migrations are the coordinator's), prefilled with jobs by plain SQL, and read back after the run
 * to say what happened to every nominal time of the measured window.
 */
import Database from "better-sqlite3";
import { type JobDefinition, jobDefinitionSchema } from "../coordinator/domain/job.js";
import { SqliteStore } from "../coordinator/store/sqlite/sqlite-store.js";
import type { AgentLog } from "./coordinator-params.js";
import { percentile } from "./lib.js";

/** The jobs of one run: job i fires at anchors[i] + k × periodMs. */
export interface Schedule {
  jobs: number;
  periodMs: number;
  anchors: Float64Array;
  /** Aggregate nominal fires per second (jobs / period). */
  rate: number;
}

export const jobId = (i: number) => `bench-${String(i).padStart(6, "0")}`;

/** The bench's jobs for one run: their schedule, and each one's definition in resolved form. */
export interface BenchJobs {
  schedule: Schedule;
  definition: (i: number) => JobDefinition;
}

/**
 * `jobs` jobs, all `every periodMs` with anchors spread evenly over one period from `firstAt`, so
 * nominal times come at `rate` per second from `firstAt` on. Every job is active (none paused);
 * the period is jobs / rate (200 s at 500/s, 50 s at 2,000/s).
 */
export function planJobs(o: { jobs: number; rate: number; firstAt: number }): BenchJobs {
  const periodMs = Math.round((o.jobs * 1000) / o.rate);
  const anchors = new Float64Array(o.jobs);
  for (let i = 0; i < o.jobs; i++) anchors[i] = o.firstAt + Math.floor((i * periodMs) / o.jobs);
  // Defaults filled in once by the real schema; each job is that resolved form with its own id,
  // params and anchor (checked against the schema for the first and last job below).
  const template = jobDefinitionSchema.parse({
    id: jobId(0),
    handler: "echo",
    params: { n: 0 },
    trigger: { type: "every", everyMs: periodMs, anchor: o.firstAt },
  });
  const definition = (i: number): JobDefinition => ({
    ...template,
    id: jobId(i),
    params: { n: i },
    trigger: { type: "every", everyMs: periodMs, anchor: anchors[i] as number },
  });
  for (const i of [0, o.jobs - 1]) {
    const def = definition(i);
    if (JSON.stringify(jobDefinitionSchema.parse(def)) !== JSON.stringify(def)) {
      throw new Error(`bench job ${i} is not in the schema's resolved form`);
    }
  }
  return {
    schedule: { jobs: o.jobs, periodMs, anchors, rate: (o.jobs * 1000) / periodMs },
    definition,
  };
}

/** Creates the SQLite store and inserts the jobs of {@link planJobs}. */
export function prefillStore(
  path: string,
  o: { jobs: number; rate: number; firstAt: number; now: number },
): Schedule {
  const { schedule, definition } = planJobs(o);
  const anchors = schedule.anchors;
  const store = new SqliteStore({ path, now: () => o.now });
  void store.close();
  const db = new Database(path);
  try {
    const job = db.prepare(
      `INSERT INTO jobs (id, version, definition, next_fire_at, paused, created_at, updated_at)
       VALUES (?, 1, ?, ?, 0, ?, ?)`,
    );
    const version = db.prepare(
      "INSERT INTO job_versions (job_id, version, definition, created_at) VALUES (?, 1, ?, ?)",
    );
    db.transaction(() => {
      for (let i = 0; i < o.jobs; i++) {
        const json = JSON.stringify(definition(i));
        job.run(jobId(i), json, anchors[i], o.now, o.now);
        version.run(jobId(i), json, o.now);
      }
    })();
    db.pragma("wal_checkpoint(TRUNCATE)");
  } finally {
    db.close();
  }
  return schedule;
}

/** Nominal times of the schedule in [start, end). */
export function expectedFires(s: Schedule, start: number, end: number): number {
  let n = 0;
  for (let i = 0; i < s.jobs; i++) {
    const a = s.anchors[i] as number;
    const k0 = Math.max(0, Math.ceil((start - a) / s.periodMs));
    for (let t = a + k0 * s.periodMs; t < end; t += s.periodMs) n++;
  }
  return n;
}

/** The drain's two counts, the same on both stores (`?` placeholders here). */
export const DRAIN_SQL = {
  recorded: "SELECT COUNT(*) FROM fires WHERE scheduled_for >= ? AND scheduled_for < ?",
  open: `SELECT COUNT(*) FROM executions
       WHERE state IN ('PENDING', 'DISPATCHED', 'SCHEDULED', 'RUNNING', 'RETRY_WAITING')
         AND scheduled_for >= ? AND scheduled_for < ?`,
} as const;

/** Counts the window's nominal times already recorded and the executions of them still open. */
export function drainProgress(
  db: Database.Database,
  start: number,
  end: number,
): { recorded: number; open: number } {
  const recorded = db.prepare(DRAIN_SQL.recorded).pluck().get(start, end) as number;
  const open = db.prepare(DRAIN_SQL.open).pluck().get(start, end) as number;
  return { recorded, open };
}

/** A start this late counts as stalled (see FireFigures.stalled). */
export const STALL_MS = 100;

/** n, p50, p99, max and min of a sample, ms; NaN when it is empty. */
export interface Dist {
  n: number;
  p50: number;
  p99: number;
  max: number;
  min: number;
}

function dist(values: number[]): Dist {
  const s = Float64Array.from(values).sort();
  return {
    n: s.length,
    p50: percentile(s, 50),
    p99: percentile(s, 99),
    max: percentile(s, 100),
    min: percentile(s, 0),
  };
}

/** What happened to the window's nominal times, from the store and the agents' logs. */
export interface FireFigures {
  expected: number;
  /** Nominal times whose handler was entered at least once. */
  ran: number;
  /** Nominal times never run by the end of the drain. */
  lost: number;
  lostBreakdown: {
    /** Recorded as missed under the job's misfire policy (fired too late). */
    missed: number;
    /** No fire record at all: the coordinator never got to them. */
    notFired: number;
    /** Fired, but the execution ended (or was left) in this state without running. */
    byState: Record<string, number>;
  };
  /** Nominal times whose handler was entered more than once (any agent, any round). */
  duplicated: number;
  /** Of those, the ones run by more than one agent. */
  duplicatedAcrossAgents: number;
  /** Nominal times with more than one execution row. */
  duplicateExecutions: number;
  /** Executions dispatched more than once (dispatch timeout → round + 1). */
  redispatched: number;
  /** Handler entered (agent, host clock) − nominal time. */
  start: Dist & { early: number; earlyPct: number };
  /**
   * Fires that started more than STALL_MS late, and the span of nominal times they fall in (s
   * from the window's start): one short span is one stall, not a steady state.
   */
  stalled: { count: number; fromS: number; toS: number } | null;
  /** The `started` report's startedAt (the agent's estimate of coordinator time) − nominal. */
  startReported: Dist;
  /** Dispatch received by the broker (host clock) − nominal; negative = ahead of time. */
  trigger: Dist & { aheadPct: number };
  /** Stored dispatchedAt (the dispatcher pass's start time, last dispatch) − nominal. */
  triggerStored: Dist;
  /** SUCCEEDED stored (the finished transition's time) − nominal. */
  endToEnd: Dist;
  /** Fires recorded (any nominal time) per second of the window, and runs stored SUCCEEDED. */
  throughput: { firedPerSec: number; succeededPerSec: number };
  counters: Record<string, number>;
  /** Each agent's clock offset estimate and its uncertainty, as its last heartbeat stored them. */
  agents: { agentId: string; clockOffsetMs: number; clockUncertaintyMs: number }[];
  /**
   * Date.now() − hostNow() as an agent measured it, the one furthest from 0 of all agents' start
   * and stop readings: the error bound of start lateness, which compares the two clocks.
   */
  agentClockAlignmentMs: number;
  /**
   * The `started` report's startedAt (the agent's estimate of coordinator time as it started the
   * command) minus the host clock as the handler was entered, for fires that ran once: the
   * agent's clock error, less the time from that stamp to the handler (µs alone, tens of ms when
   * a burst of starts is stamped in one turn before any handler runs). Its upper end bounds the
   * clock error; `agents` holds the offsets themselves.
   */
  agentTimeError: Dist;
  /**
   * Where late starts came from. `delivery`: the dispatch taken by the agent's executor (its
   * host clock) − received by the broker; `arrival`: taken by the executor − nominal time
   * (negative: ahead). `late`: starts more than LATE_MS late, split by whether their dispatch
   * reached the agent before the nominal time. `loopGaps`: the agents' event loops held for more
   * than LOOP_GAP_MS within the window (all agents), their count, total and longest, ms.
   */
  diagnosis: {
    delivery: Dist;
    arrival: Dist;
    late: { count: number; arrivedLate: number; arrivedAhead: number };
    loopGaps: { count: number; totalMs: number; maxMs: number; over50: number };
    /**
     * The agents' journal checkpoints over their whole run: passes on the checkpoint thread, the
     * times an agent's own thread finished one (so the WAL starts over), and the longest of
     * those, ms.
     */
    agentCheckpoints: {
      checkpoints: number;
      finishedInline: number;
      inlineMs: number;
      inlineMaxMs: number;
    };
  };
}

/** A start later than this counts in FireFigures.diagnosis.late. */
export const LATE_MS = 10;

export interface ExecRow {
  id: string;
  job_id: string;
  scheduled_for: number;
  state: string;
  started_at: number | null;
  updated_at: number;
  dispatched_at: number | null;
  round: number;
  dispatches: number;
}

/** What the read-back takes from a store after the run: the window's rows, and a few totals. */
export interface StoreReadBack {
  fires: { job_id: string; scheduled_for: number; status: string }[];
  executions: ExecRow[];
  /** Fires recorded `fired` with fired_at in the window, and executions SUCCEEDED in it. */
  firedInWindow: number;
  succeededInWindow: number;
  counters: Record<string, number>;
  /** The agents table's `record` JSON, by agent id. */
  agentRecords: string[];
}

/** The queries of the read-back, the same on both stores (`?` placeholders here). */
export const READ_BACK_SQL = {
  fires:
    "SELECT job_id, scheduled_for, status FROM fires WHERE scheduled_for >= ? AND scheduled_for < ?",
  executions: `SELECT id, job_id, scheduled_for, state, started_at, updated_at, dispatched_at, round,
           dispatches
         FROM executions WHERE kind = 'job' AND scheduled_for >= ? AND scheduled_for < ?`,
  firedInWindow:
    "SELECT COUNT(*) AS n FROM fires WHERE status = 'fired' AND fired_at >= ? AND fired_at < ?",
  succeededInWindow:
    "SELECT COUNT(*) AS n FROM executions WHERE state = 'SUCCEEDED' AND updated_at >= ? AND updated_at < ?",
  counters: "SELECT name, value FROM counters",
  agents: "SELECT record FROM agents ORDER BY agent_id",
} as const;

/** Reads the SQLite store after the run (the coordinator has exited) and scores the window. */
export function analyze(
  path: string,
  s: Schedule,
  window: { start: number; end: number },
  observed: { dispatches: Map<string, number>; logs: AgentLog[] },
): FireFigures {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const { start: ws, end: we } = window;
    const count = (sql: string) => (db.prepare(sql).get(ws, we) as { n: number }).n;
    const readBack: StoreReadBack = {
      fires: db.prepare(READ_BACK_SQL.fires).all(ws, we) as StoreReadBack["fires"],
      executions: db.prepare(READ_BACK_SQL.executions).all(ws, we) as ExecRow[],
      firedInWindow: count(READ_BACK_SQL.firedInWindow),
      succeededInWindow: count(READ_BACK_SQL.succeededInWindow),
      counters: Object.fromEntries(
        (db.prepare(READ_BACK_SQL.counters).all() as { name: string; value: number }[]).map((c) => [
          c.name,
          c.value,
        ]),
      ),
      agentRecords: db.prepare(READ_BACK_SQL.agents).pluck().all() as string[],
    };
    return scoreWindow(s, window, readBack, observed);
  } finally {
    db.close();
  }
}

/** What happened to every nominal time of the window, from a store's read-back and the agents' logs. */
export function scoreWindow(
  s: Schedule,
  window: { start: number; end: number },
  store: StoreReadBack,
  observed: { dispatches: Map<string, number>; logs: AgentLog[] },
): FireFigures {
  const { start: ws, end: we } = window;
  const key = (job: string, t: number) => `${job}@${t}`;
  const nominal = new Map<string, { rows: ExecRow[]; fire: string | undefined }>();
  for (let i = 0; i < s.jobs; i++) {
    const a = s.anchors[i] as number;
    const k0 = Math.max(0, Math.ceil((ws - a) / s.periodMs));
    for (let t = a + k0 * s.periodMs; t < we; t += s.periodMs) {
      nominal.set(key(jobId(i), t), { rows: [], fire: undefined });
    }
  }
  for (const f of store.fires) {
    const n = nominal.get(key(f.job_id, f.scheduled_for));
    if (n) n.fire = f.status;
  }
  for (const r of store.executions) nominal.get(key(r.job_id, r.scheduled_for))?.rows.push(r);

  const runs = new Map<string, { count: number; first: number; agents: Set<string> }>();
  const received = new Map<string, number>();
  const gaps: number[] = [];
  const agentCheckpoints = { checkpoints: 0, finishedInline: 0, inlineMs: 0, inlineMaxMs: 0 };
  let alignment = 0;
  for (const log of observed.logs) {
    for (const [id, at] of log.received ?? []) {
      received.set(id, Math.min(at, received.get(id) ?? Number.POSITIVE_INFINITY));
    }
    for (const [at, ms] of log.loopGaps ?? []) if (at - ms >= ws && at <= we) gaps.push(ms);
    const c = log.checkpoints;
    if (c) {
      agentCheckpoints.checkpoints += c.checkpoints ?? 0;
      agentCheckpoints.finishedInline += c.finishedInline ?? 0;
      agentCheckpoints.inlineMs += c.inlineMs ?? 0;
      agentCheckpoints.inlineMaxMs = Math.max(agentCheckpoints.inlineMaxMs, c.inlineMaxMs ?? 0);
    }
    for (const a of log.clockAlignment) if (Math.abs(a) > Math.abs(alignment)) alignment = a;
    for (const [id, , at] of log.runs) {
      const r = runs.get(id);
      if (r) {
        r.count++;
        r.first = Math.min(r.first, at);
        r.agents.add(log.agentId);
      } else runs.set(id, { count: 1, first: at, agents: new Set([log.agentId]) });
    }
  }

  const start: number[] = [];
  const stalledAt: number[] = [];
  const startReported: number[] = [];
  const trigger: number[] = [];
  const triggerStored: number[] = [];
  const endToEnd: number[] = [];
  const agentTimeError: number[] = [];
  const lostBreakdown: FireFigures["lostBreakdown"] = { missed: 0, notFired: 0, byState: {} };
  const delivery: number[] = [];
  const arrival: number[] = [];
  const late = { count: 0, arrivedLate: 0, arrivedAhead: 0 };
  let ran = 0;
  let duplicated = 0;
  let duplicatedAcrossAgents = 0;
  let duplicateExecutions = 0;
  let redispatched = 0;
  for (const [k, n] of nominal) {
    const t = Number(k.slice(k.indexOf("@") + 1));
    if (n.rows.length > 1) duplicateExecutions++;
    let count = 0;
    let first = Number.POSITIVE_INFINITY;
    const agents = new Set<string>();
    for (const r of n.rows) {
      const run = runs.get(r.id);
      if (run) {
        count += run.count;
        first = Math.min(first, run.first);
        for (const a of run.agents) agents.add(a);
      }
      if (r.dispatches > 1 || r.round > 1) redispatched++;
      if (r.started_at !== null) {
        startReported.push(r.started_at - t);
        // Only a single run: with two, startedAt belongs to whichever round was stored.
        if (run?.count === 1) agentTimeError.push(r.started_at - run.first);
      }
      const seen = observed.dispatches.get(r.id);
      if (seen !== undefined) trigger.push(seen - t);
      const got = received.get(r.id);
      if (got !== undefined) {
        arrival.push(got - t);
        if (seen !== undefined) delivery.push(got - seen);
        if (run && run.first - t > LATE_MS) {
          late.count++;
          if (got > t) late.arrivedLate++;
          else late.arrivedAhead++;
        }
      }
      if (r.dispatched_at !== null) triggerStored.push(r.dispatched_at - t);
      if (r.state === "SUCCEEDED") endToEnd.push(r.updated_at - t);
    }
    if (count > 1) duplicated++;
    if (count > 1 && agents.size > 1) duplicatedAcrossAgents++;
    if (count > 0) {
      ran++;
      start.push(first - t);
      if (first - t > STALL_MS) stalledAt.push((t - ws) / 1000);
      continue;
    }
    if (n.fire === "missed") lostBreakdown.missed++;
    else if (n.fire === undefined) lostBreakdown.notFired++;
    else {
      const state = n.rows[0]?.state ?? "no execution";
      lostBreakdown.byState[state] = (lostBreakdown.byState[state] ?? 0) + 1;
    }
  }

  const seconds = (we - ws) / 1000;
  const firedInWindow = store.firedInWindow;
  const succeededInWindow = store.succeededInWindow;
  const counters = store.counters;
  const agents = store.agentRecords
    .map(
      (json) =>
        JSON.parse(json) as {
          agentId: string;
          clockOffsetMs: number;
          clockUncertaintyMs: number;
        },
    )
    .map((a) => ({
      agentId: a.agentId,
      clockOffsetMs: a.clockOffsetMs,
      clockUncertaintyMs: a.clockUncertaintyMs,
    }));

  const early = start.filter((v) => v < 0).length;
  return {
    expected: nominal.size,
    ran,
    lost: nominal.size - ran,
    lostBreakdown,
    duplicated,
    duplicatedAcrossAgents,
    duplicateExecutions,
    redispatched,
    start: { ...dist(start), early, earlyPct: start.length ? (100 * early) / start.length : 0 },
    stalled: stalledAt.length
      ? {
          count: stalledAt.length,
          fromS: stalledAt.reduce((a, b) => Math.min(a, b)),
          toS: stalledAt.reduce((a, b) => Math.max(a, b)),
        }
      : null,
    startReported: dist(startReported),
    trigger: {
      ...dist(trigger),
      aheadPct: trigger.length ? (100 * trigger.filter((v) => v < 0).length) / trigger.length : 0,
    },
    triggerStored: dist(triggerStored),
    endToEnd: dist(endToEnd),
    throughput: {
      firedPerSec: firedInWindow / seconds,
      succeededPerSec: succeededInWindow / seconds,
    },
    counters,
    agents,
    agentClockAlignmentMs: alignment,
    agentTimeError: dist(agentTimeError),
    diagnosis: {
      delivery: dist(delivery),
      arrival: dist(arrival),
      late,
      loopGaps: {
        count: gaps.length,
        totalMs: gaps.reduce((a, b) => a + b, 0),
        maxMs: gaps.reduce((a, b) => Math.max(a, b), 0),
        over50: gaps.filter((g) => g > 50).length,
      },
      agentCheckpoints,
    },
  };
}
