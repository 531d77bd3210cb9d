import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import { SqliteStore } from "../../coordinator/store/sqlite/sqlite-store.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

/**
 * kill -9 of the coordinator process with executions in flight: after a restart on the same
 * store nothing stays stuck, no nominal time fires twice, and the missed ones are recorded.
 */
describe("coordinator restart after kill -9", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  const agents: AgentProcess[] = [];
  let coordinator: ChildProcess | undefined;

  const startCoordinator = (configFile: string): ChildProcess => {
    const log = openSync(`${tmp.dir}/coordinator.log`, "a");
    const child = spawn(process.execPath, [AX, "coordinator", "start", "--config", configFile], {
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    return child;
  };
  const exited = (c: ChildProcess) =>
    c.exitCode !== null || c.signalCode !== null
      ? Promise.resolve()
      : new Promise<void>((r) => c.once("exit", () => r()));

  afterAll(async () => {
    if (coordinator) {
      coordinator.kill("SIGKILL");
      await exited(coordinator);
    }
    await Promise.all(agents.map((a) => a.stop(3000)));
    await broker?.close();
    tmp?.cleanup();
  });

  it("recovers: nothing stuck, nothing fired twice, the misfire policy applied", async () => {
    broker = await testBroker();
    tmp = tempDir();
    const storePath = `${tmp.dir}/ax.sqlite`;
    const jobsFile = `${tmp.dir}/jobs.json`;
    writeFileSync(
      jobsFile,
      JSON.stringify({
        jobs: [
          { id: "tick", handler: "echo", trigger: { type: "every", every: "1s" } },
          {
            id: "slow",
            handler: "sleep",
            params: { ms: 1500 },
            trigger: { type: "every", every: "2s" },
            overlap: { policy: "PARALLEL" },
            retry: { maxAttempts: 3, baseMs: 200 },
          },
        ],
      }),
    );
    const configFile = `${tmp.dir}/coordinator.json`;
    writeFileSync(
      configFile,
      JSON.stringify({
        store: { path: storePath },
        mqtt: { url: broker.url, prefix: broker.prefix },
        // Unsigned agents: this test is not about authentication (test/integration/security*.test.ts are).
        security: { messages: "off" },
        heartbeatMs: 500,
        misfireThresholdMs: 500,
        jobsFile,
      }),
    );
    coordinator = startCoordinator(configFile);
    for (const n of [1, 2]) {
      agents.push(
        spawnAgentProcess(tmp.dir, {
          agentId: `${broker.prefix}-r${n}`,
          mqtt: {
            url: broker.url,
            prefix: broker.prefix,
            keepaliveS: 5,
            reconnect: { baseMs: 100, capMs: 1000 },
          },
          heartbeatMs: 500,
        }),
      );
    }
    const peek = () => new SqliteStore({ path: storePath });
    await waitFor(
      "executions running",
      async () => {
        const s = peek();
        try {
          const running = await s.listExecutions({ jobId: "slow", states: ["RUNNING"] });
          const ticks = await s.listExecutions({ jobId: "tick", states: ["SUCCEEDED"] });
          return running.length > 0 && ticks.length >= 2 ? true : undefined;
        } finally {
          await s.close();
        }
      },
      30_000,
      100,
    );
    coordinator.kill("SIGKILL");
    await exited(coordinator);
    const killedAt = Date.now();
    const before = peek();
    const inFlight = (await before.listExecutions({ limit: 10_000 })).filter(
      (e) => !TERMINAL_STATES.has(e.state),
    );
    await before.close();
    expect(inFlight.length).toBeGreaterThan(0);

    await new Promise((r) => setTimeout(r, 3500)); // fires missed while the coordinator is down
    coordinator = startCoordinator(configFile);
    await waitFor(
      "every execution from before the kill to end",
      async () => {
        const s = peek();
        try {
          for (const e of inFlight) {
            const now = await s.getExecution(e.id);
            if (!now || !TERMINAL_STATES.has(now.state)) return undefined;
          }
          return true;
        } finally {
          await s.close();
        }
      },
      30_000,
      250,
    );
    await new Promise((r) => setTimeout(r, 1500));
    coordinator.kill("SIGTERM");
    await exited(coordinator);
    coordinator = undefined;

    const store = peek();
    try {
      const all = await store.listExecutions({ limit: 100_000 });
      for (const job of ["tick", "slow"]) {
        const times = all
          .filter((e) => e.jobId === job && e.scheduledFor !== null)
          .map((e) => e.scheduledFor);
        expect(new Set(times).size, `${job}: a nominal time fired twice`).toBe(times.length);
      }
      // FIRE_ONCE: the ~3 s of missed "tick" times fired once, late; the others are recorded missed.
      const counters = await store.counters();
      expect(counters.missed_fires ?? 0).toBeGreaterThanOrEqual(1);
      const lateTick = all.filter(
        (e) =>
          e.jobId === "tick" &&
          e.scheduledFor !== null &&
          e.scheduledFor > killedAt &&
          e.scheduledFor < killedAt + 3000,
      );
      expect(lateTick.length).toBeLessThanOrEqual(1);
      // Nothing the first process left in flight is stuck; a killed run was failed over or finished.
      for (const e of inFlight) {
        const now = await store.getExecution(e.id);
        expect(TERMINAL_STATES.has(now?.state ?? "PENDING")).toBe(true);
      }
    } finally {
      await store.close();
    }
  }, 90_000);
});
