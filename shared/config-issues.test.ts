import { describe, expect, it } from "vitest";
import { z } from "zod";
import * as zm from "zod/mini";
import { issueLines, keyedIssues, unknownKeys } from "./config-issues.js";

const mini = zm.strictObject({
  agentId: zm.string(),
  tags: zm.optional(zm.record(zm.string(), zm.string())),
  mqtt: zm.strictObject({
    url: zm.string(),
    reconnect: zm.optional(zm.strictObject({ baseMs: zm.optional(zm.number()) })),
  }),
});

const full = z
  .object({
    heartbeatMs: z.number().optional(),
    alerts: z
      .object({
        webhooks: z.array(z.object({ url: z.string(), secret: z.string().optional() }).strict()),
      })
      .strict()
      .optional(),
  })
  .strict();

function linesOf(schema: zm.ZodMiniType, input: unknown): string[] {
  const r = schema.safeParse(input, { error: unknownKeys });
  return r.success ? [] : issueLines(r.error.issues, input);
}

describe("unknown keys in a config", () => {
  it("names each unknown key at its full path with the closest known key (zod/mini)", () => {
    expect(
      linesOf(mini, {
        agentId: "a",
        tagz: {},
        mqtt: { url: "mqtt://x", reconnect: { basems: 1, zzzz: 2 } },
      }),
    ).toEqual([
      // Zod reports an object's own unknown keys after the problems inside its fields.
      'mqtt.reconnect.basems: unknown key; did you mean "baseMs"?',
      "mqtt.reconnect.zzzz: unknown key",
      'tagz: unknown key; did you mean "tags"?',
    ]);
  });

  it("says so once when a required key is missing and its near miss is given", () => {
    expect(linesOf(mini, { agentID: "a", mqtt: { url: "mqtt://x" } })).toEqual([
      'agentID: unknown key; did you mean "agentId"? (agentId is required)',
    ]);
    expect(linesOf(mini, { agentId: "a", mqtt: { ur1: "mqtt://x" } })).toEqual([
      'mqtt.ur1: unknown key; did you mean "url"? (mqtt.url is required)',
    ]);
  });

  it("keeps a bad value of the suggested key as its own problem", () => {
    const lines = linesOf(mini, { agentId: 5, agentID: "a", mqtt: { url: "x" } });
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^agentId: Invalid input/);
    expect(lines[1]).toBe('agentID: unknown key; did you mean "agentId"?');
  });

  it("works with zod (classic) too, inside arrays", () => {
    expect(
      linesOf(full as never, {
        heartbeat: 5,
        alerts: { webhooks: [{ url: "u" }, { url: "u", secert: "s" }] },
      }),
    ).toEqual([
      'alerts.webhooks.1.secert: unknown key; did you mean "secret"?',
      'heartbeat: unknown key; did you mean "heartbeatMs"?',
    ]);
  });

  it("without the error map, still gives each key its own line", () => {
    const r = full.safeParse({ a: 1, b: 2 });
    expect(r.success).toBe(false);
    if (!r.success) {
      expect(keyedIssues(r.error.issues)).toEqual([
        { path: ["a"], message: "unknown key" },
        { path: ["b"], message: "unknown key" },
      ]);
    }
  });
});
