import type { BundlePage, BundleRecord } from "../../domain/bundle.js";
import { decodeExecutionCursor, encodeExecutionCursor } from "../cursor.js";
import { type BundleRow, bundleOf, bundleValues } from "../stored-bundle.js";
import type { StoreContext } from "./context.js";
import { wrap } from "./values.js";

/*
 * Published bundles in the SQLite store (docs/bundles.md, "Publishing a bundle"): one row per
 * archive, keyed by its sha256, the record's fields as columns and the archive as a BLOB. Rows are
 * never changed: publishing the same archive again finds its row.
 */

/** Every column but the archive. */
const COLUMNS =
  "sha256, profile, version, target, bytes, agent_sha256, key_id, built_at, published_at, published_by";

/** Store.putBundle. */
export function putBundle(ctx: StoreContext, record: BundleRecord, archive: Buffer): boolean {
  return wrap("putBundle", () =>
    ctx.writer.write(() => {
      const done = ctx.statements
        .prepare(
          `INSERT INTO bundles (${COLUMNS}, archive) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (sha256) DO NOTHING`,
        )
        .run(...bundleValues(record), archive);
      return done.changes > 0;
    }),
  );
}

/** Store.getBundle. */
export function getBundle(ctx: StoreContext, sha256: string): BundleRecord | undefined {
  const row = wrap("getBundle", () =>
    ctx.statements.prepare(`SELECT ${COLUMNS} FROM bundles WHERE sha256 = ?`).get(sha256),
  ) as BundleRow | undefined;
  return row === undefined ? undefined : bundleOf(row);
}

/** Store.readBundleArchive. */
export function readBundleArchive(ctx: StoreContext, sha256: string): Buffer | undefined {
  const row = wrap("readBundleArchive", () =>
    ctx.statements.prepare("SELECT archive FROM bundles WHERE sha256 = ?").get(sha256),
  ) as { archive: Buffer } | undefined;
  return row?.archive;
}

/** Store.pageBundles. */
export function pageBundles(
  ctx: StoreContext,
  query: { limit: number; cursor?: string; profile?: string },
): BundlePage {
  const where: string[] = [];
  const args: unknown[] = [];
  if (query.profile !== undefined) {
    where.push("profile = ?");
    args.push(query.profile);
  }
  if (query.cursor !== undefined) {
    const c = decodeExecutionCursor(query.cursor);
    where.push("(published_at < ? OR (published_at = ? AND sha256 < ?))");
    args.push(c.createdAt, c.createdAt, c.id);
  }
  const limit = Math.max(1, Math.floor(query.limit));
  const rows = wrap("pageBundles", () =>
    ctx.statements
      .prepare(
        `SELECT ${COLUMNS} FROM bundles ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
           ORDER BY published_at DESC, sha256 DESC LIMIT ?`,
      )
      .all(...args, limit + 1),
  ) as BundleRow[];
  const items = rows.slice(0, limit).map(bundleOf);
  const last = items[items.length - 1];
  return rows.length > limit && last !== undefined
    ? { items, next: encodeExecutionCursor({ createdAt: last.publishedAt, id: last.sha256 }) }
    : { items };
}
