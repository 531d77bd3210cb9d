import { AxError } from "../../shared/errors.js";
import type { ExecState } from "../../shared/fsm.js";
import { newId } from "../../shared/ids.js";
import {
  type RolloutEvent,
  type RolloutRecord,
  type RolloutSpec,
  type RolloutState,
  waveCap,
} from "../domain/rollout.js";
import type { EngineContext } from "../engine/context.js";
import type { Fleet } from "../engine/fleet.js";
import { matchingAgents, type RolloutEngine, tally } from "../engine/rollouts.js";
import { commandParams } from "./agent-update.js";
import { type Idempotency, once, replayed } from "./idempotency.js";

/** A rollout as the API shows it: the record and its progress. */
export interface RolloutView extends RolloutRecord {
  progress: {
    /** Agents the selector matches now that offer the handler. */
    matching: number;
    reached: number;
    byState: Partial<Record<ExecState, number>>;
    succeeded: number;
    failed: number;
    open: number;
    waves: {
      percent: number;
      soak: number;
      /** How many agents the wave holds in all (percents are cumulative). */
      cap: number;
      reached: number;
      byState: Partial<Record<ExecState, number>>;
    }[];
  };
}

function notFound(id: string): AxError {
  return new AxError("AX_ROLLOUT_NOT_FOUND", `rollout "${id}" not found`, { context: { id } });
}

/** A spec refused after its schema passed, in the words of the schema's refusals: path, problem. */
function invalid(path: (string | number)[], problem: string): AxError {
  const at = ["body", ...path];
  return new AxError("AX_API_INVALID_REQUEST", `invalid request\n${at.join(".")}: ${problem}`, {
    context: { issues: [{ path: at, message: problem }] },
  });
}

/** Which states each operator action may start from. */
const ALLOWED: Record<"pause" | "resume" | "abort", readonly RolloutState[]> = {
  pause: ["CREATED", "IN_PROGRESS"],
  resume: ["CREATED", "PAUSED"],
  abort: ["CREATED", "IN_PROGRESS", "PAUSED"],
};

/** Rollouts: create, read, pause, resume, abort (the API, the CLI and the console come here). */
export class RolloutOperations {
  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
    private readonly engine: RolloutEngine,
    private readonly excluded: (agentId: string) => boolean,
  ) {}

  /**
   * Creates the rollout `spec` describes. With an idempotency `key` (docs/api.md), once: the same
   * request again answers with the rollout the first made, as it is now.
   */
  async create(spec: RolloutSpec, actor = "system", key?: Idempotency): Promise<RolloutView> {
    const made = await replayed<{ rolloutId: string }>(this.ctx, key);
    if (made !== undefined) return this.get(made.rolloutId);
    const now = this.ctx.clock.wallNow();
    if (spec.endsAt !== undefined && spec.endsAt <= now) {
      throw invalid(["endsAt"], "must be in the future: the rollout's end has passed");
    }
    if (spec.command.at !== undefined && spec.command.at + spec.command.startWithin <= now) {
      throw invalid(
        ["command", "at"],
        "at + startWithin is in the past: the rollout's command could only expire",
      );
    }
    // Filled in once, here: every agent the rollout reaches is sent these same params.
    const params = await commandParams(this.ctx, spec.command.handler, spec.command.params, [
      "command",
      "params",
    ]);
    const id = spec.id ?? newId("ro_", now);
    const state: RolloutState = spec.start ? "IN_PROGRESS" : "CREATED";
    const record: RolloutRecord = {
      id,
      description: spec.description ?? null,
      version: 1,
      state,
      selector: spec.selector,
      command: { ...spec.command, params },
      rate: spec.rate,
      waves: spec.waves,
      abort: spec.abort ?? null,
      endsAt: spec.endsAt ?? null,
      wave: 0,
      soakUntil: null,
      createdAt: now,
      updatedAt: now,
      startedAt: spec.start ? now : null,
      finishedAt: null,
      createdBy: actor,
      reason: null,
      settled: false,
    };
    let created = false;
    const first = await once(this.ctx, key, { rolloutId: id }, async (idempotency) => {
      created = await this.ctx.store.createRollout(
        record,
        {
          at: now,
          fromState: null,
          toState: state,
          event: "created",
          actor,
          reason: null,
          detail: null,
        },
        idempotency,
      );
    });
    // Another request with the key made it meanwhile: that rollout, and nothing more.
    if (first.rolloutId !== id) return this.get(first.rolloutId);
    if (!created) {
      throw new AxError("AX_ROLLOUT_CONFLICT", `rollout "${id}" already exists`, {
        context: { id },
      });
    }
    await this.ctx.store.flush();
    this.ctx.log("info", `rollout ${id} created (${state}) by ${actor}`, { rolloutId: id });
    this.engine.wake();
    return this.view(record);
  }

  async list(query: { limit: number; cursor?: string; state?: RolloutState }) {
    const page = await this.ctx.store.pageRollouts(query);
    return {
      items: await Promise.all(page.items.map((r) => this.view(r))),
      nextCursor: page.nextCursor,
    };
  }

  async get(id: string): Promise<RolloutView> {
    const r = await this.ctx.store.getRollout(id);
    if (r === undefined) throw notFound(id);
    return this.view(r);
  }

  async detail(id: string): Promise<{ rollout: RolloutView; timeline: RolloutEvent[] }> {
    const rollout = await this.get(id);
    return { rollout, timeline: await this.ctx.store.getRolloutTimeline(id) };
  }

  pause(id: string, reason: string | undefined, actor = "system"): Promise<RolloutView> {
    return this.act(id, "pause", reason, actor);
  }

  resume(id: string, actor = "system"): Promise<RolloutView> {
    return this.act(id, "resume", undefined, actor);
  }

  abort(id: string, reason: string | undefined, actor = "system"): Promise<RolloutView> {
    return this.act(id, "abort", reason, actor);
  }

  /** An operator's action, as a compare-and-set on the rollout's version (read again on a race). */
  private async act(
    id: string,
    action: "pause" | "resume" | "abort",
    reason: string | undefined,
    actor: string,
  ): Promise<RolloutView> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const r = await this.ctx.store.getRollout(id);
      if (r === undefined) throw notFound(id);
      if (!ALLOWED[action].includes(r.state)) {
        throw new AxError(
          "AX_ROLLOUT_CONFLICT",
          `rollout "${id}" is ${r.state}; ${action} needs it ${ALLOWED[action].join(" or ")}`,
          { context: { id, state: r.state } },
        );
      }
      const why = reason ?? `${action} by ${actor}`;
      let ok: boolean;
      if (action === "abort") {
        ok = await this.engine.abort(r, why, actor);
      } else {
        const now = this.ctx.clock.wallNow();
        const to: RolloutState = action === "pause" ? "PAUSED" : "IN_PROGRESS";
        ok = await this.ctx.store.updateRollout(
          {
            ...r,
            state: to,
            reason: action === "pause" ? why : null,
            updatedAt: now,
            startedAt: r.startedAt ?? (to === "IN_PROGRESS" ? now : null),
          },
          r.version,
          {
            at: now,
            fromState: r.state,
            toState: to,
            // The first move to IN_PROGRESS starts it, from CREATED or from a pause before any
            // start (CREATED → PAUSED → resume).
            event: action === "pause" ? "paused" : r.startedAt === null ? "started" : "resumed",
            actor,
            reason: reason ?? null,
            detail: null,
          },
        );
      }
      if (ok) {
        await this.ctx.store.flush();
        this.ctx.log("info", `rollout ${id}: ${action} by ${actor}`, { rolloutId: id });
        this.engine.wake();
        return this.get(id);
      }
    }
    throw new AxError("AX_ROLLOUT_CONFLICT", `rollout "${id}" kept changing; try again`, {
      context: { id },
      retryable: true,
    });
  }

  /** The record with its progress, counted from its executions and the fleet now. */
  async view(r: RolloutRecord): Promise<RolloutView> {
    await this.fleet.current();
    const t = tally(r, await this.ctx.store.countRolloutExecutions(r.id));
    const skip = await this.engine.skipped(r);
    const matching = matchingAgents(this.fleet, r, this.excluded, skip).length;
    return {
      ...r,
      progress: {
        matching,
        reached: t.reached,
        byState: t.byState,
        succeeded: t.succeeded,
        failed: t.failed,
        open: t.open,
        waves: r.waves.map((w, i) => ({
          percent: w.percent,
          soak: w.soak,
          cap: waveCap(r.waves, i, matching),
          reached: t.waves[i]?.reached ?? 0,
          byState: t.waves[i]?.byState ?? {},
        })),
      },
    };
  }
}
