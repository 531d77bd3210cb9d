import type { Migration } from "../../../shared/migrate.js";

/** The coordinator's SQLite schema, append-only: add a step, never edit a shipped one. */
export const SQLITE_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "jobs, fires, executions, timeline, agents, counters",
    sql: `
      CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        definition TEXT NOT NULL,
        next_fire_at REAL,
        paused INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
      );
      CREATE INDEX jobs_next_fire ON jobs (next_fire_at) WHERE paused = 0;
      CREATE TABLE job_versions (
        job_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        definition TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (job_id, version)
      );
      -- A fire's identity is (job_id, scheduled_for): the UNIQUE key makes firing exactly-once.
      CREATE TABLE fires (
        job_id TEXT NOT NULL,
        scheduled_for REAL NOT NULL,
        fired_at REAL NOT NULL,
        execution_id TEXT NOT NULL,
        PRIMARY KEY (job_id, scheduled_for)
      );
      CREATE TABLE executions (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        job_id TEXT,
        job_version INTEGER,
        handler TEXT NOT NULL,
        params TEXT NOT NULL,
        target_agent_id TEXT,
        agent_id TEXT,
        state TEXT NOT NULL,
        round INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        dispatches INTEGER NOT NULL,
        max_dispatches INTEGER NOT NULL,
        fire_at REAL NOT NULL,
        deadline REAL NOT NULL,
        timeout_ms REAL NOT NULL,
        dispatch_timeout_ms REAL NOT NULL,
        priority INTEGER NOT NULL,
        retry_base_ms REAL NOT NULL,
        retry_cap_ms REAL NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        dispatched_at REAL,
        started_at REAL,
        finished_at REAL,
        late_ms REAL,
        next_attempt_at REAL,
        result TEXT,
        message TEXT
      );
      CREATE INDEX executions_state ON executions (state, priority DESC, fire_at);
      CREATE INDEX executions_job ON executions (job_id, created_at);
      CREATE TABLE timeline (
        execution_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        event TEXT NOT NULL,
        from_state TEXT,
        to_state TEXT NOT NULL,
        round INTEGER NOT NULL,
        agent_id TEXT,
        detail TEXT,
        PRIMARY KEY (execution_id, seq)
      );
      CREATE TABLE agents (
        agent_id TEXT PRIMARY KEY,
        record TEXT NOT NULL,
        instance_id TEXT NOT NULL,
        journal_id TEXT NOT NULL,
        acked_seq INTEGER NOT NULL,
        status TEXT NOT NULL
      );
      CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
      );
    `,
  },
  {
    version: 2,
    name: "retention: message_bytes, purge indexes",
    sql: `
      -- The size of an execution's message before the store capped it.
      ALTER TABLE executions ADD COLUMN message_bytes INTEGER;
      -- Rows from before this step: what is stored is all that is known of their size.
      UPDATE executions SET message_bytes = length(CAST(message AS BLOB)) WHERE message IS NOT NULL;
      -- The purge's scan, oldest finished first. Partial: only terminal rows are ever purged, and
      -- the query must repeat this WHERE clause word for word for SQLite to use the index.
      CREATE INDEX executions_finished ON executions (COALESCE(finished_at, updated_at))
        WHERE state IN ('SUCCEEDED', 'FAILED', 'TIMED_OUT', 'EXPIRED', 'CANCELED', 'SKIPPED');
      -- Old fire records, oldest first (the primary key leads with job_id).
      CREATE INDEX fires_scheduled ON fires (scheduled_for);
    `,
  },
  {
    version: 3,
    name: "shards, groups, routing tags, missed fires",
    sql: `
      -- The nominal time a job execution fired for, and its shard of that firing.
      ALTER TABLE executions ADD COLUMN scheduled_for REAL;
      ALTER TABLE executions ADD COLUMN shard_index INTEGER;
      ALTER TABLE executions ADD COLUMN shard_total INTEGER;
      -- Executions with one group key run one at a time across the fleet.
      ALTER TABLE executions ADD COLUMN group_key TEXT;
      -- The agent tags the execution requires (JSON object), from its job.
      ALTER TABLE executions ADD COLUMN tags TEXT;
      CREATE INDEX executions_group ON executions (group_key, state) WHERE group_key IS NOT NULL;
      CREATE INDEX executions_job_state ON executions (job_id, state);
      -- A nominal time that was missed and not fired (misfire policy) is recorded too, never
      -- silent: status 'missed' with no execution.
      ALTER TABLE fires ADD COLUMN status TEXT NOT NULL DEFAULT 'fired';
    `,
  },
  {
    version: 4,
    name: "indexes of open executions only",
    sql: `
      -- The dispatcher's and the overlap rules' indexes cover open executions only: finished
      -- ones are most rows, and every execution's last transition no longer rewrites an entry
      -- in them. Partial: a query must repeat this WHERE clause word for word to use them.
      DROP INDEX executions_state;
      DROP INDEX executions_job_state;
      CREATE INDEX executions_open ON executions (state, priority DESC, fire_at)
        WHERE state IN ('PENDING', 'DISPATCHED', 'SCHEDULED', 'RUNNING', 'RETRY_WAITING');
      CREATE INDEX executions_open_job ON executions (job_id, state)
        WHERE state IN ('PENDING', 'DISPATCHED', 'SCHEDULED', 'RUNNING', 'RETRY_WAITING');
    `,
  },
  {
    version: 5,
    name: "timeline and fires clustered by their keys",
    sql: `
      -- WITHOUT ROWID: each row lives in its primary key's b-tree, so appending a timeline entry
      -- or a fire writes one b-tree instead of the table's and its key's.
      CREATE TABLE timeline_new (
        execution_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        event TEXT NOT NULL,
        from_state TEXT,
        to_state TEXT NOT NULL,
        round INTEGER NOT NULL,
        agent_id TEXT,
        detail TEXT,
        PRIMARY KEY (execution_id, seq)
      ) WITHOUT ROWID;
      INSERT INTO timeline_new SELECT execution_id, seq, at, event, from_state, to_state, round,
        agent_id, detail FROM timeline;
      DROP TABLE timeline;
      ALTER TABLE timeline_new RENAME TO timeline;
      CREATE TABLE fires_new (
        job_id TEXT NOT NULL,
        scheduled_for REAL NOT NULL,
        fired_at REAL NOT NULL,
        execution_id TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'fired',
        PRIMARY KEY (job_id, scheduled_for)
      ) WITHOUT ROWID;
      INSERT INTO fires_new SELECT job_id, scheduled_for, fired_at, execution_id, status FROM fires;
      DROP TABLE fires;
      ALTER TABLE fires_new RENAME TO fires;
      CREATE INDEX fires_scheduled ON fires (scheduled_for);
    `,
  },
  {
    version: 6,
    name: "alerts",
    sql: `
      -- One row per alert and webhook: what was sent, how often it was tried, how it ended.
      CREATE TABLE alerts (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        url TEXT NOT NULL,
        payload TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        last_error TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
      );
      CREATE INDEX alerts_pending ON alerts (created_at) WHERE status = 'pending';
      CREATE INDEX alerts_created ON alerts (created_at);
    `,
  },
  {
    version: 7,
    name: "executions by creation time, for the operator's listing",
    sql: `
      -- The executions listing pages newest first by (created_at, id), the keyset of its cursor,
      -- and filters a time range on created_at. Neither column is ever updated, so transitions
      -- never touch this index; only creating and purging an execution does. (An index on the
      -- agent was left out: every transition sets agent_id, and rewriting such an index entry on
      -- each one cost about a third more per transition. The agent filter walks this index.)
      CREATE INDEX executions_created ON executions (created_at, id);
    `,
  },
  {
    version: 8,
    name: "partial indexes without IN lists",
    sql: `
      -- SQLite evaluates "state IN (three or more constants)" by building a temporary b-tree of
      -- the list, each time a statement is run. In a partial index's WHERE clause that happened on
      -- every INSERT and on every UPDATE of state: six temporary b-trees per transition, opened and
      -- closed, most of all the SQLite work the transition did. The same sets as chains of
      -- equalities are a few comparisons. Queries repeat these clauses word for word to use them.
      DROP INDEX executions_finished;
      DROP INDEX executions_open;
      DROP INDEX executions_open_job;
      CREATE INDEX executions_finished ON executions (COALESCE(finished_at, updated_at))
        WHERE (state = 'SUCCEEDED' OR state = 'FAILED' OR state = 'TIMED_OUT'
          OR state = 'EXPIRED' OR state = 'CANCELED' OR state = 'SKIPPED');
      -- In the dispatcher's whole order (priority DESC, fire_at, created_at): no sort per pass.
      CREATE INDEX executions_open ON executions (state, priority DESC, fire_at, created_at)
        WHERE (state = 'PENDING' OR state = 'DISPATCHED' OR state = 'SCHEDULED'
          OR state = 'RUNNING' OR state = 'RETRY_WAITING');
      -- The overlap rules' peers of a job, in their order (created_at, id): no sort, and no
      -- state column for the planner to look up each open state in, through a temporary b-tree.
      CREATE INDEX executions_open_job ON executions (job_id, created_at, id)
        WHERE (state = 'PENDING' OR state = 'DISPATCHED' OR state = 'SCHEDULED'
          OR state = 'RUNNING' OR state = 'RETRY_WAITING');
    `,
  },
  {
    version: 9,
    name: "jobs listening for events and other jobs' ends",
    sql: `
      -- Event messages and transitions are matched against the jobs with an event or after
      -- trigger. Reading every job to find them cost about half a second and 130 MB of garbage
      -- with 100,000 jobs, on the first transition and after every change of a job. Only a
      -- change of definition touches this index; advancing a job's next fire time does not.
      CREATE INDEX jobs_listening ON jobs (id)
        WHERE (json_extract(definition, '$.trigger.type') = 'event'
          OR json_extract(definition, '$.trigger.type') = 'after');
    `,
  },
  {
    version: 10,
    name: "jobs with a dispatch lead of their own",
    sql: `
      -- The firing scan reads only ids and times, a short window ahead; the few jobs that are
      -- dispatched further ahead (their dispatchLead) are found through this index, without
      -- reading every job's definition.
      CREATE INDEX jobs_lead ON jobs (id)
        WHERE json_extract(definition, '$.dispatchLead') IS NOT NULL;
    `,
  },
  {
    version: 11,
    name: "agent identities",
    sql: `
      -- Who is enrolled (docs/security.md). No key is stored: each agent's message key and MQTT
      -- password derive from the fleet key and the generation, so a copy of this file is no
      -- credential.
      CREATE TABLE identities (
        agent_id TEXT PRIMARY KEY,
        record TEXT NOT NULL
      );
    `,
  },
  {
    version: 12,
    name: "API tokens, job history",
    sql: `
      -- Tokens made through the API (POST /api/tokens). Only the SHA-256 digest is kept: a copy
      -- of this file lets no one call the API.
      CREATE TABLE api_tokens (
        name TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        role TEXT NOT NULL,
        created_at REAL NOT NULL,
        created_by TEXT NOT NULL,
        last_used_at REAL
      );
      -- Who changed a job, or fired it by hand (issue 16: every write records its token).
      CREATE TABLE job_history (
        job_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        action TEXT NOT NULL,
        version INTEGER,
        actor TEXT NOT NULL,
        detail TEXT,
        PRIMARY KEY (job_id, seq)
      );
      ALTER TABLE jobs ADD COLUMN updated_by TEXT;
    `,
  },
  {
    version: 13,
    name: "job indexes without device commands",
    sql: `
      -- A device command has no job: its rows in the two indexes by job were never read (every
      -- query through them names a job, which implies job_id IS NOT NULL), yet a command to
      -- 10,000 agents paid 20,000 index inserts for them.
      DROP INDEX executions_job;
      DROP INDEX executions_open_job;
      CREATE INDEX executions_job ON executions (job_id, created_at) WHERE job_id IS NOT NULL;
      CREATE INDEX executions_open_job ON executions (job_id, created_at, id)
        WHERE (state = 'PENDING' OR state = 'DISPATCHED' OR state = 'SCHEDULED'
          OR state = 'RUNNING' OR state = 'RETRY_WAITING') AND job_id IS NOT NULL;
    `,
  },
  {
    version: 14,
    name: "coordinators sharing the store, claims on executions",
    sql: `
      -- One row per coordinator id that ever joined (Store.joinCoordinators). Its epoch grows by
      -- one at each join and fences the writes of the id's earlier lives; times are the store's
      -- clock. A member is live while lease_until is ahead of that clock.
      CREATE TABLE coordinators (
        id TEXT PRIMARY KEY,
        epoch INTEGER NOT NULL,
        joined_at REAL NOT NULL,
        renewed_at REAL NOT NULL,
        lease_until REAL NOT NULL,
        info TEXT NOT NULL DEFAULT '{}'
      );
      -- Who listed an execution as due last (DueOptions.claim), and until when the others pass it
      -- over. Null for a store no two coordinators share.
      ALTER TABLE executions ADD COLUMN claimed_by TEXT;
      ALTER TABLE executions ADD COLUMN claim_until REAL;
    `,
  },
  {
    version: 15,
    name: "rollouts",
    sql: `
      -- A rollout (docs/rollouts.md): its record as JSON, with what is queried as columns.
      -- settled: final, and every execution it created ended.
      CREATE TABLE rollouts (
        id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        state TEXT NOT NULL,
        settled INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        finished_at REAL,
        record TEXT NOT NULL
      );
      CREATE INDEX rollouts_created ON rollouts (created_at, id);
      CREATE INDEX rollouts_unsettled ON rollouts (id) WHERE settled = 0;
      -- Retention: settled rollouts go, with their timelines and targets, like old executions.
      CREATE INDEX rollouts_finished ON rollouts (finished_at) WHERE settled = 1;
      CREATE TABLE rollout_events (
        rollout_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (rollout_id, seq)
      );
      -- One row per agent a rollout reached: the key is what makes a reach happen once.
      CREATE TABLE rollout_targets (
        rollout_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        execution_id TEXT NOT NULL,
        wave INTEGER NOT NULL,
        reached_at REAL NOT NULL,
        PRIMARY KEY (rollout_id, agent_id)
      );
    `,
  },
  {
    version: 16,
    name: "published bundles",
    sql: `
      -- A bundle published for over-the-air updates (docs/bundles.md, "Publishing a bundle"):
      -- its archive, named by the archive's sha256, with the manifest facts agents are matched
      -- by. target is JSON text (NativeTarget). Never changed once written.
      CREATE TABLE bundles (
        sha256 TEXT PRIMARY KEY,
        profile TEXT NOT NULL,
        version TEXT NOT NULL,
        target TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        agent_sha256 TEXT NOT NULL,
        key_id TEXT NOT NULL,
        built_at REAL NOT NULL,
        published_at REAL NOT NULL,
        published_by TEXT NOT NULL,
        archive BLOB NOT NULL
      );
      CREATE INDEX bundles_published ON bundles (published_at, sha256);
      CREATE INDEX bundles_profile ON bundles (profile, published_at, sha256);
    `,
  },
  {
    version: 17,
    name: "pending commands by target",
    sql: `
      -- listDue with onlyTargets (issue 18): a dispatcher with few agents in reach reads the
      -- pending executions of those agents and those with no target (NULL) by target, and the
      -- pending commands past their deadline by deadline, instead of walking every pending row
      -- to pass over the commands of agents out of reach.
      CREATE INDEX executions_pending_target ON executions (target_agent_id, priority DESC, fire_at, created_at)
        WHERE state = 'PENDING';
      CREATE INDEX executions_pending_deadline ON executions (deadline)
        WHERE state = 'PENDING' AND target_agent_id IS NOT NULL;
    `,
  },
  {
    version: 18,
    name: "event ledger",
    sql: `
      -- Store.recordEvent (issue 19): each event message fires once, whichever coordinator
      -- reads it first, and a redelivery after a restart finds its row.
      -- One row per message (job_id '') and one per job it fired.
      CREATE TABLE events (
        name TEXT NOT NULL,
        msg_id TEXT NOT NULL,
        job_id TEXT NOT NULL,
        fired_at REAL NOT NULL,
        executions INTEGER NOT NULL,
        PRIMARY KEY (name, msg_id, job_id)
      ) WITHOUT ROWID;
      CREATE INDEX events_fired ON events (fired_at);
    `,
  },
  {
    version: 19,
    name: "idempotency keys",
    sql: `
      -- An operator's request made with an Idempotency-Key (docs/api.md): written with the
      -- executions it created, so the same request again answers the same and creates nothing.
      CREATE TABLE idempotency (
        scope TEXT PRIMARY KEY,
        request TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at REAL NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX idempotency_created ON idempotency (created_at);
    `,
  },
];
