/**
 * Rollouts (docs/rollouts.md) on one in-process coordinator: how long a rollout takes to reach a
 * fleet at its rate, the coordinator's own ceiling, and how soon a rollout stops once its abort
 * threshold is crossed. A fresh SQLite store in a temp folder, the embedded broker, messages
 * authenticated (the default), and N agents of the fleet simulator (bench/fleet-sim/), enrolled
 * and online, all in this one process:
 *
 * 1. Reach at a rate: a rollout to all N at `--rate` a minute, no agent failing: create → the last
 *    agent reached, against the rate's ideal (N at the rate, less the one second's worth the
 *    bucket allows at once), and create → COMPLETED; and whether the reaches ever ran ahead of
 *    what the rate allows. Then the same at 1,000,000 a minute (the most a rollout may ask), far
 *    above what one process does: the coordinator's own ceiling.
 * 2. Abort latency: every fifth agent in id order (the order agents are reached) fails the
 *    command; `--runs` rollouts to all N with abort criteria 10 % of at least 20: from the moment
 *    the threshold was crossed (the executions' finishedAt) to the rollout's finishedAt, with the
 *    agents it reached and the executions it canceled.
 * 3. The process's RSS before the first rollout and after the last: the coordinator's, with the
 *    broker and the simulated agents, which share the process and its event loop.
 *
 *   npm run bench:rollout [-- --agents 1000 --rate 6000 --runs 5]
 */
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator } from "../coordinator/coordinator.js";
import {
  type RolloutRecord,
  type RolloutSpecInput,
  rolloutSpecSchema,
} from "../coordinator/domain/rollout.js";
import type { ExecutionRecord } from "../coordinator/store/port.js";
import type { ExecState } from "../shared/fsm.js";
import { tempDir, waitFor } from "../test/helpers/env.js";
import { enrolSimAgents, Simulator } from "./fleet-sim/simulator.js";
import {
  finishRun,
  fmt,
  machineAtStart,
  mdTable,
  percentile,
  printTable,
  writeResults,
} from "./lib.js";

const { values: opts } = parseArgs({
  options: {
    agents: { type: "string", default: "1000" },
    rate: { type: "string", default: "6000" },
    runs: { type: "string", default: "5" },
  },
});
const AGENTS = Number(opts.agents);
const RATE = Number(opts.rate);
const RUNS = Number(opts.runs);
/** The most a rollout's rate may be (its schema's maximum): far above what one process does. */
const CEILING_RATE = 1_000_000;
const ABORT = { thresholdPercent: 10, minExecuted: 20 } as const;
const TARGET_ABORT_MS = 1_000;
const FAILURE_STATES = new Set<ExecState>(["FAILED", "TIMED_OUT", "EXPIRED"]);
const MiB = 1024 * 1024;

const started = performance.now();
const machine = machineAtStart();
const rssStart = process.memoryUsage().rss;

const tmp = tempDir("ax-bench-rollout-");
const broker = await startEmbeddedBroker(0);
const config = parseCoordinatorConfig({
  store: { path: join(tmp.dir, "ax.sqlite") },
  mqtt: { url: broker.url },
});
/** The coordinator's warnings and errors, with the phase of the bench they came in. */
const logs = {
  warn: 0,
  error: 0,
  aborts: 0,
  samples: [] as string[],
  /** Logged while it closed, after the simulator: the first of them, and how many. */
  shutdown: 0,
  shutdownSample: null as string | null,
};
let phase = "start";
const coordinator = new Coordinator(config, {
  log: (level, msg) => {
    if (level !== "warn" && level !== "error") return;
    logs[level]++;
    // The rollouts' own aborts are what the bench asks for; anything else is worth a look.
    if (level === "warn" && /^rollout \S+ aborted: /.test(msg)) {
      logs.aborts++;
      return;
    }
    if (phase === "shutdown") {
      logs.shutdown++;
      logs.shutdownSample ??= `${level}: ${msg.slice(0, 300)}`;
      return;
    }
    if (logs.samples.length < 20) logs.samples.push(`${phase}: ${level}: ${msg.slice(0, 300)}`);
  },
});
await coordinator.start();

// The fleet: enrolled one by one as `ax fleet enroll` does, then connected by the simulator.
const ids = Array.from({ length: AGENTS }, (_, i) => `ro-${String(i).padStart(6, "0")}`);
const specs = await enrolSimAgents(coordinator, ids, { fleet: "rollout" }, "bench", () => ({
  fails: false,
}));
const sim = new Simulator({
  host: "127.0.0.1",
  port: broker.port,
  prefix: config.mqtt.prefix,
  agents: specs,
});
const onlineStart = performance.now();
sim.start();
await waitFor(
  `${AGENTS} agents online`,
  () => (ids.every((id) => coordinator.fleet.get(id)?.status === "online") ? true : undefined),
  120_000,
  100,
);
const onlineS = (performance.now() - onlineStart) / 1000;
// A heartbeat's worth (the default, 5 s) of clock samples before the first rollout: a fresh
// agent's estimate is loose, and every start waits out its uncertainty.
await new Promise((r) => setTimeout(r, 5_000));

/** When each execution was dispatched (coordinator time), for the runs' last dispatch. */
const dispatchedAt = new Map<string, number>();
coordinator.events.on("transition", (e) => {
  if (e.to === "DISPATCHED" && !dispatchedAt.has(e.executionId)) {
    dispatchedAt.set(e.executionId, e.at);
  }
});

/** The process's CPU (cores) and event-loop delay while `fn` ran. */
async function measured<T>(fn: () => Promise<T>) {
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const value = await fn();
  const used = process.cpuUsage(cpu);
  loop.disable();
  return {
    value,
    cpuCores: (used.user + used.system) / 1000 / (performance.now() - t0),
    loopDelayP99Ms: loop.percentile(99) / 1e6,
    loopDelayMaxMs: loop.max / 1e6,
  };
}

/** Creates a rollout to the whole fleet, as the API does. */
function create(id: string, perMinute: number, abort?: typeof ABORT) {
  const spec: RolloutSpecInput = {
    id,
    selector: { tags: { fleet: "rollout" } },
    command: { handler: "echo", params: { rollout: id } },
    rate: { perMinute },
    ...(abort === undefined ? {} : { abort: { ...abort } }),
  };
  return coordinator.rollouts.create(rolloutSpecSchema.parse(spec), "bench");
}

/** Polls the stored rollout until it is settled, or gives up after `timeoutMs`. */
async function settled(id: string, timeoutMs: number): Promise<RolloutRecord | undefined> {
  try {
    return await waitFor(
      `rollout ${id} settled`,
      async () => {
        const r = await coordinator.store.getRollout(id);
        return r?.settled === true ? r : undefined;
      },
      timeoutMs,
      50,
    );
  } catch {
    return undefined;
  }
}

/** A rollout that did not settle in time is aborted, so the next run starts clean. */
async function giveUp(id: string): Promise<RolloutRecord | undefined> {
  const r = await coordinator.store.getRollout(id);
  if (r !== undefined && r.state !== "ABORTED" && r.state !== "COMPLETED") {
    await coordinator.rollouts.abort(id, "the bench gave up waiting", "bench");
  }
  await settled(id, 60_000);
  return r;
}

async function executionsOf(id: string) {
  const targets = await coordinator.store.listRolloutTargets(id);
  const execs: ExecutionRecord[] = [];
  for (const t of targets) {
    const e = await coordinator.store.getExecution(t.executionId);
    if (e !== undefined) execs.push(e);
  }
  const byState: Partial<Record<ExecState, number>> = {};
  for (const e of execs) byState[e.state] = (byState[e.state] ?? 0) + 1;
  return { targets, execs, byState };
}

const s = (ms: number) => Math.round(ms) / 1000;

/** Phase 1: a rollout to all N at `perMinute`, no agent failing. */
async function reach(id: string, perMinute: number) {
  const burst = Math.max(1, perMinute / 60);
  const idealS = Math.max(0, (AGENTS - burst) / (perMinute / 60));
  const timeoutMs = 60_000 + 3 * idealS * 1000;
  const created = await create(id, perMinute);
  const done = (await settled(id, timeoutMs)) ?? (await giveUp(id));
  const { targets, execs, byState } = await executionsOf(id);
  const t0 = created.createdAt;
  const reachedAt = targets.map((t) => t.reachedAt).sort((a, b) => a - b);
  const lastReached = reachedAt[reachedAt.length - 1] ?? t0;
  const lastDispatched = Math.max(t0, ...execs.map((e) => dispatchedAt.get(e.id) ?? t0));
  const lastEnded = Math.max(t0, ...execs.map((e) => e.finishedAt ?? t0));
  const toStart = execs
    .map((e) => (e.startedAt ?? Number.NaN) - (dispatchedAt.get(e.id) ?? Number.NaN))
    .filter((v) => Number.isFinite(v))
    .sort((a, b) => a - b);
  // The rate is a ceiling: at no moment more reached than one second's worth plus rate × elapsed.
  let aheadOfRate = 0;
  for (const [i, at] of reachedAt.entries()) {
    const allowed = Math.floor(burst + ((at - t0) * perMinute) / 60_000);
    aheadOfRate = Math.max(aheadOfRate, i + 1 - allowed);
  }
  const completed = done?.state === "COMPLETED";
  return {
    perMinute,
    state: done?.state ?? "?",
    reason: done?.reason ?? null,
    reached: targets.length,
    byState,
    idealReachS: s(idealS * 1000),
    reachS: s(lastReached - t0),
    lastDispatchS: s(lastDispatched - t0),
    lastEndS: s(lastEnded - t0),
    dispatchToStartMs: { p50: percentile(toStart, 50), max: toStart[toStart.length - 1] ?? null },
    completedS: completed ? s((done?.finishedAt as number) - t0) : null,
    reachedPerS: lastDispatched > t0 ? (targets.length * 1000) / (lastDispatched - t0) : null,
    completedPerS: completed ? (AGENTS * 1000) / ((done?.finishedAt as number) - t0) : null,
    aheadOfRate,
  };
}

/** Phase 2: one rollout to all N with abort criteria, every fifth agent failing. */
async function abortRun(id: string) {
  const created = await create(id, RATE, ABORT);
  const done = (await settled(id, 120_000)) ?? (await giveUp(id));
  const { targets, execs, byState } = await executionsOf(id);
  // The moment the threshold was crossed: the first end after which at least minExecuted had
  // ended and thresholdPercent of them failed (as test/integration/rollouts.test.ts reads it).
  const ended = execs
    .filter((e) => e.state === "SUCCEEDED" || FAILURE_STATES.has(e.state))
    .sort((a, b) => (a.finishedAt as number) - (b.finishedAt as number));
  let crossedAt: number | undefined;
  let failed = 0;
  for (const [i, e] of ended.entries()) {
    if (FAILURE_STATES.has(e.state)) failed++;
    const n = i + 1;
    if (n >= ABORT.minExecuted && (failed / n) * 100 >= ABORT.thresholdPercent) {
      crossedAt = e.finishedAt as number;
      break;
    }
  }
  const aborted = done?.state === "ABORTED" && done.finishedAt !== null && crossedAt !== undefined;
  const timeline = await coordinator.store.getRolloutTimeline(id);
  const abortedEntry = timeline.find((e) => e.event === "aborted");
  return {
    state: done?.state ?? "?",
    reason: done?.reason ?? null,
    abortActor: abortedEntry?.actor ?? null,
    crossedMs: crossedAt === undefined ? null : crossedAt - created.createdAt,
    stopMs: aborted ? (done.finishedAt as number) - (crossedAt as number) : null,
    createToAbortMs: done?.finishedAt != null ? done.finishedAt - created.createdAt : null,
    reached: targets.length,
    reachedAfterCrossing:
      crossedAt === undefined ? null : targets.filter((t) => t.reachedAt > crossedAt).length,
    canceled: byState.CANCELED ?? 0,
    byState,
    endedAtAbort: abortedEntry?.detail?.ended ?? null,
    failedAtAbort: abortedEntry?.detail?.failed ?? null,
  };
}

/** The three phases, then the agents' clock uncertainty and the RSS at the end. */
async function measure() {
  const rssBefore = process.memoryUsage().rss;
  phase = "reach";
  const rateRun = await measured(() => reach("reach-rate", RATE));
  const ceilingRun = await measured(() => reach("reach-ceiling", CEILING_RATE));
  // From here on every fifth agent's handler fails every command it is sent (the simulator reads
  // the flag when it reports), as devices a bad command breaks.
  for (const [i, spec] of specs.entries()) spec.fails = i % 5 === 0;
  phase = "abort";
  const abortRuns = await measured(async () => {
    const out = [];
    for (let k = 1; k <= RUNS; k++) out.push(await abortRun(`abort-${k}`));
    return out;
  });
  const rssAfter = process.memoryUsage().rss;
  // How far each agent's estimate of coordinator time may be off, which the threshold's moment
  // (its executions' finishedAt, as the agents reported them) inherits.
  const uncertainties = sim.agents.map((a) => a.clock.uncertaintyMs).sort((a, b) => a - b);
  const clockUncertaintyMs = {
    p50: percentile(uncertainties, 50),
    max: uncertainties[uncertainties.length - 1] ?? Number.NaN,
  };
  return { rssBefore, rateRun, ceilingRun, abortRuns, rssAfter, clockUncertaintyMs };
}

let result: Awaited<ReturnType<typeof measure>>;
try {
  result = await measure();
} finally {
  phase = "shutdown";
  sim.close();
  await coordinator.close();
  await broker.close();
  tmp.cleanup();
}
finishRun(machine, started);
const { rssBefore, rateRun, ceilingRun, abortRuns, rssAfter, clockUncertaintyMs } = result;

// --- report ---------------------------------------------------------------------------------

const stops = abortRuns.value
  .map((r) => r.stopMs)
  .filter((v): v is number => v !== null)
  .sort((a, b) => a - b);
const allAborted = stops.length === RUNS;
const abortStop = { p50: percentile(stops, 50), max: stops[stops.length - 1] ?? Number.NaN };
const abortMet = allAborted && abortStop.max <= TARGET_ABORT_MS;
/** A count, as people write it (fmt gives every number below 10 three decimals). */
const int = (v: number) => v.toLocaleString("en-US");
const reachedRange = (xs: number[]) =>
  xs.length === 0
    ? "–"
    : Math.min(...xs) === Math.max(...xs)
      ? int(Math.min(...xs))
      : `${int(Math.min(...xs))}–${int(Math.max(...xs))}`;
const abortReached = reachedRange(abortRuns.value.map((r) => r.reached));
const abortCanceled = reachedRange(abortRuns.value.map((r) => r.canceled));
const num = (v: number | null) => (v === null ? "–" : v);
const n = AGENTS.toLocaleString("en-US");

const reachHeader = [
  "rate /min",
  "ideal reach s",
  "reach s",
  "last dispatch s",
  "last end s",
  "COMPLETED s",
  "dispatch → start p50 / max ms",
  "reached /s",
  "ahead of rate",
  "end state",
  "CPU cores",
  "loop delay p99 / max ms",
];
const reachRow = (r: typeof rateRun) => [
  r.value.perMinute.toLocaleString("en-US"),
  r.value.idealReachS,
  r.value.reachS,
  r.value.lastDispatchS,
  r.value.lastEndS,
  num(r.value.completedS),
  `${fmt(r.value.dispatchToStartMs.p50)} / ${fmt(r.value.dispatchToStartMs.max ?? Number.NaN)}`,
  num(r.value.reachedPerS),
  int(r.value.aheadOfRate),
  `${r.value.state} (${int(r.value.reached)} reached)`,
  r.cpuCores,
  `${fmt(r.loopDelayP99Ms)} / ${fmt(r.loopDelayMaxMs)}`,
];
const reachRows = [reachRow(rateRun), reachRow(ceilingRun)];
const abortHeader = [
  "run",
  "create → threshold crossed ms",
  "threshold crossed → ABORTED ms",
  "ended / failed at abort",
  "reached (after crossing)",
  "canceled",
  "by state",
];
const abortRows = abortRuns.value.map((r, i) => [
  String(i + 1),
  num(r.crossedMs),
  num(r.stopMs),
  `${r.endedAtAbort ?? "?"} / ${r.failedAtAbort ?? "?"}`,
  `${int(r.reached)} (${r.reachedAfterCrossing ?? "?"})`,
  int(r.canceled),
  Object.entries(r.byState)
    .map(([k, v]) => `${k} ${v}`)
    .join(", "),
]);
const memHeader = ["when", "RSS MiB"];
const memRows = [
  ["process start (nothing running)", rssStart / MiB],
  [`before the first rollout (${n} agents online)`, rssBefore / MiB],
  ["after the last rollout settled", rssAfter / MiB],
];

console.log(`\nreach: ${n} agents, all online in ${fmt(onlineS)} s`);
printTable(reachHeader, reachRows);
console.log(`\nabort: ${RUNS} runs, every fifth agent failing`);
printTable(abortHeader, abortRows);
console.log("");
printTable(memHeader, memRows);
console.log(
  `\nabort p50 ${fmt(abortStop.p50)} ms, max ${fmt(abortStop.max)} ms: target ≤ ${TARGET_ABORT_MS} ms ${abortMet ? "met" : "NOT MET"}`,
);
console.log(`simulator: ${JSON.stringify(sim.counters)}`);
console.log(
  `coordinator log: ${logs.warn} warnings (${logs.aborts} of them the aborts), ${logs.error} errors; ${logs.shutdown} while it shut down${logs.shutdownSample === null ? "" : `, e.g. ${logs.shutdownSample}`}`,
);
for (const line of logs.samples) console.log(`  ${line}`);

const rateR = rateRun.value;
const ceil = ceilingRun.value;
const ratePerS = RATE / 60;
writeResults(
  "rollout",
  {
    agents: AGENTS,
    ratePerMinute: RATE,
    runs: RUNS,
    onlineS,
    reachAtRate: { ...rateR, cpuCores: rateRun.cpuCores, loopDelayMaxMs: rateRun.loopDelayMaxMs },
    ceiling: { ...ceil, cpuCores: ceilingRun.cpuCores, loopDelayMaxMs: ceilingRun.loopDelayMaxMs },
    abort: {
      criteria: ABORT,
      stopMs: abortStop,
      targetMs: TARGET_ABORT_MS,
      met: abortMet,
      runs: abortRuns.value,
      cpuCores: abortRuns.cpuCores,
      loopDelayMaxMs: abortRuns.loopDelayMaxMs,
    },
    rssMiB: { start: rssStart / MiB, before: rssBefore / MiB, after: rssAfter / MiB },
    clockUncertaintyMs,
    simulator: sim.counters,
    coordinatorLog: logs,
    machine,
  },
  `## Rollouts: reach at a rate, and the abort

\`npm run bench:rollout\` (\`tsx bench/rollout.ts\`; \`--agents ${AGENTS} --rate ${RATE} --runs ${RUNS}\` in this run) runs a
coordinator inside the bench's own process (a fresh SQLite store in a temp folder, messages authenticated, its
default) on the embedded broker, enrols ${n} agents and runs them with the fleet simulator
(\`bench/fleet-sim/\`: one MQTT connection per agent, one instant handler, \`echo\`), all online in
${fmt(onlineS)} s. **The simulator, the broker and the coordinator share this one process and its
event loop**: every figure below includes the simulated agents' work (${machine.cpus} cores, ${machine.cpuModel}; load
average ${machine.loadavgAtStart.join(" / ")} at start, ${machine.loadavgAtEnd.join(" / ")} at the end; ${machine.runSeconds} s in all).

**Reach at a rate.** A rollout to all ${n} agents, none failing. *Reach* is from its creation to
the last agent reached (the time on its target row: that of the engine's pass that reached it); its *ideal* is ${n} agents at the rate,
less the one second's worth the rate's bucket allows at once. *Last dispatch* is to the last
execution handed to the MQTT client, *last end* to the last execution's end (its \`finishedAt\`, as
its agent reported it), *COMPLETED* to the rollout's completion (its \`finishedAt\`). *Dispatch →
start* is from an execution's dispatch to its start on the agent (which waits out its estimate's
uncertainty before it starts, never early). *Ahead of rate* is the most agents reached, at any moment, beyond one second's worth
plus rate × elapsed (the rate is a ceiling: 0 is right). *Reached /s* is the agents over the time
to the last dispatch. The second row asks ${CEILING_RATE.toLocaleString("en-US")} a minute, far more than one process
does, so what it shows is the coordinator's own pace (and the simulator's): the engine reaches at
most 1,000 agents per pass, so at ${n} agents the reach itself is ${AGENTS <= 1000 ? "one write" : "a few writes"}, and the rest
is dispatch and the agents' round trips.

${mdTable(reachHeader, reachRows)}

At ${RATE.toLocaleString("en-US")} a minute (${fmt(ratePerS)} a second) the last agent was reached ${fmt(rateR.reachS)} s after the creation, against
an ideal of ${fmt(rateR.idealReachS)} s (${fmt(rateR.reachS - rateR.idealReachS)} s more), and the rollout ${rateR.completedS === null ? `**did not complete** (${rateR.state})` : `completed ${fmt(rateR.completedS)} s after it`}; never ahead of the rate: ${rateR.aheadOfRate === 0 ? "met" : `**not met** (${rateR.aheadOfRate} ahead)`}.
With no limit to speak of, ${n} agents were reached and dispatched in ${fmt(ceil.lastDispatchS)} s (${ceil.reachedPerS === null ? "–" : fmt(ceil.reachedPerS)} a second) and the
rollout ${ceil.completedS === null ? `**did not complete** (${ceil.state})` : `completed in ${fmt(ceil.completedS)} s (${fmt(ceil.completedPerS ?? Number.NaN)} agents a second through the whole path)`}. From
dispatch to start took ${fmt(ceil.dispatchToStartMs.p50)} ms p50 and ${fmt(ceil.dispatchToStartMs.max ?? Number.NaN)} ms at most (${fmt(rateR.dispatchToStartMs.p50)} ms p50 at the paced rate): ${n} dispatches at
once, which the broker routes and the simulated agents open and answer on the same event loop as
the coordinator (the process used ${fmt(ceilingRun.cpuCores)} cores of ${machine.cpus} meanwhile). This row bounds the
coordinator and the simulator together; a fleet of real devices does its share on its own CPUs.

**Abort latency.** Every fifth agent in id order (the order the rollout reaches them) fails the
command; a rollout to all ${n} at ${RATE.toLocaleString("en-US")} a minute with abort criteria ${ABORT.thresholdPercent} % of at least ${ABORT.minExecuted} ended,
${RUNS} runs one after another on the same coordinator and agents (each waits for the one before to
settle). The threshold is crossed at the first end after which at least ${ABORT.minExecuted} executions had ended
and ${ABORT.thresholdPercent} % of them failed, read from the executions' \`finishedAt\` (the agents' report of coordinator
time); the latency is from there to the rollout's \`finishedAt\` (ABORTED). It includes the report's
way through the broker, the coordinator's reading of it, and the engine's pass. *Ended / failed at
abort* is what the engine counted when it aborted (its timeline entry); *reached (after crossing)*
is the agents the rollout reached, and how many of them it reached after the threshold was crossed
and before it aborted; *canceled* is the executions the abort ended CANCELED.

${mdTable(abortHeader, abortRows)}

Threshold crossed → ABORTED: p50 ${fmt(abortStop.p50)} ms, max ${fmt(abortStop.max)} ms over ${stops.length} of ${RUNS} runs; target ≤ ${fmt(TARGET_ABORT_MS)} ms: ${abortMet ? "met" : "**not met**"}.
${abortReached} agents were reached per run of ${n} (the first pass reaches one second's worth, ${int(Math.floor(Math.max(1, ratePerS)))}, at once), and
${abortCanceled} executions canceled per run. The simulated handler is instant, so an execution an agent was sent
has usually run and ended by the time the abort lands, and ends as it ran; only one not yet
dispatched, or not yet started on its agent, is left to cancel. While the runs went on the process
used ${fmt(abortRuns.cpuCores)} cores, and its event loop was delayed ${fmt(abortRuns.loopDelayP99Ms)} ms p99, ${fmt(abortRuns.loopDelayMaxMs)} ms at most.

**Memory.** The process's RSS (\`process.memoryUsage().rss\`): coordinator, broker and the ${n}
simulated agents together, so it is an upper bound of the coordinator's.

${mdTable(memHeader, memRows)}

**What limits these figures.** One process holds the coordinator, the broker and every simulated
agent, on one event loop: the agents' sealing and parsing of messages, and the broker's routing,
take the same thread as the coordinator's passes, so the time to reach, to complete and to abort
is of the whole (the event loop's delay while each phase ran is given above). The threshold's
moment is the agents' estimate of coordinator time, whose uncertainty at the end was
${fmt(clockUncertaintyMs.p50)} ms p50, ${fmt(clockUncertaintyMs.max)} ms at most. While it measured, the coordinator logged ${logs.warn + logs.error - logs.shutdown - logs.aborts} warnings or errors
besides the rollouts' ${logs.aborts} aborts${logs.samples.length === 0 ? "" : ` (${logs.samples.map((l) => `\`${l}\``).join("; ")})`}. ${logs.shutdown === 0 ? "" : `Closed right after the simulator, it logged ${logs.shutdown} more, such as \`${logs.shutdownSample}\`: reports that arrived as it closed, answered after its MQTT link had stopped.`}`,
);
