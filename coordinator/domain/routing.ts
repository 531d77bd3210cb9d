import { DEFAULT_VIRTUAL_NODES, HashRing, hash32 } from "./hash-ring.js";
import type { Routing } from "./job.js";
import { placeShards } from "./shard-placement.js";

export { DEFAULT_VIRTUAL_NODES, HashRing, hash32, MAX_VIRTUAL_NODES } from "./hash-ring.js";
export { placeShards } from "./shard-placement.js";

/**
 * What routing needs to know of an agent (the coordinator's agent record has these fields).
 * `load` is the last heartbeat's utilisation: the agent's running executions divided by its
 * `concurrency` when it sent the heartbeat, so 0 when idle and 1 with every slot taken (the
 * protocol only bounds it below, at 0; a value above 1 is used as it is).
 */
export interface RoutableAgent {
  agentId: string;
  handlers: readonly string[];
  /** The agent's tags, as announced in its hello. */
  tags: Readonly<Record<string, string>>;
  /** Utilisation at the last heartbeat, 0..1. */
  load: number;
  /** Executions the agent runs at once (its hello's `capacity.concurrency`). */
  concurrency: number;
}

/** Orders agent ids by UTF-16 code unit, so `agent-10` sorts before `agent-2`. */
function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** True when `tags` has every name of `selector` with the same value (an empty selector: any). */
export function matchesSelector(
  tags: Readonly<Record<string, string>>,
  selector: Readonly<Record<string, string>>,
): boolean {
  for (const name in selector) {
    if (!Object.hasOwn(tags, name) || tags[name] !== selector[name]) return false;
  }
  return true;
}

/**
 * Agents that `isLive` accepts (the caller folds in busy back-off), that have `handler` and whose
 * tags match `selector` (the job's `tags`), in the order given.
 */
export function eligibleAgents<A extends RoutableAgent>(
  agents: readonly A[],
  handler: string,
  isLive: (agent: A) => boolean,
  selector: Readonly<Record<string, string>> = {},
): A[] {
  return agents.filter(
    (a) => isLive(a) && a.handlers.includes(handler) && matchesSelector(a.tags, selector),
  );
}

/**
 * ROUND_ROBIN: the next agent, after the one chosen last time, among `candidates` (already
 * filtered to live agents with the handler), in agentId order so the rotation is stable.
 * The caller remembers the chosen agent's id as the next call's `lastAgentId`. With no last
 * choice, the rotation starts at the agent `key` hashes to (the lowest agentId without a key):
 * had every job started at the lowest, jobs that fire together would all go to one agent, then
 * all to the next, in step, for good.
 */
export function roundRobin<A extends RoutableAgent>(
  candidates: readonly A[],
  lastAgentId: string | undefined,
  key?: string,
): A | undefined {
  if (candidates.length === 0) return undefined;
  const sorted = [...candidates].sort((a, b) => compareIds(a.agentId, b.agentId));
  if (lastAgentId === undefined) {
    return key === undefined ? sorted[0] : sorted[hash32(key) % sorted.length];
  }
  return sorted.find((a) => a.agentId > lastAgentId) ?? sorted[0];
}

/**
 * The value of the dotted `path` (`deviceId`, `device.id`, `sensors.0`) in an execution's
 * params, as the string CONSISTENT_HASH and STICKY hash; undefined when the path is not there.
 * A string is used as it is; anything else as canonical JSON (object keys sorted), so `42` and
 * `"42"` hash alike and `{a,b}` equals `{b,a}`.
 */
export function hashKeyValue(params: unknown, path: string): string | undefined {
  let value = params;
  for (const segment of path.split(".")) {
    if (value === null || typeof value !== "object" || !Object.hasOwn(value, segment)) {
      return undefined;
    }
    value = (value as Record<string, unknown>)[segment];
  }
  if (value === undefined) return undefined;
  return typeof value === "string" ? value : canonicalJson(value);
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) {
    return `[${value.map((v) => (v === undefined ? "null" : canonicalJson(v))).join(",")}]`;
  }
  if (value !== null && typeof value === "object") {
    const entries = Object.keys(value)
      .sort(compareIds)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(",")}}`;
  }
  return JSON.stringify(value) ?? String(value);
}

/** One routing decision's input, besides the candidates and the time. */
export interface RouteRequest {
  /** The job's routing (its parsed `routing` field; for a command, its own). */
  routing: Routing;
  /**
   * Whose state this decision reads and updates: the job id, or `handler:NAME` for a command.
   * It is also what CONSISTENT_HASH hashes when `hashValue` is absent.
   */
  key: string;
  /**
   * What CONSISTENT_HASH and STICKY's fallback hash: `hashKeyValue(params, routing.hashKey)`.
   * @default key
   */
  hashValue?: string | undefined;
  /** The execution's shard when its job is sharded (SHARD_BROADCAST). @default {index:0,total:1} */
  shard?: { index: number; total: number } | undefined;
  /**
   * Executions dispatched to the agent and not ended yet, counting those dispatched earlier in
   * the same pass (LEAST_LOADED). @default none
   */
  inFlight?: ((agentId: string) => number) | undefined;
  /** Uniform in [0, 1) (RANDOM). @default Math.random */
  random?: (() => number) | undefined;
}

/** Limits of a Router's caches. */
export interface RouterOptions {
  /**
   * Points (8 bytes each) of all cached consistent-hash rings together; past it the least
   * recently used rings are dropped, though the one in use is always kept. @default 4194304
   */
  maxRingPoints?: number;
}

interface CachedRing {
  ring: HashRing;
  /** For each of the ring's agents, its index in the candidate list the cache key spells. */
  position: Int32Array;
}

interface ShardState {
  total: number;
  /** The candidates' ids in the order last given, joined: unchanged → placement unchanged. */
  candidates: string;
  /** Agents by shard index; a remembered placement may lack some. */
  placement: (string | undefined)[];
}

interface LastUse {
  at: number;
  /** Breaks ties between dispatches in the same millisecond: later is larger. */
  seq: number;
}

/** Separates ids in cache keys; ids (ID_PATTERN) never contain it. */
const SEP = "\u0000";

/**
 * What a key's past executions say about where it ran, for a Router that has routed none of it
 * yet ({@link Router.remember}); {@link routingMemoryOf} reads it from the store's records.
 */
export interface RoutingMemory {
  /** The agent of the key's latest execution that SUCCEEDED (STICKY goes back to it). */
  succeeded?: string | undefined;
  /** The agent each shard last had, by shard index, for a job of `total` shards. */
  shards?: { total: number; placement: (string | undefined)[] } | undefined;
}

/** A past execution of a key, as routing remembers it: where it ran, how it ended, its shard. */
export interface PastRoute {
  agentId: string | null;
  state: string;
  shardIndex: number | null;
  shardTotal: number | null;
}

/**
 * The memory that a job's executions, newest first, give for a firing of `shardTotal` shards
 * (null: not sharded): the agent of the latest that SUCCEEDED, and each shard's latest agent
 * among the executions of the same shard count.
 */
export function routingMemoryOf(
  recent: readonly PastRoute[],
  shardTotal: number | null,
): RoutingMemory {
  const memory: RoutingMemory = {};
  memory.succeeded = recent.find((r) => r.state === "SUCCEEDED")?.agentId ?? undefined;
  if (shardTotal !== null && shardTotal > 0) {
    const placement = new Array<string | undefined>(shardTotal).fill(undefined);
    let seen = false;
    for (const r of recent) {
      const i = r.shardIndex;
      if (r.shardTotal !== shardTotal || i === null || i < 0 || i >= shardTotal) continue;
      if (placement[i] !== undefined || r.agentId === null) continue;
      placement[i] = r.agentId;
      seen = true;
    }
    if (seen) memory.shards = { total: shardTotal, placement };
  }
  return memory;
}

/**
 * Chooses the agent for an execution by its job's routing strategy, keeping the little state the
 * strategies need in memory: a round-robin cursor per key, the last dispatch time per agent
 * (LEAST_RECENTLY_USED and LEAST_LOADED's tie-break), the agent that last succeeded per key
 * (STICKY), consistent-hash rings per candidate set, and shard placements per key
 * (SHARD_BROADCAST). It does no I/O and reads no clock. The state starts empty in a new process;
 * its caller gives it what the store says of a key's past ({@link remember}) before the key's
 * first STICKY or SHARD_BROADCAST choice, so that the agent STICKY follows and the shards'
 * placement carry over a restart or a change of active coordinator. Rotations and LRU order start
 * over.
 */
export class Router {
  private readonly cursors = new Map<string, string>();
  private readonly lastUse = new Map<string, LastUse>();
  private useSeq = 0;
  private readonly succeeded = new Map<string, string>();
  private readonly rings = new Map<string, CachedRing>();
  private ringPoints = 0;
  private readonly shards = new Map<string, ShardState>();
  /** Keys whose memory was given ({@link remember}), or that needed none. */
  private readonly remembered = new Set<string>();
  private readonly maxRingPoints: number;

  constructor(options: RouterOptions = {}) {
    this.maxRingPoints = options.maxRingPoints ?? 4 * 1024 * 1024;
  }

  /**
   * The agent to dispatch to, among `candidates` (live agents with the handler and the job's
   * tags, each once), or undefined when none fits: no candidates, or none that TARGET names.
   * Choosing counts as dispatching at `now`: it advances the round-robin cursor of
   * `request.key` and marks the agent used (see `noteDispatched`).
   */
  choose<A extends RoutableAgent>(
    request: RouteRequest,
    candidates: readonly A[],
    now: number,
  ): A | undefined {
    const chosen = this.pick(request, candidates);
    if (chosen !== undefined) {
      const strategy = request.routing.strategy;
      if (strategy === "ROUND_ROBIN" || strategy === "TARGET") {
        this.cursors.set(request.key, chosen.agentId);
      }
      this.noteDispatched(chosen.agentId, now);
    }
    return chosen;
  }

  /**
   * Records a dispatch to `agentId` at `now` made without `choose` (a redispatch to the same
   * agent, a command for one device), so LEAST_RECENTLY_USED sees it.
   */
  noteDispatched(agentId: string, now: number): void {
    this.lastUse.set(agentId, { at: now, seq: ++this.useSeq });
  }

  /** Records that `agentId` ran an execution of `key` successfully (STICKY follows it). */
  noteSucceeded(key: string, agentId: string): void {
    this.succeeded.set(key, agentId);
  }

  /**
   * Forgets an agent that left the fleet for good (not one that is merely offline: STICKY and
   * SHARD_BROADCAST are meant to come back to it): its last use, the keys it was sticky for and
   * the rings it is on.
   */
  forgetAgent(agentId: string): void {
    this.lastUse.delete(agentId);
    for (const [key, agent] of this.succeeded) if (agent === agentId) this.succeeded.delete(key);
    for (const [key, cached] of this.rings) {
      if (cached.ring.agentIds.includes(agentId)) this.dropRing(key, cached);
    }
  }

  /**
   * True until `key`'s memory is given: a STICKY or SHARD_BROADCAST choice for it should then
   * wait for {@link remember}.
   */
  needsMemory(key: string): boolean {
    return !this.remembered.has(key);
  }

  /**
   * Takes what the store says of `key`'s past, where this process knows nothing newer: the agent
   * it last succeeded on, and the placement of its shards, which a later change of candidates
   * then moves as little as it would have in the process that made it.
   */
  remember(key: string, memory: RoutingMemory): void {
    if (this.remembered.has(key)) return;
    this.remembered.add(key);
    if (memory.succeeded !== undefined && !this.succeeded.has(key)) {
      this.succeeded.set(key, memory.succeeded);
    }
    if (memory.shards !== undefined && !this.shards.has(key)) {
      // No candidate list matches "": the next choice places the shards again, from this one.
      this.shards.set(key, {
        total: memory.shards.total,
        candidates: "",
        placement: memory.shards.placement,
      });
    }
  }

  /** Forgets a deleted job's (or command handler's) cursor, sticky agent and shard placement. */
  forgetKey(key: string): void {
    this.cursors.delete(key);
    this.succeeded.delete(key);
    this.shards.delete(key);
    this.remembered.delete(key);
  }

  /** The current shard placement of `key` (agentIds by shard index), if one was made. */
  shardPlacement(key: string): readonly (string | undefined)[] | undefined {
    return this.shards.get(key)?.placement;
  }

  /** How many consistent-hash rings are cached. */
  get cachedRings(): number {
    return this.rings.size;
  }

  private pick<A extends RoutableAgent>(
    request: RouteRequest,
    candidates: readonly A[],
  ): A | undefined {
    if (candidates.length === 0) return undefined;
    const { routing, key } = request;
    switch (routing.strategy) {
      case "FIRST":
        return lowestId(candidates);
      case "ROUND_ROBIN":
        return roundRobin(candidates, this.cursors.get(key), key);
      case "RANDOM": {
        const r = (request.random ?? Math.random)();
        return candidates[Math.min(candidates.length - 1, Math.floor(r * candidates.length))];
      }
      case "CONSISTENT_HASH":
        return this.hashed(request, candidates);
      case "LEAST_LOADED":
        return this.leastLoaded(candidates, request.inFlight);
      case "LEAST_RECENTLY_USED":
        return this.leastRecentlyUsed(candidates);
      case "STICKY": {
        const last = this.succeeded.get(key);
        return candidates.find((a) => a.agentId === last) ?? this.hashed(request, candidates);
      }
      case "FAILOVER":
        return routing.agents === undefined
          ? lowestId(candidates)
          : firstListed(routing.agents, candidates);
      case "SHARD_BROADCAST":
        return this.sharded(request, candidates);
      case "TARGET": {
        const targets = candidates.filter(
          (a) =>
            (routing.agents === undefined || routing.agents.includes(a.agentId)) &&
            (routing.selector === undefined || matchesSelector(a.tags, routing.selector)),
        );
        return roundRobin(targets, this.cursors.get(key), key);
      }
    }
  }

  private hashed<A extends RoutableAgent>(
    request: RouteRequest,
    candidates: readonly A[],
  ): A | undefined {
    const vnodes = request.routing.virtualNodes ?? DEFAULT_VIRTUAL_NODES;
    let ids = `${vnodes}`;
    for (const a of candidates) ids += SEP + a.agentId;
    let cached = this.rings.get(ids);
    if (cached === undefined) {
      cached = ringFor(candidates, vnodes);
      this.ringPoints += cached.ring.size;
      for (const [key, old] of this.rings) {
        if (this.ringPoints <= this.maxRingPoints) break;
        this.dropRing(key, old);
      }
    } else {
      // Refresh its place in the eviction order (a Map iterates in insertion order).
      this.rings.delete(ids);
    }
    this.rings.set(ids, cached);
    const owner = cached.ring.ownerIndex(hash32(request.hashValue ?? request.key));
    return candidates[cached.position[owner] as number];
  }

  private dropRing(key: string, cached: CachedRing): void {
    this.rings.delete(key);
    this.ringPoints -= cached.ring.size;
  }

  private leastLoaded<A extends RoutableAgent>(
    candidates: readonly A[],
    inFlight: RouteRequest["inFlight"],
  ): A | undefined {
    let best: A | undefined;
    let bestScore = Number.POSITIVE_INFINITY;
    for (const a of candidates) {
      const score = a.load + (inFlight?.(a.agentId) ?? 0) / Math.max(1, a.concurrency);
      if (
        best === undefined ||
        score < bestScore ||
        (score === bestScore && this.usedBefore(a.agentId, best.agentId))
      ) {
        best = a;
        bestScore = score;
      }
    }
    return best;
  }

  private leastRecentlyUsed<A extends RoutableAgent>(candidates: readonly A[]): A | undefined {
    let best: A | undefined;
    for (const a of candidates) {
      if (best === undefined || this.usedBefore(a.agentId, best.agentId)) best = a;
    }
    return best;
  }

  /** True when `a` was last used before `b`: never used first, then by time, then by agentId. */
  private usedBefore(a: string, b: string): boolean {
    const ua = this.lastUse.get(a);
    const ub = this.lastUse.get(b);
    if (ua === undefined || ub === undefined) {
      if (ua !== ub) return ua === undefined;
      return a < b;
    }
    if (ua.at !== ub.at) return ua.at < ub.at;
    if (ua.seq !== ub.seq) return ua.seq < ub.seq;
    return a < b;
  }

  private sharded<A extends RoutableAgent>(
    request: RouteRequest,
    candidates: readonly A[],
  ): A | undefined {
    const { index, total } = request.shard ?? { index: 0, total: 1 };
    let ids = "";
    for (const a of candidates) ids += SEP + a.agentId;
    let state = this.shards.get(request.key);
    if (state === undefined || state.total !== total || state.candidates !== ids) {
      const placement = placeShards(
        request.key,
        total,
        candidates.map((a) => a.agentId),
        state?.total === total ? state.placement : undefined,
      );
      state = { total, candidates: ids, placement };
      this.shards.set(request.key, state);
    }
    const agentId = state.placement[index];
    return candidates.find((a) => a.agentId === agentId);
  }
}

function ringFor(candidates: readonly RoutableAgent[], vnodes: number): CachedRing {
  const ring = HashRing.build(
    candidates.map((a) => a.agentId),
    vnodes,
  );
  const position = new Int32Array(ring.agentIds.length);
  const at = new Map(candidates.map((a, i) => [a.agentId, i]));
  ring.agentIds.forEach((id, i) => {
    position[i] = at.get(id) as number;
  });
  return { ring, position };
}

function lowestId<A extends RoutableAgent>(candidates: readonly A[]): A | undefined {
  let best: A | undefined;
  for (const a of candidates) if (best === undefined || a.agentId < best.agentId) best = a;
  return best;
}

function firstListed<A extends RoutableAgent>(
  order: readonly string[],
  candidates: readonly A[],
): A | undefined {
  for (const id of order) {
    const found = candidates.find((a) => a.agentId === id);
    if (found !== undefined) return found;
  }
  return undefined;
}
