/**
 * The PostgreSQL side of bench/coordinator.ts (`--store postgres`): a schema of its own created
 * by the real PgStore (so the migrations are the coordinator's), prefilled with the jobs of
 * planJobs by plain SQL, as the SQLite prefill writes them, and read back after the run with the
 * same queries as the SQLite store's. The schema is dropped at the end of the run.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { PgStore } from "../coordinator/store/postgres/pg-store.js";
import {
  DRAIN_SQL,
  type ExecRow,
  planJobs,
  READ_BACK_SQL,
  type Schedule,
  type StoreReadBack,
} from "./coordinator-store.js";

/** The default database: AX_BENCH_PG_URL, else AX_TEST_PG_URL, else the local server. */
export function defaultPgUrl(): string {
  return (
    process.env.AX_BENCH_PG_URL ??
    process.env.AX_TEST_PG_URL ??
    "postgres://postgres@127.0.0.1:5432/test"
  );
}

/** A fresh schema name for one run: `ax_b_` and 12 hex digits. */
export function benchSchema(): string {
  return `ax_b_${randomBytes(6).toString("hex")}`;
}

/** `?` placeholders as PostgreSQL's `$1`, `$2`, … */
const numbered = (sql: string) => {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
};

/** A client whose session resolves tables in `schema` only, as the store's pool does. */
async function connect(url: string, schema: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    application_name: "ax-bench",
    options: `-c search_path=${schema}`,
  });
  await client.connect();
  return client;
}

/**
 * Jobs per INSERT of the prefill: each batch is one JSON parameter, its rows taken apart by the
 * server (json_array_elements). Measured at 10,000 jobs: 0.87 s for the jobs as unnest() of text
 * arrays (the server's array parser on quoted JSON), 0.47 s as a VALUES list of 40,000
 * parameters, 0.26 s as one JSON value.
 */
const BATCH = 10_000;

/**
 * Creates the schema with PgStore.open (its migrations) and inserts the jobs: the columns
 * putJob fills (jobs.ts: trigger type and dispatch lead from the definition, not paused,
 * created = updated = `now`, no updated_by) and version 1 of each in job_versions, in one
 * transaction; then ANALYZE, as autovacuum would soon after a bulk load, so the coordinator's
 * first queries are planned on the table's real size. No job history, as in the SQLite prefill.
 */
export async function prefillPg(
  url: string,
  schema: string,
  o: { jobs: number; rate: number; firstAt: number; now: number },
): Promise<Schedule> {
  const { schedule, definition } = planJobs(o);
  const store = await PgStore.open({ url, schema, now: () => o.now });
  await store.close();
  const client = await connect(url, schema);
  try {
    await client.query("BEGIN");
    for (let from = 0; from < o.jobs; from += BATCH) {
      // [id, definition, trigger type, dispatch lead, next fire time] per job.
      const rows: [string, string, string, number | null, number][] = [];
      for (let i = from; i < Math.min(o.jobs, from + BATCH); i++) {
        const def = definition(i);
        rows.push([
          def.id,
          JSON.stringify(def),
          def.trigger.type,
          def.dispatchLead ?? null,
          schedule.anchors[i] as number,
        ]);
      }
      const batch = JSON.stringify(rows);
      await client.query(
        `INSERT INTO jobs (id, version, definition, trigger_type, dispatch_lead, next_fire_at,
           paused, created_at, updated_at)
         SELECT r->>0, 1, r->>1, r->>2, (r->>3)::float8, (r->>4)::float8, false, $2, $2
         FROM json_array_elements($1::json) AS r`,
        [batch, o.now],
      );
      await client.query(
        `INSERT INTO job_versions (job_id, version, definition, created_at)
         SELECT r->>0, 1, r->>1, $2 FROM json_array_elements($1::json) AS r`,
        [batch, o.now],
      );
    }
    await client.query("COMMIT");
    await client.query("ANALYZE jobs, job_versions");
  } finally {
    await client.end();
  }
  return schedule;
}

/** Reads a run's schema after the window: the drain's progress, then the read-back. */
export class PgReadBack {
  private constructor(private readonly client: pg.Client) {}

  static async open(url: string, schema: string): Promise<PgReadBack> {
    return new PgReadBack(await connect(url, schema));
  }

  private async count(sql: string, start: number, end: number): Promise<number> {
    const r = await this.client.query<{ n: string }>(
      numbered(sql.replace(/COUNT\(\*\)( AS n)?/, "COUNT(*) AS n")),
      [start, end],
    );
    return Number(r.rows[0]?.n ?? 0);
  }

  /** As drainProgress does on SQLite. */
  async drainProgress(start: number, end: number): Promise<{ recorded: number; open: number }> {
    return {
      recorded: await this.count(DRAIN_SQL.recorded, start, end),
      open: await this.count(DRAIN_SQL.open, start, end),
    };
  }

  /** The window's rows and totals, as analyze reads them from SQLite. */
  async readBack(window: { start: number; end: number }): Promise<StoreReadBack> {
    const w = [window.start, window.end];
    const q = this.client;
    const fires = await q.query<StoreReadBack["fires"][number]>(numbered(READ_BACK_SQL.fires), w);
    const executions = await q.query<ExecRow>(numbered(READ_BACK_SQL.executions), w);
    const counters = await q.query<{ name: string; value: string }>(READ_BACK_SQL.counters);
    const agents = await q.query<{ record: string }>(READ_BACK_SQL.agents);
    return {
      fires: fires.rows,
      executions: executions.rows,
      firedInWindow: await this.count(READ_BACK_SQL.firedInWindow, window.start, window.end),
      succeededInWindow: await this.count(
        READ_BACK_SQL.succeededInWindow,
        window.start,
        window.end,
      ),
      counters: Object.fromEntries(counters.rows.map((c) => [c.name, Number(c.value)])),
      agentRecords: agents.rows.map((a) => a.record),
    };
  }

  async close(): Promise<void> {
    await this.client.end();
  }
}

/** Drops a run's schema and everything in it. */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, application_name: "ax-bench" });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${client.escapeIdentifier(schema)} CASCADE`);
  } finally {
    await client.end();
  }
}
