import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { Ack, Dispatch, DownMessage, Query, UpMessage } from "../../shared/protocol/index.js";
import { storeBeside, tempDir, waitFor } from "../helpers/env.js";
import {
  type Cleanups,
  coordinatorSetup,
  type FakeAgent,
  fakeAgent,
} from "../helpers/fake-agent.js";

/**
 * Nothing an agent reports is thrown away (issue 15, item 1): reports beyond a gap wait for it,
 * the agent is asked to re-send from the gap, and what is published while the coordinator is down
 * is queued by the broker for its persistent session.
 */
describe("report delivery", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  const setup = () => coordinatorSetup(cleanups);

  const isAck = (m: DownMessage): m is Ack => m.type === "ack";

  it("holds a report that arrives beyond a gap, asks for a replay, and applies both in order", async () => {
    const { broker, start } = await setup();
    const coordinator = await start();
    cleanups.push(() => coordinator.close());
    const agent = await fakeAgent(broker, `${broker.prefix}-a`);
    cleanups.push(() => agent.close());
    const id = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo" });
    await agent.waitFor("dispatch", (m): m is DownMessage => m.type === "dispatch");
    const at = Date.now();
    // seq 2 first: seq 1 was "lost" on the way.
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
    const replay = await agent.waitFor(
      "a replay request",
      (m): m is Ack => isAck(m) && m.replay === true,
    );
    expect(replay.upTo).toBe(0);
    expect(replay.journalId).toBe(agent.journalId);
    expect((await coordinator.store.getExecution(id))?.state).toBe("DISPATCHED");
    // The replay brings seq 1, and then 2 again.
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
    await waitFor("running", async () =>
      (await coordinator.store.getExecution(id))?.state === "RUNNING" ? true : undefined,
    );
    await agent.waitFor("ack of 2", (m): m is Ack => isAck(m) && m.upTo === 2);
    const events = (await coordinator.store.getTimeline(id)).map((e) => e.event);
    expect(events).toEqual(["created", "dispatch", "accepted", "started"]);
    expect((await coordinator.store.counters()).out_of_order_reports).toBe(1);
    // No ack ever covered a report before it was applied.
    const acks = agent.received.filter(isAck).map((a) => a.upTo);
    expect(Math.max(...acks.slice(0, acks.indexOf(2)))).toBeLessThan(2);
  });

  it("applies what an agent reported while the coordinator was down, from the broker's queue", async () => {
    const { broker, start } = await setup();
    const first = await start();
    const agent = await fakeAgent(broker, `${broker.prefix}-b`);
    cleanups.push(() => agent.close());
    const id = await first.sendCommand({ agentId: agent.agentId, handler: "echo" });
    await agent.waitFor("dispatch", (m): m is DownMessage => m.type === "dispatch");
    const at = Date.now();
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.waitFor("ack of 1", (m): m is Ack => isAck(m) && m.upTo === 1);
    await first.close();
    // Published with no coordinator connected, and never re-sent.
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
    await agent.report({
      type: "finished",
      executionId: id,
      round: 1,
      seq: 3,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      startedAt: at,
      finishedAt: at + 1,
    });
    const second = await start();
    cleanups.push(() => second.close());
    const done = await waitFor("succeeded", async () => {
      const e = await second.store.getExecution(id);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.finishedAt).toBe(at + 1);
    await agent.waitFor("ack of 3", (m): m is Ack => isAck(m) && m.upTo === 3);
  });

  it("does not acknowledge a report whose execution changed under every write, and applies it again", async () => {
    const tmp = tempDir();
    cleanups.push(() => tmp.cleanup());
    const path = join(tmp.dir, "ax.sqlite");
    const { broker, start } = await coordinatorSetup(cleanups, { store: { path } });
    const coordinator = await start();
    cleanups.push(() => coordinator.close());
    const agent = await fakeAgent(broker, `${broker.prefix}-c`);
    cleanups.push(() => agent.close());
    const id = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo" });
    const dispatch = await agent.waitFor(
      "dispatch",
      (m): m is Dispatch => m.type === "dispatch" && m.executionId === id,
    );
    // Every write to the execution loses its compare-and-set, as when another writer moves it
    // each time first: the store leaves the row as it was.
    const db = storeBeside(path);
    cleanups.push(() => db.close());
    await db.exec(`CREATE TRIGGER moving BEFORE UPDATE ON executions WHEN OLD.id = '${id}'
      BEGIN SELECT RAISE(IGNORE); END`);
    await agent.succeed({ executionId: id, round: dispatch.round }, 1);
    await agent.waitFor("a replay request", (m): m is Ack => isAck(m) && m.replay === true);
    expect((await coordinator.store.getExecution(id))?.state).toBe("DISPATCHED");
    expect(Math.max(0, ...agent.received.filter(isAck).map((a) => a.upTo))).toBe(0);
    // Once writes go through again, the replay applies them: nothing the agent said is lost.
    await db.exec("DROP TRIGGER moving");
    await agent.succeed({ executionId: id, round: dispatch.round }, 1);
    await agent.waitFor("ack of 3", (m): m is Ack => isAck(m) && m.upTo === 3);
    expect((await coordinator.store.getExecution(id))?.state).toBe("SUCCEEDED");
    expect((await coordinator.store.getTimeline(id)).map((e) => e.event)).toEqual([
      "created",
      "dispatch",
      "accepted",
      "started",
      "finished",
    ]);
  });
  /**
   * A coordinator and an agent. `sealed`: the coordinator authenticates messages (the default)
   * and the agent, enrolled with it, seals what it sends; an unreadable report is taken as the
   * agent's only then. Otherwise messages are not authenticated.
   */
  const agentOn = async (name: string, sealed: boolean) => {
    const { broker, start } = await coordinatorSetup(
      cleanups,
      sealed ? { security: { messages: "required" } } : {},
    );
    const coordinator = await start();
    cleanups.push(() => coordinator.close());
    const agentId = `${broker.prefix}-${name}`;
    const key = sealed
      ? Buffer.from(
          (await coordinator.identities.enroll(agentId, { actor: "test" })).file.key,
          "base64url",
        )
      : undefined;
    const agent = await fakeAgent(broker, agentId, key ? { key } : {});
    cleanups.push(() => agent.close());
    return { coordinator, agent };
  };

  /** {@link agentOn}, and a command dispatched to the agent. */
  const commandOn = async (name: string, sealed = true) => {
    const { coordinator, agent } = await agentOn(name, sealed);
    const id = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo" });
    await agent.waitFor("dispatch", (m): m is DownMessage => m.type === "dispatch");
    return { coordinator, agent, id };
  };

  /** The agent accepted and started the command (seqs 1 and 2) at `at`. */
  const running = async (agent: FakeAgent, id: string, at: number) => {
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.report({
      type: "started",
      executionId: id,
      round: 1,
      seq: 2,
      startedAt: at,
      lateMs: 0,
    });
  };

  /** Publishes a report the protocol refuses, as a buggy agent would: envelope, seq, a bad field. */
  const unreadable = (agent: FakeAgent, body: Record<string, unknown>) =>
    agent.publish({
      v: 1,
      msgId: `m-${body.seq}`,
      sentAt: Date.now(),
      ...body,
    } as unknown as UpMessage);

  /**
   * The agent runs the command (seqs 1 and 2) and reports its finish unreadably (seq 3: a result
   * that is not a JSON object, so the protocol refuses the whole report); returns the query the
   * coordinator sends about it, once seq 3 is acknowledged.
   */
  const finishUnreadably = async (agent: FakeAgent, id: string): Promise<Query> => {
    const at = Date.now();
    await running(agent, id, at);
    await unreadable(agent, {
      type: "finished",
      executionId: id,
      round: 1,
      seq: 3,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      result: "done",
      startedAt: at,
      finishedAt: at + 5,
    });
    const query = await agent.waitFor(
      "a query",
      (m): m is Query => m.type === "query" && m.executionId === id,
    );
    await agent.waitFor("ack of 3", (m): m is Ack => isAck(m) && m.upTo === 3);
    return query;
  };

  /**
   * The agent answers the query about its unreadable finish `succeeded` (seq 4): the execution
   * ends SUCCEEDED by that answer, and its timeline shows the finish that could not be read.
   */
  const answeredSucceeded = async (agent: FakeAgent, coordinator: Coordinator, id: string) => {
    await agent.report({
      type: "state",
      executionId: id,
      round: 1,
      seq: 4,
      localState: "succeeded",
    });
    const done = await waitFor("succeeded", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.message).toContain("could not be read");
    const events = (await coordinator.store.getTimeline(id)).map((e) => e.event);
    expect(events).toEqual([
      "created",
      "dispatch",
      "accepted",
      "started",
      "report_unreadable",
      "finished",
    ]);
    return done;
  };

  it("acknowledges an authentic report it cannot read in its turn, so the reports behind it are applied", async () => {
    const { coordinator, agent } = await agentOn("u", true);
    const a = await coordinator.sendCommand({
      agentId: agent.agentId,
      handler: "echo",
      at: Date.now() + 60_000,
    });
    const b = await coordinator.sendCommand({ agentId: agent.agentId, handler: "echo" });
    await waitFor("both dispatched", () =>
      agent.received.filter((m) => m.type === "dispatch").length === 2 ? true : undefined,
    );
    await agent.report({ type: "accepted", executionId: a, round: 1, seq: 1 });
    await agent.waitFor("ack of 1", (m): m is Ack => isAck(m) && m.upTo === 1);
    const before = await coordinator.store.getExecution(a);
    // seq 2: a progress whose percent is null, which the protocol refuses.
    await unreadable(agent, { type: "progress", executionId: a, round: 1, seq: 2, percent: null });
    const at = Date.now();
    await agent.report({ type: "accepted", executionId: b, round: 1, seq: 3 });
    await agent.report({
      type: "started",
      executionId: b,
      round: 1,
      seq: 4,
      startedAt: at,
      lateMs: 0,
    });
    await agent.report({
      type: "finished",
      executionId: b,
      round: 1,
      seq: 5,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      startedAt: at,
      finishedAt: at + 1,
    });
    const done = await waitFor("b succeeded", async () => {
      const e = await coordinator.store.getExecution(b);
      return e?.state === "SUCCEEDED" ? e : undefined;
    });
    expect(done.finishedAt).toBe(at + 1);
    await agent.waitFor("ack of 5", (m): m is Ack => isAck(m) && m.upTo === 5);
    // What it said changed nothing; that it said something unreadable is on the record.
    const after = await coordinator.store.getExecution(a);
    expect(after?.state).toBe(before?.state);
    const note = (await coordinator.store.getTimeline(a)).find(
      (e) => e.event === "report_unreadable",
    );
    expect(note?.detail).toMatchObject({
      seq: 2,
      type: "progress",
      round: 1,
      code: "AX_PROTO_INVALID_FIELD",
    });
    expect(String(note?.detail?.reason)).toContain("percent");
    const counters = await coordinator.store.counters();
    expect(counters.unreadable_reports).toBe(1);
    expect(counters.invalid_messages).toBe(1);
    expect(agent.received.some((m) => isAck(m) && m.replay === true)).toBe(false);
  });

  it("settles a finish it cannot read by the agent's answer to a query", async () => {
    const { coordinator, agent, id } = await commandOn("f");
    const query = await finishUnreadably(agent, id);
    expect(query.round).toBe(1);
    expect((await coordinator.store.getExecution(id))?.state).toBe("RUNNING");
    const done = await answeredSucceeded(agent, coordinator, id);
    expect(done.message).toContain("result");
    await agent.waitFor("ack of 4", (m): m is Ack => isAck(m) && m.upTo === 4);
  });

  it("settles a finish it cannot read by the agent's answer that comes after a restart", async () => {
    const { broker, start } = await coordinatorSetup(cleanups, {
      security: { messages: "required" },
    });
    const first = await start();
    const agentId = `${broker.prefix}-r`;
    const enrolled = await first.identities.enroll(agentId, { actor: "test" });
    const agent = await fakeAgent(broker, agentId, {
      key: Buffer.from(enrolled.file.key, "base64url"),
    });
    cleanups.push(() => agent.close());
    const id = await first.sendCommand({ agentId, handler: "echo" });
    await agent.waitFor("dispatch", (m): m is DownMessage => m.type === "dispatch");
    await finishUnreadably(agent, id);
    // The coordinator that asked is gone; the one after it never asked, and reads the record.
    await first.close();
    const second = await start();
    cleanups.push(() => second.close());
    const done = await answeredSucceeded(agent, second, id);
    expect(done.attempt).toBe(1);
  });

  it("does not take an unknown answer about a finish it could not read for an interruption", async () => {
    const { coordinator, agent, id } = await commandOn("k");
    await finishUnreadably(agent, id);
    // The agent has let the execution go: it finished it, so it was not interrupted.
    await agent.report({ type: "state", executionId: id, round: 1, seq: 4, localState: "unknown" });
    await agent.waitFor("ack of 4", (m): m is Ack => isAck(m) && m.upTo === 4);
    await coordinator.settle();
    expect((await coordinator.store.getExecution(id))?.state).toBe("RUNNING");
    const events = (await coordinator.store.getTimeline(id)).map((e) => e.event);
    expect(events).toEqual(["created", "dispatch", "accepted", "started", "report_unreadable"]);
  });

  it("does not acknowledge an unreadable message that is not a report of protocol v1", async () => {
    const { coordinator, agent, id } = await commandOn("v");
    // Another protocol version, and a heartbeat that carries a seq: neither is a report to count.
    await agent.publish({
      v: 2,
      type: "accepted",
      msgId: "m-1",
      sentAt: Date.now(),
      executionId: id,
      round: 1,
      seq: 1,
    } as unknown as UpMessage);
    await unreadable(agent, { type: "heartbeat", seq: 1, running: "no" });
    await waitFor("both refused", async () =>
      (await coordinator.store.counters()).invalid_messages === 2 ? true : undefined,
    );
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.waitFor("ack of 1", (m): m is Ack => isAck(m) && m.upTo === 1);
    expect((await coordinator.store.getExecution(id))?.state).toBe("SCHEDULED");
    expect((await coordinator.store.counters()).unreadable_reports ?? 0).toBe(0);
  });
  it("acknowledges no unreadable report when messages are not authenticated: it could be anyone's", async () => {
    const { coordinator, agent, id } = await commandOn("n", false);
    await unreadable(agent, { type: "accepted", executionId: id, round: "1", seq: 1 });
    await waitFor("refused", async () =>
      (await coordinator.store.counters()).invalid_messages === 1 ? true : undefined,
    );
    // seq 1 is still to come: the real one is applied when it does.
    await agent.report({ type: "accepted", executionId: id, round: 1, seq: 1 });
    await agent.waitFor("ack of 1", (m): m is Ack => isAck(m) && m.upTo === 1);
    expect((await coordinator.store.getExecution(id))?.state).toBe("SCHEDULED");
    expect((await coordinator.store.counters()).unreadable_reports ?? 0).toBe(0);
  });
  it("goes on past reports the agent no longer has, once it has re-sent its oldest three times", async () => {
    const { coordinator, agent, id } = await commandOn("g", false);
    // Seqs 1-4 were acknowledged by a store that has since been restored from an older backup:
    // the agent's outbox starts at 5, and each re-send of it starts there.
    const at = Date.now();
    const outbox = async () => {
      await agent.report({ type: "accepted", executionId: id, round: 1, seq: 5 });
      await agent.report({
        type: "started",
        executionId: id,
        round: 1,
        seq: 6,
        startedAt: at,
        lateMs: 0,
      });
    };
    await outbox();
    await agent.waitFor("a replay request", (m): m is Ack => isAck(m) && m.replay === true);
    for (let i = 0; i < 2; i++) {
      await new Promise((r) => setTimeout(r, 100));
      await outbox();
    }
    await new Promise((r) => setTimeout(r, 300));
    expect((await coordinator.store.getExecution(id))?.state).toBe("DISPATCHED");
    await outbox();
    await agent.waitFor("ack of 6", (m): m is Ack => isAck(m) && m.upTo === 6);
    const running = await waitFor("running", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "RUNNING" ? e : undefined;
    });
    expect(running.startedAt).toBe(at);
    expect((await coordinator.store.counters()).missing_reports).toBe(4);
  });
});
