import { AxError } from "../../shared/errors.js";
import type { EngineContext } from "../engine/context.js";
import type { Fleet } from "../engine/fleet.js";
import type { AgentRecord } from "../store/port.js";

/** An agent as the operator sees it: what it said, and what the coordinator makes of it now. */
export type AgentView = AgentRecord & {
  /** Online and not backing off after a busy answer. */
  live: boolean;
  /** Executions dispatched to it and not ended. */
  inFlight: number;
};

/** The fleet, read: every agent the coordinator knows, online or not. */
export class AgentOperations {
  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
  ) {}

  /** Every known agent, by id. */
  async list(): Promise<AgentView[]> {
    const inFlight = await this.ctx.store.countInFlightByAgent();
    const now = this.ctx.clock.wallNow();
    return this.fleet
      .list()
      .sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0))
      .map((a) => this.view(a, inFlight, now));
  }

  /** One agent; AX_AGENT_NOT_FOUND when the coordinator has never heard from it. */
  async get(agentId: string): Promise<AgentView> {
    const agent = this.fleet.get(agentId);
    if (!agent) {
      throw new AxError("AX_AGENT_NOT_FOUND", `agent "${agentId}" not found`, {
        context: { agentId },
      });
    }
    return this.view(agent, await this.ctx.store.countInFlightByAgent(), this.ctx.clock.wallNow());
  }

  private view(a: AgentRecord, inFlight: Record<string, number>, now: number): AgentView {
    return { ...a, live: this.fleet.isLive(a.agentId, now), inFlight: inFlight[a.agentId] ?? 0 };
  }
}
