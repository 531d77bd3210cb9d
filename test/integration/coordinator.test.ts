import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import { isAxError } from "../../shared/errors.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForEnd,
} from "../helpers/env.js";

/** Operator control and leases, on a real broker, a real store and a real agent process. */
describe("coordinator: control and leases", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let agent: AgentProcess;
  let agentId: string;

  const ended = (id: string, timeoutMs = 15_000) => waitForEnd(coordinator, id, timeoutMs);

  const startAgent = () =>
    spawnAgentProcess(tmp.dir, {
      agentId,
      mqtt: {
        url: broker.url,
        prefix: broker.prefix,
        keepaliveS: 5,
        reconnect: { baseMs: 100, capMs: 1000 },
      },
      heartbeatMs: 500,
    });

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    agentId = `${broker.prefix}-c1`;
    coordinator = await startTestCoordinator(broker, tmp.dir, 500);
    agent = startAgent();
    await waitFor("agent online", () =>
      coordinator.fleet.get(agentId)?.status === "online" ? true : undefined,
    );
  }, 60_000);

  afterAll(async () => {
    await agent?.stop(3000);
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("cancels a pending execution at once, and a running one through the agent", async () => {
    const pending = await coordinator.sendCommand({
      agentId: "nobody-here",
      queue: true,
      handler: "echo",
      deadline: Date.now() + 60_000,
    });
    const canceled = await coordinator.cancelExecution(pending);
    expect(canceled.state).toBe("CANCELED");

    const running = await coordinator.sendCommand({
      agentId,
      handler: "sleep",
      params: { ms: 20_000 },
    });
    await waitFor("running", async () =>
      (await coordinator.store.getExecution(running))?.state === "RUNNING" ? true : undefined,
    );
    await coordinator.cancelExecution(running);
    const done = await ended(running);
    expect(done.state).toBe("CANCELED");
    const events = (await coordinator.store.getTimeline(running)).map(
      (t) => `${t.event}:${t.toState}`,
    );
    expect(events).toContain("cancel:RUNNING");
    expect(events.at(-1)).toBe("finished:CANCELED");

    await expect(coordinator.cancelExecution(running)).rejects.toSatisfy(
      (e) =>
        isAxError(e, "AX_EXEC_CONFLICT") &&
        e.message === `execution "${running}" already ended CANCELED`,
    );
    await expect(coordinator.cancelExecution("ex_nope")).rejects.toSatisfy((e) =>
      isAxError(e, "AX_EXEC_NOT_FOUND"),
    );
  }, 30_000);

  it("retries a failed execution as a new attempt, and refuses to retry one that succeeded", async () => {
    const failed = await coordinator.sendCommand({
      agentId,
      handler: "fail",
      params: { retryable: false, message: "relay stuck" },
    });
    const first = await ended(failed);
    expect(first.state).toBe("FAILED");
    expect(first.message).toBe("relay stuck");
    const retryId = await coordinator.retryExecution(failed);
    const second: ExecutionRecord = await ended(retryId);
    expect(second.state).toBe("FAILED");
    expect(second.attempt).toBe(1);
    expect(second.handler).toBe("fail");
    const ok = await coordinator.sendCommand({ agentId, handler: "echo" });
    await ended(ok);
    await expect(coordinator.retryExecution(ok)).rejects.toSatisfy((e) =>
      isAxError(e, "AX_EXEC_CONFLICT"),
    );
  }, 30_000);

  it("triggers a manual run, and pauses and resumes a job", async () => {
    // PARALLEL: with the default SKIP, a scheduled run still in flight when the manual one was
    // dispatched skipped it (a race a loaded machine lost once in CI).
    await coordinator.putJob({
      id: "pausable",
      handler: "echo",
      trigger: { type: "every", every: "1s" },
      overlap: { policy: "PARALLEL" },
    });
    const manual = await coordinator.triggerJob("pausable");
    expect((await ended(manual)).state).toBe("SUCCEEDED");
    await coordinator.pauseJob("pausable");
    await new Promise((r) => setTimeout(r, 1500));
    const before = (await coordinator.store.listExecutions({ jobId: "pausable" })).length;
    await new Promise((r) => setTimeout(r, 2500));
    expect((await coordinator.store.listExecutions({ jobId: "pausable" })).length).toBe(before);
    await coordinator.resumeJob("pausable");
    await waitFor("a fire after resume", async () =>
      (await coordinator.store.listExecutions({ jobId: "pausable" })).length > before
        ? true
        : undefined,
    );
    await coordinator.pauseJob("pausable");
  }, 30_000);

  it("fires event-triggered jobs from an MQTT event, once per message, with the payload in params", async () => {
    await coordinator.putJob({
      id: "on-door",
      handler: "echo",
      params: { site: "north" },
      trigger: { type: "event", name: "door-open" },
    });
    const client = await mqtt.connectAsync(broker.url, { clientId: `${broker.prefix}-ev` });
    const message = JSON.stringify({
      v: 1,
      type: "event",
      msgId: "ev-1",
      sentAt: Date.now(),
      payload: { door: 7 },
    });
    await client.publishAsync(`${broker.prefix}/v1/events/door-open`, message, { qos: 1 });
    await client.publishAsync(`${broker.prefix}/v1/events/door-open`, message, { qos: 1 }); // redelivered
    await client.endAsync();
    const [exec] = await waitFor("the event's execution", async () => {
      const list = await coordinator.store.listExecutions({ jobId: "on-door" });
      return list.length > 0 ? list : undefined;
    });
    const done = await ended(exec?.id ?? "");
    expect(done.state).toBe("SUCCEEDED");
    expect(done.result).toEqual({ echo: { site: "north", door: 7 } });
    await new Promise((r) => setTimeout(r, 300));
    expect(await coordinator.store.listExecutions({ jobId: "on-door" })).toHaveLength(1);
    expect((await coordinator.store.counters()).duplicate_events).toBe(1);
  }, 30_000);

  it("fires a job after another ends in a listed state, with its outcome in params", async () => {
    /**
     * Defines `source` (run by hand) and `follower` (after it, in `state`), runs the source and
     * waits for the follower's end: the source's execution id and the follower's result.
     */
    const follow = async (
      source: { id: string; handler: string; params: Record<string, unknown> },
      follower: string,
      state: "SUCCEEDED" | "FAILED",
    ) => {
      await coordinator.putJob({ ...source, trigger: { type: "manual" } });
      await coordinator.putJob({
        id: follower,
        handler: "echo",
        trigger: { type: "after", job: source.id, states: [state] },
      });
      const sourceExec = await coordinator.triggerJob(source.id);
      await ended(sourceExec);
      const [exec] = await waitFor(`${follower} to fire`, async () => {
        const list = await coordinator.store.listExecutions({ jobId: follower });
        return list.length > 0 ? list : undefined;
      });
      const done = await ended(exec?.id ?? "");
      expect(done.state).toBe("SUCCEEDED");
      return { sourceExec, result: done.result };
    };
    const a = await follow(
      { id: "step-a", handler: "echo", params: { n: 1 } },
      "step-b",
      "SUCCEEDED",
    );
    expect(a.result).toEqual({
      echo: {
        after: {
          jobId: "step-a",
          executionId: a.sourceExec,
          state: "SUCCEEDED",
          result: { echo: { n: 1 } },
          message: "ok",
        },
      },
    });
    // An execution that ended without a result still gives both keys, null.
    const f = await follow(
      { id: "step-f", handler: "fail", params: { message: "boom" } },
      "step-g",
      "FAILED",
    );
    expect(f.result).toEqual({
      echo: {
        after: {
          jobId: "step-f",
          executionId: f.sourceExec,
          state: "FAILED",
          result: null,
          message: "boom",
        },
      },
    });
    await expect(
      coordinator.putJob({ id: "loop", handler: "echo", trigger: { type: "after", job: "loop" } }),
    ).rejects.toSatisfy(
      (e) =>
        isAxError(e, "AX_JOB_INVALID") &&
        e.message === 'job "loop" is invalid\ntrigger.job: a job cannot fire after itself',
    );
  }, 30_000);

  it("fails a running execution over when its agent dies and never answers the query", async () => {
    const id = await coordinator.sendCommand({
      agentId,
      handler: "sleep",
      params: { ms: 60_000 },
      timeoutMs: 120_000,
    });
    await waitFor("running", async () =>
      (await coordinator.store.getExecution(id))?.state === "RUNNING" ? true : undefined,
    );
    await agent.kill();
    const done = await ended(id, 20_000);
    expect(done.state).toBe("FAILED");
    expect(done.message).toMatch(
      /^lease lapsed: the agent is offline, and no answer to a query within \d+ ms$/,
    );
    const last = (await coordinator.store.getTimeline(id)).at(-1);
    expect(last).toMatchObject({
      event: "finished",
      fromState: "RUNNING",
      toState: "FAILED",
      reason: done.message,
    });
    agent = startAgent();
    await waitFor("agent back", () =>
      coordinator.fleet.get(agentId)?.status === "online" ? true : undefined,
    );
    // The restarted agent reports the killed run interrupted; that late report is dropped, counted.
    await waitFor("the late report dropped", async () =>
      ((await coordinator.store.counters()).illegal_transitions ?? 0) >= 1 ? true : undefined,
    );
    expect((await coordinator.store.getExecution(id))?.state).toBe("FAILED");
  }, 60_000);
});
