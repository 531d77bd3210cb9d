import { z } from "zod";
import type { ExecState } from "../../shared/fsm.js";
import { HANDLER_NAME_PATTERN } from "../../shared/ids.js";
import { durationSchema } from "./duration.js";
import { idSchema, instantSchema, paramsSchema, tagsSchema } from "./job.js";

/**
 * Rollouts (docs/rollouts.md): one device command sent to every agent a selector matches, at a
 * rate, in waves, stopped by abort criteria. This module is the model and its pure rules; the
 * engine (engine/rollouts.ts) applies them to the fleet and the store.
 */

export const ROLLOUT_STATES = ["CREATED", "IN_PROGRESS", "PAUSED", "ABORTED", "COMPLETED"] as const;
export type RolloutState = (typeof ROLLOUT_STATES)[number];
export const FINAL_ROLLOUT_STATES: ReadonlySet<RolloutState> = new Set(["ABORTED", "COMPLETED"]);

/**
 * End states an abort criterion may count as failures (docs/rollouts.md): FAILED, TIMED_OUT,
 * EXPIRED, and CANCELED. Never SUCCEEDED, nor SKIPPED, which a rollout's commands never end in.
 */
export const ABORT_ON_STATES = ["FAILED", "TIMED_OUT", "EXPIRED", "CANCELED"] as const;
const FAILURE_STATES = ABORT_ON_STATES;

/** Defaults applied when the spec leaves a field out; docs/rollouts.md lists them. */
export const ROLLOUT_DEFAULTS = {
  perMinute: 600,
  startWithinMs: 60_000,
  timeoutMs: 30_000,
  abortOn: ["FAILED", "TIMED_OUT", "EXPIRED"] as ExecState[],
  minExecuted: 1,
} as const;

const selectorSchema = z
  .object({
    tags: tagsSchema.optional().meta({ description: "Every one of these tags." }),
    agentIds: z
      .array(idSchema)
      .min(1)
      .max(100_000)
      .optional()
      .meta({ description: "One of these agent ids." }),
    profile: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .meta({ description: "The firmware profile its hello reports." }),
    agentVersion: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .meta({ description: "The bundle version its hello reports." }),
  })
  .strict()
  .refine(
    (s) =>
      (s.tags !== undefined && Object.keys(s.tags).length > 0) ||
      s.agentIds !== undefined ||
      s.profile !== undefined ||
      s.agentVersion !== undefined,
    "give at least one of tags, agentIds, profile, agentVersion",
  );

const commandSchema = z
  .object({
    handler: z
      .string()
      .regex(HANDLER_NAME_PATTERN, "must be a handler name such as echo or mqtt.publish"),
    params: paramsSchema.default({}),
    at: instantSchema.optional().meta({
      description: "When every device runs it; without it each runs it as soon as it is reached.",
    }),
    startWithin: durationSchema
      .pipe(
        z
          .number()
          .int()
          .min(1_000, "must be at least 1s")
          .max(30 * 86_400_000),
      )
      .default(ROLLOUT_DEFAULTS.startWithinMs)
      .meta({ description: "A device's latest start after its start time; then EXPIRED." }),
    timeout: durationSchema
      .pipe(
        z
          .number()
          .int()
          .min(1, "must be at least 1ms")
          .max(7 * 86_400_000),
      )
      .default(ROLLOUT_DEFAULTS.timeoutMs)
      .meta({ description: "A device's longest run; then TIMED_OUT." }),
  })
  .strict();

const rateSchema = z.union([
  z
    .object({
      perMinute: z.number().positive().max(1_000_000).meta({
        description: "At most this many agents reached per minute.",
      }),
    })
    .strict(),
  z
    .object({
      exponential: z
        .object({
          basePerMinute: z.number().positive().max(1_000_000),
          factor: z.number().min(1).max(100),
          stepSuccesses: z.number().int().min(1),
          maxPerMinute: z.number().positive().max(1_000_000).optional(),
        })
        .strict()
        .refine(
          (e) => e.maxPerMinute === undefined || e.maxPerMinute >= e.basePerMinute,
          "maxPerMinute must be at least basePerMinute",
        ),
    })
    .strict(),
]);

const waveSchema = z
  .object({
    percent: z.number().gt(0).max(100),
    soak: durationSchema
      .pipe(
        z
          .number()
          .int()
          .min(0)
          .max(30 * 86_400_000),
      )
      .default(0),
  })
  .strict();

const abortSchema = z
  .object({
    thresholdPercent: z.number().gt(0).max(100),
    minExecuted: z.number().int().min(1).default(ROLLOUT_DEFAULTS.minExecuted),
    on: z
      .array(z.enum(FAILURE_STATES))
      .min(1)
      .default([...ROLLOUT_DEFAULTS.abortOn] as (typeof FAILURE_STATES)[number][]),
  })
  .strict();

/** A rollout as an operator writes it (the API's body, the CLI's flags). */
export const rolloutSpecSchema = z
  .object({
    id: idSchema.optional(),
    description: z.string().max(1024).optional(),
    selector: selectorSchema,
    command: commandSchema,
    rate: rateSchema.default({ perMinute: ROLLOUT_DEFAULTS.perMinute }),
    waves: z
      .array(waveSchema)
      .min(1)
      .max(20)
      .default([{ percent: 100, soak: 0 }])
      .superRefine((waves, ctx) => {
        for (let i = 1; i < waves.length; i++) {
          if ((waves[i]?.percent ?? 0) <= (waves[i - 1]?.percent ?? 0)) {
            ctx.addIssue({
              code: "custom",
              path: [i, "percent"],
              message: "must be more than the wave before (percents are cumulative)",
            });
          }
        }
        if (waves[waves.length - 1]?.percent !== 100) {
          ctx.addIssue({
            code: "custom",
            path: [waves.length - 1, "percent"],
            message: "the last wave must be 100 (every matching agent)",
          });
        }
      }),
    abort: abortSchema.optional(),
    endsAt: instantSchema.optional(),
    start: z.boolean().default(true),
  })
  .strict();

export type RolloutSpecInput = z.input<typeof rolloutSpecSchema>;
export type RolloutSpec = z.output<typeof rolloutSpecSchema>;
export type RolloutSelector = RolloutSpec["selector"];
export type RolloutRate = RolloutSpec["rate"];

/** A rollout as stored: its spec (without id and start) and where it is. */
export interface RolloutRecord {
  id: string;
  description: string | null;
  version: number;
  state: RolloutState;
  selector: RolloutSelector;
  command: RolloutSpec["command"];
  rate: RolloutRate;
  waves: RolloutSpec["waves"];
  abort: RolloutSpec["abort"] | null;
  endsAt: number | null;
  /** The index of the wave being reached. */
  wave: number;
  /** When the current wave's soak ends (its executions all ended); null while it runs. */
  soakUntil: number | null;
  createdAt: number;
  updatedAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  createdBy: string;
  /** Why it was last paused, aborted or completed. */
  reason: string | null;
  /** Final, and every execution it created ended (an aborted one's open ones were canceled). */
  settled: boolean;
}

/** A rollout's timeline entry. */
export interface RolloutEvent {
  seq: number;
  at: number;
  fromState: RolloutState | null;
  toState: RolloutState;
  event: string;
  actor: string | null;
  reason: string | null;
  detail: Record<string, unknown> | null;
}

/** An agent reached: the execution it was sent, in which wave. */
export interface RolloutTarget {
  agentId: string;
  executionId: string;
  wave: number;
  reachedAt: number;
}

/** What the selector needs of an agent. */
export interface SelectableAgent {
  agentId: string;
  tags: Record<string, string>;
  profile: string;
  bundleVersion: string;
  handlers: readonly string[];
}

/** True when `agent` matches every field of `selector`. */
export function selects(selector: RolloutSelector, agent: SelectableAgent): boolean {
  if (selector.agentIds !== undefined && !selector.agentIds.includes(agent.agentId)) return false;
  if (selector.profile !== undefined && agent.profile !== selector.profile) return false;
  if (selector.agentVersion !== undefined && agent.bundleVersion !== selector.agentVersion) {
    return false;
  }
  for (const [k, v] of Object.entries(selector.tags ?? {})) {
    if (agent.tags[k] !== v) return false;
  }
  return true;
}

/** The rate, in agents per minute, once `succeeded` executions of the rollout succeeded. */
export function ratePerMinute(rate: RolloutRate, succeeded: number): number {
  if ("perMinute" in rate) return rate.perMinute;
  const e = rate.exponential;
  const steps = Math.floor(succeeded / e.stepSuccesses);
  const r = e.basePerMinute * e.factor ** Math.min(steps, 1_000);
  return Math.min(r, e.maxPerMinute ?? Number.POSITIVE_INFINITY, 1_000_000);
}

/**
 * How many agents wave `index` holds in all (percents are cumulative) out of `matching`: at least
 * one for a wave above 0 %, so a 1 % canary of 50 agents is one agent, not none.
 */
export function waveCap(waves: RolloutSpec["waves"], index: number, matching: number): number {
  const w = waves[Math.min(index, waves.length - 1)];
  if (w === undefined || matching === 0) return 0;
  if (w.percent >= 100) return matching;
  return Math.min(matching, Math.max(1, Math.ceil((matching * w.percent) / 100)));
}

/**
 * The abort decision: with `ended` executions of the rollout ended, `failed` of them in a state
 * the criteria count, it aborts once at least `minExecuted` ended and the failures reach the
 * threshold. Returns the reason, or undefined.
 */
export function abortReason(
  abort: RolloutRecord["abort"],
  ended: number,
  failed: number,
): string | undefined {
  if (abort === null || abort === undefined) return undefined;
  if (ended < abort.minExecuted || ended === 0) return undefined;
  const pct = (failed / ended) * 100;
  if (pct < abort.thresholdPercent) return undefined;
  return `${failed} of ${ended} ended executions failed (${round1(pct)} %, threshold ${abort.thresholdPercent} % of at least ${abort.minExecuted}; failures: ${abort.on.join(", ")})`;
}

function round1(n: number): number {
  return Math.round(n * 10) / 10;
}

/**
 * A token bucket that paces reaches at a rate that may change: it fills at the rate and holds at
 * most one second of it (at least one token), so no more than one second's worth plus rate ×
 * elapsed are ever reached. It lives in memory: a restart (or a resume) starts it full again.
 */
export class ReachBucket {
  private tokens = 0;
  private lastMs: number | undefined;

  /** Tokens available at `nowMs` under `perMinute`. */
  available(nowMs: number, perMinute: number): number {
    const cap = Math.max(1, perMinute / 60);
    if (this.lastMs === undefined) this.tokens = cap;
    else this.tokens = Math.min(cap, this.tokens + ((nowMs - this.lastMs) * perMinute) / 60_000);
    this.lastMs = nowMs;
    return Math.floor(this.tokens);
  }

  take(n: number): void {
    this.tokens = Math.max(0, this.tokens - n);
  }

  /** A paused rollout's bucket does not fill. */
  reset(): void {
    this.lastMs = undefined;
    this.tokens = 0;
  }
}
