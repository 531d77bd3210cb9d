/**
 * Coordinator benchmark: 100,000 jobs in the store, aggregate fire rates of 500, 2,000 and 5,000
 * per second (and 50 and 100 for reference), executed by bundled agents over the embedded broker; start, trigger and end-to-end
 * lateness, lost and duplicated fires, the coordinator's RSS and CPU, and a CPU profile of it.
 *
 *   npm run bench:coordinator                      # 20 s per rate, about 6 minutes
 *   npm run bench:coordinator -- --duration 60     # the full 60 s per rate, about 11 minutes
 *   options: --rates 50,2000  --no-profile  --profile-rates 500,2000  --profile-duration 10
 *            --agents 4 (agent processes; default 2)
 *            --repeat 3 (runs at the target rate, 2,000/s, counting the rates' own; default 3)
 *            --agent-sync-start (agents fsync each start, their default; off here, see the doc)
 *            --coordinator-nice 10 (the coordinator's nice value, as an agent's neighbour would
 *            set it; default 0)
 *            --auth on|off|both (messages authenticated, the coordinator's default; off:
 *            `security.messages: "off"`; both, the default: every rate with it on, and at the
 *            target rate as many runs again with it off, alternating, to measure its cost)
 *            --store sqlite|postgres (default sqlite) --pg-url URL (default AX_BENCH_PG_URL, else
 *            AX_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test)
 *            --coordinators 1,2,3 (postgres: coordinators sharing the store, one active and the
 *            rest standbys; each count runs every rate; bench/coordinator-pg.ts)
 *            --lease-ms 3000 (postgres: the coordinators' cluster.leaseMs; default theirs, 3 s)
 *            --firing shared (postgres: the coordinators' cluster.firing, active or shared)
 *            --dispatch active (postgres: the coordinators' cluster.dispatch, active or shared;
 *              shared needs --firing shared)
 *
 * Each rate is a fresh run (bench/coordinator-run.ts): a new store, broker, coordinator process
 * (bench/coordinator-worker.ts, bundled) and agents (bench/coordinator-agent.ts, bundled).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { REQUIRE_BANNER } from "../coordinator/bundle/build.js";
import { AUTH_TARGETS, authTargetRows, compareAuth, printAuth } from "./coordinator-auth.js";
import { AGENTS, JOBS } from "./coordinator-params.js";
import { runPostgres } from "./coordinator-pg.js";
import {
  printProfile,
  printRates,
  renderMarkdown,
  TARGET_RATE,
  TARGETS,
  targetRows,
} from "./coordinator-report.js";
import { type RateResult, runRate } from "./coordinator-run.js";
import { defaultPgUrl } from "./coordinator-store-pg.js";
import { bundleBenchEntry, finishRun, machineAtStart, printTable, writeResults } from "./lib.js";

/**
 * The rates, and two lower ones that show where the coordinator stops keeping up (it is
 * far from the rates yet; see the findings in docs/benchmarks.md).
 */
const RATES = [50, 100, 500, 2_000, 5_000, 10_000];
/** A rate it keeps up with (late) and the target rate, each a separate run under the profiler. */
const PROFILE_RATES = [500, TARGET_RATE];

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const DIST = join(ROOT, "dist", "bench");
const WORKER = join(DIST, "coordinator-worker.mjs");
const AGENT = join(DIST, "coordinator-agent.mjs");

async function buildAll(): Promise<void> {
  mkdirSync(DIST, { recursive: true });
  // The coordinator: packages stay imports (resolved from node_modules), and the bundle is not
  // minified, so the profile keeps function names and esbuild's `// file` marks.
  await bundleBenchEntry(join(ROOT, "bench", "coordinator-worker.ts"), WORKER);
  // The agent: as buildAgentBundle builds agent/cli.ts.
  await build({
    entryPoints: [join(ROOT, "bench", "coordinator-agent.ts")],
    outfile: AGENT,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    minify: true,
    external: ["better-sqlite3"],
    banner: { js: REQUIRE_BANNER },
    logLevel: "silent",
  });
}

/** The commit measured, and whether the code the bench runs had uncommitted changes. */
function source(): { commit: string; modified: boolean } {
  const git = (...args: string[]) =>
    execFileSync("git", args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  try {
    return {
      commit: git("rev-parse", "--short", "HEAD").trim(),
      modified: git("status", "--porcelain", "--", "coordinator", "agent", "shared").trim() !== "",
    };
  } catch {
    return { commit: "unknown", modified: false };
  }
}

function options() {
  const { values } = parseArgs({
    options: {
      duration: { type: "string", default: "20" },
      rates: { type: "string", default: RATES.join(",") },
      "no-profile": { type: "boolean", default: false },
      "profile-rates": { type: "string", default: PROFILE_RATES.join(",") },
      "profile-duration": { type: "string", default: "10" },
      "agent-sync-start": { type: "boolean", default: false },
      "coordinator-nice": { type: "string", default: "0" },
      agents: { type: "string", default: String(AGENTS) },
      repeat: { type: "string", default: "3" },
      auth: { type: "string", default: "both" },
      store: { type: "string", default: "sqlite" },
      "pg-url": { type: "string" },
      coordinators: { type: "string", default: "1" },
      "lease-ms": { type: "string" },
      firing: { type: "string", default: "shared" },
      dispatch: { type: "string", default: "active" },
    },
    strict: true,
  });
  const positive = (name: string, text: string) => {
    const n = Number(text);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number`);
    return n;
  };
  return {
    durationS: positive("duration", values.duration),
    rates: values.rates.split(",").map((r) => positive("rates", r)),
    profileRates: values["no-profile"]
      ? []
      : values["profile-rates"].split(",").map((r) => positive("profile-rates", r)),
    profileDurationS: positive("profile-duration", values["profile-duration"]),
    agentSyncStart: values["agent-sync-start"],
    coordinatorNice: ((text: string) => {
      const nice = Number(text);
      if (!Number.isInteger(nice) || nice < 0 || nice > 19) {
        throw new Error(`--coordinator-nice must be a whole number from 0 to 19, not "${text}"`);
      }
      return nice;
    })(values["coordinator-nice"]),
    repeat: Math.floor(positive("repeat", values.repeat)),
    auth: ((a: string): "on" | "off" | "both" => {
      if (a !== "on" && a !== "off" && a !== "both") {
        throw new Error(`--auth must be on, off or both, not "${a}"`);
      }
      return a;
    })(values.auth),
    agents: ((a: number) => {
      if (!Number.isInteger(a)) throw new Error("--agents must be a whole number");
      return a;
    })(positive("agents", values.agents)),
    store: ((st: string): "sqlite" | "postgres" => {
      if (st !== "sqlite" && st !== "postgres") {
        throw new Error(`--store must be sqlite or postgres, not "${st}"`);
      }
      return st;
    })(values.store),
    pgUrl: values["pg-url"] ?? defaultPgUrl(),
    leaseMs:
      values["lease-ms"] === undefined ? undefined : positive("lease-ms", values["lease-ms"]),
    firing: ((f: string): "active" | "shared" => {
      if (f !== "active" && f !== "shared") {
        throw new Error(`--firing must be active or shared, not "${f}"`);
      }
      return f;
    })(values.firing),
    dispatch: ((d: string): "active" | "shared" => {
      if (d !== "active" && d !== "shared") {
        throw new Error(`--dispatch must be active or shared, not "${d}"`);
      }
      if (d === "shared" && values.firing !== "shared") {
        throw new Error("--dispatch shared needs --firing shared");
      }
      return d;
    })(values.dispatch),
    coordinators: values.coordinators.split(",").map((c) => {
      const k = Number(c);
      if (!Number.isInteger(k) || k < 1 || k > 9) {
        throw new Error(`--coordinators must list whole numbers from 1 to 9, not "${c}"`);
      }
      return k;
    }),
  };
}

/** The options a SQLite run records: those it had before `--store` came. */
function sqliteSettings(o: ReturnType<typeof options>) {
  const { store, pgUrl, coordinators, leaseMs, firing, dispatch, ...rest } = o;
  void leaseMs;
  void firing;
  void dispatch;
  void store;
  void pgUrl;
  void coordinators;
  return rest;
}

async function main(): Promise<void> {
  const o = options();
  if (o.store === "sqlite" && o.coordinators.some((k) => k !== 1)) {
    throw new Error("--coordinators needs --store postgres: a SQLite store has one coordinator");
  }
  const started = performance.now();
  const machine = {
    ...machineAtStart(),
    source: source(),
  };
  console.log(
    `coordinator bench: ${machine.cpus} cores, load average ${machine.loadavgAtStart.join(" ")}; ` +
      `${JOBS.toLocaleString("en-US")} jobs, ${o.agents} agents, ${o.durationS} s per rate` +
      (o.coordinatorNice === 0 ? "" : `, coordinator at nice ${o.coordinatorNice}`) +
      `, auth ${o.auth}` +
      (o.durationS < 60 ? " (the full run: --duration 60)" : ""),
  );
  await buildAll();
  if (o.store === "postgres") {
    if (o.profileRates.length)
      console.log("(CPU profiles are taken on SQLite runs only: none here)");
    if (o.auth === "both") console.log("(authentication on: --auth both compares on SQLite only)");
    await runPostgres(
      {
        url: o.pgUrl,
        coordinators: o.coordinators,
        rates: o.rates,
        durationS: o.durationS,
        repeat: o.repeat,
        agents: o.agents,
        auth: o.auth !== "off",
        agentSyncStart: o.agentSyncStart,
        coordinatorNice: o.coordinatorNice,
        workerFile: WORKER,
        agentFile: AGENT,
        leaseMs: o.leaseMs,
        firing: o.firing,
        dispatch: o.dispatch,
        command: `npm run bench:coordinator -- ${process.argv.slice(2).join(" ")}`,
      },
      machine,
      started,
    );
    return;
  }

  // The rates run with authentication on unless it is off; "both" adds runs with it off at the
  // target rate, each next to one with it on, so both meet the same neighbours on the cores.
  const auth = o.auth !== "off";
  const compare = o.auth === "both";
  /** One plain (unprofiled) run of `rate` for the window's length, its tables printed. */
  const plainRun = async (rate: number, withAuth = auth): Promise<RateResult> => {
    const r = await runRate({
      auth: withAuth,
      rate,
      durationMs: o.durationS * 1000,
      workerFile: WORKER,
      agentFile: AGENT,
      profile: false,
      agentSyncStart: o.agentSyncStart,
      coordinatorNice: o.coordinatorNice,
      agents: o.agents,
    });
    printRates([r]);
    return r;
  };
  const results: RateResult[] = [];
  const offRuns: RateResult[] = [];
  const offRun = async (i: number) => {
    console.log(
      `\n${TARGET_RATE.toLocaleString("en-US")} fires/s with authentication off (run ${i} of ${o.repeat}) for ${o.durationS} s …`,
    );
    offRuns.push(await plainRun(TARGET_RATE, false));
  };
  for (const rate of o.rates) {
    console.log(
      `\n${rate.toLocaleString("en-US")} fires/s for ${o.durationS} s${auth ? "" : ", authentication off"} …`,
    );
    results.push(await plainRun(rate));
    if (compare && rate === TARGET_RATE) await offRun(1);
  }
  // The target rate again, each a fresh run: a single minute's tail says little on shared cores.
  const repeats: RateResult[] = [];
  if (o.rates.includes(TARGET_RATE)) {
    for (let i = 2; i <= o.repeat; i++) {
      console.log(
        `\n${TARGET_RATE.toLocaleString("en-US")} fires/s again (run ${i} of ${o.repeat}) for ${o.durationS} s …`,
      );
      repeats.push(await plainRun(TARGET_RATE));
      if (compare) await offRun(i);
    }
  }
  const profiles: RateResult[] = [];
  for (const rate of o.profileRates) {
    console.log(
      `\nCPU profile: ${rate.toLocaleString("en-US")} fires/s for ${o.profileDurationS} s …`,
    );
    const r = await runRate({
      rate,
      durationMs: o.profileDurationS * 1000,
      workerFile: WORKER,
      agentFile: AGENT,
      profile: true,
      auth,
      agentSyncStart: o.agentSyncStart,
      coordinatorNice: o.coordinatorNice,
      agents: o.agents,
    });
    profiles.push(r);
    if (r.profile) printProfile(r.profile);
    else console.log(`no profile was written: ${JSON.stringify(r.worker?.profile ?? null)}`);
  }

  console.log("\nall rates");
  printRates(results);
  finishRun(machine, started);
  const onRuns = auth ? [...results.filter((r) => r.rate === TARGET_RATE), ...repeats] : [];
  const authComparison = compareAuth(onRuns, offRuns);
  printAuth(authComparison);
  const targets = [...targetRows(results, repeats), ...authTargetRows(onRuns, offRuns)];
  console.log(`\ntargets (at ${TARGET_RATE.toLocaleString("en-US")} fires/s)`);
  printTable(
    ["target", "figure", "verdict"],
    targets.map((t) => [t.target, t.figure, t.met === null ? "n/a" : t.met ? "met" : "NOT MET"]),
  );
  const figures = {
    machine,
    // As before --store: the PostgreSQL options (a URL may hold a password) are not SQLite's.
    settings: { ...sqliteSettings(o), jobs: JOBS },
    targets: { ...TARGETS, ...AUTH_TARGETS },
    verdicts: Object.fromEntries(targets.map((t) => [t.key, { figure: t.value, met: t.met }])),
    rates: results,
    repeats,
    /** Runs at the target rate with authentication off (--auth both), alternating with repeats. */
    authOff: offRuns,
    auth: authComparison,
    profiles,
  };
  // A run at another priority is kept beside the plain one, not over it.
  writeResults(
    o.coordinatorNice === 0 ? "coordinator" : `coordinator-nice${o.coordinatorNice}`,
    figures,
    renderMarkdown({ results, repeats, profiles, targets, machine, o, auth: authComparison }),
  );
  console.log(`done in ${machine.runSeconds} s`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
