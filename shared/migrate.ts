import { AxError } from "./errors.js";

/** One step of an append-only migration ledger. Never edit a shipped step; add a new one. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** The part of a better-sqlite3 database {@link transactionOf} needs (structural: no I/O import). */
export interface TransactionDb {
  prepare(sql: string): { run(...args: unknown[]): unknown };
  readonly inTransaction: boolean;
}

/** The part of a better-sqlite3 database the runner needs. */
export interface MigratableDb extends TransactionDb {
  exec(sql: string): unknown;
  prepare(sql: string): { all(...args: unknown[]): unknown[]; run(...args: unknown[]): unknown };
}

/**
 * Runs `fn` in a transaction (`BEGIN <mode>`), or in a savepoint when one is open already, and
 * rolls back what it wrote if it throws: what better-sqlite3's `db.transaction` does, which a
 * bundled agent leaves out (ten times the bytes, for variants it never uses).
 */
export function transactionOf(db: TransactionDb, mode = ""): <T>(fn: () => T) => T {
  type Statement = { run(): unknown };
  const [begin, commit, rollback, save, release, undo] = [
    `BEGIN ${mode}`,
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT ax_tx",
    "RELEASE ax_tx",
    "ROLLBACK TO ax_tx",
  ].map((sql) => db.prepare(sql)) as [
    Statement,
    Statement,
    Statement,
    Statement,
    Statement,
    Statement,
  ];
  return (fn) => {
    const nested = db.inTransaction;
    (nested ? save : begin).run();
    try {
      const result = fn();
      (nested ? release : commit).run();
      return result;
    } catch (err) {
      // A failed COMMIT may have ended the transaction already.
      if (db.inTransaction) {
        (nested ? undo : rollback).run();
        if (nested) release.run();
      }
      throw err;
    }
  };
}

/**
 * Applies every migration newer than the database's, each in its own transaction, recording it in
 * `schema_migrations`. Refuses a database that has a version this build does not know. Returns the
 * versions it applied; a step another process applied meanwhile is skipped.
 */
export function migrate(db: MigratableDb, migrations: readonly Migration[], now: number): number[] {
  db.exec(
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)",
  );
  const applied = new Set(
    (db.prepare("SELECT version FROM schema_migrations").all() as { version: number }[]).map(
      (r) => r.version,
    ),
  );
  const known = new Set(migrations.map((m) => m.version));
  for (const v of applied) {
    if (!known.has(v)) {
      throw new AxError(
        "AX_STORE_MIGRATION",
        `the database has migration ${v}, which this build does not know: it was written by a newer version`,
        { context: { version: v } },
      );
    }
  }
  const ran: number[] = [];
  const sorted = [...migrations].sort((a, b) => a.version - b.version);
  for (const m of sorted) {
    if (applied.has(m.version)) continue;
    let appliedHere = false;
    try {
      // IMMEDIATE, and checked again inside: another process opening the same file may have
      // applied this step since `applied` was read.
      transactionOf(
        db,
        "IMMEDIATE",
      )(() => {
        if (db.prepare("SELECT 1 FROM schema_migrations WHERE version = ?").all(m.version).length) {
          return;
        }
        db.exec(m.sql);
        db.prepare(
          "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
        ).run(m.version, m.name, now);
        appliedHere = true;
      });
    } catch (err) {
      throw new AxError(
        "AX_STORE_MIGRATION",
        `migration ${m.version} (${m.name}) failed: ${(err as Error).message}`,
        {
          cause: err,
          context: { version: m.version },
        },
      );
    }
    if (appliedHere) ran.push(m.version);
  }
  return ran;
}
