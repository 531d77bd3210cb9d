import { afterEach, describe, expect, it } from "vitest";
import { newExecution } from "../../../test/contract/store.contract.js";
import { limitBucket } from "./due.js";
import { SqliteStore } from "./sqlite-store.js";

describe("the SQLite store's due lists, whose lengths are written into their SQL", () => {
  let store: SqliteStore | undefined;
  afterEach(async () => {
    await store?.close();
  });

  it("rounds a length up by at most an eighth, and a negative one to no limit", () => {
    expect([0, 1, 3, 8, 9, 17, 100, 500, 512, 513].map(limitBucket)).toEqual([
      0, 1, 3, 8, 9, 18, 104, 512, 512, 576,
    ]);
    const all = new Set(Array.from({ length: 1024 }, (_, i) => limitBucket(i + 1)));
    expect(all.size).toBeLessThan(70);
    for (let n = 1; n <= 4096; n++) {
      expect(limitBucket(n)).toBeGreaterThanOrEqual(n);
      expect(limitBucket(n)).toBeLessThanOrEqual(Math.max(n, Math.floor(n * 1.125) + 1));
    }
    expect(limitBucket(-1)).toBe(-1);
    expect(limitBucket(Number.POSITIVE_INFINITY)).toBe(-1);
  });

  it("still returns exactly the length asked for, first rows first", async () => {
    store = new SqliteStore({ path: ":memory:" });
    await store.createExecutions(
      Array.from({ length: 7 }, (_, i) => newExecution(`p${i}`, { fireAt: 1_000 + i })),
      1,
    );
    const ids = async (pendingLimit: number, limit = 100) =>
      (await (store as SqliteStore).listDue(2_000, 2_000, limit, { pendingLimit })).pending.map(
        (e) => e.id,
      );
    expect(await ids(3)).toEqual(["p0", "p1", "p2"]);
    expect(await ids(5)).toEqual(["p0", "p1", "p2", "p3", "p4"]);
    expect(await ids(100, 6)).toEqual(["p0", "p1", "p2", "p3", "p4", "p5"]);
    expect(await ids(-1, -1)).toHaveLength(7);
    // Through the index by target (onlyTargets) as well.
    const only = await store.listDue(2_000, 2_000, 100, { pendingLimit: 3, onlyTargets: [] });
    expect(only.pending.map((e) => e.id)).toEqual(["p0", "p1", "p2"]);
  });
});
