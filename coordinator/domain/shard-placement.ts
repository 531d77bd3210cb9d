import { hash32, mix32 } from "./hash-ring.js";

/** A shard's rendezvous rank with an agent: the higher, the more the shard prefers the agent. */
function shardRank(shardSeed: number, agentHash: number): number {
  return mix32(shardSeed ^ agentHash);
}

/**
 * SHARD_BROADCAST: which agent runs each of a job's `total` shards, as agentIds by shard index
 * (empty when no agent is live). Deterministic for the same inputs, whatever the order of
 * `liveAgentIds`.
 *
 * - Without `previous` (or with one for another `total`), shard by shard in index order each goes
 *   to the agent with the fewest shards so far, ties to the agent the shard ranks highest
 *   (rendezvous hashing on jobKey, shard and agentId): with total ≤ agents every shard gets its
 *   own agent, otherwise every agent gets ⌊total/agents⌋ or ⌈total/agents⌉.
 * - With `previous`, a shard whose agent is still live stays there; only the shards of agents
 *   that went away (or that `previous` lacks) move, each to the agent with the fewest shards (same tie-break). An agent
 *   that joins takes nothing from the others: it fills up as shards move, and since moving
 *   shards go to the emptiest agents first the spread evens out again as agents come and go.
 */
export function placeShards(
  jobKey: string,
  total: number,
  liveAgentIds: readonly string[],
  previous?: readonly (string | undefined)[],
): string[] {
  // The default sort orders strings by UTF-16 code unit, as agentIds are ordered elsewhere.
  const ids = [...new Set(liveAgentIds)].sort();
  if (ids.length === 0 || total < 1) return [];
  const index = new Map(ids.map((id, i) => [id, i]));
  const agentHashes = ids.map(hash32);
  const counts = new Array<number>(ids.length).fill(0);
  const placement = new Array<string>(total);
  const open: number[] = [];
  for (let shard = 0; shard < total; shard++) {
    const kept = previous?.length === total ? previous[shard] : undefined;
    const at = kept === undefined ? undefined : index.get(kept);
    if (at === undefined) {
      open.push(shard);
    } else {
      placement[shard] = kept as string;
      counts[at] = (counts[at] as number) + 1;
    }
  }
  for (const shard of open) {
    const seed = hash32(`${jobKey}#${shard}`);
    let best = 0;
    let bestRank = -1;
    for (let a = 0; a < ids.length; a++) {
      const count = counts[a] as number;
      const bestCount = counts[best] as number;
      if (count > bestCount) continue;
      const rank = shardRank(seed, agentHashes[a] as number);
      if (count < bestCount || rank > bestRank) {
        best = a;
        bestRank = rank;
      }
    }
    placement[shard] = ids[best] as string;
    counts[best] = (counts[best] as number) + 1;
  }
  return placement;
}
