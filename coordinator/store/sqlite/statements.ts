import type Database from "better-sqlite3";
import { PATCH_COLUMNS } from "./rows.js";

/*
 * The SQL the SQLite store runs more than once, and the cache of its prepared statements. The
 * WHERE clauses below repeat partial indexes of the migrations word for word: SQLite uses a
 * partial index only for a query whose WHERE clause implies the index's.
 */

/**
 * The states a purge may delete. Written out, not built from TERMINAL_STATES: the purge query must
 * repeat the WHERE clause of the partial index `executions_finished` (migration 8) exactly.
 */
export const TERMINAL_SQL =
  "(state = 'SUCCEEDED' OR state = 'FAILED' OR state = 'TIMED_OUT' OR state = 'EXPIRED' OR state = 'CANCELED' OR state = 'SKIPPED')";

/** The WHERE clause of the partial indexes of open executions (migration 8), word for word. */
export const OPEN_SQL =
  "(state = 'PENDING' OR state = 'DISPATCHED' OR state = 'SCHEDULED' OR state = 'RUNNING' OR state = 'RETRY_WAITING')";

/**
 * The WHERE clause of the partial index `jobs_listening` (migration 9), word for word: the jobs
 * whose trigger is `event` or `after`.
 */
export const LISTENING_SQL =
  "(json_extract(definition, '$.trigger.type') = 'event' OR json_extract(definition, '$.trigger.type') = 'after')";

/** Inserts or replaces one agent's record; the acked seq of the same journal never goes down. */
export const PUT_AGENT_SQL = `INSERT INTO agents (agent_id, record, instance_id, journal_id, acked_seq, status)
   VALUES (@agentId, @record, @instanceId, @journalId, @ackedSeq, @status)
   ON CONFLICT (agent_id) DO UPDATE SET record = @record, instance_id = @instanceId,
     journal_id = @journalId,
     acked_seq = CASE WHEN journal_id = @journalId THEN MAX(acked_seq, @ackedSeq) ELSE @ackedSeq END,
     status = @status`;

/** The UPDATE of each patch shape, made when first needed (a few shapes occur in practice). */
const applyTransitionSql: (string | undefined)[] = [];

/**
 * A transition's compare-and-set for one patch shape (a bit per {@link PATCH_COLUMNS} entry the
 * patch sets): the snapshot, then the patched columns (`message` also sets `message_bytes`),
 * then id, expected state and round. Only the columns a transition changes are in its SET list,
 * so it binds a dozen values instead of forty, and SQLite rewrites only the indexes on them.
 */
export function applyTransitionSqlFor(shape: number): string {
  let sql = applyTransitionSql[shape];
  if (sql === undefined) {
    const set = ["state = ?", "round = ?", "attempt = ?", "max_attempts = ?", "dispatches = ?"];
    set.push("max_dispatches = ?", "updated_at = ?");
    PATCH_COLUMNS.forEach(([key, column], i) => {
      if ((shape & (1 << i)) === 0) return;
      set.push(key === "message" ? "message = ?, message_bytes = ?" : `${column} = ?`);
    });
    sql = `UPDATE executions SET ${set.join(", ")} WHERE id = ? AND state = ? AND round = ?`;
    applyTransitionSql[shape] = sql;
  }
  return sql;
}

/** Prepared statements by SQL text: preparing on every call cost more than running them. */
export class Statements {
  private readonly cache = new Map<string, Database.Statement>();

  constructor(private readonly db: Database.Database) {}

  /** The statement of `sql`, prepared on first use. */
  prepare(sql: string): Database.Statement {
    let st = this.cache.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.cache.set(sql, st);
    }
    return st;
  }
}
