import type { AlertRecord } from "../port.js";
import { alertColumns } from "../stored-text.js";
import type { StoreContext } from "./context.js";
import { type AlertRow, toAlert } from "./rows.js";
import { capUtf8, wrap } from "./values.js";

/*
 * What the SQLite store keeps for operators to watch: webhook alerts and their delivery, and
 * named counters (invalid messages, stale reports, …).
 */

const INSERT_ALERT = `INSERT INTO alerts (id, kind, url, payload, status, attempts, last_error, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`;

/** Store.putAlert. */
export function putAlert(ctx: StoreContext, a: AlertRecord): void {
  wrap("putAlert", () =>
    ctx.writer.writeOne(INSERT_ALERT).run(...alertColumns(a, ctx.maxErrorTextBytes)),
  );
}

/** Alerts inside the caller's write (TransitionWrite.alerts). */
export function insertAlerts(ctx: StoreContext, alerts: readonly AlertRecord[]): void {
  const insert = ctx.statements.prepare(INSERT_ALERT);
  for (const a of alerts) insert.run(...alertColumns(a, ctx.maxErrorTextBytes));
}

/** Store.updateAlert. */
export function updateAlert(
  ctx: StoreContext,
  id: string,
  p: Pick<AlertRecord, "status" | "attempts" | "lastError" | "updatedAt">,
): void {
  wrap("updateAlert", () =>
    ctx.writer
      .writeOne(
        "UPDATE alerts SET status = ?, attempts = ?, last_error = ?, updated_at = ? WHERE id = ?",
      )
      .run(
        p.status,
        p.attempts,
        p.lastError === null ? null : capUtf8(p.lastError, ctx.maxErrorTextBytes).text,
        p.updatedAt,
        id,
      ),
  );
}

/** Store.listAlerts. */
export function listAlerts(
  ctx: StoreContext,
  filter: { pending?: boolean; limit?: number },
): AlertRecord[] {
  const sql = filter.pending
    ? "SELECT * FROM alerts WHERE status = 'pending' ORDER BY created_at LIMIT ?"
    : "SELECT * FROM alerts ORDER BY created_at DESC LIMIT ?";
  const rows = wrap("listAlerts", () =>
    ctx.statements.prepare(sql).all(filter.limit ?? 100),
  ) as AlertRow[];
  return rows.map(toAlert);
}

/** Store.bumpCounter. */
export function bumpCounter(ctx: StoreContext, name: string, by: number): void {
  wrap("bumpCounter", () => ctx.writer.writeOne(BUMP_COUNTER).run(name, by));
}

const BUMP_COUNTER =
  "INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value";

/** Adds to a counter within the write that is open (a write's own count, in its transaction). */
export function addToCounter(ctx: StoreContext, name: string, by: number): void {
  ctx.statements.prepare(BUMP_COUNTER).run(name, by);
}

/** Store.counters. */
export function counters(ctx: StoreContext): Record<string, number> {
  const rows = wrap("counters", () =>
    ctx.statements.prepare("SELECT name, value FROM counters").all(),
  ) as { name: string; value: number }[];
  return Object.fromEntries(rows.map((r) => [r.name, r.value]));
}
