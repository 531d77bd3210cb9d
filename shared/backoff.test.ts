import { describe, expect, it } from "vitest";
import { backoffMs } from "./backoff.js";

/** The largest double below 1: the top of what Math.random can return. */
const ALMOST_ONE = 1 - Number.EPSILON / 2;
const opts = { baseMs: 1_000, capMs: 60_000 };

describe("backoffMs", () => {
  it("random 0 gives 0 for every attempt (full jitter reaches down to no wait)", () => {
    for (const attempt of [1, 2, 3, 10, 100]) expect(backoffMs(attempt, opts, () => 0)).toBe(0);
  });

  it("random just below 1 gives just below base·2^(attempt-1)", () => {
    expect(ALMOST_ONE).toBeLessThan(1);
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffMs(n, opts, () => ALMOST_ONE))).toEqual([
      999, 1_999, 3_999, 7_999, 15_999, 31_999,
    ]);
  });

  it("random 0.5 gives half the ceiling", () => {
    expect([1, 2, 3].map((n) => backoffMs(n, opts, () => 0.5))).toEqual([500, 1_000, 2_000]);
  });

  it("the cap bounds the ceiling from the attempt where base·2^(n-1) passes it", () => {
    // 1000·2^6 = 64000 > 60000 from attempt 7 on.
    expect(backoffMs(6, opts, () => ALMOST_ONE)).toBe(31_999);
    expect(backoffMs(7, opts, () => ALMOST_ONE)).toBe(59_999);
    expect(backoffMs(100, opts, () => ALMOST_ONE)).toBe(59_999);
    expect(backoffMs(100, opts, () => 0.5)).toBe(30_000);
  });

  it("stays finite and capped for an attempt so large that 2^(n-1) overflows", () => {
    expect(backoffMs(5_000, opts, () => ALMOST_ONE)).toBe(59_999);
  });

  it("treats attempt 0 and below like attempt 1", () => {
    expect(backoffMs(0, opts, () => ALMOST_ONE)).toBe(999);
    expect(backoffMs(-3, opts, () => ALMOST_ONE)).toBe(999);
  });

  it("a cap below the base caps the first attempt too", () => {
    expect(backoffMs(1, { baseMs: 5_000, capMs: 2_000 }, () => ALMOST_ONE)).toBe(1_999);
  });

  it("is a whole number in [0, min(cap, base·2^(n-1))) for any random value", () => {
    let seed = 7;
    const lcg = () => {
      seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
      return seed / 2 ** 32;
    };
    for (let n = 1; n <= 20; n++) {
      const ceiling = Math.min(opts.capMs, opts.baseMs * 2 ** (n - 1));
      for (let i = 0; i < 50; i++) {
        const d = backoffMs(n, opts, lcg);
        expect(Number.isInteger(d)).toBe(true);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThan(ceiling);
      }
    }
  });

  it("uses Math.random when no random is given", () => {
    const d = backoffMs(3, opts);
    expect(d).toBeGreaterThanOrEqual(0);
    expect(d).toBeLessThan(4_000);
  });
});
