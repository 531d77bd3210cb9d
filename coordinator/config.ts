import { readFileSync } from "node:fs";
import { z } from "zod";
import { AxError } from "../shared/errors.js";
import { durationSchema } from "./domain/duration.js";
import { formatIssues } from "./domain/job.js";

/** What webhooks can be told about. */
export const ALERT_KINDS = [
  "execution.failed",
  "execution.timed_out",
  "execution.expired",
  "fire.missed",
  "agent.offline",
] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];

/** Coordinator options as users write them in a config file. */
export const coordinatorConfigSchema = z
  .object({
    store: z
      .object({
        /** SQLite file. @default "ax.sqlite" */
        path: z.string().min(1).default("ax.sqlite"),
      })
      .strict()
      .default({ path: "ax.sqlite" }),
    mqtt: z
      .object({
        url: z.string().regex(/^mqtts?:\/\/.+/, "must be an mqtt:// or mqtts:// URL"),
        /** @default "ax" */
        prefix: z
          .string()
          .regex(/^[A-Za-z0-9._-]+$/, "must be one plain topic level")
          .default("ax"),
        username: z.string().optional(),
        password: z.string().optional(),
        sharedGroup: z
          .string()
          .regex(/^[A-Za-z0-9._-]+$/)
          .optional(),
      })
      .strict(),
    /** A JSON file of job definitions loaded (and upserted) at start. */
    jobsFile: z.string().optional(),
    /** Agents send heartbeats this often; 3 missed → offline. @default 5s */
    heartbeat: durationSchema.default(5_000),
    /** Dispatch this long before the fire time, so the agent fires from its own wheel. @default 500ms */
    dispatchLead: durationSchema.default(500),
    /** How often the engine looks for work to dispatch, time out, retry or expire. @default 100ms */
    poll: durationSchema.default(100),
    /** Jobs due within this window are held on the firing wheel. @default 5s */
    lookAhead: durationSchema.default(5_000),
    /** A fire this late is a misfire, handled by the job's misfire policy. @default 5s */
    misfireThreshold: durationSchema.default(5_000),
    /**
     * An agent that answers `busy` gets no new work for this long, doubled for each further
     * `busy` in a row (at most 8×); its execution is routed elsewhere or waits. @default 1s
     */
    busyBackoff: durationSchema.default(1_000),
    /** Grace past an execution's timeout before the coordinator times it out itself. @default 5s */
    timeoutGrace: durationSchema.default(5_000),
    /** Webhooks told about failures, misfires and agents going offline. @default none */
    alerts: z
      .object({
        webhooks: z
          .array(
            z
              .object({
                url: z.string().regex(/^https?:\/\/.+/, "must be an http:// or https:// URL"),
                /** Alert kinds sent to this hook. @default all */
                kinds: z.array(z.enum(ALERT_KINDS)).min(1).optional(),
                /** Extra request headers (e.g. Authorization). */
                headers: z.record(z.string(), z.string()).optional(),
                /** Signs each body: header X-Ax-Signature: sha256=HMAC-SHA256(secret, body). */
                secret: z.string().min(16).optional(),
              })
              .strict(),
          )
          .max(32)
          .default([]),
        /** Tries per alert and hook before it is recorded failed. @default 6 */
        maxAttempts: z.number().int().min(1).max(100).default(6),
        /** Retry back-off: base and cap of the full-jitter exponential. @default 1s, 5m */
        backoffBase: durationSchema.default(1_000),
        backoffCap: durationSchema.default(300_000),
        /** One attempt's time limit. @default 10s */
        timeout: durationSchema.default(10_000),
      })
      .strict()
      .default({
        webhooks: [],
        maxAttempts: 6,
        backoffBase: 1_000,
        backoffCap: 300_000,
        timeout: 10_000,
      }),
    /** @default 65536 */
    maxPayloadBytes: z
      .number()
      .int()
      .min(1024)
      .max(16 * 1024 * 1024)
      .default(65_536),
    /**
     * Finished executions and their timelines are purged this many days after they end.
     * @default 30
     */
    retentionDays: z.number().int().min(1).max(3650).default(30),
    /**
     * Stored error text (an execution's message, a timeline entry's detail) is capped at this many
     * UTF-8 bytes.
     * @default 2048
     */
    maxErrorTextBytes: z.number().int().min(256).max(65_536).default(2048),
  })
  .strict();

export type CoordinatorConfigInput = z.input<typeof coordinatorConfigSchema>;
export type CoordinatorConfig = Readonly<z.output<typeof coordinatorConfigSchema>>;

/** Parses options; a bad one throws AX_CONFIG_INVALID naming `source`, the field path and the problem. */
export function parseCoordinatorConfig(input: unknown, source = "config"): CoordinatorConfig {
  const result = coordinatorConfigSchema.safeParse(input);
  if (!result.success) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      `${source}: invalid coordinator config\n${formatIssues(result.error)}`,
      {
        context: { source },
      },
    );
  }
  return Object.freeze(result.data);
}

/** Reads and parses a JSON file, naming the file in any error. */
export function readJsonFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new AxError("AX_CONFIG_READ", `${path}: cannot read: ${(err as Error).message}`, {
      cause: err,
    });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new AxError("AX_CONFIG_READ", `${path}: not valid JSON: ${(err as Error).message}`, {
      cause: err,
    });
  }
}
