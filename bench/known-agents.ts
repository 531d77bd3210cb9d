import type { Coordinator } from "../coordinator/coordinator.js";
import type { AgentRecord } from "../coordinator/store/port.js";

/**
 * Writes an offline agent record for each id to the coordinator's store and loads the fleet from
 * it, as a coordinator starting on a store that knows them would: what benches of a large known
 * fleet need, with no simulator. `shape` gives each its profile, handlers and tags.
 */
export async function knownOfflineAgents(
  coordinator: Coordinator,
  ids: readonly string[],
  shape: (i: number) => Pick<AgentRecord, "profile" | "handlers" | "tags">,
): Promise<void> {
  const now = Date.now();
  for (const [i, id] of ids.entries()) {
    await coordinator.store.putAgent({
      agentId: id,
      instanceId: id,
      journalId: id,
      ackedSeq: 0,
      status: "offline",
      bundleVersion: "0.1.0",
      bundleSha256: "0".repeat(64),
      concurrency: 2,
      queue: 16,
      connectedAt: now,
      lastSeenAt: now,
      clockOffsetMs: 0,
      clockUncertaintyMs: 1,
      load: 0,
      journalDepth: 0,
      outboxDepth: 0,
      ...shape(i),
    });
  }
  await coordinator.store.flush();
  await coordinator.fleet.load();
}
