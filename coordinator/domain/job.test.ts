import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { durationSchema, parseDuration } from "./duration.js";
import { formatIssues, jobDefinitionSchema, ROUTING_STRATEGIES } from "./job.js";

const base = { id: "j1", handler: "echo", trigger: { type: "every", every: "2s" } } as const;

/** The formatted issues of a definition that must fail. */
function issuesOf(schema: z.ZodType, input: unknown, root?: string): string {
  const r = schema.safeParse(input);
  if (r.success) throw new Error(`expected a failure, parsed ${JSON.stringify(r.data)}`);
  return formatIssues(r.error, root);
}

describe("parseDuration", () => {
  it.each([
    ["500ms", 500],
    ["2s", 2_000],
    ["5m", 300_000],
    ["1h", 3_600_000],
    ["1d", 86_400_000],
    ["1.5s", 1_500],
    ["0s", 0],
    [" 2s ", 2_000],
    [250, 250],
    [0, 0],
    [1.5, 1.5],
  ])("%j → %d ms", (input, expected) => {
    expect(parseDuration(input)).toBe(expected);
  });

  it.each([
    ["abc"],
    [""],
    ["5"],
    ["2 s"],
    ["-2s"],
    ["2S"],
    ["2sec"],
    ["1h30m"],
    [-1],
    [Number.NaN],
    [Number.POSITIVE_INFINITY],
  ])("%j is not a duration", (input) => {
    expect(parseDuration(input)).toBeUndefined();
  });

  it("durationSchema resolves strings and numbers to milliseconds", () => {
    expect(durationSchema.parse("5m")).toBe(300_000);
    expect(durationSchema.parse(750)).toBe(750);
  });
});

describe("jobDefinitionSchema", () => {
  it("applies every default", () => {
    expect(jobDefinitionSchema.parse(base)).toEqual({
      id: "j1",
      handler: "echo",
      params: {},
      trigger: { type: "every", everyMs: 2_000 },
      routing: { strategy: "ROUND_ROBIN" },
      tags: {},
      shards: 1,
      overlap: { policy: "SKIP", queueMax: 10 },
      misfire: { policy: "FIRE_ONCE", maxCatchUp: 10, windowMs: 3_600_000 },
      timeout: 60_000,
      deadline: 60_000,
      dispatchTimeout: 5_000,
      maxDispatches: 3,
      retry: { maxAttempts: 1, baseMs: 1_000, capMs: 60_000 },
      priority: 0,
      paused: false,
    });
  });

  it("defaults a cron trigger's time zone to UTC and a partial retry's other fields", () => {
    const job = jobDefinitionSchema.parse({
      ...base,
      trigger: { type: "cron", expr: "0 9 * * *" },
      retry: { maxAttempts: 4 },
    });
    expect(job.trigger).toEqual({ type: "cron", expr: "0 9 * * *", tz: "UTC" });
    expect(job.retry).toEqual({ maxAttempts: 4, baseMs: 1_000, capMs: 60_000 });
  });

  it("resolves durations given as strings and numbers", () => {
    const job = jobDefinitionSchema.parse({
      ...base,
      timeout: "5m",
      deadline: "1h",
      dispatchTimeout: "500ms",
      retry: { maxAttempts: 3, baseMs: "2s", capMs: 30_000 },
    });
    expect(job).toMatchObject({
      timeout: 300_000,
      deadline: 3_600_000,
      dispatchTimeout: 500,
      retry: { maxAttempts: 3, baseMs: 2_000, capMs: 30_000 },
    });
  });

  it("keeps what is given over the defaults", () => {
    const job = jobDefinitionSchema.parse({
      ...base,
      id: "report.daily:eu-1",
      handler: "mqtt.publish",
      params: { topic: "t" },
      maxDispatches: 5,
      priority: -1000,
      paused: true,
    });
    expect(job).toMatchObject({
      id: "report.daily:eu-1",
      handler: "mqtt.publish",
      params: { topic: "t" },
      maxDispatches: 5,
      priority: -1000,
      paused: true,
    });
  });

  it("parses each trigger type", () => {
    const parse = (trigger: unknown) => jobDefinitionSchema.parse({ ...base, trigger }).trigger;
    expect(parse({ type: "cron", expr: "*/2 * * * * *", tz: "Europe/London" })).toEqual({
      type: "cron",
      expr: "*/2 * * * * *",
      tz: "Europe/London",
    });
    expect(parse({ type: "every", every: 100 })).toEqual({ type: "every", everyMs: 100 });
    expect(parse({ type: "every", every: "1m", anchor: "2026-01-01T00:00:30Z" })).toEqual({
      type: "every",
      everyMs: 60_000,
      anchor: Date.parse("2026-01-01T00:00:30Z"),
    });
    expect(parse({ type: "every", every: "1m", anchor: 0 })).toEqual({
      type: "every",
      everyMs: 60_000,
      anchor: 0,
    });
    expect(parse({ type: "at", at: "2026-05-01T12:00:00Z" })).toEqual({
      type: "at",
      at: Date.parse("2026-05-01T12:00:00Z"),
    });
    expect(parse({ type: "at", at: 1_777_636_800_000 })).toEqual({
      type: "at",
      at: 1_777_636_800_000,
    });
    expect(parse({ type: "delay", delay: "10m" })).toEqual({ type: "delay", delayMs: 600_000 });
    expect(parse({ type: "delay", delay: 0 })).toEqual({ type: "delay", delayMs: 0 });
    expect(parse({ type: "delay", delayMs: 1_500 })).toEqual({ type: "delay", delayMs: 1_500 });
    expect(parse({ type: "event", name: "door.opened:b-7" })).toEqual({
      type: "event",
      name: "door.opened:b-7",
    });
    expect(parse({ type: "after", job: "extract" })).toEqual({
      type: "after",
      job: "extract",
      states: ["SUCCEEDED"],
    });
    expect(parse({ type: "after", job: "extract", states: ["FAILED", "TIMED_OUT"] })).toEqual({
      type: "after",
      job: "extract",
      states: ["FAILED", "TIMED_OUT"],
    });
    expect(parse({ type: "manual" })).toEqual({ type: "manual" });
  });

  it("keeps given values of the fleet fields over their defaults", () => {
    const job = jobDefinitionSchema.parse({
      ...base,
      shards: 1024,
      overlap: { policy: "QUEUE", queueMax: 1_000 },
      misfire: { policy: "CATCH_UP", maxCatchUp: 10_000, window: "15m" },
      group: "line-3:press",
      concurrency: 10_000,
      tags: { site: "plant-2", "hw.rev": "B", [`${"t".repeat(64)}`]: "v".repeat(128) },
    });
    expect(job).toMatchObject({
      shards: 1024,
      overlap: { policy: "QUEUE", queueMax: 1_000 },
      misfire: { policy: "CATCH_UP", maxCatchUp: 10_000, windowMs: 900_000 },
      group: "line-3:press",
      concurrency: 10_000,
      tags: { site: "plant-2", "hw.rev": "B", [`${"t".repeat(64)}`]: "v".repeat(128) },
    });
  });

  it("leaves group and concurrency out when not given", () => {
    const job = jobDefinitionSchema.parse(base);
    expect("group" in job).toBe(false);
    expect("concurrency" in job).toBe(false);
  });

  it("misfire: a partial object gets the other defaults; windowMs is accepted as given", () => {
    const parse = (misfire: unknown) => jobDefinitionSchema.parse({ ...base, misfire }).misfire;
    expect(parse({})).toEqual({ policy: "FIRE_ONCE", maxCatchUp: 10, windowMs: 3_600_000 });
    expect(parse({ policy: "SKIP" })).toEqual({
      policy: "SKIP",
      maxCatchUp: 10,
      windowMs: 3_600_000,
    });
    expect(parse({ window: "30s" })).toEqual({
      policy: "FIRE_ONCE",
      maxCatchUp: 10,
      windowMs: 30_000,
    });
    expect(parse({ windowMs: 0 })).toEqual({ policy: "FIRE_ONCE", maxCatchUp: 10, windowMs: 0 });
  });

  it("overlap: a partial object gets the other default", () => {
    const parse = (overlap: unknown) => jobDefinitionSchema.parse({ ...base, overlap }).overlap;
    expect(parse({ policy: "REPLACE" })).toEqual({ policy: "REPLACE", queueMax: 10 });
    expect(parse({ queueMax: 1 })).toEqual({ policy: "SKIP", queueMax: 1 });
  });

  it("a parsed definition parses again to itself (stored definitions round-trip)", () => {
    for (const trigger of [
      { type: "every", every: "2s", anchor: "2026-01-01T00:00:30Z" },
      { type: "every", every: 250 },
      { type: "cron", expr: "*/2 * * * * *", tz: "Europe/London" },
      { type: "at", at: "2026-05-01T12:00:00Z" },
      { type: "delay", delay: "90s" },
      { type: "event", name: "door.opened" },
      { type: "after", job: "extract" },
      { type: "after", job: "extract", states: ["FAILED", "CANCELED"] },
      { type: "manual" },
    ]) {
      const once = jobDefinitionSchema.parse({ ...base, trigger, timeout: "5m", retry: {} });
      expect(jobDefinitionSchema.parse(once)).toEqual(once);
    }
  });

  it("a definition with every fleet field given round-trips too", () => {
    for (const extra of [
      {},
      { overlap: {}, misfire: {} },
      {
        shards: 8,
        overlap: { policy: "QUEUE", queueMax: 3 },
        misfire: { policy: "CATCH_UP", maxCatchUp: 50, window: "2h" },
        group: "g1",
        concurrency: 2,
        tags: { site: "plant-2" },
      },
    ]) {
      const once = jobDefinitionSchema.parse({ ...base, ...extra });
      expect(jobDefinitionSchema.parse(once)).toEqual(once);
      // Also after a trip through JSON, as the store keeps it.
      expect(jobDefinitionSchema.parse(JSON.parse(JSON.stringify(once)))).toEqual(once);
    }
  });

  it("parses each routing strategy, leaving out what is not given", () => {
    const parse = (routing: unknown) => jobDefinitionSchema.parse({ ...base, routing }).routing;
    expect(parse({})).toEqual({ strategy: "ROUND_ROBIN" });
    for (const strategy of ROUTING_STRATEGIES.filter((s) => s !== "TARGET")) {
      expect(parse({ strategy })).toEqual({ strategy });
    }
    expect(parse({ strategy: "CONSISTENT_HASH", hashKey: "device.id", virtualNodes: 512 })).toEqual(
      { strategy: "CONSISTENT_HASH", hashKey: "device.id", virtualNodes: 512 },
    );
    expect(parse({ strategy: "STICKY", hashKey: "deviceId", virtualNodes: 1 })).toEqual({
      strategy: "STICKY",
      hashKey: "deviceId",
      virtualNodes: 1,
    });
    expect(
      parse({ strategy: "CONSISTENT_HASH", hashKey: "sensors.0", virtualNodes: 8192 }),
    ).toEqual({ strategy: "CONSISTENT_HASH", hashKey: "sensors.0", virtualNodes: 8192 });
    expect(parse({ strategy: "FAILOVER", agents: ["primary", "standby"] })).toEqual({
      strategy: "FAILOVER",
      agents: ["primary", "standby"],
    });
    expect(parse({ strategy: "TARGET", agents: ["dev-1"] })).toEqual({
      strategy: "TARGET",
      agents: ["dev-1"],
    });
    expect(parse({ strategy: "TARGET", selector: { site: "plant-2", "hw.rev": "B" } })).toEqual({
      strategy: "TARGET",
      selector: { site: "plant-2", "hw.rev": "B" },
    });
  });

  it("a stored routing parses again to itself, also after a trip through JSON", () => {
    for (const routing of [
      { strategy: "ROUND_ROBIN" },
      { strategy: "CONSISTENT_HASH", hashKey: "device.id", virtualNodes: 64 },
      { strategy: "STICKY" },
      { strategy: "FAILOVER", agents: ["b", "a"] },
      { strategy: "TARGET", selector: { site: "x" } },
      { strategy: "SHARD_BROADCAST" },
    ]) {
      const once = jobDefinitionSchema.parse({ ...base, routing, shards: 4 });
      expect(once.routing).toEqual(routing);
      expect(jobDefinitionSchema.parse(once)).toEqual(once);
      expect(jobDefinitionSchema.parse(JSON.parse(JSON.stringify(once)))).toEqual(once);
    }
  });

  it("accepts the resolved everyMs form of an every trigger", () => {
    const job = jobDefinitionSchema.parse({ ...base, trigger: { type: "every", everyMs: 2_000 } });
    expect(job.trigger).toEqual({ type: "every", everyMs: 2_000 });
  });

  it.each([
    {
      name: "id with /",
      input: { ...base, id: "a/b" },
      issues: "id: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "id starting with $",
      input: { ...base, id: "$SYS" },
      issues: "id: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "unknown key (strict)",
      input: { ...base, retries: 3 },
      issues: '(root): Unrecognized key: "retries"',
    },
    {
      name: "unknown key inside retry (strict)",
      input: { ...base, retry: { maxAttempts: 2, backoff: "2s" } },
      issues: 'retry: Unrecognized key: "backoff"',
    },
    {
      name: "missing handler",
      input: { id: "j1", trigger: base.trigger },
      issues: "handler: is required (string)",
    },
    {
      name: "bad handler name",
      input: { ...base, handler: "1echo" },
      issues: "handler: must be a handler name such as echo or mqtt.publish",
    },
    {
      name: "unknown trigger type",
      input: { ...base, trigger: { type: "weekly" } },
      issues:
        "trigger.type: Invalid discriminator value. Expected 'cron' | 'every' | 'at' | 'delay' | 'event' | 'after' | 'manual'",
    },
    {
      name: "cron with 4 fields",
      input: { ...base, trigger: { type: "cron", expr: "* * * *" } },
      issues:
        "trigger.expr: must have 5 fields (minute hour day month weekday) or 6 (with seconds first), got 4",
    },
    {
      name: "cron with 7 fields",
      input: { ...base, trigger: { type: "cron", expr: "0 0 9 * * * 2026" } },
      issues:
        "trigger.expr: must have 5 fields (minute hour day month weekday) or 6 (with seconds first), got 7",
    },
    {
      name: "cron with an out-of-range field",
      input: { ...base, trigger: { type: "cron", expr: "0 25 * * *" } },
      issues:
        "trigger.expr: is not a valid cron expression: Constraint error, got value 25 expected range 0-23",
    },
    {
      name: "bad time zone (reported once, on tz)",
      input: { ...base, trigger: { type: "cron", expr: "0 9 * * *", tz: "Mars/Olympus" } },
      issues: 'trigger.tz: "Mars/Olympus" is not a known IANA time zone',
    },
    {
      name: "every 0s",
      input: { ...base, trigger: { type: "every", every: "0s" } },
      issues: "trigger.every: must be at least 100ms",
    },
    {
      name: "every 99 ms",
      input: { ...base, trigger: { type: "every", every: 99 } },
      issues: "trigger.every: must be at least 100ms",
    },
    {
      name: "every abc (one issue, not also the minimum)",
      input: { ...base, trigger: { type: "every", every: "abc" } },
      issues:
        'trigger.every: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "abc")',
    },
    {
      name: "every without an interval",
      input: { ...base, trigger: { type: "every" } },
      issues: 'trigger.every: give the interval as every (e.g. "2s")',
    },
    {
      name: "every and everyMs both given",
      input: { ...base, trigger: { type: "every", every: "2s", everyMs: 2_000 } },
      issues: 'trigger.every: give the interval as every (e.g. "2s")',
    },
    {
      name: "everyMs below the minimum",
      input: { ...base, trigger: { type: "every", everyMs: 50 } },
      issues: "trigger.everyMs: must be at least 100ms",
    },
    {
      name: "every anchor not a date",
      input: { ...base, trigger: { type: "every", every: "1s", anchor: "soon" } },
      issues:
        'trigger.anchor: must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got "soon")',
    },
    {
      name: "at not a date",
      input: { ...base, trigger: { type: "at", at: "not a date" } },
      issues:
        'trigger.at: must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got "not a date")',
    },
    {
      name: "at without a time zone",
      input: { ...base, trigger: { type: "at", at: "2026-12-24T18:00:00" } },
      issues:
        'trigger.at: has no time zone: add Z for UTC or an offset such as +01:00 (got "2026-12-24T18:00:00")',
    },
    {
      name: "at in a form that is not ISO 8601",
      input: { ...base, trigger: { type: "at", at: "Dec 24 2026 18:00 GMT" } },
      issues:
        'trigger.at: must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got "Dec 24 2026 18:00 GMT")',
    },
    {
      name: "at before the epoch",
      input: { ...base, trigger: { type: "at", at: -1 } },
      issues:
        "trigger.at: must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got -1)",
    },
    {
      name: "timeout not a duration",
      input: { ...base, timeout: "10 minutes" },
      issues:
        'timeout: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "10 minutes")',
    },
    {
      name: "retry.maxAttempts 0",
      input: { ...base, retry: { maxAttempts: 0 } },
      issues: "retry.maxAttempts: Too small: expected number to be >=1",
    },
    {
      name: "priority 5000",
      input: { ...base, priority: 5000 },
      issues: "priority: Too big: expected number to be <=1000",
    },
    {
      name: "maxDispatches 1.5",
      input: { ...base, maxDispatches: 1.5 },
      issues: "maxDispatches: Invalid input: expected int, received number",
    },
    {
      name: "shards 0",
      input: { ...base, shards: 0 },
      issues: "shards: Too small: expected number to be >=1",
    },
    {
      name: "shards 1025",
      input: { ...base, shards: 1025 },
      issues: "shards: Too big: expected number to be <=1024",
    },
    {
      name: "shards 2.5",
      input: { ...base, shards: 2.5 },
      issues: "shards: Invalid input: expected int, received number",
    },
    {
      name: "overlap.policy unknown",
      input: { ...base, overlap: { policy: "DROP" } },
      issues: 'overlap.policy: Invalid option: expected one of "PARALLEL"|"SKIP"|"QUEUE"|"REPLACE"',
    },
    {
      name: "overlap.policy in lower case",
      input: { ...base, overlap: { policy: "skip" } },
      issues: 'overlap.policy: Invalid option: expected one of "PARALLEL"|"SKIP"|"QUEUE"|"REPLACE"',
    },
    {
      name: "overlap.queueMax 0",
      input: { ...base, overlap: { policy: "QUEUE", queueMax: 0 } },
      issues: "overlap.queueMax: Too small: expected number to be >=1",
    },
    {
      name: "overlap.queueMax 1001",
      input: { ...base, overlap: { queueMax: 1001 } },
      issues: "overlap.queueMax: Too big: expected number to be <=1000",
    },
    {
      name: "overlap unknown key (strict)",
      input: { ...base, overlap: { policy: "QUEUE", max: 3 } },
      issues: 'overlap: Unrecognized key: "max"',
    },
    {
      name: "overlap given as a string",
      input: { ...base, overlap: "SKIP" },
      issues: "overlap: Invalid input: expected object, received string",
    },
    {
      name: "misfire.policy unknown",
      input: { ...base, misfire: { policy: "FIRE_ALL" } },
      issues: 'misfire.policy: Invalid option: expected one of "FIRE_ONCE"|"SKIP"|"CATCH_UP"',
    },
    {
      name: "misfire.maxCatchUp 0",
      input: { ...base, misfire: { policy: "CATCH_UP", maxCatchUp: 0 } },
      issues: "misfire.maxCatchUp: Too small: expected number to be >=1",
    },
    {
      name: "misfire.maxCatchUp 10001",
      input: { ...base, misfire: { maxCatchUp: 10_001 } },
      issues: "misfire.maxCatchUp: Too big: expected number to be <=10000",
    },
    {
      name: "misfire.maxCatchUp 1.5",
      input: { ...base, misfire: { maxCatchUp: 1.5 } },
      issues: "misfire.maxCatchUp: Invalid input: expected int, received number",
    },
    {
      name: "misfire.window not a duration",
      input: { ...base, misfire: { window: "an hour" } },
      issues:
        'misfire.window: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "an hour")',
    },
    {
      name: "misfire.windowMs negative",
      input: { ...base, misfire: { windowMs: -1 } },
      issues:
        "misfire.windowMs: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got -1)",
    },
    {
      name: "misfire window and windowMs both given",
      input: { ...base, misfire: { window: "1h", windowMs: 3_600_000 } },
      issues: 'misfire.window: give the window once, as window (e.g. "1h")',
    },
    {
      name: "misfire unknown key (strict)",
      input: { ...base, misfire: { threshold: "1m" } },
      issues: 'misfire: Unrecognized key: "threshold"',
    },
    {
      name: "group with /",
      input: { ...base, group: "line/3" },
      issues: "group: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "group empty",
      input: { ...base, group: "" },
      issues: "group: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "group not a string",
      input: { ...base, group: 3 },
      issues: "group: Invalid input: expected string, received number",
    },
    {
      name: "concurrency 0",
      input: { ...base, concurrency: 0 },
      issues: "concurrency: Too small: expected number to be >=1",
    },
    {
      name: "concurrency 10001",
      input: { ...base, concurrency: 10_001 },
      issues: "concurrency: Too big: expected number to be <=10000",
    },
    {
      name: "concurrency null",
      input: { ...base, concurrency: null },
      issues: "concurrency: Invalid input: expected number, received null",
    },
    {
      name: "tag name with a space",
      input: { ...base, tags: { "bad tag": "x" } },
      issues: "tags.bad tag: must be a tag name: 1-64 of A-Z a-z 0-9 . _ -",
    },
    {
      name: "tag name with :",
      input: { ...base, tags: { "site:eu": "x" } },
      issues: "tags.site:eu: must be a tag name: 1-64 of A-Z a-z 0-9 . _ -",
    },
    {
      name: "tag name of 65 characters",
      input: { ...base, tags: { ["t".repeat(65)]: "x" } },
      issues: `tags.${"t".repeat(65)}: must be a tag name: 1-64 of A-Z a-z 0-9 . _ -`,
    },
    {
      name: "tag value of 129 characters",
      input: { ...base, tags: { site: "v".repeat(129) } },
      issues: "tags.site: Too big: expected string to have <=128 characters",
    },
    {
      name: "tag value not a string",
      input: { ...base, tags: { rev: 2 } },
      issues: "tags.rev: Invalid input: expected string, received number",
    },
    {
      name: "tags given as a list",
      input: { ...base, tags: ["site"] },
      issues: "tags: Invalid input: expected record, received array",
    },
    {
      name: "routing.strategy unknown",
      input: { ...base, routing: { strategy: "LEAST_CONNECTIONS" } },
      issues:
        'routing.strategy: Invalid option: expected one of "FIRST"|"ROUND_ROBIN"|"RANDOM"|"CONSISTENT_HASH"|"LEAST_LOADED"|"LEAST_RECENTLY_USED"|"STICKY"|"FAILOVER"|"SHARD_BROADCAST"|"TARGET"',
    },
    {
      name: "routing.strategy in lower case",
      input: { ...base, routing: { strategy: "round_robin" } },
      issues:
        'routing.strategy: Invalid option: expected one of "FIRST"|"ROUND_ROBIN"|"RANDOM"|"CONSISTENT_HASH"|"LEAST_LOADED"|"LEAST_RECENTLY_USED"|"STICKY"|"FAILOVER"|"SHARD_BROADCAST"|"TARGET"',
    },
    {
      name: "routing unknown key (strict)",
      input: { ...base, routing: { strategy: "CONSISTENT_HASH", key: "deviceId" } },
      issues: 'routing: Unrecognized key: "key"',
    },
    {
      name: "routing TARGET without agents or selector",
      input: { ...base, routing: { strategy: "TARGET" } },
      issues: "routing.agents: TARGET needs agents (agent ids) or selector (tags)",
    },
    {
      name: "routing TARGET with both agents and selector",
      input: { ...base, routing: { strategy: "TARGET", agents: ["a"], selector: { site: "x" } } },
      issues: "routing.selector: TARGET takes agents or selector, not both",
    },
    {
      name: "routing TARGET with an empty selector",
      input: { ...base, routing: { strategy: "TARGET", selector: {} } },
      issues: "routing.selector: must name at least one tag",
    },
    {
      name: "routing TARGET with no agents",
      input: { ...base, routing: { strategy: "TARGET", agents: [] } },
      issues: "routing.agents: Too small: expected array to have >=1 items",
    },
    {
      name: "routing agents with ROUND_ROBIN",
      input: { ...base, routing: { strategy: "ROUND_ROBIN", agents: ["a"] } },
      issues: "routing.agents: only for strategy TARGET or FAILOVER, not ROUND_ROBIN",
    },
    {
      name: "routing agents without a strategy (the default, ROUND_ROBIN)",
      input: { ...base, routing: { agents: ["a"] } },
      issues: "routing.agents: only for strategy TARGET or FAILOVER, not ROUND_ROBIN",
    },
    {
      name: "routing selector with FAILOVER",
      input: { ...base, routing: { strategy: "FAILOVER", selector: { site: "x" } } },
      issues: "routing.selector: only for strategy TARGET, not FAILOVER",
    },
    {
      name: "routing hashKey with RANDOM",
      input: { ...base, routing: { strategy: "RANDOM", hashKey: "deviceId" } },
      issues: "routing.hashKey: only for strategy CONSISTENT_HASH or STICKY, not RANDOM",
    },
    {
      name: "routing hashKey with TARGET",
      input: { ...base, routing: { strategy: "TARGET", agents: ["a"], hashKey: "deviceId" } },
      issues: "routing.hashKey: only for strategy CONSISTENT_HASH or STICKY, not TARGET",
    },
    {
      name: "routing virtualNodes with LEAST_LOADED",
      input: { ...base, routing: { strategy: "LEAST_LOADED", virtualNodes: 100 } },
      issues: "routing.virtualNodes: only for strategy CONSISTENT_HASH or STICKY, not LEAST_LOADED",
    },
    {
      name: "routing hashKey empty",
      input: { ...base, routing: { strategy: "CONSISTENT_HASH", hashKey: "" } },
      issues: "routing.hashKey: must be a dotted path into params such as deviceId or device.id",
    },
    {
      name: "routing hashKey with an empty segment",
      input: { ...base, routing: { strategy: "CONSISTENT_HASH", hashKey: "device..id" } },
      issues: "routing.hashKey: must be a dotted path into params such as deviceId or device.id",
    },
    {
      name: "routing hashKey with a leading dot",
      input: { ...base, routing: { strategy: "STICKY", hashKey: ".id" } },
      issues: "routing.hashKey: must be a dotted path into params such as deviceId or device.id",
    },
    {
      name: "routing hashKey of 257 characters",
      input: { ...base, routing: { strategy: "STICKY", hashKey: "k".repeat(257) } },
      issues: "routing.hashKey: Too big: expected string to have <=256 characters",
    },
    {
      name: "routing virtualNodes 0",
      input: { ...base, routing: { strategy: "CONSISTENT_HASH", virtualNodes: 0 } },
      issues: "routing.virtualNodes: Too small: expected number to be >=1",
    },
    {
      name: "routing virtualNodes 8193",
      input: { ...base, routing: { strategy: "CONSISTENT_HASH", virtualNodes: 8193 } },
      issues: "routing.virtualNodes: Too big: expected number to be <=8192",
    },
    {
      name: "routing virtualNodes 1.5",
      input: { ...base, routing: { strategy: "STICKY", virtualNodes: 1.5 } },
      issues: "routing.virtualNodes: Invalid input: expected int, received number",
    },
    {
      name: "routing agent id with /",
      input: { ...base, routing: { strategy: "TARGET", agents: ["ok", "a/b"] } },
      issues:
        "routing.agents.1: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "routing agent listed twice",
      input: { ...base, routing: { strategy: "FAILOVER", agents: ["a", "b", "a"] } },
      issues: 'routing.agents.2: duplicate agent id "a"',
    },
    {
      name: "routing agents as a string",
      input: { ...base, routing: { strategy: "TARGET", agents: "dev-1" } },
      issues: "routing.agents: Invalid input: expected array, received string",
    },
    {
      name: "routing selector with a bad tag name",
      input: { ...base, routing: { strategy: "TARGET", selector: { "bad tag": "x" } } },
      issues: "routing.selector.bad tag: must be a tag name: 1-64 of A-Z a-z 0-9 . _ -",
    },
    {
      name: "routing selector value not a string",
      input: { ...base, routing: { strategy: "TARGET", selector: { rev: 2 } } },
      issues: "routing.selector.rev: Invalid input: expected string, received number",
    },
    {
      name: "routing given as a string",
      input: { ...base, routing: "ROUND_ROBIN" },
      issues: "routing: Invalid input: expected object, received string",
    },
    {
      name: "delay without a delay",
      input: { ...base, trigger: { type: "delay" } },
      issues: 'trigger.delay: give the delay as delay (e.g. "10m")',
    },
    {
      name: "delay and delayMs both given",
      input: { ...base, trigger: { type: "delay", delay: "1m", delayMs: 60_000 } },
      issues: 'trigger.delay: give the delay as delay (e.g. "10m")',
    },
    {
      name: "delay not a duration",
      input: { ...base, trigger: { type: "delay", delay: "later" } },
      issues:
        'trigger.delay: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "later")',
    },
    {
      name: "delayMs negative",
      input: { ...base, trigger: { type: "delay", delayMs: -5 } },
      issues:
        "trigger.delayMs: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got -5)",
    },
    {
      name: "event without a name",
      input: { ...base, trigger: { type: "event" } },
      issues: "trigger.name: is required (string)",
    },
    {
      name: "event name with a topic wildcard",
      input: { ...base, trigger: { type: "event", name: "door/#" } },
      issues: "trigger.name: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "event unknown key (strict)",
      input: { ...base, trigger: { type: "event", name: "door", topic: "x" } },
      issues: 'trigger: Unrecognized key: "topic"',
    },
    {
      name: "after without a job",
      input: { ...base, trigger: { type: "after" } },
      issues: "trigger.job: is required (string)",
    },
    {
      name: "after a job id starting with $",
      input: { ...base, trigger: { type: "after", job: "$extract" } },
      issues: "trigger.job: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
    },
    {
      name: "after with no states",
      input: { ...base, trigger: { type: "after", job: "extract", states: [] } },
      issues: "trigger.states: Too small: expected array to have >=1 items",
    },
    {
      name: "after with a state that is not terminal",
      input: { ...base, trigger: { type: "after", job: "extract", states: ["RUNNING"] } },
      issues:
        'trigger.states.0: Invalid option: expected one of "SUCCEEDED"|"FAILED"|"TIMED_OUT"|"EXPIRED"|"CANCELED"|"SKIPPED"',
    },
    {
      name: "after with a bad second state",
      input: { ...base, trigger: { type: "after", job: "extract", states: ["FAILED", "failed"] } },
      issues:
        'trigger.states.1: Invalid option: expected one of "SUCCEEDED"|"FAILED"|"TIMED_OUT"|"EXPIRED"|"CANCELED"|"SKIPPED"',
    },
    {
      name: "after with states as a string",
      input: { ...base, trigger: { type: "after", job: "extract", states: "FAILED" } },
      issues: "trigger.states: Invalid input: expected array, received string",
    },
    {
      name: "manual with a time (strict)",
      input: { ...base, trigger: { type: "manual", at: 0 } },
      issues: 'trigger: Unrecognized key: "at"',
    },
  ])("$name", ({ input, issues }) => {
    expect(issuesOf(jobDefinitionSchema, input)).toBe(issues);
  });

  it("lists every issue, one per line", () => {
    expect(issuesOf(jobDefinitionSchema, { ...base, id: "a/b", priority: 5000 })).toBe(
      [
        "id: must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit",
        "priority: Too big: expected number to be <=1000",
      ].join("\n"),
    );
  });

  it("lists every issue of the fleet fields, each at its path", () => {
    expect(
      issuesOf(jobDefinitionSchema, {
        ...base,
        shards: 0,
        overlap: { policy: "X", queueMax: 0 },
        misfire: { maxCatchUp: 0 },
        tags: { "a b": "x", ok: 1 },
      }),
    ).toBe(
      [
        "tags.a b: must be a tag name: 1-64 of A-Z a-z 0-9 . _ -",
        "tags.ok: Invalid input: expected string, received number",
        "shards: Too small: expected number to be >=1",
        'overlap.policy: Invalid option: expected one of "PARALLEL"|"SKIP"|"QUEUE"|"REPLACE"',
        "overlap.queueMax: Too small: expected number to be >=1",
        "misfire.maxCatchUp: Too small: expected number to be >=1",
      ].join("\n"),
    );
  });
  it("lists every routing issue, each at its field", () => {
    expect(
      issuesOf(jobDefinitionSchema, {
        ...base,
        routing: { strategy: "RANDOM", hashKey: "id", agents: ["a"], selector: { s: "x" } },
      }),
    ).toBe(
      [
        "routing.agents: only for strategy TARGET or FAILOVER, not RANDOM",
        "routing.selector: only for strategy TARGET, not RANDOM",
        "routing.hashKey: only for strategy CONSISTENT_HASH or STICKY, not RANDOM",
      ].join("\n"),
    );
  });
});

describe("params bounds (a dispatch must be able to carry them)", () => {
  const job = (params: Record<string, unknown>) => ({
    id: "p",
    handler: "echo",
    trigger: { type: "manual" },
    params,
  });
  it("refuses params nested deeper than the protocol allows, naming the field", () => {
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 100_000; i++) deep = { d: deep };
    expect(issuesOf(jobDefinitionSchema, job(deep))).toBe(
      "params: nests deeper than 30 levels of arrays and objects",
    );
  });
  it("refuses params with more keys than a dispatch carries", () => {
    const many = Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [`k${i}`, i]));
    expect(issuesOf(jobDefinitionSchema, job(many))).toBe("params: has 1025 keys, more than 1024");
  });
  it("refuses params too large for one payload", () => {
    expect(issuesOf(jobDefinitionSchema, job({ blob: "x".repeat(70_000) }))).toMatch(
      /^params: is 70011 bytes of JSON, more than 60000/,
    );
  });
  it("takes params 30 levels deep", () => {
    let deep: Record<string, unknown> = {};
    for (let i = 1; i < 30; i++) deep = { d: deep };
    expect(jobDefinitionSchema.safeParse(job(deep)).success).toBe(true);
  });
});

describe("instants: ISO 8601 with their zone, never the host's", () => {
  it.each([
    ["2026-12-24T18:00:00Z", Date.UTC(2026, 11, 24, 18)],
    ["2026-12-24T19:00:00+01:00", Date.UTC(2026, 11, 24, 18)],
    ["2026-12-24T13:00:00.250-0500", Date.UTC(2026, 11, 24, 18, 0, 0, 250)],
    ["2026-12-24 18:00Z", Date.UTC(2026, 11, 24, 18)],
    ["2026-12-24", Date.UTC(2026, 11, 24)],
    [1_798_135_200_000, 1_798_135_200_000],
  ])("reads %s", (at, ms) => {
    const job = jobDefinitionSchema.parse({
      id: "i",
      handler: "echo",
      trigger: { type: "at", at },
    });
    expect(job.trigger).toEqual({ type: "at", at: ms });
  });
});
