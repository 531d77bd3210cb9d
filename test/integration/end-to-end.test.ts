import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForAgentsOnline,
  waitForEnd,
} from "../helpers/env.js";

/**
 * The foundation's proof on real parts: a broker, a coordinator on a SQLite file, and two agents
 * as child processes. A job every 1 s for 5 s runs 4 to 6 times, each nominal time once, each
 * with a timeline from PENDING to SUCCEEDED; a malformed message disturbs nothing.
 */
describe("a job runs end to end", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  const agents: AgentProcess[] = [];

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 1000);
    for (const n of [1, 2]) {
      agents.push(
        spawnAgentProcess(tmp.dir, {
          agentId: `${broker.prefix}-agent-${n}`,
          mqtt: { url: broker.url, prefix: broker.prefix, keepaliveS: 5 },
          heartbeatMs: 1000,
        }),
      );
    }
    await waitForAgentsOnline(coordinator, 2);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop(5000)));
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("fires every second for five seconds, each nominal time once, and every run succeeds", async () => {
    const jobId = "every-second";
    await coordinator.putJob({
      id: jobId,
      handler: "echo",
      params: { n: 1 },
      trigger: { type: "every", every: "1s" },
    });

    // A malformed message on an agent's up topic, mid-run: rejected, counted, nothing else.
    await new Promise((r) => setTimeout(r, 2000));
    const intruder = await mqtt.connectAsync(broker.url, { clientId: `${broker.prefix}-x` });
    await intruder.publishAsync(
      `${broker.prefix}/v1/agents/${agents[0]?.agentId}/up`,
      '{"v":1,"type":"finished"',
      {
        qos: 1,
      },
    );
    await intruder.publishAsync(
      `${broker.prefix}/v1/agents/${agents[0]?.agentId}/up`,
      JSON.stringify({
        v: 1,
        type: "finished",
        msgId: "x1",
        sentAt: 1,
        executionId: "ex",
        round: 0,
      }),
      { qos: 1 },
    );
    await intruder.endAsync();
    await new Promise((r) => setTimeout(r, 3000));

    expect(await coordinator.store.getJob(jobId)).toBeDefined();
    const pausedAt = Date.now();
    await coordinator.pauseJob(jobId);
    const ended = await waitFor(
      "every execution of the job to end",
      async () => {
        const all = await coordinator.store.listExecutions({ jobId });
        return all.every((e) => TERMINAL_STATES.has(e.state)) ? all : undefined;
      },
      20_000,
    );
    // The pause cancels a fire made ahead of its time (the 500 ms dispatch lead) that had not
    // started: only one due after the pause.
    for (const e of ended.filter((x) => x.state === "CANCELED")) {
      expect(e.fireAt).toBeGreaterThan(pausedAt - 5);
    }
    const executions = ended.filter((e) => e.state !== "CANCELED");

    expect(executions.length).toBeGreaterThanOrEqual(4);
    expect(executions.length).toBeLessThanOrEqual(6);
    expect(executions.map((e) => e.state)).toEqual(executions.map(() => "SUCCEEDED"));
    // Each nominal time fired once, one second apart.
    const fireTimes = executions.map((e) => e.fireAt).sort((a, b) => a - b);
    expect(new Set(fireTimes).size).toBe(fireTimes.length);
    for (let i = 1; i < fireTimes.length; i++) {
      expect((fireTimes[i] ?? 0) - (fireTimes[i - 1] ?? 0)).toBe(1000);
    }
    // Round robin used both agents.
    expect(new Set(executions.map((e) => e.agentId)).size).toBe(2);

    for (const e of executions) {
      const timeline = await coordinator.store.getTimeline(e.id);
      expect(timeline.map((t) => t.toState)).toEqual([
        "PENDING",
        "DISPATCHED",
        "SCHEDULED",
        "RUNNING",
        "SUCCEEDED",
      ]);
      expect(e.result).toEqual({ echo: { n: 1 } });
      expect(e.lateMs).toBeGreaterThanOrEqual(0);
      expect(e.startedAt ?? 0).toBeGreaterThanOrEqual(e.fireAt - 50);
    }

    const counters = await coordinator.store.counters();
    expect(counters.invalid_messages).toBe(2);
    // The agents are still registered and online: nothing was disturbed.
    expect(coordinator.fleet.list().map((a: { status: string }) => a.status)).toEqual([
      "online",
      "online",
    ]);
  }, 60_000);

  it("runs a device command on its target agent at its time", async () => {
    const agentId = agents[1]?.agentId ?? "";
    const at = Date.now() + 1500;
    const id = await coordinator.sendCommand({
      agentId,
      handler: "echo",
      params: { relay: "on" },
      at,
      deadline: at + 5000,
    });
    const done: ExecutionRecord = await waitForEnd(coordinator, id);
    expect(done.state).toBe("SUCCEEDED");
    expect(done.agentId).toBe(agentId);
    expect(done.startedAt ?? 0).toBeGreaterThanOrEqual(at - 50);
  }, 30_000);

  it("keeps no lease for an execution that has ended", async () => {
    // Once every execution has ended the lease table must be empty: it must not keep one entry
    // per execution that ever ran (it once grew by 2,000 a second at 2,000 fires/s).
    await coordinator.pauseJob("every-second");
    await waitFor("every execution ended", async () => {
      const open = await coordinator.store.countOpenExecutions();
      return Object.values(open).every((n) => !n) ? true : undefined;
    });
    await waitFor("the lease table to empty", () =>
      coordinator.leases.size === 0 ? true : undefined,
    );
  });
});
