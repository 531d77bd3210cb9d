import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { axFailure } from "../test/helpers/ax-error.js";
import type { Migration } from "./migrate.js";
import { openSqlite, openSqliteReadonly } from "./sqlite.js";

const STEPS: Migration[] = [
  { version: 1, name: "parents", sql: "CREATE TABLE p (id INTEGER PRIMARY KEY)" },
  {
    version: 2,
    name: "children",
    sql: "CREATE TABLE c (id INTEGER PRIMARY KEY, p INTEGER NOT NULL REFERENCES p (id))",
  },
];

describe("openSqlite", () => {
  let dir: string;
  let path: string;
  const opened: Database.Database[] = [];
  const open = (options: Partial<Parameters<typeof openSqlite>[1]> = {}) => {
    const db = openSqlite(path, { label: "test db", ...options });
    opened.push(db);
    return db;
  };
  const openReadonly = (migrations?: Migration[]) => {
    const db = openSqliteReadonly(path, {
      label: "test db",
      ...(migrations === undefined ? {} : { migrations }),
    });
    opened.push(db);
    return db;
  };

  beforeEach(() => {
    dir = realpathSync(mkdtempSync(join(tmpdir(), "ax-sqlite-")));
    path = join(dir, "db.sqlite");
  });
  afterEach(() => {
    for (const db of opened.splice(0)) if (db.open) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("opens in WAL mode with synchronous NORMAL and temp tables in memory, and migrates", () => {
    const db = open({ migrations: { steps: STEPS, now: 5 } });
    expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(db.pragma("synchronous", { simple: true })).toBe(1); // NORMAL
    expect(db.pragma("temp_store", { simple: true })).toBe(2); // MEMORY
    expect(db.pragma("busy_timeout", { simple: true })).toBe(5000);
    expect(db.pragma("foreign_keys", { simple: true })).toBe(1);
    expect(db.prepare("SELECT version, applied_at FROM schema_migrations").all()).toEqual([
      { version: 1, applied_at: 5 },
      { version: 2, applied_at: 5 },
    ]);
  });

  it("applies the pragmas a caller adds", () => {
    const db = open({ synchronous: "FULL", busyTimeoutMs: 1234, cacheKiB: 512 });
    expect(db.pragma("synchronous", { simple: true })).toBe(2); // FULL
    expect(db.pragma("busy_timeout", { simple: true })).toBe(1234);
    expect(db.pragma("cache_size", { simple: true })).toBe(-512);
  });

  it("names the path when the file cannot be opened", () => {
    writeFileSync(path, "not a database, only text that is long enough ".repeat(40));
    expect(axFailure(() => open())).toBe(
      `AX_STORE_FAILED: test db ${path}: cannot open: file is not a database`,
    );
    const missingDir = join(dir, "missing", "db.sqlite");
    expect(axFailure(() => openSqlite(missingDir, { label: "test db" }))).toBe(
      `AX_STORE_FAILED: test db ${missingDir}: cannot open: Cannot open database because the directory does not exist`,
    );
  });

  describe("read-only", () => {
    it("reads a file written in WAL mode, and refuses writes", () => {
      const writer = open({ migrations: { steps: STEPS, now: 5 } });
      writer.prepare("INSERT INTO p (id) VALUES (7)").run();
      const reader = openReadonly(STEPS);
      expect(reader.prepare("SELECT id FROM p").all()).toEqual([{ id: 7 }]);
      expect(() => reader.prepare("INSERT INTO p (id) VALUES (8)").run()).toThrow(/readonly/);
    });

    it("refuses a missing file and creates none", () => {
      expect(axFailure(() => openReadonly())).toBe(
        `AX_STORE_FAILED: test db ${path}: cannot open: no such file`,
      );
      expect(existsSync(path)).toBe(false);
    });

    it("refuses a file that lacks this build's migrations, instead of applying them", () => {
      open({ migrations: { steps: STEPS.slice(0, 1), now: 5 } }).close();
      expect(axFailure(() => openReadonly(STEPS))).toBe(
        "AX_STORE_MIGRATION: the test db lacks migration 2 of this build, which opening it read-only cannot apply: open it once for writing to migrate it",
      );
    });

    it("refuses a file written by a newer build", () => {
      open({ migrations: { steps: STEPS, now: 5 } }).close();
      expect(axFailure(() => openReadonly(STEPS.slice(0, 1)))).toBe(
        "AX_STORE_MIGRATION: the database has migration 2, which this build does not know: it was written by a newer version",
      );
    });
  });
});
