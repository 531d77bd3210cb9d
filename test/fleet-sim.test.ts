import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enrolSimAgents, Simulator } from "../bench/fleet-sim/simulator.js";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator } from "../coordinator/coordinator.js";
import { newId } from "../shared/ids.js";
import { tempDir, waitFor } from "./helpers/env.js";

/**
 * The fleet simulator of bench/fleet.ts against a real coordinator (messages authenticated, its
 * default) on the embedded broker: its agents come online, run a command sent to all of them by
 * tag, and what their in-memory journals say happened is what the store recorded.
 */
describe("fleet simulator", () => {
  const AGENTS = 20;
  const tmp = tempDir("ax-fleet-sim-");
  const prefix = `axs${newId().slice(-8)}`;
  let broker: Awaited<ReturnType<typeof startEmbeddedBroker>>;
  let coordinator: Coordinator;
  let sim: Simulator;

  beforeAll(async () => {
    broker = await startEmbeddedBroker(0);
    coordinator = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.sqlite") },
        mqtt: { url: broker.url, prefix },
        heartbeatMs: 1_000,
      }),
    );
    await coordinator.start();
    const ids = Array.from({ length: AGENTS }, (_, i) => `sim-${i}`);
    const specs = await enrolSimAgents(coordinator, ids, { fleet: "sim" }, "test");
    sim = new Simulator({ host: "127.0.0.1", port: broker.port, prefix, agents: specs });
    sim.start();
  });

  afterAll(async () => {
    sim?.close();
    await coordinator?.close();
    await broker?.close();
    tmp.cleanup();
  });

  it("comes online, runs a command by tag once on every agent, and agrees with the store", async () => {
    await waitFor("every simulated agent online", () =>
      coordinator.fleet.list().filter((a) => a.status === "online").length === AGENTS
        ? true
        : undefined,
    );
    const fireAt = Date.now() + 1_500;
    const targets = await coordinator.sendCommands({
      selector: { fleet: "sim" },
      handler: "echo",
      params: { hello: "fleet" },
      at: fireAt,
    });
    expect(targets).toHaveLength(AGENTS);
    const done = await waitFor("every execution to succeed", async () => {
      const records = await Promise.all(
        targets.map((t) => coordinator.store.getExecution(t.executionId)),
      );
      return records.every((r) => r?.state === "SUCCEEDED") ? records : undefined;
    });
    for (const [i, t] of targets.entries()) {
      const record = done[i];
      const agent = sim.agents.find((a) => a.spec.agentId === t.agentId);
      const command = agent?.journal.get(t.executionId);
      expect(command?.runs, t.executionId).toBe(1);
      expect(command?.state).toBe("succeeded");
      expect(record?.agentId).toBe(t.agentId);
      expect(record?.startedAt).toBe(command?.startedAt);
      // Never early (rule 12): the start waits for the estimate less its uncertainty.
      expect(record?.startedAt).toBeGreaterThanOrEqual(fireAt);
    }
    // Every simulated agent ran exactly the one command it was sent.
    expect(sim.agents.reduce((n, a) => n + a.journal.size, 0)).toBe(AGENTS);
    expect(sim.counters.refused).toBe(0);
    expect(sim.counters.invalid).toBe(0);
  });
});
