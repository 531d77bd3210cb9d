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

  it("starts two bursts in two windows, each start once and never early, and never starts a cancelled one", async () => {
    const first = Date.now() + 1_500;
    // 300 ms apart: past the gap that closes a window, so the second burst is a window of its own.
    const second = first + 300;
    const a = await coordinator.sendCommands({
      selector: { fleet: "sim" },
      handler: "echo",
      params: { burst: 1 },
      at: first,
    });
    const b = await coordinator.sendCommands({
      selector: { fleet: "sim" },
      handler: "echo",
      params: { burst: 2 },
      at: second,
    });
    const [doomed] = await coordinator.sendCommands({
      agentId: "sim-0",
      handler: "echo",
      params: { burst: "cancelled" },
      at: second,
    });
    if (doomed === undefined) throw new Error("no execution for sim-0");
    const agent0 = sim.agents.find((x) => x.spec.agentId === "sim-0");
    await waitFor("sim-0 to hold the command it will lose", () =>
      agent0?.journal.get(doomed.executionId)?.state === "scheduled" ? true : undefined,
    );
    await coordinator.executions.cancel(doomed.executionId, "test");
    const all = [...a, ...b];
    await waitFor("both bursts to succeed", async () => {
      const records = await Promise.all(
        all.map((t) => coordinator.store.getExecution(t.executionId)),
      );
      return records.every((r) => r?.state === "SUCCEEDED") ? true : undefined;
    });
    for (const [fireAt, targets] of [
      [first, a],
      [second, b],
    ] as const) {
      for (const t of targets) {
        const command = sim.agents
          .find((x) => x.spec.agentId === t.agentId)
          ?.journal.get(t.executionId);
        expect(command?.runs, t.executionId).toBe(1);
        // Stamped once the estimate less its bound reached fireAt (rule 12), and by a window
        // armed for its burst, not one that waited for the first burst's reports.
        const startedAt = command?.startedAt as number;
        expect(startedAt - (command?.uncertaintyAtStart as number)).toBeGreaterThanOrEqual(fireAt);
        expect(command?.timerLateMs).toBeGreaterThanOrEqual(0);
        expect(command?.timerLateMs).toBeLessThan(250);
      }
    }
    const lost = agent0?.journal.get(doomed.executionId);
    expect(lost?.runs).toBe(0);
    expect(lost?.startedAt).toBeUndefined();
    expect((await coordinator.store.getExecution(doomed.executionId))?.state).toBe("CANCELED");
  });
});
