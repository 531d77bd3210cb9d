import { describe, expect, it } from "vitest";
import {
  abortReason,
  ReachBucket,
  ratePerMinute,
  rolloutSpecSchema,
  selects,
  waveCap,
} from "./rollout.js";

const base = { selector: { tags: { site: "a" } }, command: { handler: "echo" } };

/** The first issue's path and message of a spec that must be refused. */
function refusal(spec: unknown): string {
  const r = rolloutSpecSchema.safeParse(spec);
  if (r.success) throw new Error("the spec was accepted");
  const issue = r.error.issues[0];
  return `${issue?.path.join(".")}: ${issue?.message}`;
}

describe("rollout spec", () => {
  it("fills in the defaults", () => {
    const spec = rolloutSpecSchema.parse(base);
    expect(spec.rate).toEqual({ perMinute: 600 });
    expect(spec.waves).toEqual([{ percent: 100, soak: 0 }]);
    expect(spec.command).toEqual({
      handler: "echo",
      params: {},
      startWithin: 60_000,
      timeout: 30_000,
    });
    expect(spec.start).toBe(true);
    expect(spec.abort).toBeUndefined();
    const withAbort = rolloutSpecSchema.parse({ ...base, abort: { thresholdPercent: 10 } });
    expect(withAbort.abort).toEqual({
      thresholdPercent: 10,
      minExecuted: 1,
      on: ["FAILED", "TIMED_OUT", "EXPIRED"],
    });
  });

  it("names the field and the problem of a bad spec", () => {
    expect(refusal({ ...base, selector: {} })).toBe(
      "selector: give at least one of tags, agentIds, profile, agentVersion",
    );
    expect(refusal({ ...base, waves: [{ percent: 10 }, { percent: 5 }, { percent: 100 }] })).toBe(
      "waves.1.percent: must be more than the wave before (percents are cumulative)",
    );
    expect(refusal({ ...base, waves: [{ percent: 10 }, { percent: 50 }] })).toBe(
      "waves.1.percent: the last wave must be 100 (every matching agent)",
    );
    expect(refusal({ ...base, waves: [{ percent: 100, soak: "soon" }] })).toMatch(
      /^waves\.0\.soak: must be milliseconds or a duration/,
    );
    expect(refusal({ ...base, abort: { thresholdPercent: 10, on: ["SUCCEEDED"] } })).toMatch(
      /^abort\.on\.0: /,
    );
    // Only FAILED, TIMED_OUT, EXPIRED and CANCELED count as failures (docs/rollouts.md).
    expect(refusal({ ...base, abort: { thresholdPercent: 10, on: ["SKIPPED"] } })).toMatch(
      /^abort\.on\.0: /,
    );
    expect(refusal({ ...base, rate: { perMinute: 0 } })).toMatch(/^rate/);
    expect(refusal({ ...base, command: { handler: "echo", startWithin: 10 } })).toBe(
      "command.startWithin: must be at least 1s",
    );
    expect(refusal({ ...base, speed: 1 })).toMatch(/speed/);
  });
});

describe("rollout rules", () => {
  const agent = {
    agentId: "gw-1",
    tags: { site: "a", role: "gw" },
    profile: "sensor-hub",
    bundleVersion: "1.2.0",
    handlers: ["echo"],
  };

  it("selects an agent only when every field of the selector matches", () => {
    expect(selects({ tags: { site: "a" } }, agent)).toBe(true);
    expect(selects({ tags: { site: "a", role: "x" } }, agent)).toBe(false);
    expect(selects({ agentIds: ["gw-2", "gw-1"], profile: "sensor-hub" }, agent)).toBe(true);
    expect(selects({ agentIds: ["gw-1"], agentVersion: "1.3.0" }, agent)).toBe(false);
  });

  it("holds at least one agent in a wave above 0 %, and every agent in the last", () => {
    const waves = [
      { percent: 1, soak: 0 },
      { percent: 10, soak: 0 },
      { percent: 100, soak: 0 },
    ];
    expect([0, 1, 2].map((i) => waveCap(waves, i, 50))).toEqual([1, 5, 50]);
    expect([0, 1, 2].map((i) => waveCap(waves, i, 1_000))).toEqual([10, 100, 1_000]);
    expect(waveCap(waves, 0, 0)).toBe(0);
  });

  it("raises an exponential rate by its factor at each step of successes, up to its cap", () => {
    const rate = {
      exponential: { basePerMinute: 10, factor: 2, stepSuccesses: 5, maxPerMinute: 50 },
    };
    expect([0, 4, 5, 10, 15, 100].map((n) => ratePerMinute(rate, n))).toEqual([
      10, 10, 20, 40, 50, 50,
    ]);
    expect(ratePerMinute({ perMinute: 30 }, 1_000)).toBe(30);
  });

  it("aborts once at least the minimum ended and the failures reach the threshold", () => {
    const abort = { thresholdPercent: 20, minExecuted: 10, on: ["FAILED" as const] };
    expect(abortReason(abort, 9, 9)).toBeUndefined();
    expect(abortReason(abort, 10, 1)).toBeUndefined();
    expect(abortReason(abort, 10, 2)).toBe(
      "2 of 10 ended executions failed (20 %, threshold 20 % of at least 10; failures: FAILED)",
    );
    expect(abortReason(null, 10, 10)).toBeUndefined();
  });

  it("paces reaches: one second's worth at once, then the rate", () => {
    const b = new ReachBucket();
    expect(b.available(0, 600)).toBe(10);
    b.take(10);
    expect(b.available(500, 600)).toBe(5);
    b.take(5);
    expect(b.available(500, 600)).toBe(0);
    // Never more than one second's worth, however long it waited.
    expect(b.available(60_000, 600)).toBe(10);
    const slow = new ReachBucket();
    expect(slow.available(0, 6)).toBe(1);
    slow.take(1);
    expect(slow.available(9_000, 6)).toBe(0);
    expect(slow.available(10_000, 6)).toBe(1);
  });
});
