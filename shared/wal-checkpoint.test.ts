import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { WalCheckpointer } from "./wal-checkpoint.js";

const dirs: string[] = [];
const open: { db: Database.Database; cp: WalCheckpointer }[] = [];

afterEach(() => {
  for (const { db, cp } of open.splice(0)) {
    cp.close();
    if (db.open) db.close();
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setup(options: Partial<ConstructorParameters<typeof WalCheckpointer>[1]> = {}) {
  const dir = mkdtempSync(join(tmpdir(), "ax-wal-"));
  dirs.push(dir);
  const path = join(dir, "db.sqlite");
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)");
  const warnings: string[] = [];
  const cp = new WalCheckpointer(db, {
    path,
    synchronous: "NORMAL",
    log: (_level, message) => warnings.push(message),
    ...options,
  });
  open.push({ db, cp });
  const insert = db.prepare("INSERT INTO t (v) VALUES (?)");
  const write = (n: number) => {
    for (let i = 0; i < n; i++) {
      insert.run("x".repeat(600));
      cp.wrote();
    }
  };
  return { db, cp, path, write, warnings };
}

const walBytes = (path: string) => statSync(`${path}-wal`).size;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("WalCheckpointer", () => {
  it("turns off the writer's own checkpoints and copies the WAL on its thread", async () => {
    const { db, cp, path, write } = setup({ everyWrites: 1_000_000 });
    expect(db.pragma("wal_autocheckpoint", { simple: true })).toBe(0);
    // Far past SQLite's 1,000-page default: the writer no longer checkpoints inside commits, so
    // the WAL holds every frame until the thread copies them.
    write(3_000);
    expect(walBytes(path)).toBeGreaterThan(1_000 * 4_096);
    const r = await cp.checkpoint();
    expect(cp.offThread).toBe(true);
    expect(r.log).toBeGreaterThan(1_000);
    expect(r.checkpointed).toBe(r.log);
    expect(cp.stats).toMatchObject({ checkpoints: 1, workerStarts: 1 });
  });

  it("keeps the WAL bounded under steady writes: long ones are started over", async () => {
    const { cp, path, write } = setup({ everyWrites: 16, minIntervalMs: 0, restartFrames: 256 });
    for (let round = 0; round < 40; round++) {
      write(100);
      await sleep(5);
    }
    await cp.checkpoint();
    expect(cp.stats.checkpoints).toBeGreaterThan(5);
    expect(cp.stats.finishedInline).toBeGreaterThan(0);
    // 4,000 commits of a 600-byte row at ~2 pages each would be ~32 MB of WAL unchecked; started
    // over, the file stays within a few restart lengths (journal_size_limit cuts it back).
    expect(walBytes(path)).toBeLessThan(4 * 256 * 4_200);
    expect(cp.stats.workerStarts).toBe(1);
  });

  it("loses nothing: every committed row is in the file after checkpoints and a reopen", async () => {
    const { db, cp, path, write } = setup({ everyWrites: 8, minIntervalMs: 0, restartFrames: 64 });
    for (let round = 0; round < 20; round++) {
      write(50);
      await sleep(2);
    }
    await cp.checkpoint();
    cp.close();
    db.close();
    const again = new Database(path, { readonly: true });
    expect(again.prepare("SELECT COUNT(*) FROM t").pluck().get()).toBe(1_000);
    expect(again.pragma("integrity_check", { simple: true })).toBe("ok");
    again.close();
  });

  it("stops its thread when idle and starts one again on the next request", async () => {
    const { cp, write } = setup({ everyWrites: 10, minIntervalMs: 0, idleMs: 30 });
    write(20);
    await cp.checkpoint();
    await sleep(150);
    write(20);
    await cp.checkpoint();
    expect(cp.stats.workerStarts).toBe(2);
  });

  it("falls back to SQLite's own checkpoints when the thread cannot load better-sqlite3", async () => {
    const { db, cp, write, warnings } = setup({
      everyWrites: 10,
      minIntervalMs: 0,
      sqliteModule: "file:///nonexistent/better-sqlite3/index.js",
    });
    write(20);
    const r = await cp.checkpoint();
    expect(cp.offThread).toBe(false);
    expect(db.pragma("wal_autocheckpoint", { simple: true })).toBe(1000);
    expect(r.finishedInline).toBe(true);
    expect(warnings.join("\n")).toMatch(/checkpointing inline/);
  });
});
