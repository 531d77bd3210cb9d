import { join } from "node:path";
import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { Ack, Dispatch, DownMessage } from "../../shared/protocol/index.js";
import {
  startTestCoordinator,
  storeBeside,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForAgentsOnline,
} from "../helpers/env.js";
import { fakeAgent } from "../helpers/fake-agent.js";

/**
 * An event message fires its jobs once, also when the broker delivers it again after the
 * coordinator restarted (a QoS 1 message it had not acknowledged): the store's event ledger
 * remembers it, where the coordinator's memory of recent messages is gone. An `after` trigger's
 * follow-ups go in the same ledger, written with the transition that ends the execution they
 * follow: a fault between the two cannot end it without them.
 */
describe("the store's event ledger: each event and each follow-up fires once", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 500);
  }, 30_000);

  afterAll(async () => {
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  const publish = async (msgId: string) => {
    const client = await mqtt.connectAsync(broker.url, { clientId: `${broker.prefix}-app` });
    await client.publishAsync(
      `${broker.prefix}/v1/events/door-open`,
      JSON.stringify({ v: 1, type: "event", msgId, sentAt: Date.now(), payload: { msgId } }),
      { qos: 1 },
    );
    await client.endAsync();
  };
  const fired = async () =>
    (await coordinator.store.listExecutions({ jobId: "on-door" })).map(
      (e) => (e.params as { msgId: string }).msgId,
    );

  it("a message delivered again after a restart fires nothing; the next one fires", async () => {
    await coordinator.putJob({
      id: "on-door",
      handler: "echo",
      trigger: { type: "event", name: "door-open" },
    });
    await publish("m-1");
    await waitFor("m-1 fired", async () => ((await fired()).includes("m-1") ? true : undefined));
    const [first] = await coordinator.store.listExecutions({ jobId: "on-door" });
    expect((await coordinator.store.getTimeline(first?.id as string))[0]?.detail).toEqual({
      event: "door-open",
      msgId: "m-1",
    });

    await coordinator.close();
    coordinator = await startTestCoordinator(broker, tmp.dir, 500);
    // The same message again, then a new one: they are read in order, so once m-2 fired the
    // copy of m-1 was read too.
    await publish("m-1");
    await publish("m-2");
    await waitFor("m-2 fired", async () => ((await fired()).includes("m-2") ? true : undefined));
    expect((await fired()).sort()).toEqual(["m-1", "m-2"]);
    expect((await coordinator.store.counters()).duplicate_events).toBe(1);
  }, 30_000);

  it("writes an after trigger's follow-up with the end it follows: both or neither", async () => {
    await coordinator.putJob({ id: "step-a", handler: "echo", trigger: { type: "manual" } });
    await coordinator.putJob({
      id: "step-b",
      handler: "echo",
      trigger: { type: "after", job: "step-a", states: ["SUCCEEDED"] },
    });
    const agent = await fakeAgent(broker, `${broker.prefix}-a`);
    const db = storeBeside(join(tmp.dir, "ax.sqlite"));
    try {
      await waitForAgentsOnline(coordinator, 1);
      // The store fails the follow-up's row, as a crash or a full disk between the two would.
      await db.exec(`CREATE TRIGGER no_step_b BEFORE INSERT ON executions WHEN NEW.job_id = 'step-b'
        BEGIN SELECT RAISE(ABORT, 'no room for step-b'); END`);
      const id = await coordinator.triggerJob("step-a");
      const dispatch = await agent.waitFor(
        "dispatch",
        (m): m is Dispatch => m.type === "dispatch" && m.executionId === id,
      );
      const ref = { executionId: id, round: dispatch.round };
      await agent.succeed(ref, 1);
      // The end was not written either: its report is not acknowledged, and asked again (the
      // reports before it may have been applied on their own).
      await agent.waitFor(
        "a replay request",
        (m): m is Ack => m.type === "ack" && m.replay === true,
      );
      expect(["DISPATCHED", "RUNNING"]).toContain(
        (await coordinator.store.getExecution(id))?.state,
      );
      expect(await coordinator.store.listExecutions({ jobId: "step-b" })).toEqual([]);
      const acked = () =>
        agent.received.filter((m: DownMessage): m is Ack => m.type === "ack").map((a) => a.upTo);
      expect(Math.max(0, ...acked())).toBeLessThan(3);

      await db.exec("DROP TRIGGER no_step_b");
      await agent.succeed(ref, 1);
      await agent.waitFor("ack of 3", (m): m is Ack => m.type === "ack" && m.upTo === 3);
      // Truth: the agent ran step-a once and succeeded; the record says so, and step-b follows
      // it exactly once, naming it.
      expect(await coordinator.store.getExecution(id)).toMatchObject({ state: "SUCCEEDED" });
      const follow = await coordinator.store.listExecutions({ jobId: "step-b" });
      expect(follow).toHaveLength(1);
      expect(follow[0]?.params.after).toMatchObject({ executionId: id, state: "SUCCEEDED" });
      expect((await coordinator.store.getTimeline(follow[0]?.id as string))[0]?.detail).toEqual({
        after: id,
      });
    } finally {
      db.close();
      await agent.close();
    }
  }, 30_000);
});
