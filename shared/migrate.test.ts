import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { AxError } from "./errors.js";
import { type MigratableDb, type Migration, migrate, transactionOf } from "./migrate.js";

const CREATE_T: Migration = { version: 1, name: "create t", sql: "CREATE TABLE t (a INTEGER)" };
const ADD_B: Migration = { version: 2, name: "add t.b", sql: "ALTER TABLE t ADD COLUMN b TEXT" };
const FILL_T: Migration = {
  version: 3,
  name: "fill t",
  sql: "INSERT INTO t (a, b) VALUES (1, 'one'); INSERT INTO t (a, b) VALUES (2, 'two');",
};

describe("migrate", () => {
  const dbs: Database.Database[] = [];
  const dirs: string[] = [];
  const memory = () => {
    const db = new Database(":memory:");
    dbs.push(db);
    return db;
  };
  afterEach(() => {
    for (const db of dbs.splice(0)) db.close();
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  const ledger = (db: Database.Database) =>
    db.prepare("SELECT version, name, applied_at FROM schema_migrations ORDER BY version").all();
  const tables = (db: Database.Database) =>
    (
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
        name: string;
      }[]
    ).map((r) => r.name);

  /** The AxError `fn` throws (fails the test if it throws nothing or something else). */
  function thrown(fn: () => unknown): AxError {
    try {
      fn();
    } catch (err) {
      if (err instanceof AxError) return err;
      throw err;
    }
    throw new Error("expected an AxError");
  }

  it("applies pending migrations in version order and records each", () => {
    const db = memory();
    // Listed out of order: 2 and 3 only work after 1 and 2.
    expect(migrate(db, [FILL_T, CREATE_T, ADD_B], 500)).toEqual([1, 2, 3]);
    expect(ledger(db)).toEqual([
      { version: 1, name: "create t", applied_at: 500 },
      { version: 2, name: "add t.b", applied_at: 500 },
      { version: 3, name: "fill t", applied_at: 500 },
    ]);
    expect(db.prepare("SELECT a, b FROM t ORDER BY a").all()).toEqual([
      { a: 1, b: "one" },
      { a: 2, b: "two" },
    ]);
  });

  it("runs each migration inside a transaction", () => {
    const db = memory();
    db.function("in_transaction", () => (db.inTransaction ? 1 : 0));
    migrate(
      db,
      [{ version: 1, name: "probe", sql: "CREATE TABLE probe AS SELECT in_transaction() AS t" }],
      1,
    );
    expect(db.prepare("SELECT t FROM probe").all()).toEqual([{ t: 1 }]);
    expect(db.inTransaction).toBe(false);
  });

  it("applies nothing on a second run, and only the new steps on a later one", () => {
    const db = memory();
    expect(migrate(db, [CREATE_T, ADD_B], 500)).toEqual([1, 2]);
    // Re-running CREATE TABLE t would throw, so an empty result also proves nothing ran.
    expect(migrate(db, [CREATE_T, ADD_B], 600)).toEqual([]);
    expect(migrate(db, [CREATE_T, ADD_B, FILL_T], 700)).toEqual([3]);
    expect(ledger(db)).toEqual([
      { version: 1, name: "create t", applied_at: 500 },
      { version: 2, name: "add t.b", applied_at: 500 },
      { version: 3, name: "fill t", applied_at: 700 },
    ]);
  });

  it("rolls a failing migration back, does not record it, and names it in AX_STORE_MIGRATION", () => {
    const db = memory();
    const broken: Migration = {
      version: 2,
      name: "add u",
      sql: "CREATE TABLE u (x INTEGER); INSERT INTO u VALUES (1); INSERT INTO missing VALUES (1);",
    };
    const later: Migration = { version: 3, name: "add v", sql: "CREATE TABLE v (x INTEGER)" };
    const err = thrown(() => migrate(db, [CREATE_T, broken, later], 500));
    expect(err.code).toBe("AX_STORE_MIGRATION");
    expect(err.message).toBe("migration 2 (add u) failed: no such table: missing");
    expect(err.context).toEqual({ version: 2 });
    expect(err.cause).toMatchObject({ code: "SQLITE_ERROR" });
    // Migration 1 stays; 2's own statements are gone; 3 never ran.
    expect(tables(db)).toEqual(["schema_migrations", "t"]);
    expect(ledger(db)).toEqual([{ version: 1, name: "create t", applied_at: 500 }]);
    expect(db.inTransaction).toBe(false);
    // Fixed, it applies from where it stopped.
    const fixed = { ...broken, sql: "CREATE TABLE u (x INTEGER); INSERT INTO u VALUES (1);" };
    expect(migrate(db, [CREATE_T, fixed, later], 600)).toEqual([2, 3]);
    expect(tables(db)).toEqual(["schema_migrations", "t", "u", "v"]);
  });

  it("refuses a database with a migration this build does not know", () => {
    const db = memory();
    migrate(db, [CREATE_T, ADD_B], 500);
    const err = thrown(() => migrate(db, [CREATE_T, FILL_T], 600));
    expect(err.code).toBe("AX_STORE_MIGRATION");
    expect(err.message).toBe(
      "the database has migration 2, which this build does not know: it was written by a newer version",
    );
    expect(err.context).toEqual({ version: 2 });
    // Refused before anything was applied: the pending step 3 did not run.
    expect(db.prepare("SELECT COUNT(*) AS n FROM t").get()).toEqual({ n: 0 });
    expect(ledger(db)).toHaveLength(2);
  });

  it("skips a step another process applied after this one read the ledger", () => {
    const dir = mkdtempSync(join(tmpdir(), "ax-migrate-"));
    dirs.push(dir);
    const file = join(dir, "race.sqlite");
    const mine = new Database(file);
    const theirs = new Database(file);
    dbs.push(mine, theirs);
    let raced = false;
    // The other process runs all migrations just after this one has read the ledger.
    const racing: MigratableDb = {
      exec: (sql) => mine.exec(sql),
      prepare: (sql) => {
        // The step's transaction is about to begin.
        if (sql.startsWith("BEGIN") && !raced) {
          raced = true;
          expect(migrate(theirs, [CREATE_T, ADD_B], 400)).toEqual([1, 2]);
        }
        return mine.prepare(sql);
      },
      get inTransaction() {
        return mine.inTransaction;
      },
    };
    expect(migrate(racing, [CREATE_T, ADD_B], 500)).toEqual([]);
    expect(raced).toBe(true);
    expect(ledger(mine)).toEqual([
      { version: 1, name: "create t", applied_at: 400 },
      { version: 2, name: "add t.b", applied_at: 400 },
    ]);
  });
});

describe("transactionOf", () => {
  const dbs: Database.Database[] = [];
  afterEach(() => {
    for (const db of dbs.splice(0)) db.close();
  });
  const rows = (db: Database.Database) =>
    (db.prepare("SELECT v FROM t ORDER BY v").all() as { v: number }[]).map((r) => r.v);

  it("commits what fn wrote, and rolls all of it back when fn throws", () => {
    const db = new Database(":memory:");
    dbs.push(db);
    db.exec("CREATE TABLE t (v INTEGER)");
    const tx = transactionOf(db);
    const insert = db.prepare("INSERT INTO t (v) VALUES (?)");
    expect(tx(() => insert.run(1).changes)).toBe(1);
    expect(() =>
      tx(() => {
        insert.run(2);
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(rows(db)).toEqual([1]);
    expect(db.inTransaction).toBe(false);
  });

  it("inside an open transaction, undoes only its own part when it throws", () => {
    const db = new Database(":memory:");
    dbs.push(db);
    db.exec("CREATE TABLE t (v INTEGER)");
    const tx = transactionOf(db, "IMMEDIATE");
    const insert = db.prepare("INSERT INTO t (v) VALUES (?)");
    tx(() => {
      insert.run(1);
      expect(() =>
        tx(() => {
          insert.run(2);
          throw new Error("inner");
        }),
      ).toThrow("inner");
      tx(() => insert.run(3));
      expect(db.inTransaction).toBe(true);
    });
    expect(rows(db)).toEqual([1, 3]);
    expect(db.inTransaction).toBe(false);
  });
});
