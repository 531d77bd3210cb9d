import type { BundlePage, BundleRecord } from "../../domain/bundle.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import { type BundleRow, bundleOf, bundleValues } from "../stored-bundle.js";
import { type Queryable, run } from "./tx.js";

/*
 * Published bundles in the PostgreSQL store, as in SQLite's (sqlite/bundles.ts): one row per
 * archive, keyed by its sha256, the archive as bytea. The functions run in the caller's
 * transaction.
 */

const COLUMNS =
  "sha256, profile, version, target, bytes, agent_sha256, key_id, built_at, published_at, published_by";

export async function putBundle(
  q: Queryable,
  record: BundleRecord,
  archive: Buffer,
): Promise<boolean> {
  const done = await run(
    q,
    `INSERT INTO bundles (${COLUMNS}, archive) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
       ON CONFLICT (sha256) DO NOTHING`,
    [...bundleValues(record), archive],
  );
  return (done.rowCount ?? 0) > 0;
}

export async function getBundle(q: Queryable, sha256: string): Promise<BundleRecord | undefined> {
  const r = await run<BundleRow>(q, `SELECT ${COLUMNS} FROM bundles WHERE sha256 = $1`, [sha256]);
  const row = r.rows[0];
  return row === undefined ? undefined : bundleOf(row);
}

export async function readBundleArchive(q: Queryable, sha256: string): Promise<Buffer | undefined> {
  const r = await run<{ archive: Buffer }>(q, "SELECT archive FROM bundles WHERE sha256 = $1", [
    sha256,
  ]);
  return r.rows[0]?.archive;
}

export async function pageBundles(
  q: Queryable,
  query: { limit: number; cursor?: string; profile?: string },
): Promise<BundlePage> {
  const where: string[] = [];
  const args: unknown[] = [];
  if (query.profile !== undefined) {
    args.push(query.profile);
    where.push(`profile = $${args.length}`);
  }
  if (query.cursor !== undefined) {
    const c = decodeExecutionCursor(query.cursor);
    args.push(c.createdAt, c.id);
    where.push(`(published_at, sha256) < ($${args.length - 1}, $${args.length})`);
  }
  const limit = Math.max(1, Math.floor(query.limit));
  args.push(limit + 1);
  const r = await run<BundleRow>(
    q,
    `SELECT ${COLUMNS} FROM bundles ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
       ORDER BY published_at DESC, sha256 DESC LIMIT $${args.length}`,
    args,
  );
  const items = r.rows.slice(0, limit).map(bundleOf);
  const last = items[items.length - 1];
  return r.rows.length > limit && last !== undefined
    ? { items, next: encodeExecutionCursor({ createdAt: last.publishedAt, id: last.sha256 }) }
    : { items };
}
