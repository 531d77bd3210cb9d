import type { ClientBase } from "pg";
import { AxError } from "../../../shared/errors.js";
import type { Migration } from "../../../shared/migrate.js";

/*
 * The PostgreSQL schema, append-only like SQLite's (store/sqlite/migrations.ts): add a step,
 * never edit a shipped one. It starts from what SQLite's thirteen steps arrived at, not from their
 * history. Differences, each for a reason:
 * - Times the port passes in (fire times, deadlines, created/updated) are `double precision`:
 *   the protocol allows fractions of a millisecond (an agent's startedAt, lateMs) and SQLite
 *   keeps them as REAL, so a bigint would refuse or round what SQLite stores. Times the database
 *   clock makes (leases, claims) are whole ms, `bigint`.
 * - JSON values are `text` holding the JSON exactly as written: jsonb would reorder keys, and
 *   what was stored must come back byte for byte.
 * - Keys and ids are text in the "C" collation: byte order, as SQLite compares text, so listings
 *   by id and the keyset pages come out in the same order on both, through their indexes.
 * - The job fields the listings select by (trigger type, dispatch lead) are columns of their own,
 *   written from the definition by putJob, instead of expressions over its JSON.
 */

/** The open states, as an SQL list: the partial indexes and the queries that use them. */
export const OPEN_STATES_SQL = "('PENDING', 'DISPATCHED', 'SCHEDULED', 'RUNNING', 'RETRY_WAITING')";
/** The terminal states, as an SQL list. */
export const TERMINAL_STATES_SQL =
  "('SUCCEEDED', 'FAILED', 'TIMED_OUT', 'EXPIRED', 'CANCELED', 'SKIPPED')";

/** The coordinator's PostgreSQL schema, one step per version. */
export const PG_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "jobs, versions, fires, executions, timeline",
    sql: `
      CREATE TABLE jobs (
        id text COLLATE "C" PRIMARY KEY,
        version integer NOT NULL,
        definition text NOT NULL,
        -- From the definition, for listListeningJobs and listLeadFires.
        trigger_type text NOT NULL,
        dispatch_lead double precision,
        next_fire_at double precision,
        paused boolean NOT NULL DEFAULT false,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        updated_by text
      );
      CREATE INDEX jobs_next_fire ON jobs (next_fire_at) WHERE NOT paused;
      CREATE INDEX jobs_listening ON jobs (id) WHERE trigger_type IN ('event', 'after');
      CREATE INDEX jobs_lead ON jobs (id) WHERE dispatch_lead IS NOT NULL;
      -- Every version of every job, kept when the job is deleted: versions never restart.
      CREATE TABLE job_versions (
        job_id text COLLATE "C" NOT NULL,
        version integer NOT NULL,
        definition text NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (job_id, version)
      );
      -- A fire's identity is (job_id, scheduled_for): the primary key makes firing exactly-once,
      -- across coordinators too. A nominal time missed under the misfire policy is recorded as
      -- status 'missed' with no execution.
      CREATE TABLE fires (
        job_id text COLLATE "C" NOT NULL,
        scheduled_for double precision NOT NULL,
        fired_at double precision NOT NULL,
        execution_id text NOT NULL,
        status text NOT NULL DEFAULT 'fired',
        PRIMARY KEY (job_id, scheduled_for)
      );
      CREATE INDEX fires_scheduled ON fires (scheduled_for);
      CREATE TABLE executions (
        id text COLLATE "C" PRIMARY KEY,
        kind text NOT NULL,
        job_id text COLLATE "C",
        job_version integer,
        handler text NOT NULL,
        params text NOT NULL,
        target_agent_id text,
        agent_id text,
        state text NOT NULL,
        round integer NOT NULL,
        attempt integer NOT NULL,
        max_attempts integer NOT NULL,
        dispatches integer NOT NULL,
        max_dispatches integer NOT NULL,
        fire_at double precision NOT NULL,
        deadline double precision NOT NULL,
        timeout_ms double precision NOT NULL,
        dispatch_timeout_ms double precision NOT NULL,
        priority integer NOT NULL,
        retry_base_ms double precision NOT NULL,
        retry_cap_ms double precision NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        dispatched_at double precision,
        started_at double precision,
        finished_at double precision,
        late_ms double precision,
        next_attempt_at double precision,
        result text,
        message text,
        message_bytes integer,
        scheduled_for double precision,
        shard_index integer,
        shard_total integer,
        group_key text,
        tags text
      );
      -- The dispatcher's scan, in its order; open executions only (finished ones are most rows).
      CREATE INDEX executions_open ON executions (state, priority DESC, fire_at, created_at)
        WHERE state IN ${OPEN_STATES_SQL};
      -- The purge's scan, oldest finished first.
      CREATE INDEX executions_finished ON executions (COALESCE(finished_at, updated_at))
        WHERE state IN ${TERMINAL_STATES_SQL};
      -- By job (commands have none), and a job's open peers in their order.
      CREATE INDEX executions_job ON executions (job_id, created_at) WHERE job_id IS NOT NULL;
      CREATE INDEX executions_open_job ON executions (job_id, created_at, id)
        WHERE state IN ${OPEN_STATES_SQL} AND job_id IS NOT NULL;
      CREATE INDEX executions_group ON executions (group_key, state) WHERE group_key IS NOT NULL;
      -- The operator's listing pages by (created_at, id); neither column is ever updated.
      CREATE INDEX executions_created ON executions (created_at, id);
      CREATE TABLE timeline (
        execution_id text COLLATE "C" NOT NULL,
        seq integer NOT NULL,
        at double precision NOT NULL,
        event text NOT NULL,
        from_state text,
        to_state text NOT NULL,
        round integer NOT NULL,
        agent_id text,
        detail text,
        PRIMARY KEY (execution_id, seq)
      );
    `,
  },
  {
    version: 2,
    name: "agents, identities, counters, alerts, API tokens, job history",
    sql: `
      -- An agent's record whole, as JSON; what is updated or matched on in columns of its own.
      CREATE TABLE agents (
        agent_id text COLLATE "C" PRIMARY KEY,
        record text NOT NULL,
        instance_id text NOT NULL,
        journal_id text NOT NULL,
        acked_seq bigint NOT NULL,
        status text NOT NULL
      );
      -- Who is enrolled (docs/security.md); no key is stored.
      CREATE TABLE identities (
        agent_id text COLLATE "C" PRIMARY KEY,
        record text NOT NULL
      );
      CREATE TABLE counters (
        name text PRIMARY KEY,
        value bigint NOT NULL
      );
      CREATE TABLE alerts (
        id text PRIMARY KEY,
        kind text NOT NULL,
        url text NOT NULL,
        payload text NOT NULL,
        status text NOT NULL,
        attempts integer NOT NULL,
        last_error text,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL
      );
      CREATE INDEX alerts_pending ON alerts (created_at) WHERE status = 'pending';
      CREATE INDEX alerts_created ON alerts (created_at);
      -- Only the SHA-256 digest of a token is kept: a copy of the database lets no one call the API.
      CREATE TABLE api_tokens (
        name text COLLATE "C" PRIMARY KEY,
        digest text NOT NULL UNIQUE,
        role text NOT NULL,
        created_at double precision NOT NULL,
        created_by text NOT NULL,
        last_used_at double precision
      );
      CREATE TABLE job_history (
        job_id text COLLATE "C" NOT NULL,
        seq integer NOT NULL,
        at double precision NOT NULL,
        action text NOT NULL,
        version integer,
        actor text NOT NULL,
        detail text,
        PRIMARY KEY (job_id, seq)
      );
    `,
  },
  {
    version: 3,
    name: "coordinators sharing the store: membership, claims on due work",
    sql: `
      -- One row per coordinator id. Its epoch rises by one at each join and fences the writes of
      -- its earlier lives; times are the database's clock, in whole ms.
      CREATE TABLE coordinators (
        id text COLLATE "C" PRIMARY KEY,
        epoch bigint NOT NULL,
        joined_at bigint NOT NULL,
        renewed_at bigint NOT NULL,
        lease_until bigint NOT NULL,
        info text NOT NULL
      );
      -- A claim on due work (listDue with a claim): who holds it, until when (database clock).
      ALTER TABLE executions ADD COLUMN claimed_by text, ADD COLUMN claim_until bigint;
    `,
  },
  {
    version: 4,
    name: "rollouts",
    sql: `
      -- A rollout (docs/rollouts.md): its record as JSON, with what is queried as columns.
      -- settled: final, and every execution it created ended.
      CREATE TABLE rollouts (
        id text COLLATE "C" PRIMARY KEY,
        version integer NOT NULL,
        state text NOT NULL,
        settled boolean NOT NULL DEFAULT false,
        created_at double precision NOT NULL,
        finished_at double precision,
        record text NOT NULL
      );
      CREATE INDEX rollouts_created ON rollouts (created_at, id);
      CREATE INDEX rollouts_unsettled ON rollouts (id) WHERE NOT settled;
      -- Retention: settled rollouts go, with their timelines and targets, like old executions.
      CREATE INDEX rollouts_finished ON rollouts (finished_at) WHERE settled;
      CREATE TABLE rollout_events (
        rollout_id text COLLATE "C" NOT NULL,
        seq integer NOT NULL,
        entry text NOT NULL,
        PRIMARY KEY (rollout_id, seq)
      );
      -- One row per agent a rollout reached: the key is what makes a reach happen once.
      CREATE TABLE rollout_targets (
        rollout_id text COLLATE "C" NOT NULL,
        agent_id text COLLATE "C" NOT NULL,
        execution_id text COLLATE "C" NOT NULL,
        wave integer NOT NULL,
        reached_at double precision NOT NULL,
        PRIMARY KEY (rollout_id, agent_id)
      );
    `,
  },
  {
    version: 5,
    name: "published bundles",
    sql: `
      -- A bundle published for over-the-air updates (docs/bundles.md, "Publishing a bundle"),
      -- as SQLite's migration 16: the archive by its sha256, with the manifest facts agents are
      -- matched by; target is JSON text. Never changed once written.
      CREATE TABLE bundles (
        sha256 text COLLATE "C" PRIMARY KEY,
        profile text COLLATE "C" NOT NULL,
        version text NOT NULL,
        target text NOT NULL,
        bytes integer NOT NULL,
        agent_sha256 text NOT NULL,
        key_id text NOT NULL,
        built_at double precision NOT NULL,
        published_at double precision NOT NULL,
        published_by text NOT NULL,
        archive bytea NOT NULL
      );
      CREATE INDEX bundles_published ON bundles (published_at, sha256);
      CREATE INDEX bundles_profile ON bundles (profile, published_at, sha256);
    `,
  },
  {
    version: 6,
    name: "pending commands by target",
    sql: `
      -- listDue with onlyTargets, as SQLite's migration 17: a dispatcher with few agents in reach
      -- reads the pending executions with no target (NULL) and those of the agents in reach by
      -- target, and the pending commands past their deadline by deadline, instead of walking
      -- every pending row to pass over the commands waiting for agents out of reach.
      CREATE INDEX executions_pending_target
        ON executions (target_agent_id, priority DESC, fire_at, created_at)
        WHERE state = 'PENDING';
      CREATE INDEX executions_pending_deadline ON executions (deadline)
        WHERE state = 'PENDING' AND target_agent_id IS NOT NULL;
    `,
  },
  {
    version: 7,
    name: "the fence as a function",
    sql: `
      -- The membership's fence, raising when it fails, so that a write transaction checks it in
      -- the same round trip as its COMMIT ("SELECT ax_fence(…); COMMIT"): the statement after an
      -- error in one query string is not run. Its row must still have the epoch and a lease
      -- ahead by the database's clock; SQLSTATE AXF01 otherwise.
      CREATE FUNCTION ax_fence(p_id text, p_epoch bigint) RETURNS void
      LANGUAGE plpgsql AS $$
      BEGIN
        IF NOT EXISTS (SELECT 1 FROM coordinators WHERE id = p_id AND epoch = p_epoch
            AND lease_until > (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint) THEN
          RAISE EXCEPTION 'coordinator % (epoch %) is no longer a member of the store', p_id,
            p_epoch USING ERRCODE = 'AXF01';
        END IF;
      END
      $$;
    `,
  },
  {
    version: 8,
    name: "event ledger",
    sql: `
      -- Store.recordEvent, as SQLite's migration 18: each event message fires once, whichever
      -- coordinator reads it first, and a redelivery after a restart finds its row.
      -- One row per message (job_id '') and one per job it fired.
      CREATE TABLE events (
        name text COLLATE "C" NOT NULL,
        msg_id text COLLATE "C" NOT NULL,
        job_id text COLLATE "C" NOT NULL,
        fired_at double precision NOT NULL,
        executions integer NOT NULL,
        PRIMARY KEY (name, msg_id, job_id)
      );
      CREATE INDEX events_fired ON events (fired_at);
    `,
  },
  {
    version: 9,
    name: "idempotency keys",
    sql: `
      -- As SQLite's migration 19: an operator's request made with an Idempotency-Key, written
      -- with the executions it created.
      CREATE TABLE idempotency (
        scope text COLLATE "C" PRIMARY KEY,
        request text NOT NULL,
        result text NOT NULL,
        created_at double precision NOT NULL
      );
      CREATE INDEX idempotency_created ON idempotency (created_at);
    `,
  },
];

/** The first key of the migration runner's advisory lock ("ax" in ASCII); the second is the schema's hash. */
const MIGRATION_LOCK_KEY = 0x6178;

/**
 * Takes the migration lock of the session's schema for the rest of the transaction, so that
 * coordinators starting together migrate one after the other and the later finds nothing to do.
 */
async function lockMigrations(client: ClientBase, schema: string | undefined): Promise<void> {
  // By name: before the schema exists current_schema() is NULL, and a NULL key locks nothing.
  await client.query(
    "SELECT pg_advisory_xact_lock($1, hashtext(COALESCE($2::text, current_schema(), '')))",
    [MIGRATION_LOCK_KEY, schema ?? null],
  );
}

/** Runs `fn` in a transaction on `client`, rolling back if it throws. */
async function inTransaction<T>(client: ClientBase, fn: () => Promise<T>): Promise<T> {
  await client.query("BEGIN");
  try {
    const result = await fn();
    await client.query("COMMIT");
    return result;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {});
    throw err;
  }
}

/**
 * Applies every migration newer than the database's to the session's schema (the first of its
 * search_path, created if missing), each in its own transaction under an advisory lock,
 * recording it in `schema_migrations`. Refuses a database that has a version this build does not
 * know (AX_STORE_MIGRATION). Returns the versions it applied; a step another coordinator applied
 * meanwhile is skipped. The same semantics as shared/migrate.ts, for PostgreSQL.
 */
export async function migratePg(
  client: ClientBase,
  migrations: readonly Migration[],
  now: number,
  schema?: string,
): Promise<number[]> {
  let applied: Set<number>;
  try {
    applied = await inTransaction(client, async () => {
      await lockMigrations(client, schema);
      // Under the lock: two coordinators creating the schema at once would collide.
      if (schema !== undefined) {
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${client.escapeIdentifier(schema)}`);
      }
      await client.query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at double precision NOT NULL)",
      );
      const rows = await client.query<{ version: number }>("SELECT version FROM schema_migrations");
      return new Set(rows.rows.map((r) => r.version));
    });
  } catch (err) {
    throw new AxError(
      "AX_STORE_MIGRATION",
      `store: reading the schema's migrations failed: ${(err as Error).message}`,
      { cause: err },
    );
  }
  const known = new Set(migrations.map((m) => m.version));
  for (const v of [...applied].sort((a, b) => a - b)) {
    if (!known.has(v)) {
      throw new AxError(
        "AX_STORE_MIGRATION",
        `the database has migration ${v}, which this build does not know: it was written by a newer version`,
        { context: { version: v } },
      );
    }
  }
  const ran: number[] = [];
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
    if (applied.has(m.version)) continue;
    try {
      // Checked again under the lock: another coordinator may have applied it since.
      const appliedHere = await inTransaction(client, async () => {
        await lockMigrations(client, schema);
        const done = await client.query("SELECT 1 FROM schema_migrations WHERE version = $1", [
          m.version,
        ]);
        if (done.rowCount) return false;
        await client.query(m.sql);
        await client.query(
          "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
          [m.version, m.name, now],
        );
        return true;
      });
      if (appliedHere) ran.push(m.version);
    } catch (err) {
      throw new AxError(
        "AX_STORE_MIGRATION",
        `migration ${m.version} (${m.name}) failed: ${(err as Error).message}`,
        { cause: err, context: { version: m.version } },
      );
    }
  }
  return ran;
}
