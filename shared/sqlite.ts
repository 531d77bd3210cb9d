import { existsSync } from "node:fs";
import Database from "better-sqlite3";
import { AxError } from "./errors.js";
import { type Migration, migrate } from "./migrate.js";

/** What every open of a SQLite file takes. */
interface OpenBase {
  /** What the file is, for error messages: `journal`, `store`. */
  label: string;
  /** better-sqlite3's native addon, where node_modules has none (a bundled agent). */
  nativeBinding?: string | undefined;
  /**
   * `NORMAL`: in WAL mode a commit survives a crash of the process, and a power loss may undo the
   * last commits but never leaves the file inconsistent. `FULL`: every commit is on disk before it
   * returns. @default "NORMAL"
   */
  synchronous?: "NORMAL" | "FULL";
  /** How long a statement waits for another connection's lock, ms; 0 fails at once. @default 5000 */
  busyTimeoutMs?: number;
  /** Page cache, KiB. @default SQLite's (2 MiB) */
  cacheKiB?: number;
}

/** How {@link openSqlite} opens a database for reading and writing. */
export interface SqliteOpenOptions extends OpenBase {
  /** Applied after the pragmas, `now` being when they ran. */
  migrations?: { steps: readonly Migration[]; now: number };
}

/** How {@link openSqliteReadonly} opens a database. */
export interface SqliteReadonlyOptions extends OpenBase {
  /** The migrations this build knows: the file must have every one of them, and no other. */
  migrations?: readonly Migration[];
}

/**
 * Opens a SQLite file the way the agent's journal and the coordinator's store both do: WAL mode,
 * `synchronous` as asked, temporary tables and indexes in memory, a busy timeout, foreign keys
 * enforced, then the migrations. Whatever goes wrong closes the handle again (the caller gets
 * none to close) and is an AxError: AX_STORE_MIGRATION from a migration, else AX_STORE_FAILED
 * with the path (retryable when SQLite was busy).
 */
export function openSqlite(path: string, options: SqliteOpenOptions): Database.Database {
  return open(path, options, false, (db) => {
    if (options.migrations) migrate(db, options.migrations.steps, options.migrations.now);
  });
}

/**
 * Opens an existing SQLite file for reading only, with the pragmas of {@link openSqlite}: nothing
 * is written to it, not even a migration. A missing file is AX_STORE_FAILED naming the path (none
 * is created); one whose schema is not this build's is AX_STORE_MIGRATION. Writes through the
 * handle fail (SQLITE_READONLY).
 */
export function openSqliteReadonly(
  path: string,
  options: SqliteReadonlyOptions,
): Database.Database {
  if (path !== ":memory:" && !existsSync(path)) {
    throw new AxError("AX_STORE_FAILED", `${options.label} ${path}: cannot open: no such file`, {
      context: { path },
    });
  }
  return open(path, options, true, (db) => {
    if (options.migrations) checkMigrated(db, options.migrations, options.label);
  });
}

function open(
  path: string,
  options: OpenBase,
  readonly: boolean,
  then: (db: Database.Database) => void,
): Database.Database {
  let db: Database.Database | undefined;
  try {
    db = new Database(path, {
      ...(readonly ? { readonly: true, fileMustExist: true } : {}),
      ...(options.nativeBinding === undefined ? {} : { nativeBinding: options.nativeBinding }),
    });
    // A read-only connection cannot set the journal mode; it reads a WAL file as it is.
    if (!readonly) db.pragma("journal_mode = WAL");
    db.pragma(`synchronous = ${options.synchronous ?? "NORMAL"}`);
    // Each write of a batch (the journal) or a group commit (the store) runs in a savepoint,
    // whose first change to a page copies the page to a sub-journal. With temp files that spills
    // to disk past 64 KiB and then costs two pwrite calls per page copied (13 % of the
    // coordinator's CPU at 2,000 fires/s); in memory it is a copy, bounded by one commit's pages.
    db.pragma("temp_store = MEMORY");
    // Set, not left to the driver's defaults (better-sqlite3 builds SQLite with both on), so
    // that what a connection enforces does not change with the driver.
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`);
    db.pragma("foreign_keys = ON");
    if (options.cacheKiB !== undefined) db.pragma(`cache_size = -${options.cacheKiB}`);
    then(db);
    return db;
  } catch (err) {
    // A file that is not a database, or one written by a newer build: no handle is left on it.
    if (db?.open) db.close();
    if (err instanceof AxError) throw err;
    throw new AxError(
      "AX_STORE_FAILED",
      `${options.label} ${path}: cannot open: ${(err as Error).message}`,
      {
        cause: err,
        retryable: (err as { code?: string }).code === "SQLITE_BUSY",
        context: { path },
      },
    );
  }
}

/**
 * Refuses a file opened read-only whose schema is not this build's: one a newer build wrote, or one
 * that needs migrations a read-only connection cannot apply.
 */
function checkMigrated(db: Database.Database, steps: readonly Migration[], label: string): void {
  const hasLedger = db
    .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
    .get();
  const applied = new Set(
    hasLedger
      ? (db.prepare("SELECT version FROM schema_migrations").all() as { version: number }[]).map(
          (r) => r.version,
        )
      : [],
  );
  const known = new Set(steps.map((m) => m.version));
  const unknown = [...applied].filter((v) => !known.has(v));
  if (unknown.length > 0) {
    throw new AxError(
      "AX_STORE_MIGRATION",
      `the database has migration ${unknown[0]}, which this build does not know: it was written by a newer version`,
      { context: { version: unknown[0] } },
    );
  }
  const missing = steps.filter((m) => !applied.has(m.version)).map((m) => m.version);
  if (missing.length > 0) {
    throw new AxError(
      "AX_STORE_MIGRATION",
      `the ${label} lacks migration ${missing[0]} of this build, which opening it read-only cannot apply: open it once for writing to migrate it`,
      { context: { version: missing[0] } },
    );
  }
}
