import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { PG_MIGRATIONS } from "../../coordinator/store/postgres/migrations.js";
import { SQLITE_MIGRATIONS } from "../../coordinator/store/sqlite/migrations.js";
import { tempDir } from "../helpers/env.js";
import { dropPgSchema, freshPgSchema, pgTestUrl, withPgClient } from "../helpers/postgres.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

function ax(args: string[], cwd: string) {
  const r = spawnSync(process.execPath, [AX, ...args], { cwd, encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const target = await pgTestUrl();

describe("ax store migrate", () => {
  let tmp: ReturnType<typeof tempDir>;
  afterEach(() => tmp?.cleanup());

  function config(store: Record<string, unknown>): string {
    tmp = tempDir();
    const file = join(tmp.dir, "coordinator.json");
    writeFileSync(file, JSON.stringify({ store, mqtt: { url: "mqtt://127.0.0.1:1" } }));
    return file;
  }

  it("creates and migrates a SQLite store, and says where it is", () => {
    const file = config({ path: "ax.sqlite" });
    const r = ax(["store", "migrate", "--config", file], tmp.dir);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const newest = SQLITE_MIGRATIONS.at(-1)?.version;
    expect(r.stdout).toContain(`store ${join(tmp.dir, "ax.sqlite")}: at migration ${newest}`);
    const db = new Database(join(tmp.dir, "ax.sqlite"), { readonly: true });
    const versions = db.prepare("SELECT version FROM schema_migrations ORDER BY version").all();
    db.close();
    expect(versions).toEqual(SQLITE_MIGRATIONS.map((m) => ({ version: m.version })));
  });

  it("refuses a store a newer build wrote, changing nothing", () => {
    const file = config({ path: "ax.sqlite" });
    expect(ax(["store", "migrate", "--config", file], tmp.dir).code).toBe(0);
    const path = join(tmp.dir, "ax.sqlite");
    const db = new Database(path);
    db.prepare(
      "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'x', 1)",
    ).run();
    db.close();
    const r = ax(["store", "migrate", "--config", file], tmp.dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/AX_STORE_MIGRATION: .*migration 999/);
  });

  it("needs --config", () => {
    tmp = tempDir();
    const r = ax(["store", "migrate"], tmp.dir);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("AX_CLI_USAGE: store migrate: --config FILE is required");
  });

  it.skipIf("skip" in target)("migrates a PostgreSQL store in its schema", async () => {
    const url = (target as { url: string }).url;
    const schema = freshPgSchema();
    try {
      const file = config({ url, schema });
      const r = ax(["store", "migrate", "--config", file], tmp.dir);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(
        `(schema ${schema}): at migration ${PG_MIGRATIONS.at(-1)?.version}`,
      );
      const rows = await withPgClient(url, schema, (c) =>
        c.query("SELECT version FROM schema_migrations ORDER BY version"),
      );
      expect(rows.rows.map((x) => Number(x.version))).toEqual(PG_MIGRATIONS.map((m) => m.version));
    } finally {
      await dropPgSchema(url, schema);
    }
  });
});
