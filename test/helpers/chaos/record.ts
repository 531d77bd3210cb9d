import Database from "better-sqlite3";
import type { ExecutionRecord, TimelineEntry } from "../../../coordinator/store/port.js";
import type { CoordinatorProcess } from "./coordinator-process.js";

/** One execution as the coordinator records it, with its timeline. */
export interface RecordedExecution {
  execution: ExecutionRecord;
  timeline: TimelineEntry[];
}

/** Every execution the coordinator holds (no timelines), over its HTTP API, all pages. */
export async function listExecutions(c: CoordinatorProcess): Promise<ExecutionRecord[]> {
  const out: ExecutionRecord[] = [];
  let cursor: string | null = null;
  do {
    const q: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    const page: { items: ExecutionRecord[]; nextCursor: string | null } = await c.api(
      "GET",
      `/api/executions?limit=500${q}`,
    );
    out.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor !== null);
  return out;
}

/** Every execution with its timeline, over the HTTP API. */
export async function readRecord(c: CoordinatorProcess): Promise<RecordedExecution[]> {
  const list = await listExecutions(c);
  const out: RecordedExecution[] = [];
  // A few at a time: the coordinator is also a test subject, not a bulk-export server.
  for (let i = 0; i < list.length; i += 8) {
    const part = await Promise.all(
      list
        .slice(i, i + 8)
        .map((e) => c.api<RecordedExecution>("GET", `/api/executions/${encodeURIComponent(e.id)}`)),
    );
    out.push(...part);
  }
  return out;
}

/** The agents the coordinator knows, with their status and their last clock estimate. */
export async function listAgents(
  c: CoordinatorProcess,
): Promise<{ agentId: string; status: string; clockUncertaintyMs: number }[]> {
  const a = await c.api<{
    items: { agentId: string; status: string; clockUncertaintyMs: number }[];
  }>("GET", "/api/agents");
  return a.items;
}

/**
 * How many executions are in each state, read straight from a stopped (or killed) coordinator's
 * SQLite store, read-only: what it had recorded at the moment it died.
 */
export function statesInStore(storePath: string): Record<string, number> {
  const db = new Database(storePath, { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare("SELECT state, COUNT(*) AS n FROM executions GROUP BY state").all() as {
      state: string;
      n: number;
    }[];
    return Object.fromEntries(rows.map((r) => [r.state, r.n]));
  } finally {
    db.close();
  }
}
