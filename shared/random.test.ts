import { describe, expect, it } from "vitest";
import { randomBytes } from "./random.js";

describe("randomBytes", () => {
  it("hands out fresh bytes, never the same twice, across pool refills and large requests", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2_000; i++) seen.add(randomBytes(12).toString("hex"));
    expect(seen.size).toBe(2_000);
    expect(randomBytes(10_000)).toHaveLength(10_000);
    // Not all zero, and roughly uniform: each byte value about 1/256 of 64 KiB.
    const counts = new Array(256).fill(0);
    for (const b of randomBytes(65_536)) counts[b]++;
    expect(Math.min(...counts)).toBeGreaterThan(150);
    expect(Math.max(...counts)).toBeLessThan(370);
  });
});
