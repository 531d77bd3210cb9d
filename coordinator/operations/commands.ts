import { AxError } from "../../shared/errors.js";
import type { EngineContext } from "../engine/context.js";
import type { Fleet } from "../engine/fleet.js";
import { newExecutionId } from "../engine/transitions.js";
import type { Identities } from "../security/identities.js";
import type { AgentRecord, NewExecution } from "../store/port.js";
import { checkCommandParams, commandParams } from "./agent-update.js";
import { type Idempotency, once, replayed } from "./idempotency.js";

/** What a device command gets when its request leaves a field out; applied here, once. */
export const COMMAND_DEFAULTS = {
  /** The latest start, after `at`. */
  deadlineAfterAtMs: 30_000,
  timeoutMs: 30_000,
  dispatchTimeoutMs: 5_000,
  maxDispatches: 3,
  priority: 0,
} as const;

/** A device command: run `handler` on one agent at `at`, and never after `deadline`. */
export interface CommandRequest {
  agentId: string;
  handler: string;
  params?: Record<string, unknown>;
  /** UTC ms. @default now */
  at?: number;
  /** UTC ms. @default at + 30 s */
  deadline?: number;
  /** @default 30000 */
  timeoutMs?: number;
  /** @default 0 */
  priority?: number;
  /**
   * Create the command even though the coordinator does not know `agentId` yet (neither enrolled
   * nor ever connected): it runs if that agent enrols and connects before its deadline, and ends
   * EXPIRED otherwise. It waives nothing else: an agent that is known and lacks the handler is
   * still refused. @default false
   */
  queue?: boolean;
}

/**
 * A device command aimed at one agent, or at every agent known to the fleet whose tags include
 * all of `selector`'s and that offers the handler.
 */
export type CommandsRequest = Omit<CommandRequest, "agentId" | "queue"> &
  (
    | { agentId: string; selector?: undefined; queue?: boolean }
    | { selector: Record<string, string>; agentId?: undefined; queue?: undefined }
  );

/** One command created: the agent it is for and its execution. */
export interface CommandTarget {
  agentId: string;
  executionId: string;
}

/** A request field the operation refused, with its path in the API's body. */
function invalid(message: string, field: string, problem: string): AxError {
  return new AxError("AX_API_INVALID_REQUEST", message, {
    context: { issues: [{ path: ["body", field], message: problem }] },
  });
}

const handlerList = (a: AgentRecord) =>
  a.handlers.length === 0 ? "none" : [...a.handlers].sort().join(", ");

/**
 * Device commands: the one operation that creates them (the API, the CLI and the console all
 * come here). It checks that the targets can run the command, applies the defaults once with the
 * coordinator's clock, and writes; a refused command writes nothing.
 */
export class CommandOperations {
  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
    private readonly identities: Identities,
    /** Tells the dispatch loop there is new work. */
    private readonly kick: () => void,
  ) {}

  /**
   * Creates one command per target; returns each target with its execution id, by agent id.
   * With `key` (an Idempotency-Key), the same request again answers as the first and creates
   * nothing.
   */
  async send(req: CommandsRequest, actor = "system", key?: Idempotency): Promise<CommandTarget[]> {
    const made = await replayed<CommandTarget[]>(this.ctx, key);
    if (made !== undefined) return made;
    const now = this.ctx.clock.wallNow();
    const at = req.at ?? now;
    const deadline = req.deadline ?? at + COMMAND_DEFAULTS.deadlineAfterAtMs;
    if (req.deadline !== undefined && deadline <= at) {
      throw invalid(
        "the command's deadline is not after its start",
        "deadline",
        "must be after at",
      );
    }
    if (deadline < now) {
      throw invalid(
        "the command's deadline has passed",
        req.deadline === undefined ? "at" : "deadline",
        `is in the past (${new Date(deadline).toISOString()}); it could only expire`,
      );
    }
    // The params' shape first: a malformed body is a 400 whatever the agents (docs/api.md).
    checkCommandParams(req.handler, req.params ?? {}, ["params"]);
    await this.fleet.current();
    const agentIds =
      req.selector === undefined
        ? [this.checkAgent(req.agentId, req.handler, req.queue === true)]
        : this.selectAgents(req.selector, req.handler);
    // Once for every target: they all get the same params.
    const params = await commandParams(this.ctx, req.handler, req.params ?? {}, ["params"]);
    const out: CommandTarget[] = [];
    const executions: NewExecution[] = [];
    for (const agentId of agentIds) {
      const executionId = newExecutionId(now);
      const execution: NewExecution = {
        id: executionId,
        kind: "command",
        jobId: null,
        jobVersion: null,
        handler: req.handler,
        params,
        targetAgentId: agentId,
        fireAt: at,
        deadline,
        timeoutMs: req.timeoutMs ?? COMMAND_DEFAULTS.timeoutMs,
        dispatchTimeoutMs: COMMAND_DEFAULTS.dispatchTimeoutMs,
        // A command runs once: a retry is the operator's to ask for.
        maxAttempts: 1,
        maxDispatches: COMMAND_DEFAULTS.maxDispatches,
        priority: req.priority ?? COMMAND_DEFAULTS.priority,
        retryBaseMs: 1000,
        retryCapMs: 60_000,
        createdAt: now,
      };
      executions.push(execution);
      out.push({ agentId, executionId });
    }
    // One write for the whole fan-out: 10,000 targets in one batch, not 10,000 writes.
    const result = await once(this.ctx, key, out, (record) =>
      this.ctx.store.createExecutions(executions, now, { actor }, record),
    );
    await this.ctx.store.flush();
    this.kick();
    return result;
  }

  /**
   * The agent a command by id is for, if it can run it (issue 17): one the coordinator does not
   * know is refused unless `queue` says to wait for it; one that connected and lacks the handler
   * is refused. One enrolled and never connected has told nothing of its handlers yet, so it gets
   * the command, and its agent refuses it if it cannot run it.
   */
  private checkAgent(agentId: string, handler: string, queue: boolean): string {
    // A revoked agent is sent nothing (docs/security.md): a command for it could only expire.
    if (this.identities.get(agentId)?.status === "revoked") {
      throw new AxError(
        "AX_AUTH_NOT_ENROLLED",
        `agent "${agentId}"'s enrolment is revoked: the coordinator sends it nothing (enrol it again first: ax fleet enroll ${agentId} --rotate)`,
        { context: { agentId } },
      );
    }
    const agent = this.fleet.get(agentId);
    if (agent === undefined) {
      if (queue || this.identities.get(agentId)?.status === "enrolled") return agentId;
      throw new AxError(
        "AX_AGENT_NOT_FOUND",
        `agent "${agentId}" is not known: it is not enrolled and has never connected (to create the command anyway, for an agent still to come, send it with queue: true, or ax command send --queue)`,
        { context: { agentId } },
      );
    }
    if (!agent.handlers.includes(handler)) {
      throw new AxError(
        "AX_AGENT_NO_HANDLER",
        `agent "${agentId}" does not offer handler "${handler}" (its handlers: ${handlerList(agent)})`,
        { context: { agentId, handler, handlers: [...agent.handlers].sort() } },
      );
    }
    return agentId;
  }

  /** Every agent known to the fleet, online or not, with all the selector's tags and the handler. */
  private selectAgents(selector: Record<string, string>, handler: string): string[] {
    const tags = Object.entries(selector);
    const tagged = this.fleet
      .list()
      .filter((a) => tags.every(([k, v]) => a.tags[k] === v))
      // A revoked agent is sent nothing, so a selector never picks it.
      .filter((a) => this.identities.get(a.agentId)?.status !== "revoked")
      .sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0));
    if (tagged.length === 0) {
      throw new AxError("AX_AGENT_NOT_FOUND", `no agent has the tags ${JSON.stringify(selector)}`, {
        context: { selector, handler },
      });
    }
    const agentIds = tagged.filter((a) => a.handlers.includes(handler)).map((a) => a.agentId);
    if (agentIds.length === 0) {
      // The first few agents are named, so the message stays a line or two for a large fleet.
      const shown = tagged.slice(0, 5).map((a) => `${a.agentId}: ${handlerList(a)}`);
      if (tagged.length > shown.length) shown.push(`${tagged.length - shown.length} more`);
      throw new AxError(
        "AX_AGENT_NO_HANDLER",
        `no agent with the tags ${JSON.stringify(selector)} offers handler "${handler}" (${shown.join("; ")})`,
        { context: { selector, handler, agentIds: tagged.map((a) => a.agentId) } },
      );
    }
    return agentIds;
  }
}
