/**
 * `npm run bench:coordinator -- --store postgres --coordinators 1,2,3`: the coordinator bench on
 * a PostgreSQL store, for each coordinator count and rate (a cell), each a fresh run of
 * bench/coordinator-run.ts on a schema of its own. Writes bench/results/coordinator-postgres.json
 * and the "Coordinator on PostgreSQL" section of docs/benchmarks.md.
 */
import pg from "pg";
import { withoutPassword } from "../coordinator/coordinator.js";
import { JOBS } from "./coordinator-params.js";
import {
  type Cell,
  PG_TARGETS,
  pgTargetRows,
  printPg,
  renderPgMarkdown,
} from "./coordinator-pg-report.js";
import { TARGET_RATE } from "./coordinator-report.js";
import { runRate } from "./coordinator-run.js";
import { finishRun, printTable, writeResults } from "./lib.js";

export interface PgBenchOptions {
  url: string;
  coordinators: number[];
  rates: number[];
  durationS: number;
  repeat: number;
  agents: number;
  auth: boolean;
  agentSyncStart: boolean;
  coordinatorNice: number;
  workerFile: string;
  agentFile: string;
  /** `cluster.leaseMs` of every coordinator; undefined: the coordinator's default (3 s). */
  leaseMs: number | undefined;
  /** `cluster.firing` of every coordinator. */
  firing: "active" | "shared";
  /** `cluster.dispatch` of every coordinator. */
  dispatch: "active" | "shared";
  /** The command line, for the docs. */
  command: string;
}

/** The server's version, and that it answers, before any run. */
async function serverVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url, application_name: "ax-bench" });
  await client.connect();
  try {
    const r = await client.query<{ server_version: string }>("SHOW server_version");
    return `PostgreSQL ${r.rows[0]?.server_version ?? "?"} on the same machine (${withoutPassword(url)})`;
  } finally {
    await client.end();
  }
}

export async function runPostgres(
  o: PgBenchOptions,
  machine: Parameters<typeof finishRun>[0] & Parameters<typeof renderPgMarkdown>[0]["machine"],
  started: number,
): Promise<void> {
  const server = await serverVersion(o.url);
  console.log(server);
  const cells: Cell[] = [];
  for (const coordinators of o.coordinators) {
    for (const rate of o.rates) {
      const cell: Cell = { coordinators, rate, runs: [] };
      cells.push(cell);
      const times = rate === TARGET_RATE ? o.repeat : 1;
      for (let i = 1; i <= times; i++) {
        console.log(
          `\nPostgreSQL, ${coordinators} coordinator(s), ${rate.toLocaleString("en-US")} fires/s for ${o.durationS} s` +
            (times > 1 ? ` (run ${i} of ${times})` : "") +
            " …",
        );
        const r = await runRate({
          auth: o.auth,
          rate,
          durationMs: o.durationS * 1000,
          workerFile: o.workerFile,
          agentFile: o.agentFile,
          profile: process.env.AX_BENCH_PG_PROFILE === "1",
          agentSyncStart: o.agentSyncStart,
          coordinatorNice: o.coordinatorNice,
          agents: o.agents,
          pg: {
            url: o.url,
            coordinators,
            ...(o.leaseMs === undefined ? {} : { leaseMs: o.leaseMs }),
            firing: o.firing,
            dispatch: o.dispatch,
          },
        });
        cell.runs.push(r);
        printPg([r]);
      }
    }
  }
  console.log("\nall cells");
  const runs = cells.flatMap((c) => c.runs);
  printPg(runs);
  finishRun(machine, started);
  const targets = pgTargetRows(cells);
  console.log("\ntargets");
  printTable(
    ["target", "figure", "verdict"],
    targets.map((t) => [t.target, t.figure, t.met === null ? "n/a" : t.met ? "met" : "NOT MET"]),
  );
  const settings = {
    store: "postgres",
    server,
    coordinators: o.coordinators,
    rates: o.rates,
    durationS: o.durationS,
    repeat: o.repeat,
    agents: o.agents,
    auth: o.auth,
    agentSyncStart: o.agentSyncStart,
    coordinatorNice: o.coordinatorNice,
    leaseMs: o.leaseMs ?? null,
    firing: o.firing,
    dispatch: o.dispatch,
    jobs: JOBS,
  };
  writeResults(
    "coordinator-postgres",
    {
      machine,
      settings,
      targets: PG_TARGETS,
      verdicts: Object.fromEntries(targets.map((t) => [t.key, { figure: t.figure, met: t.met }])),
      cells,
    },
    renderPgMarkdown({
      cells,
      targets,
      machine,
      o: {
        durationS: o.durationS,
        agents: o.agents,
        auth: o.auth,
        repeat: o.repeat,
        firing: o.firing,
        dispatch: o.dispatch,
      },
      server,
      command: o.command,
    }),
  );
  console.log(`done in ${machine.runSeconds} s`);
}
