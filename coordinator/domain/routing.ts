/** What routing needs to know of an agent. */
export interface RoutableAgent {
  agentId: string;
  handlers: readonly string[];
}

/**
 * ROUND_ROBIN: the next agent, after the one chosen last time, among `candidates` (already
 * filtered to live agents with the handler), in agentId order so the rotation is stable.
 * The caller remembers the chosen agent's id as the next call's `lastAgentId`.
 */
export function roundRobin<A extends RoutableAgent>(
  candidates: readonly A[],
  lastAgentId: string | undefined,
): A | undefined {
  if (candidates.length === 0) return undefined;
  const sorted = [...candidates].sort((a, b) =>
    a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0,
  );
  if (lastAgentId === undefined) return sorted[0];
  return sorted.find((a) => a.agentId > lastAgentId) ?? sorted[0];
}

/** Agents that `isLive` accepts (the caller folds in busy back-off) and that have `handler`. */
export function eligibleAgents<A extends RoutableAgent>(
  agents: readonly A[],
  handler: string,
  isLive: (agent: A) => boolean,
): A[] {
  return agents.filter((a) => isLive(a) && a.handlers.includes(handler));
}
