import { describe, expect, it } from "vitest";
import type { ExecutionRecord } from "../port.js";
import { EXECUTION_CACHE_SIZE, ExecutionCache } from "./caches.js";

/** Only the id matters to the cache; the rest of the record is carried as it is. */
const rec = (id: string, round = 0) => ({ id, round }) as unknown as ExecutionRecord;

describe("ExecutionCache", () => {
  it("keeps at least the latest half of its size and never more than its size", () => {
    const cache = new ExecutionCache(true);
    const n = EXECUTION_CACHE_SIZE * 2 + 123;
    for (let i = 0; i < n; i++) cache.add(rec(`e${i}`));
    let kept = 0;
    for (let i = 0; i < n; i++) if (cache.get(`e${i}`)) kept++;
    expect(kept).toBeGreaterThanOrEqual(EXECUTION_CACHE_SIZE / 2);
    expect(kept).toBeLessThanOrEqual(EXECUTION_CACHE_SIZE);
    // The latest half is all there, whatever the generations hold.
    for (let i = n - EXECUTION_CACHE_SIZE / 2; i < n; i++) {
      expect(cache.get(`e${i}`)?.id).toBe(`e${i}`);
    }
    expect(cache.get("e0")).toBeUndefined();
  });

  it("replaces a record in the generation that holds it, so a later turnover drops it in its turn", () => {
    const cache = new ExecutionCache(true);
    cache.add(rec("first"));
    for (let i = 0; i < EXECUTION_CACHE_SIZE / 2; i++) cache.add(rec(`e${i}`));
    // "first" is in the old generation now; replacing it must not make it young again.
    cache.set("first", rec("first", 2));
    expect(cache.get("first")?.round).toBe(2);
    for (let i = 0; i < EXECUTION_CACHE_SIZE / 2; i++) cache.add(rec(`f${i}`));
    expect(cache.get("first")).toBeUndefined();
  });

  it("adds a record already cached once, as the newest", () => {
    const cache = new ExecutionCache(true);
    cache.add(rec("a"));
    for (let i = 0; i < EXECUTION_CACHE_SIZE / 2; i++) cache.add(rec(`e${i}`));
    cache.add(rec("a", 1));
    for (let i = 0; i < EXECUTION_CACHE_SIZE / 2 - 1; i++) cache.add(rec(`f${i}`));
    expect(cache.get("a")?.round).toBe(1);
  });

  it("forgets on delete and clear, and keeps nothing when disabled", () => {
    const cache = new ExecutionCache(true);
    cache.add(rec("a"));
    for (let i = 0; i < EXECUTION_CACHE_SIZE / 2; i++) cache.add(rec(`e${i}`));
    cache.add(rec("b"));
    cache.delete("a");
    cache.delete("b");
    expect(cache.get("a")).toBeUndefined();
    expect(cache.get("b")).toBeUndefined();
    cache.clear();
    expect(cache.get("e0")).toBeUndefined();
    const off = new ExecutionCache(false);
    off.add(rec("a"));
    expect(off.get("a")).toBeUndefined();
  });
});
