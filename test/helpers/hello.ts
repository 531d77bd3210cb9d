/**
 * The body of a hello from agent `agentId` (instance `i-<id>`, journal `j-<id>`, nothing sent
 * yet, the echo handler), for tests and benches that fake an agent. No vitest here, so a bench
 * can use it too.
 */
export function helloBody(agentId: string) {
  return {
    type: "hello" as const,
    agentId,
    instanceId: `i-${agentId}`,
    journalId: `j-${agentId}`,
    lastSeq: 0,
    profile: "test",
    bundle: { version: "test", sha256: "dev" },
    handlers: ["echo"],
    capacity: { concurrency: 4, queue: 4 },
    tags: {},
  };
}
