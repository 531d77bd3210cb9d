import { describe, expect, it } from "vitest";
import { ReadBatch } from "./read-batch.js";

/** A batch over an in-memory table, counting the statements it would have run. */
function table(rows: Record<string, number>, maxKeys?: number) {
  const calls: string[][] = [];
  const batch = new ReadBatch<string, { id: string; n: number }, { n: number } | undefined>({
    fetch: async (ids) => {
      calls.push(ids);
      if (ids.includes("boom")) throw new Error("connection lost");
      return ids.filter((id) => id in rows).map((id) => ({ id, n: rows[id] as number }));
    },
    keyOf: (id) => id,
    rowKey: (row) => row.id,
    toValue: ([row]) => {
      if (row === undefined) return undefined;
      if (row.n < 0) throw new Error(`row ${row.id} is malformed`);
      return { n: row.n };
    },
    ...(maxKeys === undefined ? {} : { maxKeys }),
  });
  return { batch, calls };
}

describe("ReadBatch", () => {
  it("answers the reads of one turn with one fetch of their unique keys", async () => {
    const { batch, calls } = table({ a: 1, b: 2 });
    const [a, b, a2, z] = await Promise.all(["a", "b", "a", "z"].map((k) => batch.get(k)));
    expect([a, b, a2, z]).toEqual([{ n: 1 }, { n: 2 }, { n: 1 }, undefined]);
    expect(a2).not.toBe(a);
    expect(calls).toEqual([["a", "b", "z"]]);
    // A later turn is a later fetch.
    await batch.get("b");
    expect(calls).toHaveLength(2);
  });

  it("splits a turn into fetches of at most maxKeys", async () => {
    const { batch, calls } = table({ a: 1, b: 2, c: 3 }, 2);
    expect(await Promise.all(["a", "b", "c"].map((k) => batch.get(k)))).toEqual([
      { n: 1 },
      { n: 2 },
      { n: 3 },
    ]);
    expect(calls).toEqual([["a", "b"], ["c"]]);
  });

  it("a failed fetch fails its reads; a bad row fails only its own", async () => {
    const { batch } = table({ a: 1, bad: -1 });
    const out = await Promise.allSettled(["a", "boom"].map((k) => batch.get(k)));
    expect(out.map((o) => o.status)).toEqual(["rejected", "rejected"]);
    const mixed = await Promise.allSettled(["a", "bad"].map((k) => batch.get(k)));
    expect(mixed[0]).toEqual({ status: "fulfilled", value: { n: 1 } });
    expect(String((mixed[1] as PromiseRejectedResult).reason)).toMatch(/row bad is malformed/);
  });

  it("gives each key all its rows, in the order fetched", async () => {
    const rows = [
      { key: "j1", id: "e1" },
      { key: "j2", id: "e2" },
      { key: "j1", id: "e3" },
    ];
    const batch = new ReadBatch<string, { key: string; id: string }, string[]>({
      fetch: async (keys) => rows.filter((r) => keys.includes(r.key)),
      keyOf: (k) => k,
      rowKey: (r) => r.key,
      toValue: (rs) => rs.map((r) => r.id),
    });
    expect(await Promise.all(["j1", "j2", "j3"].map((k) => batch.get(k)))).toEqual([
      ["e1", "e3"],
      ["e2"],
      [],
    ]);
  });
});
