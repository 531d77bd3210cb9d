import { z } from "zod";
import { HANDLER_NAME_PATTERN, ID_PATTERN } from "../../shared/ids.js";
import { durationSchema } from "./duration.js";
import { isValidTimeZone, validateCron } from "./schedule.js";

const instantSchema = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const ms = typeof value === "number" ? value : Date.parse(value);
  if (!Number.isFinite(ms) || ms < 0) {
    ctx.addIssue({
      code: "custom",
      message: `must be UTC milliseconds or an ISO 8601 time such as 2026-01-31T12:00:00Z (got ${JSON.stringify(value)})`,
    });
    return z.NEVER;
  }
  return ms;
});

const cronTriggerSchema = z
  .object({
    type: z.literal("cron"),
    expr: z.string().min(1),
    /** IANA time zone; UTC unless given, never the host's zone. */
    tz: z.string().default("UTC"),
  })
  .strict()
  .superRefine((t, ctx) => {
    if (!isValidTimeZone(t.tz)) {
      ctx.addIssue({
        code: "custom",
        path: ["tz"],
        message: `"${t.tz}" is not a known IANA time zone`,
      });
      return;
    }
    const problem = validateCron(t.expr, t.tz);
    if (problem) ctx.addIssue({ code: "custom", path: ["expr"], message: problem });
  });

const intervalSchema = durationSchema.refine((ms) => ms >= 100, "must be at least 100ms");

const everyTriggerSchema = z
  .object({
    type: z.literal("every"),
    /** The interval, e.g. `2s` or 2000. */
    every: intervalSchema.optional(),
    /** The interval in milliseconds: the resolved form, so a stored definition parses again. */
    everyMs: intervalSchema.optional(),
    /** Fire times are anchor + k × every; UTC ms or ISO time. @default 0 (the epoch) */
    anchor: instantSchema.optional(),
  })
  .strict()
  .superRefine((t, ctx) => {
    if ((t.every === undefined) === (t.everyMs === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: ["every"],
        message: 'give the interval as every (e.g. "2s")',
      });
    }
  })
  .transform(({ type, every, everyMs, anchor }) => ({
    type,
    everyMs: (every ?? everyMs) as number,
    ...(anchor === undefined ? {} : { anchor }),
  }));

const atTriggerSchema = z.object({ type: z.literal("at"), at: instantSchema }).strict();

export const triggerSchema = z.discriminatedUnion("type", [
  cronTriggerSchema,
  everyTriggerSchema,
  atTriggerSchema,
]);
export type TriggerInput = z.input<typeof triggerSchema>;
export type Trigger = z.output<typeof triggerSchema>;

export const retrySchema = z
  .object({
    /** Total attempts including the first. @default 1 */
    maxAttempts: z.number().int().min(1).max(100).default(1),
    /** @default 1000 */
    baseMs: durationSchema.default(1000),
    /** @default 60000 */
    capMs: durationSchema.default(60_000),
  })
  .strict();

export const routingSchema = z
  .object({
    strategy: z.enum(["ROUND_ROBIN"]).default("ROUND_ROBIN"),
  })
  .strict();

/** A job definition as users write it (JSON jobs file, CLI). */
export const jobDefinitionSchema = z
  .object({
    id: z
      .string()
      .regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - and start with a letter or digit"),
    handler: z
      .string()
      .regex(HANDLER_NAME_PATTERN, "must be a handler name such as echo or mqtt.publish"),
    params: z.record(z.string(), z.unknown()).default({}),
    trigger: triggerSchema,
    routing: routingSchema.default({ strategy: "ROUND_ROBIN" }),
    /** Longest a run may take on the agent. @default 60s */
    timeout: durationSchema.default(60_000),
    /** Latest start after the nominal fire time; past it the execution is EXPIRED. @default 60s */
    deadline: durationSchema.default(60_000),
    /** No `accepted` within this → redispatch with round+1. @default 5s */
    dispatchTimeout: durationSchema.default(5_000),
    /** Dispatches per attempt before the attempt fails as undeliverable. @default 3 */
    maxDispatches: z.number().int().min(1).max(20).default(3),
    retry: retrySchema.default({ maxAttempts: 1, baseMs: 1000, capMs: 60_000 }),
    /** Higher dispatches first when agents are saturated. @default 0 */
    priority: z.number().int().min(-1000).max(1000).default(0),
    paused: z.boolean().default(false),
  })
  .strict();
export type JobDefinitionInput = z.input<typeof jobDefinitionSchema>;
export type JobDefinition = z.output<typeof jobDefinitionSchema>;

/** A list of jobs, as in a jobs file: `{ "jobs": [ … ] }`. */
export const jobsFileSchema = z
  .object({ jobs: z.array(jobDefinitionSchema) })
  .strict()
  .superRefine((file, ctx) => {
    const seen = new Set<string>();
    file.jobs.forEach((job, i) => {
      if (seen.has(job.id)) {
        ctx.addIssue({
          code: "custom",
          path: ["jobs", i, "id"],
          message: `duplicate job id "${job.id}"`,
        });
      }
      seen.add(job.id);
    });
  });

/** Formats zod issues as `path: message` lines, one per issue. */
export function formatIssues(error: z.ZodError, root = ""): string {
  return error.issues
    .map((i) => {
      const path = [root, ...i.path.map(String)].filter(Boolean).join(".");
      return `${path || "(root)"}: ${i.message}`;
    })
    .join("\n");
}
