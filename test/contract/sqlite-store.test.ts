import { type ChildProcess, spawn } from "node:child_process";
import {
  mkdtempSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { z } from "zod";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import {
  agentRecordSchema,
  apiTokenRecordSchema,
  executionRecordSchema,
  identityRecordSchema,
  jobHistoryEntrySchema,
  storedJobSchema,
  timelineEntrySchema,
} from "../../coordinator/store/records.js";
import { SQLITE_MIGRATIONS } from "../../coordinator/store/sqlite/migrations.js";
import {
  GROUP_COMMIT_MAX_WRITES,
  LISTENING_SQL,
  OPEN_SQL,
  SqliteStore,
  TERMINAL_SQL,
} from "../../coordinator/store/sqlite/sqlite-store.js";
import { migrate } from "../../shared/migrate.js";
import { axFailure } from "../helpers/ax-error.js";
import { waitFor } from "../helpers/env.js";
import { agentRecord, jobDef, newExecution, storeContract } from "./store.contract.js";
import { storeClusterContract } from "./store-cluster.contract.js";

/** A fresh temp folder; realpath so that /proc fd links compare equal. */
function freshDir(): string {
  return realpathSync(mkdtempSync(join(tmpdir(), "ax-store-")));
}

storeContract("sqlite", async () => {
  const dir = freshDir();
  const path = join(dir, "ax.sqlite");
  const opened: SqliteStore[] = [];
  const open = () => {
    const s = new SqliteStore({ path });
    opened.push(s);
    return s;
  };
  return {
    store: open(),
    openAnother: async () => open(),
    cleanup: async () => {
      for (const s of opened) await s.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

// The coordinator's own store (as openStore makes it): writes grouped into one commit per turn
// of the event loop, at most one per 10 ms. It is the file's only writer in its thread, so the
// contract's second-store cases do not apply.
storeContract("sqlite, group commit", async () => {
  const dir = freshDir();
  const store = new SqliteStore({
    path: join(dir, "ax.sqlite"),
    groupCommit: true,
    commitIntervalMs: 10,
    checkpoint: "thread",
  });
  return {
    store,
    cleanup: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

// The cluster contract, on stores whose clock the fixture moves: the process's clock plus an
// offset, shared by every store of one fixture (as one database server's clock would be).
storeClusterContract("sqlite", async () => {
  const dir = freshDir();
  const path = join(dir, "ax.sqlite");
  let offset = 0;
  const now = () => Date.now() + offset;
  const opened: SqliteStore[] = [];
  const open = () => {
    const s = new SqliteStore({ path, now });
    opened.push(s);
    return s;
  };
  return {
    store: open(),
    openAnother: async () => open(),
    advanceClock: (ms) => {
      offset += ms;
    },
    cleanup: async () => {
      for (const s of opened) await s.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

storeClusterContract("sqlite, group commit", async () => {
  const dir = freshDir();
  let offset = 0;
  const store = new SqliteStore({
    path: join(dir, "ax.sqlite"),
    now: () => Date.now() + offset,
    groupCommit: true,
    commitIntervalMs: 10,
  });
  return {
    store,
    advanceClock: (ms) => {
      offset += ms;
    },
    cleanup: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

/** How many of this process's file descriptors point at `path` (Linux; 0 elsewhere). */
function fdsOn(path: string): number {
  if (process.platform !== "linux") return 0;
  let n = 0;
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`) === path) n++;
    } catch {
      // The fd closed while we looked (readdir's own fd).
    }
  }
  return n;
}

describe("SqliteStore (SQLite specifics)", () => {
  let dir: string;
  let path: string;
  const stores: SqliteStore[] = [];
  const raws: Database.Database[] = [];
  const open = (now = 1_000, maxErrorTextBytes?: number) => {
    const s = new SqliteStore({
      path,
      now: () => now,
      ...(maxErrorTextBytes === undefined ? {} : { maxErrorTextBytes }),
    });
    stores.push(s);
    return s;
  };
  const raw = () => {
    const db = new Database(path);
    raws.push(db);
    return db;
  };

  beforeEach(() => {
    dir = freshDir();
    path = join(dir, "ax.sqlite");
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    for (const db of raws.splice(0)) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  describe("group commit", () => {
    const grouped = () => {
      const s = new SqliteStore({ path, groupCommit: true });
      stores.push(s);
      return s;
    };
    const countIn = (db: Database.Database) =>
      (db.prepare("SELECT COUNT(*) AS n FROM executions").get() as { n: number }).n;

    it("shows a write to its own reads at once, to other connections only after the commit, and runs afterCommit after that", async () => {
      const store = grouped();
      const other = raw();
      await store.createExecution(newExecution("ex-1"), 1_000);
      await store.createExecution(newExecution("ex-2"), 1_000);
      expect((await store.getExecution("ex-1"))?.state).toBe("PENDING");
      expect(countIn(other)).toBe(0);
      const seenAtCallback = await new Promise<number>((resolve) =>
        store.afterCommit(() => resolve(countIn(other))),
      );
      expect(seenAtCallback).toBe(2);
    });

    it("reads every execution as written once its cache of them has turned over", async () => {
      const store = grouped();
      // More than the cache holds (20,000), in batches, with writes to old and new in between.
      const ids = Array.from({ length: 26_000 }, (_, i) => `ex-${i}`);
      for (let i = 0; i < ids.length; i += 2_000) {
        await store.createExecutions(
          ids.slice(i, i + 2_000).map((id) => newExecution(id)),
          1_000,
        );
      }
      for (const id of ["ex-0", "ex-25999"]) {
        await store.applyTransition({
          executionId: id,
          expected: { state: "PENDING", round: 0 },
          next: {
            state: "CANCELED",
            round: 0,
            attempt: 1,
            maxAttempts: 1,
            dispatches: 0,
            maxDispatches: 3,
          },
          patch: {},
          at: 2_000,
          event: "cancel",
        });
      }
      await store.flush();
      for (const id of ["ex-0", "ex-1", "ex-12999", "ex-25998"]) {
        expect((await store.getExecution(id))?.state, id).toBe(
          id === "ex-0" ? "CANCELED" : "PENDING",
        );
      }
      expect((await store.getExecution("ex-25999"))?.state).toBe("CANCELED");
    });

    it("checkpoints on its thread, as the coordinator opens it, and loses nothing", async () => {
      const s = new SqliteStore({ path, groupCommit: true, checkpoint: "thread" });
      stores.push(s);
      const before = statSync(path).size;
      // 100 commits, far from SQLite's own 1,000-page checkpoint: the file itself grows only if
      // the thread checkpointed.
      for (let turn = 0; turn < 100; turn++) {
        for (let i = 0; i < 5; i++) await s.createExecution(newExecution(`ex-${turn}-${i}`), 1_000);
        await s.flush();
      }
      await waitFor("a checkpoint into the file", () =>
        statSync(path).size > before ? true : undefined,
      );
      await s.close();
      const db = raw();
      expect(countIn(db)).toBe(500);
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
    });

    it("resolves flush() once the writes are committed", async () => {
      const store = grouped();
      const other = raw();
      await store.putJob(jobDef("job-a"), 5_000, 10);
      await store.bumpCounter("x", 3);
      expect(other.prepare("SELECT COUNT(*) AS n FROM jobs").get()).toEqual({ n: 0 });
      await store.flush();
      expect(other.prepare("SELECT COUNT(*) AS n FROM jobs").get()).toEqual({ n: 1 });
      expect(other.prepare("SELECT value FROM counters WHERE name = 'x'").get()).toEqual({
        value: 3,
      });
    });

    it("undoes only the write that failed, not the rest of its group", async () => {
      const store = grouped();
      await store.createExecution(newExecution("ex-1"), 1_000);
      // A second execution with the same id breaks the primary key: that write fails alone.
      await expect(store.createExecution(newExecution("ex-1"), 1_000)).rejects.toThrow(
        /AX_STORE_FAILED|UNIQUE/,
      );
      await store.createExecution(newExecution("ex-2"), 1_000);
      await store.flush();
      const db = raw();
      expect(countIn(db)).toBe(2);
      // The failed insert's timeline row went with it: one "created" entry each.
      expect(db.prepare("SELECT COUNT(*) AS n FROM timeline").get()).toEqual({ n: 2 });
    });

    it("with commitIntervalMs, commits a write after a quiet spell at the end of its turn, and one soon after the last commit when the interval is up", async () => {
      const store = new SqliteStore({ path, groupCommit: true, commitIntervalMs: 200 });
      stores.push(store);
      const other = raw();
      const committedAfter = async (write: () => Promise<unknown>) => {
        const t0 = performance.now();
        await write();
        await store.flush();
        return performance.now() - t0;
      };
      // Nothing committed before: the first write's group commits on setImmediate.
      expect(await committedAfter(() => store.bumpCounter("n"))).toBeLessThan(100);
      // The next group waits out the rest of the 200 ms since that commit, then holds both
      // writes made meanwhile, in different turns of the loop.
      const second = committedAfter(async () => {
        await store.bumpCounter("n");
        await new Promise((r) => setImmediate(r));
        await new Promise((r) => setTimeout(r, 20));
        await store.bumpCounter("n");
      });
      await new Promise((r) => setTimeout(r, 60));
      expect(other.prepare("SELECT value FROM counters WHERE name = 'n'").get()).toEqual({
        value: 1,
      });
      expect(await second).toBeGreaterThanOrEqual(150);
      expect(other.prepare("SELECT value FROM counters WHERE name = 'n'").get()).toEqual({
        value: 3,
      });
      // close() commits what is still open at once.
      await store.bumpCounter("n");
      await store.close();
      expect(other.prepare("SELECT value FROM counters WHERE name = 'n'").get()).toEqual({
        value: 4,
      });
    });

    it(`commits at once after ${GROUP_COMMIT_MAX_WRITES} writes, bounding a transaction`, async () => {
      const store = grouped();
      const other = raw();
      for (let i = 0; i < GROUP_COMMIT_MAX_WRITES; i++) await store.bumpCounter("n");
      // No turn of the event loop has passed (only microtasks): the bound forced the commit.
      expect(other.prepare("SELECT value FROM counters WHERE name = 'n'").get()).toEqual({
        value: GROUP_COMMIT_MAX_WRITES,
      });
    });

    it("rolls the whole group back when a write fails past its first statement, and says so", async () => {
      const store = grouped();
      const errors: Error[] = [];
      store.onCommitError = (err) => errors.push(err);
      await store.createExecution(newExecution("ex-1"), 1_000);
      await store.flush();
      await store.bumpCounter("in-the-lost-group");
      const flushed = store.flush();
      // A full disk, as far as SQLite knows: no page may be added.
      const db = (store as unknown as { db: Database.Database }).db;
      db.pragma(`max_page_count = ${db.pragma("page_count", { simple: true }) as number}`);
      const e = (await store.getExecution("ex-1")) as ExecutionRecord;
      await expect(
        store.applyTransition({
          executionId: "ex-1",
          expected: { state: e.state, round: e.round },
          next: { ...e, state: "CANCELED" },
          patch: { message: "x".repeat(2_000) },
          at: 2_000,
          event: "cancel",
          detail: { reason: "y".repeat(2_000) },
        }),
      ).rejects.toThrow(/full/i);
      await expect(flushed).rejects.toThrow(/AX_STORE_FAILED|commit failed/);
      expect(errors).toHaveLength(1);
      db.pragma("max_page_count = 1073741823");
      // Nothing of the failed group remains; what was committed before it does.
      expect((await store.getExecution("ex-1"))?.state).toBe("PENDING");
      expect((await store.counters())["in-the-lost-group"]).toBeUndefined();
    });

    it("answers reads from what it wrote exactly as the file would", async () => {
      const store = grouped();
      await store.createExecution(
        newExecution("ex-1", { tags: { zone: "a" }, groupKey: "g", shardIndex: 1, shardTotal: 2 }),
        1_000,
      );
      const steps: [Partial<ExecutionRecord>, string, Record<string, unknown>][] = [
        [
          { state: "DISPATCHED", round: 1, dispatches: 1 },
          "dispatch",
          { agentId: "ag-1", dispatchedAt: 1_100 },
        ],
        [{ state: "RUNNING" }, "started", { startedAt: 1_200, lateMs: 3 }],
        [
          { state: "RETRY_WAITING" },
          "finished",
          {
            finishedAt: 1_300,
            message: "é".repeat(3_000),
            result: { ok: false, n: [1, 2] },
            nextAttemptAt: 2_000,
          },
        ],
      ];
      for (const [next, event, patch] of steps) {
        const e = (await store.getExecution("ex-1")) as ExecutionRecord;
        expect(
          await store.applyTransition({
            executionId: "ex-1",
            expected: { state: e.state, round: e.round },
            next: { ...e, ...next } as ExecutionRecord,
            patch,
            at: 1_000 + steps.length,
            event,
          }),
        ).toBe(true);
      }
      await store.flush();
      const fromFile = new SqliteStore({ path });
      stores.push(fromFile);
      expect(await store.getExecution("ex-1")).toEqual(await fromFile.getExecution("ex-1"));
      expect((await store.getExecution("ex-1"))?.messageBytes).toBe(6_000);
    });

    it("commits what is pending on close", async () => {
      const store = grouped();
      await store.createExecution(newExecution("ex-1"), 1_000);
      await store.close();
      expect(countIn(raw())).toBe(1);
    });

    it("runs afterCommit at once when nothing is pending", async () => {
      const store = grouped();
      let ran = false;
      store.afterCommit(() => {
        ran = true;
      });
      await Promise.resolve();
      expect(ran).toBe(true);
    });
  });

  it("opens the file in WAL mode", () => {
    open();
    expect(raw().pragma("journal_mode", { simple: true })).toBe("wal");
  });

  it("keeps every job version in job_versions, and adds none for an identical definition", async () => {
    const store = open();
    const v1 = jobDef("job-a");
    const v2 = jobDef("job-a", { params: { v: 2 } });
    await store.putJob(v1, 1_000, 10);
    await store.putJob(v1, 1_000, 20);
    await store.putJob(v2, 1_000, 30);
    const rows = raw()
      .prepare("SELECT version, definition, created_at FROM job_versions WHERE job_id = ?")
      .all("job-a") as { version: number; definition: string; created_at: number }[];
    expect(rows.map((r) => [r.version, JSON.parse(r.definition), r.created_at])).toEqual([
      [1, v1, 10],
      [2, v2, 30],
    ]);
  });

  it("two stores racing on one file leave one fires row per nominal time, each with its execution", async () => {
    const a = open();
    const b = open();
    await a.putJob(jobDef("job-a"), 10_000, 10);
    const rounds = 50;
    for (let i = 0; i < rounds; i++) {
      const t = 10_000 + i * 1_000;
      const won = await Promise.all(
        (i % 2 === 0 ? [a, b] : [b, a]).map((s, k) =>
          s.recordFire({
            jobId: "job-a",
            scheduledFor: t,
            nextFireAt: t + 1_000,
            execution: newExecution(`ex-${k}-${i}`, { fireAt: t }),
            at: t,
          }),
        ),
      );
      expect(won.filter(Boolean)).toHaveLength(1);
    }
    const db = raw();
    const fires = db
      .prepare(
        `SELECT f.scheduled_for, f.execution_id, e.fire_at FROM fires f
         LEFT JOIN executions e ON e.id = f.execution_id ORDER BY f.scheduled_for`,
      )
      .all() as { scheduled_for: number; execution_id: string; fire_at: number | null }[];
    expect(fires.map((f) => f.scheduled_for)).toEqual(
      Array.from({ length: rounds }, (_, i) => 10_000 + i * 1_000),
    );
    expect(fires.every((f) => f.fire_at === f.scheduled_for)).toBe(true);
    expect(db.prepare("SELECT COUNT(*) AS n FROM executions").get()).toEqual({ n: rounds });
  });

  it("does not re-run migrations when the file is reopened", async () => {
    const first = open(1_111);
    await first.bumpCounter("c");
    await first.close();
    open(2_222);
    expect(raw().prepare("SELECT version, name, applied_at FROM schema_migrations").all()).toEqual(
      SQLITE_MIGRATIONS.map((m) => ({ version: m.version, name: m.name, applied_at: 1_111 })),
    );
  });

  it("refuses a file written by a newer build with AX_STORE_MIGRATION, and closes it", async () => {
    await open().close();
    const db = raw();
    db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)").run(
      999,
      "from the future",
      1,
    );
    db.close();
    const fdsBefore = fdsOn(path);
    expect(() => open()).toThrow(
      expect.objectContaining({
        code: "AX_STORE_MIGRATION",
        message: expect.stringContaining("migration 999"),
      }),
    );
    expect(fdsOn(path)).toBe(fdsBefore);
  });

  it("refuses a file that is not a database with AX_STORE_FAILED naming it, and closes it", () => {
    writeFileSync(path, "this is not a database, just text that is long enough ".repeat(40));
    expect(axFailure(() => open())).toBe(
      `AX_STORE_FAILED: store ${path}: cannot open: file is not a database`,
    );
    expect(fdsOn(path)).toBe(0);
  });

  it("reads back every record exactly in its schema's shape: no field missing, none extra", async () => {
    const store = open();
    await store.putJob(jobDef("shape"), 5_000, 1_000, { actor: "ops" });
    await store.createExecution(newExecution("e-shape", { groupKey: "g" }), 1_000, {
      actor: "ops",
      reason: "because",
    });
    await store.putAgent(agentRecord("ag-shape"));
    await store.putIdentity({
      agentId: "ag-shape",
      generation: 1,
      tags: { site: "a" },
      status: "enrolled",
      enrolledAt: 1,
      updatedAt: 1,
      actor: "admin",
    });
    await store.putApiToken({
      name: "t",
      role: "viewer",
      digest: "ab".repeat(32),
      createdAt: 1,
      createdBy: "admin",
      lastUsedAt: null,
    });
    const strict = <T extends z.ZodObject>(schema: T, value: unknown) =>
      schema.strict().parse(value);
    expect(strict(storedJobSchema, await store.getJob("shape")).updatedBy).toBe("ops");
    expect(strict(executionRecordSchema, await store.getExecution("e-shape")).groupKey).toBe("g");
    const [created] = await store.getTimeline("e-shape");
    expect(strict(timelineEntrySchema, created)).toMatchObject({ actor: "ops", reason: "because" });
    expect(strict(agentRecordSchema, await store.getAgent("ag-shape")).agentId).toBe("ag-shape");
    expect(strict(identityRecordSchema, (await store.listIdentities())[0]).actor).toBe("admin");
    expect(strict(apiTokenRecordSchema, (await store.listApiTokens())[0]).name).toBe("t");
    expect(strict(jobHistoryEntrySchema, (await store.listJobHistory("shape"))[0]).action).toBe(
      "created",
    );
  });

  describe("several coordinators", () => {
    /** A group-commit store on `path` whose clock is `clock.now`. */
    const groupedAt = (clock: { now: number }) => {
      const s = new SqliteStore({ path, groupCommit: true, now: () => clock.now });
      stores.push(s);
      return s;
    };

    it("a fenced write fails alone: the writes before it in its group commit", async () => {
      const clock = { now: 10_000 };
      const store = groupedAt(clock);
      const errors: Error[] = [];
      store.onCommitError = (err) => errors.push(err);
      await store.joinCoordinators("c1", 1_000);
      await store.flush();
      // One group: two writes inside the lease, then one after it, before the commit.
      await store.bumpCounter("before");
      await store.putJob(jobDef("job-a"), 20_000, 10_100);
      clock.now = 11_000;
      await expect(store.bumpCounter("after")).rejects.toMatchObject({ code: "AX_STORE_FENCED" });
      await expect(store.createExecution(newExecution("ex-1"), 11_000)).rejects.toMatchObject({
        code: "AX_STORE_FENCED",
      });
      await store.flush();
      expect(errors).toEqual([]);
      const db = raw();
      expect(db.prepare("SELECT name, value FROM counters").all()).toEqual([
        { name: "before", value: 1 },
      ]);
      expect(db.prepare("SELECT id FROM jobs").pluck().all()).toEqual(["job-a"]);
      expect(db.prepare("SELECT COUNT(*) FROM executions").pluck().get()).toBe(0);
    });

    it("under group commit a newer epoch written between groups fences the next group's first write", async () => {
      const clock = { now: 10_000 };
      const store = groupedAt(clock);
      await store.joinCoordinators("c1", 60_000);
      await store.bumpCounter("n");
      await store.flush();
      // Another process's join of the same id, between two groups.
      raw().prepare("UPDATE coordinators SET epoch = epoch + 1 WHERE id = 'c1'").run();
      await expect(store.bumpCounter("n")).rejects.toMatchObject({ code: "AX_STORE_FENCED" });
      await store.flush();
      expect(await store.counters()).toEqual({ n: 1 });
      expect(await store.renewMembership()).toBe(false);
    });

    it("a fenced write names the coordinator, its epoch and why", async () => {
      const store = open(10_000);
      await store.joinCoordinators("c1", 60_000);
      raw().prepare("UPDATE coordinators SET epoch = 5 WHERE id = 'c1'").run();
      const err = await store.bumpCounter("n").catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: "AX_STORE_FENCED",
        retryable: true,
        context: { coordinatorId: "c1", epoch: 1 },
        message:
          'store: coordinator "c1" (epoch 1) may not write: epoch 5 of it joined since; join again for a new epoch',
      });
    });

    it("stores claims in claimed_by and claim_until, by the store's clock", async () => {
      const store = open(50_000);
      await store.createExecution(newExecution("ex-1"), 10);
      await store.createExecution(newExecution("ex-2", { fireAt: 900_000 }), 10);
      const due = await store.listDue(2_000, 2_000, 10, { claim: { holder: "A", ttlMs: 500 } });
      expect(due.pending.map((e) => e.id)).toEqual(["ex-1"]);
      expect(
        raw().prepare("SELECT id, claimed_by, claim_until FROM executions ORDER BY id").all(),
      ).toEqual([
        { id: "ex-1", claimed_by: "A", claim_until: 50_500 },
        { id: "ex-2", claimed_by: null, claim_until: null },
      ]);
    });

    it("putJob's conflict message names the job and both versions", async () => {
      const store = open();
      await store.putJob(jobDef("job-a"), 1_000, 10);
      const err = await store
        .putJob(jobDef("job-a"), 1_000, 20, { actor: "op", expectedVersion: 3 })
        .catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: "AX_STORE_CONFLICT",
        message:
          'store: job "job-a" is at version 1, but the change expected version 3: another writer changed it first',
      });
    });
  });

  describe("read-only", () => {
    const openReadonly = () => {
      const s = new SqliteStore({ path, readonly: true });
      stores.push(s);
      return s;
    };

    it("reads what a writer stored, and refuses to write", async () => {
      const writer = open();
      await writer.putJob(jobDef("ro"), 5_000, 1_000);
      const reader = openReadonly();
      expect((await reader.getJob("ro"))?.nextFireAt).toBe(5_000);
      await expect(reader.putJob(jobDef("ro2"), 5_000, 1_000)).rejects.toMatchObject({
        code: "AX_STORE_FAILED",
        message: expect.stringContaining("readonly"),
      });
      expect(await writer.getJob("ro2")).toBeUndefined();
    });

    it("refuses a missing store, and leaves no file behind", () => {
      expect(axFailure(() => openReadonly())).toBe(
        `AX_STORE_FAILED: store ${path}: cannot open: no such file`,
      );
      expect(readdirSync(dir)).toEqual([]);
    });
  });

  it("migration 2 records the byte size of messages already stored", async () => {
    const db = raw();
    db.pragma("journal_mode = WAL");
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version === 1),
      1,
    );
    const columns =
      "id, kind, handler, params, state, round, attempt, max_attempts, dispatches, max_dispatches, fire_at, deadline, timeout_ms, dispatch_timeout_ms, priority, retry_base_ms, retry_cap_ms, created_at, updated_at, message";
    const insert = db.prepare(
      `INSERT INTO executions (${columns}) VALUES (?, 'job', 'echo', '{}', 'FAILED', 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, ?)`,
    );
    insert.run("with", "grüße 😀");
    insert.run("without", null);
    const store = open();
    expect((await store.getExecution("with"))?.messageBytes).toBe(12);
    expect((await store.getExecution("without"))?.messageBytes).toBeNull();
    expect(
      db.prepare("SELECT version FROM schema_migrations ORDER BY version").pluck().all(),
    ).toEqual(SQLITE_MIGRATIONS.map((m) => m.version));
  });

  it("caps message and detail at maxErrorTextBytes when set", async () => {
    const store = open(1_000, 256);
    await store.createExecution(newExecution("ex-1"), 1);
    const message = "€".repeat(100); // 300 bytes; 256 falls inside the 86th character
    await store.applyTransition({
      executionId: "ex-1",
      expected: { state: "PENDING", round: 0 },
      next: {
        state: "FAILED",
        round: 0,
        attempt: 1,
        maxAttempts: 3,
        dispatches: 0,
        maxDispatches: 4,
      },
      patch: { message },
      at: 2,
      event: "finished",
      detail: { error: "x".repeat(250) },
    });
    const e = await store.getExecution("ex-1");
    expect([e?.message, e?.messageBytes]).toEqual(["€".repeat(85), 300]);
    expect((await store.getTimeline("ex-1"))[1]?.detail).toEqual({ truncated: true, bytes: 262 });
  });

  it("writes an execution without building a temporary b-tree for its partial indexes", () => {
    open();
    // An IN list of three or more constants is evaluated through a temporary b-tree built on each
    // run of the statement; in a partial index's WHERE clause that cost six per transition.
    const temporaryTrees = (sql: string, params: number) =>
      (
        raw()
          .prepare(`EXPLAIN ${sql}`)
          .all(...Array<null>(params).fill(null)) as { opcode: string }[]
      ).filter((op) => op.opcode === "OpenEphemeral").length;
    expect(temporaryTrees("UPDATE executions SET state = ?, round = ? WHERE id = ?", 3)).toBe(0);
    expect(temporaryTrees("DELETE FROM executions WHERE id = ?", 1)).toBe(0);
    expect(
      temporaryTrees(
        `INSERT INTO executions (id, kind, handler, params, state, round, attempt, max_attempts,
           dispatches, max_dispatches, fire_at, deadline, timeout_ms, dispatch_timeout_ms, priority,
           retry_base_ms, retry_cap_ms, created_at, updated_at)
         VALUES (?, 'job', 'h', '{}', 'PENDING', 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1)`,
        1,
      ),
    ).toBe(0);
    // The dispatcher's and the overlap rules' queries still find the partial indexes.
    const plan = (sql: string) =>
      (raw().prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as { detail: string }[])
        .map((r) => r.detail)
        .join("; ");
    // In the dispatcher's order, with no sort.
    expect(
      plan(`SELECT id FROM executions WHERE ${OPEN_SQL} AND state = 'PENDING' AND fire_at <= 1
        ORDER BY priority DESC, fire_at, created_at LIMIT 10`),
    ).toBe("SEARCH executions USING INDEX executions_open (state=?)");
    const peers = `SELECT id, state FROM executions WHERE job_id = 'j' AND ${OPEN_SQL}
      ORDER BY created_at, id`;
    expect(plan(peers)).toBe("SEARCH executions USING INDEX executions_open_job (job_id=?)");
    expect(temporaryTrees(peers, 0)).toBe(0);
  });

  it("finds the listening jobs through their index, and a fire's write leaves that index alone", async () => {
    const store = open();
    await store.putJob(jobDef("on-door", { trigger: { type: "event", name: "door" } }), null, 10);
    const db = raw();
    expect(
      (
        db
          .prepare(`EXPLAIN QUERY PLAN SELECT * FROM jobs WHERE ${LISTENING_SQL} ORDER BY id`)
          .all() as {
          detail: string;
        }[]
      ).map((r) => r.detail),
    ).toEqual(["SCAN jobs USING INDEX jobs_listening"]);
    // Advancing the next fire time (every fire) neither reads nor writes jobs_listening.
    const root = db
      .prepare("SELECT rootpage FROM sqlite_schema WHERE name = 'jobs_listening'")
      .pluck()
      .get() as number;
    const touched = (sql: string) =>
      (db.prepare(`EXPLAIN ${sql}`).all(null, null) as { opcode: string; p2: number }[]).some(
        (op) => (op.opcode === "OpenWrite" || op.opcode === "OpenRead") && op.p2 === root,
      );
    expect(touched("UPDATE jobs SET next_fire_at = ? WHERE id = ?")).toBe(false);
    expect(touched("UPDATE jobs SET definition = ? WHERE id = ?")).toBe(true);
  });

  it("purges through its indexes: no scan of the executions, timeline or fires tables", () => {
    open();
    const plan = (sql: string) =>
      (raw().prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as { detail: string }[])
        .map((r) => r.detail)
        .join("; ");
    expect(
      plan(
        `SELECT id FROM executions INDEXED BY executions_finished WHERE ${TERMINAL_SQL}
         AND COALESCE(finished_at, updated_at) < 1 ORDER BY COALESCE(finished_at, updated_at) LIMIT 5`,
      ),
    ).toBe("SEARCH executions USING INDEX executions_finished (<expr><?)");
    expect(plan("DELETE FROM timeline WHERE execution_id = 'x'")).toContain(
      "SEARCH timeline USING PRIMARY KEY (execution_id=?)",
    );
    expect(
      plan(
        `SELECT job_id, scheduled_for FROM fires WHERE scheduled_for < 1 ORDER BY scheduled_for LIMIT 5`,
      ),
    ).toContain("USING COVERING INDEX fires_scheduled (scheduled_for<?)");
  });

  it("deletes old fire rows below each job's next fire time and keeps the rest", async () => {
    const store = open();
    const fire = (jobId: string, t: number, at = t) =>
      store.recordFire({
        jobId,
        scheduledFor: t,
        nextFireAt: t + 1_000,
        execution: newExecution(`${jobId}-${t}`, { jobId, fireAt: t }),
        at,
      });
    // job-a fired 1,000..4,000 and was then set back to 3,000 by a putJob from a stale read.
    await store.putJob(jobDef("job-a"), 1_000, 1);
    for (const t of [1_000, 2_000, 3_000, 4_000]) expect(await fire("job-a", t)).toBe(true);
    await store.putJob(jobDef("job-a", { params: { v: 2 } }), 3_000, 4_500);
    // job-b is exhausted (no next fire time).
    await store.putJob(jobDef("job-b"), 1_000, 1);
    expect(
      await store.recordFire({
        jobId: "job-b",
        scheduledFor: 1_000,
        nextFireAt: null,
        execution: newExecution("job-b-1000", { jobId: "job-b" }),
        at: 1_000,
      }),
    ).toBe(true);
    // job-c fired at 1,000 but its fire was recorded late, after the cutoff.
    await store.putJob(jobDef("job-c"), 1_000, 1);
    expect(await fire("job-c", 1_000, 9_000)).toBe(true);

    expect(await store.purgeFinishedBefore(5_000, 100)).toBe(0); // nothing finished yet
    const fires = () =>
      (
        raw()
          .prepare("SELECT job_id, scheduled_for FROM fires ORDER BY job_id, scheduled_for")
          .all() as { job_id: string; scheduled_for: number }[]
      ).map((f) => `${f.job_id}@${f.scheduled_for}`);
    expect(fires()).toEqual(["job-a@3000", "job-a@4000", "job-c@1000"]);
    // Executions are untouched by the fires purge.
    expect(await store.listExecutions()).toHaveLength(6);
  });

  describe("two coordinator processes on one file", () => {
    const children: ChildProcess[] = [];
    afterEach(() => {
      for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
    });

    const storeModule = new URL("../../coordinator/store/sqlite/sqlite-store.ts", import.meta.url)
      .href;
    const jobModule = new URL("../../coordinator/domain/job.ts", import.meta.url).href;
    const projectRoot = fileURLToPath(new URL("../../", import.meta.url));

    /** Each child fires the shared job's times in order and rewrites its own job meanwhile. */
    const childCode = `
      import { register } from "tsx/esm/api";
      register();
      const { SqliteStore } = await import(${JSON.stringify(storeModule)});
      const { jobDefinitionSchema } = await import(${JSON.stringify(jobModule)});
      const me = process.env.AX_ME;
      const rounds = Number(process.env.AX_ROUNDS);
      const store = new SqliteStore({ path: process.env.AX_DB });
      process.stdout.write("ready\\n");
      await new Promise((resolve) => process.stdin.once("data", resolve));
      let fired = 0;
      for (let i = 0; i < rounds; i++) {
        const t = 10000 + i * 1000;
        const won = await store.recordFire({
          jobId: "race", scheduledFor: t, nextFireAt: t + 1000, at: t,
          execution: {
            id: "ex-" + me + "-" + i, kind: "job", jobId: "race", jobVersion: 1, handler: "echo",
            params: {}, targetAgentId: null, fireAt: t, deadline: t + 60000, timeoutMs: 60000,
            dispatchTimeoutMs: 5000, maxAttempts: 1, maxDispatches: 3, priority: 0,
            retryBaseMs: 1000, retryCapMs: 60000, createdAt: t,
          },
        });
        if (won) fired++;
        await store.putJob(
          jobDefinitionSchema.parse({
            id: "own-" + me, handler: "echo", trigger: { type: "every", every: 1000 }, params: { i },
          }),
          null,
          t,
        );
      }
      await store.close();
      process.stdout.write(JSON.stringify({ fired }) + "\\n");
    `;

    function startChild(me: string, rounds: number) {
      const child = spawn(process.execPath, ["--input-type=module", "-e", childCode], {
        cwd: projectRoot,
        env: { ...process.env, AX_ME: me, AX_ROUNDS: String(rounds), AX_DB: path },
        stdio: ["pipe", "pipe", "pipe"],
      });
      children.push(child);
      let out = "";
      let err = "";
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
      });
      child.stderr?.on("data", (d: Buffer) => {
        err += d.toString();
      });
      const exited = new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
        child.once("exit", (code) => resolve({ code, out, err })),
      );
      const ready = new Promise<void>((resolve, reject) => {
        const check = () => (out.includes("ready\n") ? resolve() : undefined);
        child.stdout?.on("data", check);
        void exited.then((r) => reject(new Error(`child ${me} exited early: ${r.err}`)));
      });
      return { child, ready, exited };
    }

    it("fire every nominal time exactly once and never fail on a busy database", async () => {
      const setup = open();
      await setup.putJob(jobDef("race"), 10_000, 1);
      await setup.close();
      const rounds = 400;
      const kids = [startChild("a", rounds), startChild("b", rounds)];
      await Promise.all(kids.map((k) => k.ready));
      for (const k of kids) k.child.stdin?.end("go\n");
      const results = await Promise.all(kids.map((k) => k.exited));
      for (const r of results) expect(r.err, r.err).toBe("");
      expect(results.map((r) => r.code)).toEqual([0, 0]);
      const fired = results.map(
        (r) => (JSON.parse(r.out.split("\n")[1] ?? "") as { fired: number }).fired,
      );
      expect(fired[0]! + fired[1]!).toBe(rounds);
      const db = raw();
      expect(db.prepare("SELECT COUNT(*) AS n FROM fires").get()).toEqual({ n: rounds });
      expect(db.prepare("SELECT COUNT(*) AS n FROM executions").get()).toEqual({ n: rounds });
      expect(
        db.prepare("SELECT id, version FROM jobs WHERE id LIKE 'own-%' ORDER BY id").all(),
      ).toEqual([
        { id: "own-a", version: rounds },
        { id: "own-b", version: rounds },
      ]);
    }, 60_000);
  });
});
