import { readFileSync } from "node:fs";
import { ownerAmong } from "../../../coordinator/engine/membership.js";
import type { ExecutionRecord } from "../../../coordinator/store/port.js";
import { TERMINAL_STATE_NAMES, TERMINAL_STATES } from "../../../shared/fsm.js";
import { tcpProxy } from "../tcp-proxy.js";
import type { BrokerKind } from "./broker-process.js";
import type { CoordinatorProcess } from "./coordinator-process.js";
import { ChaosHarness, sleep } from "./harness.js";
import { listExecutions, type RecordedExecution } from "./record.js";
import { leadBeyond, tickJob, workInEveryState } from "./scenarios.js";
import type { TruthResult } from "./truth.js";

/**
 * Chaos scenarios of several coordinators on one PostgreSQL store (issue "Several coordinators on
 * PostgreSQL"): the active one is lost, by kill -9 or by a partition from the database, under
 * load; a standby takes over; the lost one comes back as a standby. Each ends with the same
 * truth check as the single-coordinator scenarios (test/helpers/chaos/truth.ts).
 */
export interface ClusterScenario {
  name: string;
  title: string;
  allowsTwoRounds: boolean;
  run(pg: ClusterRunOptions): Promise<ClusterResult>;
}

export interface ClusterRunOptions {
  /** A PostgreSQL server and a schema of the run's own (dropped by the caller). */
  url: string;
  schema: string;
  broker?: BrokerKind;
  /** The store URL of coordinator `i` (0-based), when one reaches it another way (a proxy). */
  urlOf?: (i: number) => string;
}

export interface ClusterResult {
  truth: TruthResult;
  /** From the loss of the active coordinator to another one answering ready. */
  takeoverMs: number;
  /** The coordinator that took over, and the one that was lost. */
  lost: string;
  tookOver: string;
  /**
   * Executions whose timeline names the lost coordinator and another one (work it held when lost,
   * finished by the one that took over), and transition entries that name none.
   */
  handledByTwo: number;
  unnamedEntries: number;
  /** What the lost coordinator did by itself: its exit code (75: fenced), null if killed. */
  lostExitCode: number | null;
  /** How long before the takeover the lost one's process ended (negative: after it). */
  lostEndedBeforeTakeoverMs: number | null;
  /**
   * How long before the takeover the lost one logged that it was fenced (it stops dispatching
   * there); null when it logged no fence (killed).
   */
  fencedBeforeTakeoverMs: number | null;
  /** With firing shared, what the record says of the cron jobs every coordinator fired. */
  shares?: ShareLedger;
}

/** When a coordinator's log last said it was fenced (UTC ms), or null. */
function fenceLoggedAt(logFile: string): number | null {
  let at: number | null = null;
  for (const line of readFileSync(logFile, "utf8").split("\n")) {
    if (!line.includes("fenced")) continue;
    try {
      const rec = JSON.parse(line) as { time?: string | number; msg?: string };
      if (!String(rec.msg).includes("fenced")) continue;
      const t = typeof rec.time === "number" ? rec.time : Date.parse(String(rec.time));
      if (Number.isFinite(t)) at = t;
    } catch {
      // not a JSON line
    }
  }
  return at;
}

/** Leases short enough for a test; takeover then waits about 2 s plus one renewal. */
const LEASE_MS = 2_000;

async function withCluster<R>(
  scenario: string,
  pg: ClusterRunOptions,
  body: (h: ChaosHarness) => Promise<R>,
  leaseMs = LEASE_MS,
  firing?: "active" | "shared",
  dispatch?: "active" | "shared",
): Promise<R> {
  const h = await ChaosHarness.start({
    scenario,
    cluster: {
      coordinators: 3,
      url: pg.url,
      schema: pg.schema,
      leaseMs,
      ...(firing === undefined ? {} : { firing }),
      ...(dispatch === undefined ? {} : { dispatch }),
      ...(pg.urlOf === undefined ? {} : { urlOf: pg.urlOf }),
    },
    ...(pg.broker === undefined ? {} : { broker: pg.broker }),
    // With firing shared the scenarios add 12 cron jobs every second (addShareJobs), and after
    // an outage their catch-up runs arrive at once: with 4 slots a command held on its agent for
    // its time would wait behind them (the agent's queue is by priority, then arrival), which is
    // capacity, not the fault under test.
    ...(firing === "shared" ? { agent: { concurrency: 16 } } : {}),
  });
  try {
    return await body(h);
  } finally {
    await h.close();
  }
}

/** Ends the run: the lost one back as a standby, the record settled and checked. */
async function finish(
  h: ChaosHarness,
  lost: CoordinatorProcess,
  t0: number,
  outageMs: number,
): Promise<{ truth: TruthResult; handledByTwo: number; unnamedEntries: number }> {
  const faultEnd = Date.now();
  const converge = h.convergence(faultEnd);
  await lost.start({ standby: true });
  await sleep(Math.max(0, t0 + 18_000 - Date.now()));
  // The run talks to whichever coordinator is active now: if the one found after the fault
  // fenced itself since, another took over, and the record is read from that one.
  await h.findActive(20_000);
  const truth = await h.truth({ convergeMs: await converge, mustBeOnTime: leadBeyond(outageMs) });
  const health = await h.coordinator.api<{
    cluster?: { coordinators: { id: string; info: { role?: string } }[] };
  }>("GET", "/api/health");
  for (const c of h.coordinators) {
    const fenced = fenceLoggedAt(c.logFile);
    if (fenced !== null || c.exitCode() !== null) {
      truth.notes.push(
        `${c.config.cluster?.id}: exit code ${c.exitCode()}, fenced at ${fenced === null ? "-" : new Date(fenced).toISOString()}`,
      );
    }
  }
  truth.notes.push(
    `members at the end: ${(health.cluster?.coordinators ?? [])
      .map((c) => `${c.id} (${c.info.role ?? "?"})`)
      .join(", ")}`,
  );
  // Who handled what: every transition's timeline entry names the coordinator that wrote it.
  const lostId = lost.config.cluster?.id;
  let handledByTwo = 0;
  let unnamedEntries = 0;
  for (const e of await listExecutions(h.coordinator)) {
    const { timeline } = await h.coordinator.api<{
      timeline: { fromState: string | null; detail: { coordinator?: string } | null }[];
    }>("GET", `/api/executions/${e.id}`);
    const names = new Set<string>();
    for (const t of timeline) {
      if (t.fromState === null) continue; // its creation, not a transition
      if (t.detail?.coordinator === undefined) unnamedEntries++;
      else names.add(t.detail.coordinator);
    }
    if (lostId !== undefined && names.has(lostId) && names.size > 1) handledByTwo++;
  }
  truth.notes.push(`executions handled by ${lostId} and another: ${handledByTwo}`);
  return { truth, handledByTwo, unnamedEntries };
}

/**
 * kill -9 of the active coordinator under load; a standby takes over; the killed one rejoins.
 * With `firing` shared, the standbys fire their share all along, and the one that takes over
 * was already firing when it became active.
 */
export function coordinatorFailoverWith(firing: "active" | "shared"): ClusterScenario {
  return {
    name: `coordinator-failover${firing === "shared" ? "-shared-firing" : ""}`,
    title: `3 coordinators on PostgreSQL${firing === "shared" ? ", firing shared" : ""}: kill -9 of the active one under load, restarted as a standby`,
    allowsTwoRounds: false,
    run: (pg) =>
      withCluster(
        `coordinator-failover${firing === "shared" ? "-shared-firing" : ""}`,
        pg,
        async (h) => {
          const t0 = await workInEveryState(h);
          const lost = h.coordinator;
          await lost.kill();
          const lostAt = Date.now();
          const active = await h.findActive(20_000);
          const takeoverMs = Date.now() - lostAt;
          const end = await finish(h, lost, t0, takeoverMs + 1_000);
          return {
            ...end,
            takeoverMs,
            lost: lost.config.cluster?.id ?? "?",
            tookOver: active.config.cluster?.id ?? "?",
            lostExitCode: null,
            lostEndedBeforeTakeoverMs: 0,
            fencedBeforeTakeoverMs: null,
          };
        },
        LEASE_MS,
        firing,
      ),
  };
}

export const coordinatorFailover = coordinatorFailoverWith("active");

/**
 * The active coordinator cut off from the database, not from the broker: it must fence itself
 * (stop dispatching, exit 75) before a standby takes its work over.
 */
export const databasePartition: ClusterScenario = {
  name: "database-partition",
  title:
    "3 coordinators on PostgreSQL: the active one cut off from the database (not the broker) under load",
  allowsTwoRounds: false,
  run: async (pg) => {
    const target = new URL(pg.url);
    const proxy = await tcpProxy(Number(target.port || 5432), target.hostname);
    const viaProxy = new URL(pg.url);
    viaProxy.hostname = "127.0.0.1";
    viaProxy.port = String(proxy.port);
    try {
      // The active one (c1) reaches the database through the proxy, the standbys directly.
      return await withCluster(
        "database-partition",
        { ...pg, urlOf: (i) => (i === 0 ? viaProxy.toString() : pg.url) },
        async (h) => {
          const lost = h.coordinator;
          const t0 = await workInEveryState(h);
          const ended = lost.exited().then(() => Date.now());
          proxy.blackhole();
          const cutAt = Date.now();
          const active = await h.findActive(20_000);
          const takeoverAt = Date.now();
          const endedAt = await Promise.race([ended, sleep(15_000).then(() => null)]);
          const lostExitCode = lost.exitCode();
          const fencedAt = fenceLoggedAt(lost.logFile);
          proxy.heal();
          const end = await finish(h, lost, t0, takeoverAt - cutAt + 1_000);
          return {
            ...end,
            takeoverMs: takeoverAt - cutAt,
            lost: lost.config.cluster?.id ?? "?",
            tookOver: active.config.cluster?.id ?? "?",
            lostExitCode,
            lostEndedBeforeTakeoverMs: endedAt === null ? null : takeoverAt - endedAt,
            fencedBeforeTakeoverMs: fencedAt === null ? null : takeoverAt - fencedAt,
          };
        },
      );
    } finally {
      await proxy.close();
    }
  },
};

/**
 * The database restarted under load (`pg_ctl stop -m fast`, then start: every connection cut):
 * with a lease longer than the outage the active coordinator pauses and resumes; nothing is lost.
 * `restart` does it and returns how long the database was away.
 */
export function databaseRestart(
  restart: () => Promise<number>,
  firing: "active" | "shared" = "active",
  dispatch: "active" | "shared" = "active",
): ClusterScenario {
  const shared = firing === "shared";
  const mode = dispatch === "shared" ? "-shared-dispatch" : shared ? "-shared-firing" : "";
  return {
    name: `database-restart${mode}`,
    title: `3 coordinators on PostgreSQL${dispatch === "shared" ? ", dispatch shared" : shared ? ", firing shared" : ""}: the database restarted under load`,
    allowsTwoRounds: false,
    run: (pg) =>
      withCluster(
        `database-restart${mode}`,
        pg,
        async (h) => {
          const before = h.coordinator;
          if (shared) await addShareJobs(h);
          const t0 = await workInEveryState(h);
          const awayMs = await restart();
          await h.findActive(20_000);
          const end = await finish(h, before, t0, awayMs + 1_000);
          // The active one at the end: the same one, unless it fenced itself meanwhile.
          const active = h.coordinator;
          end.truth.notes.push(
            `database away ${awayMs} ms; active before ${before.config.cluster?.id}, after ${active.config.cluster?.id}`,
          );
          const ledger = shared ? await shareLedger(h) : undefined;
          if (ledger !== undefined) end.truth.notes.push(ledger.note);
          return {
            ...end,
            ...(ledger === undefined ? {} : { shares: ledger }),
            takeoverMs: 0,
            lost: before.config.cluster?.id ?? "?",
            tookOver: active.config.cluster?.id ?? "?",
            lostExitCode: before.exitCode(),
            lostEndedBeforeTakeoverMs: null,
            fencedBeforeTakeoverMs: null,
          };
        },
        12_000,
        firing,
        dispatch,
      ),
  };
}

/** What {@link sharedFiringFailover} measures besides the truth check. */
export interface SharedFiringResult {
  truth: TruthResult;
  lost: string;
  /** Executions of the 1 s cron jobs whose first timeline entry names each coordinator. */
  firedBy: Record<string, number>;
  /** Cron jobs' nominal times with no execution between a job's first and last one. */
  missingTimes: number;
  /** Cron jobs' nominal times with more than one execution. */
  duplicateTimes: number;
  /** The lost one's jobs: from its kill to the last of them first fired by another, ms. */
  shareTakenMs: number | null;
  /** How many jobs were the lost one's when it was killed. */
  lostJobs: number;
  /** Firings the lost one recorded after it was started again (its /api/health `fired`). */
  firedAfterRejoin: number;
  handledByTwo: number;
  unnamedEntries: number;
}

/**
 * The cron jobs of the shared-firing scenarios: every second, each time caught up if missed.
 * Their ids and the coordinators' are fixed, so who owns which is too: with 12, c1 owns 6, c2 4
 * and c3 2 (with 8, c3 owned none).
 */
const SHARED_JOBS = 12;

/**
 * Creates the cron jobs whose times {@link shareLedger} accounts for. They write a file rather
 * than start a process: 12 starts at every second on two agents would load the machine the
 * agents' wheels share, and what is measured here is who fires each time, not the devices.
 */
async function addShareJobs(h: ChaosHarness): Promise<void> {
  for (let i = 0; i < SHARED_JOBS; i++) {
    await h.job({ ...tickJob(h, `share-${i}`, { kind: "file" }), misfire: { policy: "CATCH_UP" } });
  }
}

/** What the record says of the cron jobs of {@link addShareJobs}. */
export interface ShareLedger {
  /** Executions whose first timeline entry names each coordinator. */
  firedBy: Record<string, number>;
  /** Nominal times with no execution between a job's first and last one. */
  missingTimes: number;
  /** Nominal times with more than one execution. */
  duplicateTimes: number;
  /** Jobs the coordinator `lostId` fired before `lostAt`. */
  lostJobs: number;
  /** From `lostAt` to the last of those jobs first fired by another, ms (null: none were its). */
  shareTakenMs: number | null;
  /** A line for the truth check's notes. */
  note: string;
}

/**
 * Reads back every execution of the cron jobs of {@link addShareJobs}: who fired it (its first
 * timeline entry), its nominal time, how far ahead of `fireAt` it was dispatched and whether it
 * started late; with `lost`, which jobs were that coordinator's before it was lost and how soon
 * the others fired them.
 */
async function shareLedger(
  h: ChaosHarness,
  lost?: { id: string; at: number },
): Promise<ShareLedger> {
  const shares: RecordedExecution[] = [];
  for (const e of await listExecutions(h.coordinator)) {
    if (e.jobId?.startsWith("share-")) {
      shares.push(
        await h.coordinator.api<RecordedExecution>(
          "GET",
          `/api/executions/${encodeURIComponent(e.id)}`,
        ),
      );
    }
  }
  const firedBy: Record<string, number> = {};
  // Started more than a tick after fireAt, by the coordinator that fired them.
  const lateBy: Record<string, number> = {};
  // How far ahead of fireAt each was dispatched, by the coordinator that fired it.
  const leadBy = new Map<string, number[]>();
  const times = new Map<string, number[]>();
  const lostJobs = new Set<string>();
  const takenAt = new Map<string, number>();
  for (const r of shares) {
    const created = r.timeline.find((t) => t.fromState === null);
    const by = String((created?.detail as { coordinator?: unknown } | null)?.coordinator);
    firedBy[by] = (firedBy[by] ?? 0) + 1;
    const job = r.execution.jobId as string;
    const list = times.get(job) ?? [];
    list.push(r.execution.scheduledFor as number);
    times.set(job, list);
    const at = created?.at ?? 0;
    const started = r.execution.startedAt;
    const dispatched = r.execution.dispatchedAt;
    if (dispatched !== null) {
      const leads = leadBy.get(by) ?? [];
      leads.push(r.execution.fireAt - dispatched);
      leadBy.set(by, leads);
    }
    if (started !== null && started - r.execution.fireAt > 20) {
      lateBy[by] = (lateBy[by] ?? 0) + 1;
    }
    if (lost !== undefined && by === lost.id && at < lost.at) lostJobs.add(job);
    if (lost !== undefined && by !== lost.id && at >= lost.at) {
      takenAt.set(job, Math.min(takenAt.get(job) ?? Number.POSITIVE_INFINITY, at));
    }
  }
  let missingTimes = 0;
  let duplicateTimes = 0;
  for (const list of times.values()) {
    list.sort((a, b) => a - b);
    for (let k = 1; k < list.length; k++) {
      const gap = (list[k] as number) - (list[k - 1] as number);
      if (gap === 0) duplicateTimes++;
      else missingTimes += Math.round(gap / 1_000) - 1;
    }
  }
  let shareTakenMs: number | null = null;
  for (const job of lostJobs) {
    const at = takenAt.get(job);
    shareTakenMs = Math.max(
      shareTakenMs ?? 0,
      at === undefined || lost === undefined ? Number.POSITIVE_INFINITY : at - lost.at,
    );
  }
  const leads = [...leadBy]
    .map(([c, l]) => {
      l.sort((a, b) => a - b);
      return `${c} ${Math.round(l[0] ?? 0)} / ${Math.round(l[Math.floor(l.length / 2)] ?? 0)}`;
    })
    .join(", ");
  const note =
    `cron jobs fired by ${JSON.stringify(firedBy)}, late ${JSON.stringify(lateBy)}, dispatched ahead of fireAt (min / median ms) ${leads}; ${missingTimes} times missing, ${duplicateTimes} twice` +
    (lost === undefined
      ? ""
      : `; ${lostJobs.size} jobs were ${lost.id}'s, taken over within ${shareTakenMs} ms`);
  return {
    firedBy,
    missingTimes,
    duplicateTimes,
    lostJobs: lostJobs.size,
    shareTakenMs,
    note,
  };
}

/**
 * Firing shared (`cluster.firing: "shared"`): every coordinator fires the jobs that hash to it.
 * A standby that fires its share is killed (-9) under load; once its lease lapses the others fire
 * its jobs; it is started again and fires its share again. Every nominal time of the cron jobs
 * must have exactly one execution, and the run ends with the truth check.
 */
export const sharedFiringFailover = {
  name: "shared-firing-failover",
  title:
    "3 coordinators on PostgreSQL, firing shared: kill -9 of a standby that fires its share, under load, restarted",
  allowsTwoRounds: false,
  run: (pg: ClusterRunOptions): Promise<SharedFiringResult> =>
    withCluster(
      "shared-firing-failover",
      pg,
      async (h) => {
        await addShareJobs(h);
        const t0 = await workInEveryState(h);
        const lost = h.coordinators[1] as CoordinatorProcess;
        const lostId = lost.config.cluster?.id ?? "?";
        await lost.kill();
        const lostAt = Date.now();
        // Down long enough for its lease to lapse and the others to take its share; started
        // again sooner, it would take the same share back under its id.
        await sleep(5_000);
        const end = await finish(h, lost, t0, 5_000);
        const ledger = await shareLedger(h, { id: lostId, at: lostAt });
        const health = await lost.api<{
          cluster?: { coordinators: { id: string; info: { fired?: number } }[] };
        }>("GET", "/api/health");
        const firedAfterRejoin =
          health.cluster?.coordinators.find((c) => c.id === lostId)?.info.fired ?? 0;
        end.truth.notes.push(
          `${ledger.note}; ${lostId} fired ${firedAfterRejoin} after it rejoined`,
        );
        return {
          truth: end.truth,
          lost: lostId,
          firedBy: ledger.firedBy,
          missingTimes: ledger.missingTimes,
          duplicateTimes: ledger.duplicateTimes,
          shareTakenMs: ledger.shareTakenMs,
          lostJobs: ledger.lostJobs,
          firedAfterRejoin,
          handledByTwo: end.handledByTwo,
          unnamedEntries: end.unnamedEntries,
        };
      },
      LEASE_MS,
      "shared",
    ),
};

/** What {@link sharedDispatchFailover} measures besides the truth check. */
export interface SharedDispatchResult {
  truth: TruthResult;
  lost: string;
  /** The agent whose coordinator was killed. */
  orphan: string;
  /** Dispatches (transitions to DISPATCHED) each coordinator wrote, before the kill. */
  dispatchedBy: Record<string, number>;
  /** Reports of the orphan's work each coordinator applied (transitions out of DISPATCHED and RUNNING). */
  reportsBy: Record<string, number>;
  /** From the kill to the first report of the orphan's applied by another coordinator, ms. */
  agentTakenMs: number | null;
  shares: ShareLedger;
  /**
   * The events published through the kill: how many, how many fired their job exactly once,
   * never, more than once, and executions of the job for a message not published.
   */
  events: { published: number; fired: number; missing: number; twice: number; unknown: number };
  follows: FollowUpLedger;
  handledByTwo: number;
  unnamedEntries: number;
}

/**
 * Dispatch shared (`cluster.dispatch: "shared"`, with firing shared): every coordinator is
 * active for its share, the agents and the jobs that hash to it. The coordinator that handles
 * agent 1 is killed (-9) under load, with commands running, scheduled and due on that agent;
 * once its lease lapses another takes the agent up (its reports, its commands, its leases), and
 * the killed one is started again. Every nominal time of the cron jobs must have exactly one
 * execution, and the run ends with the truth check.
 */
export const sharedDispatchFailover = {
  name: "shared-dispatch-failover",
  title:
    "3 coordinators on PostgreSQL, dispatch shared: kill -9 of the one that handles an agent, under load, restarted",
  allowsTwoRounds: false,
  run: (pg: ClusterRunOptions): Promise<SharedDispatchResult> =>
    withCluster(
      "shared-dispatch-failover",
      pg,
      async (h) => {
        await addShareJobs(h);
        // Events that an application publishes all along: every one must fire its job once,
        // through the kill and the lapse of the lost one's lease (every coordinator reads them).
        await h.job({
          id: "bell",
          ...h.params({ kind: "file" }, "job-bell"),
          trigger: { type: "event", name: "bell" },
          overlap: { policy: "PARALLEL" },
        });
        // A job after one of the cron jobs: each end of one fires it once, whichever
        // coordinator applies the end, through the kill too (it is written with the end).
        await h.job({
          id: "after-share",
          ...h.params({ kind: "file" }, "job-after-share"),
          trigger: { type: "after", job: "share-0", states: [...TERMINAL_STATE_NAMES] },
          overlap: { policy: "PARALLEL" },
        });
        // The ends that must be followed: from a second after it was stored (the other
        // coordinators hear of a new job within that) until the run pauses every job.
        const followedFrom = Date.now() + 1_000;
        const t0 = await workInEveryState(h);
        const orphan = h.agent(1).agentId;
        const ids = h.coordinators.map((c) => ({ id: c.config.cluster?.id ?? "?", c }));
        const owner = ownerAmong(orphan, ids) as { id: string; c: CoordinatorProcess };
        const lost = owner.c;
        const lostId = owner.id;
        const published: string[] = [];
        const publishing = (async () => {
          for (let i = 0; i < 36; i++) {
            published.push(await h.event("bell", { ring: i }));
            await sleep(250);
          }
        })();
        await sleep(1_000);
        await lost.kill();
        const lostAt = Date.now();
        // The run talks to one of the others from here.
        await h.findActive(20_000);
        // Down long enough for its lease to lapse and the others to take its share; started
        // again sooner, it would take the same share back under its id.
        await sleep(5_000);
        await publishing;
        const followedUntil = Date.now();
        const end = await finish(h, lost, t0, 5_000);
        const shares = await shareLedger(h, { id: lostId, at: lostAt });
        const dispatchedBy: Record<string, number> = {};
        const reportsBy: Record<string, number> = {};
        let agentTakenMs: number | null = null;
        const fired = new Map<string, number>();
        const all = await listExecutions(h.coordinator);
        const follows = followUpLedger(all, "share-0", "after-share", {
          from: followedFrom,
          until: followedUntil,
        });
        for (const e of all) {
          const r = await h.coordinator.api<RecordedExecution>(
            "GET",
            `/api/executions/${encodeURIComponent(e.id)}`,
          );
          if (r.execution.jobId === "bell") {
            const msgId = String((r.timeline[0]?.detail as { msgId?: unknown } | null)?.msgId);
            fired.set(msgId, (fired.get(msgId) ?? 0) + 1);
          }
          for (const t of r.timeline) {
            const by = String((t.detail as { coordinator?: unknown } | null)?.coordinator);
            if (t.toState === "DISPATCHED" && t.at < lostAt) {
              dispatchedBy[by] = (dispatchedBy[by] ?? 0) + 1;
            }
            const report = t.fromState === "DISPATCHED" || t.fromState === "RUNNING";
            // The orphan's commands only: a job's execution may have been on another agent
            // before it was sent to the orphan, and that agent's reports are its coordinator's.
            if (!report || r.execution.targetAgentId !== orphan) continue;
            reportsBy[by] = (reportsBy[by] ?? 0) + 1;
            if (by !== lostId && t.at >= lostAt) {
              agentTakenMs = Math.min(agentTakenMs ?? Number.POSITIVE_INFINITY, t.at - lostAt);
            }
          }
        }
        const events = {
          published: published.length,
          fired: published.filter((m) => fired.get(m) === 1).length,
          missing: published.filter((m) => !fired.has(m)).length,
          twice: [...fired.values()].filter((n) => n > 1).length,
          unknown: [...fired.keys()].filter((m) => !published.includes(m)).length,
        };
        end.truth.notes.push(
          `${lostId} handled ${orphan}; dispatches before the kill by ${JSON.stringify(dispatchedBy)}; ${orphan}'s reports applied by ${JSON.stringify(reportsBy)}, by another ${agentTakenMs} ms after the kill; ${shares.note}; events ${JSON.stringify(events)}; follow-ups ${JSON.stringify(follows)}`,
        );
        return {
          truth: end.truth,
          lost: lostId,
          orphan,
          dispatchedBy,
          reportsBy,
          agentTakenMs,
          shares,
          events,
          follows,
          handledByTwo: end.handledByTwo,
          unnamedEntries: end.unnamedEntries,
        };
      },
      LEASE_MS,
      "shared",
      "shared",
    ),
};

/** What the record says of an `after` trigger's follow-ups ({@link followUpLedger}). */
export interface FollowUpLedger {
  /** The source job's ended executions. */
  ended: number;
  /** Of those that ended while the follower listened, how many it followed exactly once. */
  followedOnce: number;
  /** Of those, how many it never followed. */
  missing: number;
  /** Ended executions followed more than once. */
  twice: number;
  /** Follow-ups that name no ended execution of the source, or another state than its end. */
  unknown: number;
}

/**
 * Matches the executions of job `follower` (an `after` trigger on `source`) to the ended ones of
 * `source` through `params.after`: each end in `[from, until)` (while the follower was stored and
 * not yet paused by the run's settling) must be followed exactly once, and none twice.
 */
function followUpLedger(
  all: readonly ExecutionRecord[],
  source: string,
  follower: string,
  window: { from: number; until: number },
): FollowUpLedger {
  const ended = new Map(
    all.filter((e) => e.jobId === source && TERMINAL_STATES.has(e.state)).map((e) => [e.id, e]),
  );
  const followed = new Map<string, number>();
  let unknown = 0;
  for (const e of all) {
    if (e.jobId !== follower) continue;
    const after = e.params.after as { executionId?: string; state?: string } | undefined;
    const src = ended.get(String(after?.executionId));
    if (src === undefined || src.state !== after?.state) unknown++;
    else followed.set(src.id, (followed.get(src.id) ?? 0) + 1);
  }
  const before = [...ended.values()].filter(
    (e) => e.updatedAt >= window.from && e.updatedAt < window.until,
  );
  return {
    ended: ended.size,
    followedOnce: before.filter((e) => followed.get(e.id) === 1).length,
    missing: before.filter((e) => !followed.has(e.id)).length,
    twice: [...followed.values()].filter((n) => n > 1).length,
    unknown,
  };
}

/** What {@link sharedDispatchPartition} measures besides the truth check. */
export interface SharedPartitionResult {
  truth: TruthResult;
  lost: string;
  orphan: string;
  /** How long before another coordinator first applied a report of the orphan the lost one logged its fence. */
  fencedBeforeTakeoverMs: number | null;
  /** From the cut to another coordinator's first report of the orphan applied, ms. */
  agentTakenMs: number | null;
  /** Reports of the orphan's work the lost one applied after it fenced itself, before its process ended (must be none). */
  appliedAfterFence: number;
  lostExitCode: number | null;
  unnamedEntries: number;
}

/**
 * Dispatch shared, and the coordinator that handles agent 1 cut off from the database (not from
 * the broker) under load: it must fence itself (stop dispatching and taking reports, exit 75)
 * before another coordinator takes its agents up. Each coordinator reaches the database through
 * a proxy of its own, so that the one cut off can be the one that handles agent 1.
 */
export const sharedDispatchPartition = {
  name: "shared-dispatch-partition",
  title:
    "3 coordinators on PostgreSQL, dispatch shared: the one that handles an agent cut off from the database (not the broker) under load",
  allowsTwoRounds: false,
  run: async (pg: ClusterRunOptions): Promise<SharedPartitionResult> => {
    const target = new URL(pg.url);
    const proxies = await Promise.all(
      [0, 1, 2].map(() => tcpProxy(Number(target.port || 5432), target.hostname)),
    );
    const via = (i: number) => {
      const u = new URL(pg.url);
      u.hostname = "127.0.0.1";
      u.port = String(proxies[i]?.port);
      return u.toString();
    };
    try {
      return await withCluster(
        "shared-dispatch-partition",
        { ...pg, urlOf: via },
        async (h) => {
          const t0 = await workInEveryState(h);
          const orphan = h.agent(1).agentId;
          const ids = h.coordinators.map((c, i) => ({ id: c.config.cluster?.id ?? "?", c, i }));
          const owner = ownerAmong(orphan, ids) as { id: string; c: CoordinatorProcess; i: number };
          const lost = owner.c;
          const ended = lost.exited().then(() => Date.now());
          proxies[owner.i]?.blackhole();
          const cutAt = Date.now();
          // Another coordinator to talk to: the cut-off one cannot read the store.
          h.coordinator = h.coordinators.find((c) => c !== lost) as CoordinatorProcess;
          const endedAt = await Promise.race([ended, sleep(15_000).then(() => Date.now())]);
          const lostExitCode = lost.exitCode();
          const fencedAt = fenceLoggedAt(lost.logFile);
          proxies[owner.i]?.heal();
          const end = await finish(h, lost, t0, 8_000);
          let agentTakenAt: number | null = null;
          let appliedAfterFence = 0;
          for (const e of await listExecutions(h.coordinator)) {
            // The orphan's commands only (a job's execution may have run on another agent first).
            if (e.targetAgentId !== orphan) continue;
            const r = await h.coordinator.api<RecordedExecution>(
              "GET",
              `/api/executions/${encodeURIComponent(e.id)}`,
            );
            for (const t of r.timeline) {
              if (t.fromState !== "DISPATCHED" && t.fromState !== "RUNNING") continue;
              const by = String((t.detail as { coordinator?: unknown } | null)?.coordinator);
              if (by !== owner.id && t.at >= cutAt) {
                agentTakenAt = Math.min(agentTakenAt ?? Number.POSITIVE_INFINITY, t.at);
              }
              // Between its fence and its process's end. (Not up to its restart: the new start
              // of the same id takes its clock's offset from its first, slow reads of the busy
              // store, and its first writes can be stamped some hundreds of ms early.)
              if (by === owner.id && fencedAt !== null && t.at > fencedAt && t.at <= endedAt) {
                appliedAfterFence++;
              }
            }
          }
          end.truth.notes.push(
            `${owner.id} handled ${orphan} and was cut off; fenced ${fencedAt === null ? "never" : `${fencedAt - cutAt} ms`} after the cut, exit ${lostExitCode}; ${orphan}'s reports taken by another ${agentTakenAt === null ? "never" : `${agentTakenAt - cutAt} ms`} after it`,
          );
          return {
            truth: end.truth,
            lost: owner.id,
            orphan,
            fencedBeforeTakeoverMs:
              fencedAt === null || agentTakenAt === null ? null : agentTakenAt - fencedAt,
            agentTakenMs: agentTakenAt === null ? null : agentTakenAt - cutAt,
            appliedAfterFence,
            lostExitCode,
            unnamedEntries: end.unnamedEntries,
          };
        },
        LEASE_MS,
        "shared",
        "shared",
      );
    } finally {
      for (const p of proxies) await p.close();
    }
  },
};
