import { existsSync } from "node:fs";
import Database from "better-sqlite3";

/** One (executionId, round) an agent's journal holds, as the agent recorded it. */
export interface JournalRow {
  agentId: string;
  executionId: string;
  round: number;
  attempt: number;
  /** scheduled, queued, running, or the terminal outcome (succeeded, failed, …, interrupted). */
  state: string;
  fireAt: number;
  deadline: number;
  /** When its handler started, on the coordinator's clock as the agent estimated it; null if never. */
  startedAt: number | null;
  finishedAt: number | null;
}

interface Raw {
  execution_id: string;
  round: number;
  attempt: number;
  state: string;
  fire_at: number;
  deadline: number;
  started_at: number | null;
  finished_at: number | null;
}

/**
 * Every command in an agent's journal, read straight from its SQLite file (read-only, so a
 * running agent is not disturbed; schema: agent/journal/migrations.ts). A journal not created
 * yet holds nothing.
 */
export function readJournal(agentId: string, path: string): JournalRow[] {
  if (!existsSync(path)) return [];
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    db.pragma("busy_timeout = 2000");
    const rows = db
      .prepare(
        "SELECT execution_id, round, attempt, state, fire_at, deadline, started_at, finished_at FROM commands",
      )
      .all() as Raw[];
    return rows.map((r) => ({
      agentId,
      executionId: r.execution_id,
      round: r.round,
      attempt: r.attempt,
      state: r.state,
      fireAt: r.fire_at,
      deadline: r.deadline,
      startedAt: r.started_at,
      finishedAt: r.finished_at,
    }));
  } finally {
    db.close();
  }
}
