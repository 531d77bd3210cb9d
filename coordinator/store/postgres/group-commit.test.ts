import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AxError } from "../../../shared/errors.js";
import { describeOnPg, dropPgSchema, freshPgSchema } from "../../../test/helpers/postgres.js";
import { type Batchable, GroupCommit } from "./group-commit.js";
import { type Queryable, transaction } from "./tx.js";

await describeOnPg("GroupCommit (on PostgreSQL)", (url) => {
  let schema: string;
  let pool: pg.Pool;
  /** What ends a group's transaction, and a write's own: counted as each runs. */
  const GROUP_COMMIT = "SELECT 'group'; COMMIT";
  const OWN_COMMIT = "SELECT 'own'; COMMIT";
  let fences: number;
  let ownFences: number;
  let inFlight: number;
  let mostInFlight: number;

  const groups = (maxGroups: number, maxWrites?: number) =>
    new GroupCommit(
      async (what, fn, options) => {
        if (options.commit === GROUP_COMMIT) fences++;
        if (options.commit === OWN_COMMIT) ownFences++;
        inFlight++;
        mostInFlight = Math.max(mostInFlight, inFlight);
        try {
          return await transaction(pool, what, fn, options);
        } finally {
          inFlight--;
        }
      },
      {
        maxGroups,
        ...(maxWrites === undefined ? {} : { maxWrites }),
        groupOptions: () => ({ commit: GROUP_COMMIT }),
      },
    );

  /** Inserts key k and returns the id of the transaction it ran in. */
  const insert = (k: number) => async (q: Queryable) => {
    const { rows } = await q.query<{ tx: string }>({
      text: `INSERT INTO ${schema}.t (k) VALUES ($1) RETURNING txid_current()::text AS tx`,
      values: [k],
    });
    return rows[0]?.tx as string;
  };
  const keys = async () =>
    (await pool.query<{ k: number }>(`SELECT k FROM ${schema}.t ORDER BY k`)).rows.map((r) => r.k);

  beforeEach(async () => {
    schema = freshPgSchema();
    pool = new pg.Pool({ connectionString: url, max: 4 });
    await pool.query(`CREATE SCHEMA ${schema}`);
    await pool.query(`CREATE TABLE ${schema}.t (k int PRIMARY KEY)`);
    fences = 0;
    ownFences = 0;
    inFlight = 0;
    mostInFlight = 0;
  });
  afterEach(async () => {
    await pool.end();
    await dropPgSchema(url, schema);
  });

  it("writes issued in one turn share one transaction, fenced once, each with its own result", async () => {
    const g = groups(2);
    const txs = await Promise.all([1, 2, 3].map((k) => g.write(`insert ${k}`, insert(k), {})));
    expect(new Set(txs).size).toBe(1);
    expect(fences).toBe(1);
    expect(await keys()).toEqual([1, 2, 3]);
  });

  it("a write that fails fails alone: the group rolls back and the others commit each on its own", async () => {
    await pool.query(`INSERT INTO ${schema}.t (k) VALUES (2)`);
    const g = groups(2);
    const results = await Promise.allSettled(
      [1, 2, 3].map((k) => g.write(`insert ${k}`, insert(k), {})),
    );
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const failed = results[1] as PromiseRejectedResult;
    expect(String(failed.reason)).toMatch(/insert 2 failed: duplicate key/);
    const [one, three] = [results[0], results[2]].map(
      (r) => (r as PromiseFulfilledResult<string>).value,
    );
    // Run again alone: two transactions, not the group's.
    expect(one).not.toBe(three);
    expect(await keys()).toEqual([1, 2, 3]);
  });

  it("a group whose reply was lost is not run again: each write gets the connection error", async () => {
    let runs = 0;
    const lost = new AxError("AX_STORE_FAILED", "store: 2 writes failed: Connection terminated", {
      retryable: true,
      cause: new Error("Connection terminated unexpectedly"),
    });
    const g = new GroupCommit(
      async (what, fn, options) => {
        runs++;
        await transaction(pool, what, fn, options);
        // Committed, and then the connection dropped before the reply.
        throw lost;
      },
      { maxGroups: 1, groupOptions: () => ({}) },
    );
    const out = await Promise.allSettled([1, 2].map((k) => g.write(`insert ${k}`, insert(k), {})));
    // Each named by its own write, retryable.
    expect(out.map((o) => o.status)).toEqual(["rejected", "rejected"]);
    expect(out.map((o) => String((o as PromiseRejectedResult).reason.message))).toEqual([
      "store: insert 1 failed: Connection terminated unexpectedly",
      "store: insert 2 failed: Connection terminated unexpectedly",
    ]);
    expect(out.map((o) => (o as PromiseRejectedResult).reason.retryable)).toEqual([true, true]);
    expect(runs).toBe(1);
    expect(await keys()).toEqual([1, 2]);
  });

  it("a write's own options hold when it runs alone: its mapError names the conflict", async () => {
    await pool.query(`INSERT INTO ${schema}.t (k) VALUES (5)`);
    const g = groups(1);
    const mapped = new Error("key 5 is taken");
    const out = await Promise.allSettled([
      g.write("insert 5", insert(5), { mapError: () => mapped as never }),
      g.write("insert 6", insert(6), {}),
    ]);
    expect(out[0]).toEqual({ status: "rejected", reason: mapped });
    expect(out[1]?.status).toBe("fulfilled");
    expect(await keys()).toEqual([5, 6]);
  });

  it("keeps at most maxGroups transactions in flight, and at most maxWrites writes in one", async () => {
    const g = groups(2, 16);
    const writes = Array.from({ length: 100 }, (_, i) => g.write(`insert ${i}`, insert(i), {}));
    expect(g.waiting).toBe(100); // grouped on the next microtask
    const txs = await Promise.all(writes);
    expect(mostInFlight).toBeLessThanOrEqual(2);
    const perTx = new Map<string, number>();
    for (const tx of txs) perTx.set(tx, (perTx.get(tx) ?? 0) + 1);
    expect(Math.max(...perTx.values())).toBeLessThanOrEqual(16);
    // 100 writes in groups of up to 16: 7 transactions at the least.
    expect(perTx.size).toBeGreaterThanOrEqual(7);
    expect(perTx.size).toBeLessThan(100);
    expect(await keys()).toHaveLength(100);
  });

  it("writes marked later fill a group's room after the others", async () => {
    const g = groups(1, 2);
    const [fire, a, b, c] = await Promise.all([
      g.write("fire", insert(1), {}, true),
      g.write("a", insert(2), {}),
      g.write("b", insert(3), {}),
      g.write("c", insert(4), {}),
    ]);
    // One transaction at a time, two writes each: a and b first, then c with the fire.
    expect(a).toBe(b);
    expect(c).toBe(fire);
    expect(c).not.toBe(a);
    expect(Number(fire)).toBeGreaterThan(Number(a));
    expect(await keys()).toEqual([1, 2, 3, 4]);
  });

  it("a write issued alone runs alone, with its own options (no group fence)", async () => {
    const g = groups(2);
    await g.write("insert 9", insert(9), { commit: OWN_COMMIT });
    expect([ownFences, fences]).toEqual([1, 0]);
    expect(await keys()).toEqual([9]);
  });

  describe("batchable writes", () => {
    /** Statements the batch runner ran, each with the keys it inserted. */
    let statements: number[][];
    /** A write inserting k, batchable as kind `kind` on key `key` (default: its own k). */
    const batched = (k: number, kind = "insert", key = `k${k}`): Batchable<number> => ({
      kind,
      key,
      item: k,
      run: async (q, items) => {
        statements.push(items);
        const { rows } = await q.query<{ k: number }>({
          text: `INSERT INTO ${schema}.t (k) SELECT unnest($1::int[]) RETURNING k`,
          values: [items],
        });
        return items.map((i) => rows.some((r) => r.k === i));
      },
    });
    const write = (g: GroupCommit, k: number, kind?: string, key?: string) =>
      g.write(`insert ${k}`, insert(k), {}, false, batched(k, kind, key));
    beforeEach(() => {
      statements = [];
    });

    it("writes of one kind in a group run as one statement, each with its own result", async () => {
      const g = groups(2);
      const out = await Promise.all([1, 2, 3, 4].map((k) => write(g, k)));
      expect(statements).toEqual([[1, 2, 3, 4]]);
      expect(out).toEqual([true, true, true, true]);
      expect(fences).toBe(1);
      expect(await keys()).toEqual([1, 2, 3, 4]);
    });

    it("two writes on one key never share a statement, and keep their order", async () => {
      const g = groups(2);
      // 2 and 3 on the key of 1: the first batch ends before each of them.
      await Promise.all([
        write(g, 1),
        write(g, 2, "insert", "k1"),
        write(g, 4),
        write(g, 3, "insert", "k1"),
      ]);
      // 1 alone (its own function), then 2 with 4 in one statement, then 3 alone.
      expect(statements).toEqual([[2, 4]]);
      expect(await keys()).toEqual([1, 2, 3, 4]);
    });

    it("a write that is not batchable runs in its place: what was gathered before it runs first", async () => {
      const g = groups(2);
      const plain = () =>
        g.write(
          "plain",
          async (q) => {
            statements.push([-1]);
            return insert(10)(q);
          },
          {},
        );
      await Promise.all([write(g, 1), write(g, 2), plain(), write(g, 3), write(g, 4)]);
      expect(statements).toEqual([[1, 2], [-1], [3, 4]]);
      // All in one transaction, fenced once.
      expect(fences).toBe(1);
      expect(await keys()).toEqual([1, 2, 3, 4, 10]);
    });

    it("kinds batch apart; a kind of one write runs that write's own function", async () => {
      const g = groups(2);
      await Promise.all([write(g, 1, "a"), write(g, 2, "b"), write(g, 3, "a")]);
      expect(statements).toEqual([[1, 3]]);
      expect(await keys()).toEqual([1, 2, 3]);
    });

    it("a batch that fails rolls the group back, and each write runs alone with its own outcome", async () => {
      await pool.query(`INSERT INTO ${schema}.t (k) VALUES (2)`);
      const g = groups(2);
      const out = await Promise.allSettled([1, 2, 3].map((k) => write(g, k)));
      expect(out.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
      expect(String((out[1] as PromiseRejectedResult).reason)).toMatch(
        /insert 2 failed: duplicate key/,
      );
      // Alone, each ran its own function, not the batch's.
      expect(statements).toEqual([[1, 2, 3]]);
      expect(await keys()).toEqual([1, 2, 3]);
    });
  });
});
