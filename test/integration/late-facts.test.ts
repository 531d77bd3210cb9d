import { afterEach, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { envelope } from "../../shared/message.js";
import type { Dispatch, DownMessage, UpMessage } from "../../shared/protocol/index.js";
import { waitFor } from "../helpers/env.js";
import {
  type Cleanups,
  coordinatorSetup,
  type FakeAgent,
  fakeAgent,
} from "../helpers/fake-agent.js";

/**
 * Facts outrank fences (issue 15, item 2), through the real engine: what a device reports about
 * running is recorded however late it comes, and corrects what the coordinator had guessed.
 */
describe("late facts", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function setup() {
    const { broker, start } = await coordinatorSetup(cleanups, { heartbeatMs: 300 });
    const coordinator = await start();
    cleanups.push(() => coordinator.close());
    return { broker, coordinator };
  }
  const isDispatch = (m: DownMessage): m is Dispatch => m.type === "dispatch";
  /** The agent's `accepted` (seq `seq`) and `started` (seq + 1) of `round`, started at `at`. */
  const acceptAndStart = async (
    agent: FakeAgent,
    id: string,
    round: number,
    seq: number,
    at: number,
  ) => {
    await agent.report({ type: "accepted", executionId: id, round, seq });
    await agent.report({
      type: "started",
      executionId: id,
      round,
      seq: seq + 1,
      startedAt: at,
      lateMs: 0,
    });
  };
  /** The agent's `finished` `succeeded` of `round`, as seq `seq`, now. */
  const succeeded = (
    agent: FakeAgent,
    id: string,
    round: number,
    seq: number,
    more: { message?: string; startedAt?: number; result?: Record<string, unknown> } = {},
  ) =>
    agent.report({
      type: "finished",
      executionId: id,
      round,
      seq,
      outcome: "succeeded",
      retryable: false,
      message: "",
      finishedAt: Date.now(),
      ...more,
    });
  /** Fires a manual job whose dispatch is sent again after 600 ms unanswered: its execution. */
  const fireRedispatchedSoon = async (coordinator: Coordinator, id: string) => {
    await coordinator.putJob({
      id,
      handler: "echo",
      trigger: { type: "manual" },
      dispatchTimeout: "600ms",
      maxDispatches: 5,
    });
    return coordinator.triggerJob(id);
  };

  it("a finish reported after the lease lapsed corrects the FAILED it contradicts; the timeline shows both", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-a`);
    cleanups.push(() => agent.close());
    const id = await coordinator.sendCommand({
      agentId: agent.agentId,
      handler: "echo",
      timeoutMs: 60_000,
    });
    const d = await agent.waitFor("dispatch", isDispatch);
    const at = Date.now();
    await acceptAndStart(agent, id, d.round, 1, at);
    // No heartbeats: the agent goes offline, its lease lapses, the query goes unanswered.
    const failed = await waitFor(
      "lease fail-over",
      async () => {
        const e = await coordinator.store.getExecution(id);
        return e?.state === "FAILED" ? e : undefined;
      },
      20_000,
    );
    expect(failed.message).toContain("lease lapsed");
    await agent.report({
      type: "finished",
      executionId: id,
      round: d.round,
      seq: 3,
      outcome: "succeeded",
      retryable: false,
      message: "done",
      result: { ok: true },
      startedAt: at,
      finishedAt: at + 5,
    });
    const done = await waitFor("corrected", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.result).toEqual({ ok: true });
    expect(done.finishedAt).toBe(at + 5);
    const timeline = await coordinator.store.getTimeline(id);
    const tail = timeline.slice(-2).map((t) => `${t.event}:${t.fromState}→${t.toState}`);
    expect(tail).toEqual(["finished:RUNNING→FAILED", "fact:FAILED→SUCCEEDED"]);
    expect(timeline.at(-1)?.reason).toContain("it was recorded FAILED");
    await coordinator.store.flush();
    expect((await coordinator.store.counters()).facts_adopted).toBe(1);
  });

  it("a redispatched command whose first round ran takes that round's outcome", async () => {
    const { broker, coordinator } = await setup();
    const agent = await fakeAgent(broker, `${broker.prefix}-b`);
    cleanups.push(() => agent.close());
    const id = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo" });
    const first = await agent.waitFor("dispatch 1", isDispatch);
    // Online all along (a dispatch timeout counts only while the agent is).
    const beat = setInterval(() => void agent.heartbeat(), 200);
    cleanups.push(() => clearInterval(beat));
    // No answer to round 1 within the dispatch timeout (5 s): round 2 goes to the same agent.
    const second = await waitFor(
      "dispatch 2",
      () => agent.received.filter(isDispatch).find((m) => m.round === first.round + 1),
      20_000,
    );
    const at = Date.now();
    // Round 1's reports were only late: the device ran round 1 (rule 3: round 2 never starts).
    await acceptAndStart(agent, id, first.round, 1, at);
    await agent.report({
      type: "finished",
      executionId: id,
      round: first.round,
      seq: 3,
      outcome: "succeeded",
      retryable: false,
      message: "",
      startedAt: at,
      finishedAt: at + 1,
    });
    const done = await waitFor("succeeded", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.round).toBe(second.round);
    const facts = (await coordinator.store.getTimeline(id)).filter((t) => t.event === "fact");
    expect(facts.map((f) => [f.detail?.fact, f.detail?.round, f.detail?.decision])).toEqual([
      ["started", first.round, "adopted"],
      ["finished", first.round, "adopted"],
    ]);
  });
  it("keeps following an adopted round when the later round's agent answers its cancel", async () => {
    const { broker, coordinator } = await setup();
    const a = await fakeAgent(broker, `${broker.prefix}-a`);
    cleanups.push(() => a.close());
    // A takes round 1, then says it is stopping: the coordinator sends the next round elsewhere.
    let aStopping = false;
    const beatA = setInterval(() => {
      a.publish(
        envelope(
          {
            type: "heartbeat",
            instanceId: a.instanceId,
            running: [],
            queued: 0,
            scheduled: 0,
            load: 0,
            clockOffset: { offsetMs: 0, uncertaintyMs: 0 },
            journal: { depth: 0, outboxDepth: aStopping ? 2 : 0 },
            ...(aStopping ? { shuttingDown: true } : {}),
          },
          Date.now(),
        ) as UpMessage,
      ).catch(() => {});
    }, 300);
    cleanups.push(() => clearInterval(beatA));
    const id = await fireRedispatchedSoon(coordinator, "x");
    const r1 = await a.waitFor("round 1 on A", isDispatch);
    aStopping = true;
    const b = await fakeAgent(broker, `${broker.prefix}-b`);
    cleanups.push(() => b.close());
    const beatB = setInterval(() => b.heartbeat().catch(() => {}), 300);
    cleanups.push(() => clearInterval(beatB));
    await b.waitFor("a later round on B", isDispatch);
    // A's reports, held up until now: round 1 started. The record follows it; B's round is
    // cancelled.
    const at = Date.now();
    await acceptAndStart(a, id, r1.round, 1, at);
    const cancel = await b.waitFor(
      "the cancel of B's round",
      (m): m is Extract<DownMessage, { type: "cancel" }> => m.type === "cancel",
    );
    // B had not started it: rule 8's answer.
    await b.report({
      type: "finished",
      executionId: id,
      round: cancel.round,
      seq: 1,
      outcome: "canceled",
      retryable: false,
      message: "canceled by the coordinator",
      finishedAt: Date.now(),
    });
    await waitFor("B's answer recorded", async () =>
      (await coordinator.store.getTimeline(id)).some(
        (e) => e.event === "fact" && e.agentId === b.agentId,
      )
        ? true
        : undefined,
    );
    expect((await coordinator.store.getExecution(id))?.state).toBe("RUNNING");
    await succeeded(a, id, r1.round, 3, { message: "ok", startedAt: at, result: { ok: 1 } });
    const done = await waitFor("succeeded", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.result).toEqual({ ok: 1 });
    expect(done.agentId).toBe(a.agentId);
  }, 30_000);

  it("a busy or shutting_down of an older round, or of an earlier process, routes nothing around the agent", async () => {
    const { broker, coordinator } = await setup();
    const agentId = `${broker.prefix}-d`;
    const first = await fakeAgent(broker, agentId);
    cleanups.push(() => first.close());
    const id = await coordinator.sendCommand({ agentId, handler: "echo", timeoutMs: 60_000 });
    const isRound =
      (round: number) =>
      (m: DownMessage): m is Dispatch =>
        m.type === "dispatch" && m.executionId === id && m.round === round;
    await first.waitFor("round 1", isRound(1));
    // Busy: the coordinator sends round 2 after the back-off.
    await first.report({ type: "busy", executionId: id, round: 1, seq: 1 });
    await first.waitFor("round 2", isRound(2));
    // A shutting_down of round 1, late: the record follows round 2, and the agent is not stopping.
    await first.report({
      type: "rejected",
      executionId: id,
      round: 1,
      seq: 2,
      reason: "shutting_down",
    });
    await waitFor("acknowledged", () =>
      first.received.some((m) => m.type === "ack" && m.upTo >= 2) ? true : undefined,
    );
    expect(coordinator.fleet.isDraining(agentId)).toBe(false);
    // The process stops; its successor replays its outbox, where the first one had written that
    // it was shutting down (round 2, seq 3): the record moves, but the new process is not draining.
    await first.close();
    const second = await fakeAgent(broker, agentId, { journalId: first.journalId, lastSeq: 3 });
    cleanups.push(() => second.close());
    await second.report({
      type: "rejected",
      executionId: id,
      round: 2,
      seq: 3,
      reason: "shutting_down",
    });
    await second.waitFor("round 3, to the new process", isRound(3));
    expect(coordinator.fleet.isDraining(agentId)).toBe(false);
  });

  it("keeps following an adopted round across a coordinator restart: the agent's heartbeats for it hold the lease", async () => {
    const { broker, start } = await coordinatorSetup(cleanups, { heartbeatMs: 300 });
    let coordinator = await start();
    const agentId = `${broker.prefix}-f`;
    const a = await fakeAgent(broker, agentId);
    cleanups.push(() => a.close());
    let running: { executionId: string; round: number }[] = [];
    let beating: FakeAgent = a;
    const beat = setInterval(() => beating.heartbeat(0, running).catch(() => {}), 150);
    cleanups.push(() => clearInterval(beat));
    const id = await fireRedispatchedSoon(coordinator, "f");
    const r1 = await a.waitFor("round 1", isDispatch);
    await a.waitFor("round 2", (m): m is Dispatch => isDispatch(m) && m.round === r1.round + 1);
    // Round 1 was only late: it runs, and the record follows it (a fact adopted).
    running = [{ executionId: id, round: r1.round }];
    await acceptAndStart(a, id, r1.round, 1, Date.now());
    await waitFor("running round 1", async () =>
      (await coordinator.store.getExecution(id))?.state === "RUNNING" ? true : undefined,
    );
    // The coordinator restarts: its memory of the followed round is gone, the timeline has it.
    await coordinator.close();
    coordinator = await start();
    cleanups.push(() => coordinator.close());
    const again = await fakeAgent(broker, agentId, { journalId: a.journalId, lastSeq: 2 });
    cleanups.push(() => again.close());
    beating = again;
    // Well past a lease (3 heartbeats, 900 ms) and a query's wait (2 s): it is still running.
    await new Promise((r) => setTimeout(r, 4_500));
    const e = await coordinator.store.getExecution(id);
    expect(e?.state, e?.message ?? "").toBe("RUNNING");
    await succeeded(again, id, r1.round, 3);
    await waitFor("succeeded", async () =>
      (await coordinator.store.getExecution(id))?.state === "SUCCEEDED" ? true : undefined,
    );
  }, 30_000);
});
