import type { Migration } from "../../shared/migrate.js";

/**
 * The agent journal's schema, append-only: add a step, never change what a shipped one does.
 * Comments go beside the SQL, not inside it, and the SQL is kept compact: its text ships in
 * every bundle.
 */
export const JOURNAL_MIGRATIONS: readonly Migration[] = [
  // The inbox (commands): every dispatch accepted, keyed UNIQUE (execution_id, round) so a
  // redelivered one is recognised and never run twice. Terminal rows are kept for a while to
  // answer duplicates and late cancels, then purged. The outbox: reports not yet acknowledged by
  // the coordinator, by seq (rule 1).
  {
    version: 1,
    name: "meta, commands (the inbox), outbox",
    sql: `
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE commands (id INTEGER PRIMARY KEY, execution_id TEXT NOT NULL, round INTEGER NOT NULL,
 attempt INTEGER NOT NULL, state TEXT NOT NULL, dispatch TEXT NOT NULL, fire_at REAL NOT NULL,
 deadline REAL NOT NULL, priority INTEGER NOT NULL, received_at REAL NOT NULL, started_at REAL,
 finished_at REAL, UNIQUE (execution_id, round));
CREATE INDEX commands_open ON commands (state) WHERE state IN ('scheduled', 'queued', 'running');
CREATE INDEX commands_finished ON commands (finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE outbox (seq INTEGER PRIMARY KEY, message TEXT NOT NULL);`,
  },
  // SQLite evaluates "state IN (three constants)" in a partial index's WHERE clause by building
  // a temporary b-tree of the list on every INSERT and on every UPDATE of state: five per
  // command. A chain of equalities is a few comparisons. Queries repeat it.
  {
    version: 2,
    name: "open commands' index without an IN list",
    sql: `
DROP INDEX commands_open;
CREATE INDEX commands_open ON commands (state)
 WHERE (state = 'scheduled' OR state = 'queued' OR state = 'running');`,
  },
  // Child processes a handler started (exec), so that after a crash the agent can stop what
  // survived, or report how it ended. (pid, start_time) names one process: pids are reused.
  {
    version: 3,
    name: "the child processes handlers start",
    sql: `
CREATE TABLE children (command_id INTEGER NOT NULL, pid INTEGER NOT NULL, start_time TEXT,
 exit_code INTEGER, exit_signal TEXT, stopped_by_agent INTEGER, exited_at REAL,
 PRIMARY KEY (command_id, pid));`,
  },
];
