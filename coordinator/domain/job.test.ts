import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { durationSchema, parseDuration } from "./duration.js";
import { formatIssues, jobDefinitionSchema, jobsFileSchema } from "./job.js";

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
  });

  it("a parsed definition parses again to itself (stored definitions round-trip)", () => {
    for (const trigger of [
      { type: "every", every: "2s", anchor: "2026-01-01T00:00:30Z" },
      { type: "every", every: 250 },
      { type: "cron", expr: "*/2 * * * * *", tz: "Europe/London" },
      { type: "at", at: "2026-05-01T12:00:00Z" },
    ]) {
      const once = jobDefinitionSchema.parse({ ...base, trigger, timeout: "5m", retry: {} });
      expect(jobDefinitionSchema.parse(once)).toEqual(once);
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
      issues: "handler: Invalid input: expected string, received undefined",
    },
    {
      name: "bad handler name",
      input: { ...base, handler: "1echo" },
      issues: "handler: must be a handler name such as echo or mqtt.publish",
    },
    {
      name: "unknown trigger type",
      input: { ...base, trigger: { type: "weekly" } },
      issues: "trigger.type: Invalid discriminator value. Expected 'cron' | 'every' | 'at'",
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
});

describe("jobsFileSchema", () => {
  it("parses a list of jobs", () => {
    const file = jobsFileSchema.parse({ jobs: [base, { ...base, id: "j2" }] });
    expect(file.jobs.map((j) => j.id)).toEqual(["j1", "j2"]);
  });

  it("reports a duplicate id at the second job", () => {
    expect(issuesOf(jobsFileSchema, { jobs: [base, { ...base, id: "j2" }, base] })).toBe(
      'jobs.2.id: duplicate job id "j1"',
    );
    expect(issuesOf(jobsFileSchema, { jobs: [base, base] })).toBe(
      'jobs.1.id: duplicate job id "j1"',
    );
  });

  it("reports a bad job at its index", () => {
    expect(issuesOf(jobsFileSchema, { jobs: [base, { ...base, id: "j2", priority: 5000 }] })).toBe(
      "jobs.1.priority: Too big: expected number to be <=1000",
    );
  });

  it("prefixes the path with a root such as the file name", () => {
    expect(issuesOf(jobsFileSchema, { jobs: [base, base] }, "jobs.json")).toBe(
      'jobs.json.jobs.1.id: duplicate job id "j1"',
    );
    expect(issuesOf(jobsFileSchema, { jobs: [], extra: true }, "jobs.json")).toBe(
      'jobs.json: Unrecognized key: "extra"',
    );
  });

  it("names the root when the file has no jobs list", () => {
    expect(issuesOf(jobsFileSchema, {})).toBe(
      "jobs: Invalid input: expected array, received undefined",
    );
    expect(issuesOf(jobsFileSchema, [])).toBe(
      "(root): Invalid input: expected object, received array",
    );
  });
});
