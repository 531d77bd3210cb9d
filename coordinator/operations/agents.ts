import { AxError } from "../../shared/errors.js";
import type { EngineContext } from "../engine/context.js";
import type { Fleet } from "../engine/fleet.js";
import type { AgentRecord } from "../store/port.js";
import { type AgentUpdatePage, updateHistory } from "./agent-update.js";

/** An agent as the operator sees it: what it said, and what the coordinator makes of it now. */
export type AgentView = AgentRecord & {
  /** Online and not backing off after a busy answer. */
  live: boolean;
  /** Executions dispatched to it and not ended. */
  inFlight: number;
};

/** Filters and paging of the fleet listing (GET /api/agents); all but `limit` optional. */
export interface AgentQuery {
  status?: "online" | "offline" | undefined;
  tag?: Record<string, string> | undefined;
  profile?: string | undefined;
  version?: string | undefined;
  handler?: string | undefined;
  q?: string | undefined;
  limit: number;
  cursor?: string | undefined;
}

/** A page of the fleet, and how many agents match on all pages. */
export interface AgentPage {
  items: AgentView[];
  nextCursor: string | null;
  total: number;
  counts: { online: number; offline: number };
}

/** The index of the first of the ascending `ids` greater than `after` (binary search). */
function firstIndexAfter(ids: string[], after: string): number {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((ids[mid] as string) <= after) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The fleet, read: every agent the coordinator knows, online or not. */
export class AgentOperations {
  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
  ) {}

  /** Every known agent, by id. */
  async list(): Promise<AgentView[]> {
    return (await this.page({ limit: Number.MAX_SAFE_INTEGER })).items;
  }

  /**
   * One page of the fleet, by agent id, filtered. The fleet lives in memory, so this is a scan:
   * 10,000 agents filter in well under a millisecond, and only the page's agents are shaped.
   * The cursor is the last agent id of the previous page (keyset: agents that join or leave
   * between two pages neither repeat nor shift the others).
   */
  async page(query: AgentQuery): Promise<AgentPage> {
    await this.fleet.current();
    const q = query.q?.toLowerCase();
    const tags = Object.entries(query.tag ?? {});
    const matching = this.fleet
      .list()
      .filter(
        (a) =>
          (query.status === undefined || a.status === query.status) &&
          (query.profile === undefined || a.profile === query.profile) &&
          (query.version === undefined || a.bundleVersion === query.version) &&
          (query.handler === undefined || a.handlers.includes(query.handler)) &&
          (q === undefined || a.agentId.toLowerCase().includes(q)) &&
          tags.every(([k, v]) => a.tags[k] === v),
      );
    const counts = { online: 0, offline: 0 };
    for (const a of matching) counts[a.status] += 1;
    matching.sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0));
    const after = query.cursor;
    const start =
      after === undefined
        ? 0
        : firstIndexAfter(
            matching.map((a) => a.agentId),
            after,
          );
    const slice = matching.slice(start, start + query.limit);
    const more = start + query.limit < matching.length;
    const inFlight = await this.ctx.store.countInFlightByAgent();
    const now = this.ctx.clock.wallNow();
    return {
      items: slice.map((a) => this.view(a, inFlight, now)),
      nextCursor:
        more && slice.length > 0 ? (slice[slice.length - 1] as AgentRecord).agentId : null,
      total: matching.length,
      counts,
    };
  }

  /** One agent; AX_AGENT_NOT_FOUND when the coordinator has never heard from it. */
  async get(agentId: string): Promise<AgentView> {
    await this.fleet.current();
    const agent = this.fleet.get(agentId);
    if (!agent) {
      throw new AxError("AX_AGENT_NOT_FOUND", `agent "${agentId}" not found`, {
        context: { agentId },
      });
    }
    return this.view(agent, await this.ctx.store.countInFlightByAgent(), this.ctx.clock.wallNow());
  }

  /**
   * The agent's `agent.update` executions, newest first, with the version each went from and to
   * (see {@link updateHistory}); AX_AGENT_NOT_FOUND for an agent never heard from.
   */
  async updates(
    agentId: string,
    query: { limit: number; cursor?: string | undefined },
  ): Promise<AgentUpdatePage> {
    await this.fleet.current();
    if (!this.fleet.get(agentId)) {
      throw new AxError("AX_AGENT_NOT_FOUND", `agent "${agentId}" not found`, {
        context: { agentId },
      });
    }
    return updateHistory(this.ctx, agentId, query);
  }

  private view(a: AgentRecord, inFlight: Record<string, number>, now: number): AgentView {
    return { ...a, live: this.fleet.isLive(a.agentId, now), inFlight: inFlight[a.agentId] ?? 0 };
  }
}
