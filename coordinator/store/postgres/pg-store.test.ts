import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { jobDef, newExecution } from "../../../test/contract/store.contract.js";
import { waitFor } from "../../../test/helpers/env.js";
import {
  describeOnPg,
  dropPgSchema,
  freshPgSchema,
  withPgClient,
} from "../../../test/helpers/postgres.js";
import { type ExecutionRecord, followUpKey, type Store, type TransitionWrite } from "../port.js";
import { fenceAndCommit, isFenceError, sqlLiteral } from "./membership.js";
import { migratePg, PG_MIGRATIONS } from "./migrations.js";
import { PgStore } from "./pg-store.js";
import { transaction } from "./tx.js";

/** A transition from PENDING to DISPATCHED, as the dispatcher writes it. */
function dispatch(e: ExecutionRecord, agentId: string, at: number): TransitionWrite {
  return {
    executionId: e.id,
    expected: { state: e.state, round: e.round },
    next: {
      state: "DISPATCHED",
      round: e.round + 1,
      attempt: e.attempt,
      maxAttempts: e.maxAttempts,
      dispatches: e.dispatches + 1,
      maxDispatches: e.maxDispatches,
    },
    patch: { agentId, dispatchedAt: at },
    at,
    event: "dispatch",
  };
}

await describeOnPg("PgStore (PostgreSQL specifics)", (url) => {
  let schema: string;
  const stores: PgStore[] = [];
  const open = async (over: { now?: () => number } = {}) => {
    const s = await PgStore.open({ url, schema, poolMax: 4, ...over });
    stores.push(s);
    return s;
  };
  const sql = <R extends pg.QueryResultRow>(text: string, values: unknown[] = []) =>
    withPgClient(url, schema, async (c) => (await c.query<R>(text, values)).rows);

  beforeEach(() => {
    schema = freshPgSchema();
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    await dropPgSchema(url, schema);
  });

  describe("two coordinators racing", () => {
    it("recordFire for one nominal time: exactly one true, one execution", async () => {
      const [a, b] = [await open(), await open()];
      await a.putJob(jobDef("job-a"), 1_000, 10);
      const fire = (s: Store, id: string) =>
        s.recordFire({
          jobId: "job-a",
          scheduledFor: 1_000,
          nextFireAt: 2_000,
          execution: newExecution(id),
          at: 950,
        });
      const results = await Promise.all([fire(a, "ex-a"), fire(b, "ex-b")]);
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await a.listExecutions({ jobId: "job-a" })).toHaveLength(1);
      expect(await sql("SELECT * FROM fires")).toHaveLength(1);
    });

    it("applyTransition with the same expected state: one wins, one timeline entry", async () => {
      const [a, b] = [await open(), await open()];
      await a.createExecution(newExecution("ex-1"), 1);
      const e = (await a.getExecution("ex-1")) as ExecutionRecord;
      const results = await Promise.all([
        a.applyTransition(dispatch(e, "ag-a", 10)),
        b.applyTransition(dispatch(e, "ag-b", 10)),
      ]);
      expect(results.sort()).toEqual([false, true]);
      const timeline = await b.getTimeline("ex-1");
      expect(timeline.map((t) => t.event)).toEqual(["created", "dispatch"]);
      expect(timeline[1]?.agentId).toBe((await b.getExecution("ex-1"))?.agentId);
    });

    it("listDue with claims: disjoint lists; after the ttl the other holder gets them", async () => {
      const [a, b] = [await open(), await open()];
      await a.createExecutions(
        Array.from({ length: 10 }, (_, i) => newExecution(`ex-${i}`, { fireAt: 100 + i })),
        1,
      );
      const ids = (l: { pending: ExecutionRecord[] }) => l.pending.map((e) => e.id);
      const [fromA, fromB] = await Promise.all([
        a.listDue(1_000, 1_000, 6, { claim: { holder: "a", ttlMs: 60_000 } }),
        b.listDue(1_000, 1_000, 6, { claim: { holder: "b", ttlMs: 300 } }),
      ]);
      const both = [...ids(fromA), ...ids(fromB)];
      expect(new Set(both).size).toBe(both.length);
      expect(both).toHaveLength(10);
      // Each list in dispatch order, and a holder sees its own claims again.
      expect(ids(fromA)).toEqual([...ids(fromA)].sort());
      expect(
        ids(await a.listDue(1_000, 1_000, 100, { claim: { holder: "a", ttlMs: 60_000 } })),
      ).toEqual(ids(fromA));
      // b's claims lapse by the database clock; a's do not.
      const taken = await waitFor("b's claims to lapse", async () => {
        const l = ids(await a.listDue(1_000, 1_000, 100, { claim: { holder: "a", ttlMs: 1 } }));
        return l.length === 10 ? l : undefined;
      });
      expect(taken.sort()).toEqual(both.sort());
      // Without a claim, listDue reads as SQLite's does: everything due.
      expect(ids(await b.listDue(1_000, 1_000, 100))).toHaveLength(10);
    });

    it("listDue with claims and onlyTargets: each part claimed once, the rest left alone", async () => {
      const [a, b] = [await open(), await open()];
      const command = (id: string, target: string, deadline = 9_000) =>
        newExecution(id, {
          kind: "command",
          jobId: null,
          jobVersion: null,
          targetAgentId: target,
          deadline,
        });
      await a.createExecutions(
        [
          ...Array.from({ length: 4 }, (_, i) => command(`near-${i}`, "ag-near")),
          ...Array.from({ length: 4 }, (_, i) => newExecution(`job-${i}`)),
          ...Array.from({ length: 4 }, (_, i) => command(`late-${i}`, "ag-away", 1_500)),
          // Waiting for an agent out of reach, deadline ahead: neither holder reads it.
          ...Array.from({ length: 4 }, (_, i) => command(`away-${i}`, "ag-away")),
        ],
        1,
      );
      const ids = (l: { pending: ExecutionRecord[] }) => l.pending.map((e) => e.id);
      const read = (s: Store, holder: string) =>
        s.listDue(2_000, 2_000, 100, {
          commandsBy: 2_000,
          onlyTargets: ["ag-near"],
          claim: { holder, ttlMs: 60_000 },
        });
      const [fromA, fromB] = await Promise.all([read(a, "a"), read(b, "b")]);
      const both = [...ids(fromA), ...ids(fromB)];
      expect(new Set(both).size).toBe(both.length);
      expect(both.sort()).toEqual(
        ["near", "job", "late"].flatMap((p) => [0, 1, 2, 3].map((i) => `${p}-${i}`)).sort(),
      );
      // Claimed in the store for whoever read them; the rest unclaimed.
      const claims = await sql<{ id: string; claimed_by: string | null }>(
        "SELECT id, claimed_by FROM executions ORDER BY id",
      );
      for (const c of claims) {
        if (c.id.startsWith("away-")) expect(c.claimed_by, c.id).toBeNull();
        else expect(c.claimed_by, c.id).toBe(ids(fromA).includes(c.id) ? "a" : "b");
      }
    });

    it("putJob with an expected version: the second writer is told AX_STORE_CONFLICT", async () => {
      const [a, b] = [await open(), await open()];
      await a.putJob(jobDef("job-a"), 1_000, 10, { actor: "alice", expectedVersion: 0 });
      const edit = (s: Store, priority: number) =>
        s.putJob(jobDef("job-a", { priority }), 1_000, 20, { actor: "x", expectedVersion: 1 });
      const results = await Promise.allSettled([edit(a, 1), edit(b, 2)]);
      const won = results.filter((r) => r.status === "fulfilled");
      const lost = results.filter((r) => r.status === "rejected");
      expect([won.length, lost.length]).toEqual([1, 1]);
      expect((lost[0] as PromiseRejectedResult).reason).toMatchObject({
        code: "AX_STORE_CONFLICT",
        message:
          'job "job-a" is at version 2, but the write expected version 1: another writer changed it first',
        context: { jobId: "job-a", expected: 1, actual: 2 },
      });
      // The loser wrote nothing: one update in the history, version 2 only.
      expect((await a.listJobHistory("job-a")).map((h) => h.action)).toEqual([
        "created",
        "updated",
      ]);
      expect(await a.getJobVersion("job-a", 3)).toBeUndefined();
      await expect(
        a.putJob(jobDef("job-a"), 1_000, 30, { actor: "x", expectedVersion: 0 }),
      ).rejects.toMatchObject({ code: "AX_STORE_CONFLICT", context: { actual: 2 } });
      await expect(
        a.putJob(jobDef("job-new"), 1_000, 30, { actor: "x", expectedVersion: 4 }),
      ).rejects.toMatchObject({
        code: "AX_STORE_CONFLICT",
        message: 'job "job-new" does not exist, but the write expected version 4',
      });
      expect(await a.getJob("job-new")).toBeUndefined();
    });
  });

  describe("membership and fencing", () => {
    it("joins with epochs, lists live members oldest first, and leaves", async () => {
      const [a, b] = [await open(), await open()];
      const before = await a.clockNow();
      const ja = await a.joinCoordinators("c-a", 60_000, { host: "one" });
      const jb = await b.joinCoordinators("c-b", 60_000);
      expect(ja).toMatchObject({ id: "c-a", epoch: 1, info: { host: "one" } });
      expect(ja.leaseUntil - ja.joinedAt).toBe(60_000);
      expect(ja.joinedAt).toBeGreaterThanOrEqual(before);
      expect((await a.listCoordinators()).map((c) => c.id)).toEqual(["c-a", "c-b"]);
      expect(await b.renewMembership({ host: "two" })).toBe(true);
      expect((await a.listCoordinators())[1]).toMatchObject({
        epoch: jb.epoch,
        info: { host: "two" },
      });
      await b.leaveCoordinators();
      expect((await a.listCoordinators()).map((c) => c.id)).toEqual(["c-a"]);
      // The same id joining again is a new epoch.
      const again = await open();
      expect((await again.joinCoordinators("c-a", 60_000)).epoch).toBe(2);
    });

    it("a lapsed lease fences every write: AX_STORE_FENCED, nothing written, for good", async () => {
      const a = await open();
      const joined = await a.joinCoordinators("c-a", 150);
      await a.createExecution(newExecution("ex-ok"), 1);
      await waitFor("the lease to lapse", async () =>
        (await a.clockNow()) > joined.leaseUntil ? true : undefined,
      );
      const refused = a.createExecution(newExecution("ex-late"), 2);
      await expect(refused).rejects.toMatchObject({
        code: "AX_STORE_FENCED",
        retryable: true,
        context: { coordinatorId: "c-a", epoch: 1 },
      });
      await expect(a.flush()).resolves.toBeUndefined();
      expect(await a.getExecution("ex-late")).toBeUndefined();
      expect(await a.renewMembership()).toBe(false);
      await expect(a.bumpCounter("n")).rejects.toMatchObject({ code: "AX_STORE_FENCED" });
      expect(await a.counters()).toEqual({});
      // Joining again is a new epoch, and writes go through again.
      expect((await a.joinCoordinators("c-a", 60_000)).epoch).toBe(2);
      await a.bumpCounter("n");
      expect(await a.counters()).toEqual({ n: 1 });
    });

    it("the fence is checked at COMMIT: a lease that lapses while the transaction runs refuses it", async () => {
      const a = await open();
      const joined = await a.joinCoordinators("c-it's", 400);
      const m = { id: "c-it's", epoch: joined.epoch, leaseMs: 400, fenced: false };
      const pool = new pg.Pool({ connectionString: url, options: `-c search_path=${schema}` });
      try {
        const insert = (id: string, sleepS: number) =>
          transaction(
            pool,
            `insert ${id}`,
            async (q) => {
              await q.query({
                text: "INSERT INTO counters (name, value) VALUES ($1, 1)",
                values: [id],
              });
              await q.query({ text: "SELECT pg_sleep($1)", values: [sleepS] });
            },
            { commit: fenceAndCommit(m) },
          );
        await insert("before", 0);
        // Still a member when the transaction began and wrote; no longer when it commits.
        const late: unknown = await insert("late", 0.6).then(
          () => "committed",
          (err: unknown) => err,
        );
        expect(late).toMatchObject({ message: expect.stringMatching(/c-it's \(epoch 1\)/) });
        expect(isFenceError((late as { cause?: unknown }).cause)).toBe(true);
        expect(
          (await sql<{ name: string }>("SELECT name FROM counters ORDER BY name")).map(
            (r) => r.name,
          ),
        ).toEqual(["before"]);
      } finally {
        await pool.end();
      }
    });

    it("quotes a coordinator id as an SQL literal whatever it holds", async () => {
      for (const id of ["plain", "it's", "back\\slash'd", "ünï ☃"]) {
        const rows = await sql<{ v: string }>(`SELECT ${sqlLiteral(id)} AS v`);
        expect(rows[0]?.v).toBe(id);
      }
    });

    it("another object joining as the same id fences the first; its after-commit work is dropped", async () => {
      const [first, second] = [await open(), await open()];
      const errors: Error[] = [];
      first.onCommitError = (err) => errors.push(err);
      await first.joinCoordinators("c-a", 60_000);
      await first.putJob(jobDef("job-a"), 1_000, 10);
      await second.joinCoordinators("c-a", 60_000);
      const write = first.putJob(jobDef("job-a", { priority: 9 }), 1_000, 20);
      let ran = false;
      first.afterCommit(() => {
        ran = true;
      });
      await expect(write).rejects.toMatchObject({ code: "AX_STORE_FENCED" });
      await expect(first.flush()).resolves.toBeUndefined();
      expect(ran).toBe(false);
      expect(errors.map((e) => (e as { code?: string }).code)).toEqual(["AX_STORE_FENCED"]);
      expect((await second.getJob("job-a"))?.version).toBe(1);
      expect(await first.renewMembership()).toBe(false);
      // The second life writes as usual.
      expect((await second.putJob(jobDef("job-a", { priority: 9 }), 1_000, 30)).version).toBe(2);
    });
  });

  describe("migrations", () => {
    it("two coordinators migrating at once apply each step once", async () => {
      const clients = [0, 1].map(
        () => new pg.Client({ connectionString: url, options: `-c search_path=${schema}` }),
      );
      try {
        for (const c of clients) await c.connect();
        const ran = await Promise.all(clients.map((c) => migratePg(c, PG_MIGRATIONS, 1, schema)));
        expect(ran.flat().sort()).toEqual(PG_MIGRATIONS.map((m) => m.version));
        expect(await sql("SELECT version FROM schema_migrations ORDER BY version")).toEqual(
          PG_MIGRATIONS.map((m) => ({ version: m.version })),
        );
      } finally {
        for (const c of clients) await c.end();
      }
    });

    it("refuses a database with a migration this build does not know", async () => {
      await (await open()).close();
      await sql("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'x', 1)");
      await expect(open()).rejects.toMatchObject({
        code: "AX_STORE_MIGRATION",
        message:
          "the database has migration 999, which this build does not know: it was written by a newer version",
        context: { version: 999 },
      });
    });
  });

  describe("transactions", () => {
    it("a serialization failure is retried and then succeeds; unretried it is AX_STORE_BUSY", async () => {
      await open();
      await sql("CREATE TABLE t (k integer PRIMARY KEY, v integer NOT NULL)");
      const pool = new pg.Pool({ connectionString: url, options: `-c search_path=${schema}` });
      try {
        // Both read the sum before either writes it: under SERIALIZABLE one of them must fail.
        // A barrier per round: the second round reuses none of the first's (an already
        // resolved one let one transaction commit before the other read, and nothing failed).
        let arrived = 0;
        let release: () => void = () => {};
        let bothRead = Promise.resolve();
        const barrier = () => {
          arrived = 0;
          bothRead = new Promise<void>((r) => {
            release = r;
          });
        };
        barrier();
        let tries = 0;
        const tx = (k: number, attempts?: number) =>
          transaction(
            pool,
            "sum",
            async (q) => {
              tries++;
              const sum = (
                await q.query<{ s: number }>({ text: "SELECT COUNT(*)::int AS s FROM t" })
              ).rows[0]?.s;
              if (++arrived === 2) release();
              await bothRead;
              await q.query({ text: "INSERT INTO t VALUES ($1, $2)", values: [k, sum] });
            },
            { isolation: "serializable", ...(attempts ? { attempts } : {}) },
          );
        await Promise.all([tx(1), tx(2)]);
        // Two first tries, and at least one retry (another, if the retry raced the commit).
        expect(tries).toBeGreaterThanOrEqual(3);
        expect(await sql("SELECT k, v FROM t ORDER BY v")).toHaveLength(2);

        await sql("DELETE FROM t");
        tries = 0;
        barrier();
        const settled = await Promise.allSettled([tx(3, 1), tx(4, 1)]);
        const failed = settled.filter((r) => r.status === "rejected");
        expect(failed).toHaveLength(1);
        expect((failed[0] as PromiseRejectedResult).reason).toMatchObject({
          code: "AX_STORE_BUSY",
          retryable: true,
          context: { sqlstate: "40001", attempts: 1 },
        });
      } finally {
        await pool.end();
      }
    });

    it("an unreachable server is AX_STORE_FAILED, retryable", async () => {
      await expect(
        PgStore.open({ url: "postgres://postgres@127.0.0.1:1/test", schema }),
      ).rejects.toMatchObject({ code: "AX_STORE_FAILED", retryable: true });
    });

    it("names a bad option's field and problem", async () => {
      await expect(PgStore.open({ url, schema: "Bad-Name" })).rejects.toMatchObject({
        code: "AX_CONFIG_INVALID",
        message:
          'store: schema "Bad-Name" must be a lowercase SQL identifier (a-z, 0-9, _; not starting with a digit) of at most 55 characters',
      });
    });

    it("keeps fractions of a millisecond, as SQLite does", async () => {
      const a = await open();
      await a.createExecution(newExecution("ex-1", { fireAt: 1_700_000_000_020.5 }), 0.25);
      const e = (await a.getExecution("ex-1")) as ExecutionRecord;
      await a.applyTransition({ ...dispatch(e, "ag", 10.5), patch: { lateMs: 0.5 } });
      expect(await a.getExecution("ex-1")).toMatchObject({
        fireAt: 1_700_000_000_020.5,
        lateMs: 0.5,
        updatedAt: 10.5,
      });
      expect((await a.getTimeline("ex-1"))[0]?.at).toBe(0.25);
    });
  });

  describe("point reads", () => {
    it("reads in one turn each get their own record, and a missing one undefined", async () => {
      const a = await open();
      await a.putJob(jobDef("job-a"), 1_000, 10);
      await a.createExecution(newExecution("ex-1"), 1);
      await a.createExecution(newExecution("ex-2"), 2);
      const [e1, e2, again, none, job, gone, v1] = await Promise.all([
        a.getExecution("ex-1"),
        a.getExecution("ex-2"),
        a.getExecution("ex-1"),
        a.getExecution("ex-9"),
        a.getJob("job-a"),
        a.getJob("job-9"),
        a.getJobVersion("job-a", 1),
      ]);
      expect([e1?.id, e2?.id, again?.id, none]).toEqual(["ex-1", "ex-2", "ex-1", undefined]);
      expect(again).not.toBe(e1);
      expect([job?.id, job?.version, gone]).toEqual(["job-a", 1, undefined]);
      expect(v1?.id).toBe("job-a");
      expect(await a.getJobVersion("job-a", 2)).toBeUndefined();
    });

    it("a read issued after a write sees it; a version once read stays readable", async () => {
      const [a, b] = [await open(), await open()];
      await a.putJob(jobDef("job-a"), 1_000, 10);
      await a.createExecution(newExecution("ex-1"), 1);
      const e = (await a.getExecution("ex-1")) as ExecutionRecord;
      await b.applyTransition(dispatch(e, "ag", 20));
      expect((await a.getExecution("ex-1"))?.state).toBe("DISPATCHED");
      const v1 = await a.getJobVersion("job-a", 1);
      await b.putJob(jobDef("job-a", { handler: "other" }), 1_000, 30);
      expect((await a.getJob("job-a"))?.version).toBe(2);
      expect(await a.getJobVersion("job-a", 1)).toEqual(v1);
      expect((await a.getJobVersion("job-a", 2))?.handler).toBe("other");
    });

    it("a job read holds its version: the dispatch of what it fires reads no version", async () => {
      const a = await open();
      await a.putJob(jobDef("job-a"), 1_000, 10);
      await a.putJob(jobDef("job-a", { handler: "other" }), 1_000, 20);
      const job = await a.getJob("job-a");
      expect(job?.version).toBe(2);
      // Gone from the table (as no writer does): only what the job's read kept can answer.
      await sql("DELETE FROM job_versions WHERE job_id = 'job-a'");
      expect(await a.getJobVersion("job-a", 2)).toEqual(job?.definition);
      // A version not read with its job is read from the table, which no longer has it.
      expect(await a.getJobVersion("job-a", 1)).toBeUndefined();
    });

    it("a closed store refuses them", async () => {
      const a = await open();
      await a.close();
      await expect(a.getExecution("ex-1")).rejects.toMatchObject({ code: "AX_STORE_FAILED" });
      await expect(a.getJobVersion("job-a", 1)).rejects.toMatchObject({
        code: "AX_STORE_FAILED",
      });
    });
  });

  describe("watchWork", () => {
    it("tells of executions and jobs another store object wrote, not of its own", async () => {
      const [a, b] = [await open(), await open()];
      const seen: string[] = [];
      const stop = a.watchWork((what) => seen.push(what));
      // Let the listener connect before anything is written.
      await waitFor("the listener", async () =>
        (
          await sql<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1",
            [`LISTEN "ax_work_${schema}"`],
          )
        )[0]?.n
          ? true
          : undefined,
      );
      await a.createExecution(newExecution("ex-own"), 1);
      await b.createExecution(newExecution("ex-other"), 1);
      await waitFor("a notification", () => (seen.length > 0 ? true : undefined));
      await b.putJob(jobDef("job-a"), 1_000, 10);
      await waitFor("a second notification", () => (seen.length > 1 ? true : undefined));
      // An end that fires the jobs after it (an `after` trigger) is new work too.
      const other = (await b.getExecution("ex-other")) as ExecutionRecord;
      const end = dispatch(other, "agent-1", 2);
      end.next.state = "SUCCEEDED";
      end.followUps = {
        ...followUpKey({ jobId: "job-a", executionId: "ex-other" }, "SUCCEEDED"),
        fires: [{ jobId: "job-b", executions: [newExecution("ex-after", { jobId: "job-b" })] }],
        at: 2,
      };
      expect(await b.applyTransition(end)).toBe(true);
      await waitFor("a third notification", () => (seen.length > 2 ? true : undefined));
      expect(seen).toEqual(["executions", "jobs", "executions"]);
      stop();
    });

    it("announceWork tells the other store objects, not its own, outside any write", async () => {
      const [a, b] = [await open(), await open()];
      const seenA: string[] = [];
      const seenB: string[] = [];
      const stopA = a.watchWork((what) => seenA.push(what));
      const stopB = b.watchWork((what) => seenB.push(what));
      await waitFor("both listeners", async () =>
        ((
          await sql<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1",
            [`LISTEN "ax_work_${schema}"`],
          )
        )[0]?.n ?? 0) >= 2
          ? true
          : undefined,
      );
      await a.announceWork("executions");
      await waitFor("b told", () => (seenB.length > 0 ? true : undefined));
      expect(seenB).toEqual(["executions"]);
      // a's own announcement is not news to a; b's is.
      await b.announceWork("jobs");
      await waitFor("a told", () => (seenA.length > 0 ? true : undefined));
      expect(seenA).toEqual(["jobs"]);
      expect(seenB).toEqual(["executions"]);
      // Who may act (tokens, enrolments) travels the same way.
      await a.announceWork("access");
      await waitFor("b told of access", () => (seenB.length > 1 ? true : undefined));
      expect(seenB).toEqual(["executions", "access"]);
      stopA();
      stopB();
    });

    it("reconnects when its connection drops, and tells of what it may have missed", async () => {
      const [a, b] = [await open(), await open()];
      const seen: string[] = [];
      const stop = a.watchWork((what) => seen.push(what));
      const listening = () =>
        sql<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE query = $1", [
          `LISTEN "ax_work_${schema}"`,
        ]);
      const [first] = await waitFor("the listener", async () => {
        const rows = await listening();
        return rows.length > 0 ? rows : undefined;
      });
      await sql("SELECT pg_terminate_backend($1)", [first?.pid]);
      await waitFor("the listener to reconnect", async () => {
        const rows = await listening();
        return rows.length > 0 && rows[0]?.pid !== first?.pid ? true : undefined;
      });
      await waitFor("the catch-up calls", () => (seen.length >= 3 ? true : undefined));
      expect(seen).toEqual(["executions", "jobs", "access"]);
      await b.createExecution(newExecution("ex-after"), 1);
      await waitFor("a notification after the reconnect", () =>
        seen.length >= 4 ? true : undefined,
      );
      expect(seen[3]).toBe("executions");
      stop();
    });
  });
});
