import { readFileSync } from "node:fs";
import * as z from "zod/mini";
import { AxError } from "../shared/errors.js";
import { ID_PATTERN } from "../shared/ids.js";
import { describeIssue } from "../shared/protocol/codec.js";
import { deviceHandlersConfigSchema } from "./handlers/device/index.js";

/** Agent options as written in its config file (JSON). */
export const agentConfigSchema = z.object({
  agentId: z
    .string()
    .check(z.regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)")),
  mqtt: z.object({
    url: z.string().check(z.regex(/^mqtts?:\/\/.+/, "must be an mqtt:// or mqtts:// URL")),
    /** @default "ax" */
    prefix: z._default(
      z.string().check(z.regex(/^[A-Za-z0-9._-]+$/, "must be one plain topic level")),
      "ax",
    ),
    /** Seconds; the broker publishes the Last Will after 1.5× this. @default 10 */
    keepaliveS: z._default(z.int().check(z.gte(1), z.lte(3600)), 10),
    username: z.optional(z.string()),
    password: z.optional(z.string()),
    /** Reconnect backoff: full jitter between 0 and min(capMs, baseMs·2^n). */
    reconnect: z._default(
      z.object({
        /** @default 500 */
        baseMs: z._default(z.int().check(z.gte(10), z.lte(60_000)), 500),
        /** @default 30000 */
        capMs: z._default(z.int().check(z.gte(10), z.lte(3_600_000)), 30_000),
      }),
      { baseMs: 500, capMs: 30_000 },
    ),
  }),
  /** Firmware profile name reported in hello. @default "dev" */
  profile: z._default(z.string().check(z.minLength(1), z.maxLength(64)), "dev"),
  capacity: z._default(
    z.object({
      /** Executions running at once. @default 4 */
      concurrency: z._default(z.int().check(z.gte(1), z.lte(1024)), 4),
      /** Due executions waiting for a slot; beyond it a due dispatch is answered busy. @default 64 */
      queue: z._default(z.int().check(z.gte(0), z.lte(100_000)), 64),
      /** Executions held (scheduled, queued, running); beyond it dispatches are rejected journal_full. @default 10000 */
      maxPending: z._default(z.int().check(z.gte(1), z.lte(1_000_000)), 10_000),
    }),
    { concurrency: 4, queue: 64, maxPending: 10_000 },
  ),
  tags: z._default(
    z.record(z.string().check(z.regex(/^[A-Za-z0-9._-]{1,64}$/, "bad tag name")), z.string()),
    {},
  ),
  journal: z._default(
    z.object({
      /** The journal's SQLite file. @default "ax-journal.sqlite" (in the working directory) */
      path: z._default(z.string().check(z.minLength(1)), "ax-journal.sqlite"),
      /** See docs/benchmarks.md for the cost of each. @default "NORMAL" */
      synchronous: z._default(z.enum(["NORMAL", "FULL"]), "NORMAL"),
      /** Under NORMAL, still fsync the commit that marks a command running (see docs/agent.md). @default true */
      syncStart: z._default(z.boolean(), true),
      /** Unacknowledged reports kept at most before new dispatches are refused. @default 100000 */
      maxOutbox: z._default(z.int().check(z.gte(100), z.lte(10_000_000)), 100_000),
      /** How long finished commands are kept to answer duplicates. @default 86400000 (24 h) */
      retainMs: z._default(z.int().check(z.gte(60_000)), 86_400_000),
    }),
    {
      path: "ax-journal.sqlite",
      synchronous: "NORMAL",
      syncStart: true,
      maxOutbox: 100_000,
      retainMs: 86_400_000,
    },
  ),
  /** Built-in device handlers to offer (mqtt.publish, http.request, file.write, exec); see docs/handlers.md. @default {} */
  handlers: z._default(deviceHandlersConfigSchema, {}),
  /** Wheel tick for device commands. @default 20 */
  tickMs: z._default(z.int().check(z.gte(1), z.lte(1000)), 20),
  /** Heartbeat period until the coordinator's welcome says otherwise. @default 5000 */
  heartbeatMs: z._default(z.int().check(z.gte(100), z.lte(600_000)), 5_000),
  /** Grace for running work on SIGTERM (rule 13). @default 10000 */
  shutdownGraceMs: z._default(z.int().check(z.gte(0), z.lte(3_600_000)), 10_000),
});

export type AgentConfigInput = z.input<typeof agentConfigSchema>;
export type AgentConfig = Readonly<z.output<typeof agentConfigSchema>>;

/** Parses agent options; a bad one throws AX_CONFIG_INVALID naming `source`, the field and the problem. */
export function parseAgentConfig(input: unknown, source = "config"): AgentConfig {
  const result = agentConfigSchema.safeParse(input, { error: describeIssue });
  if (!result.success) {
    const lines = result.error.issues.map(
      (i) => `${i.path.map(String).join(".") || "(root)"}: ${i.message}`,
    );
    throw new AxError("AX_CONFIG_INVALID", `${source}: invalid agent config\n${lines.join("\n")}`, {
      context: { source },
    });
  }
  return Object.freeze(result.data);
}

/** Reads and parses an agent config file. */
export function loadAgentConfig(path: string): AgentConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new AxError(
      "AX_CONFIG_READ",
      `${path}: cannot read agent config: ${(err as Error).message}`,
      { cause: err },
    );
  }
  return parseAgentConfig(raw, path);
}
