import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
} from "../helpers/env.js";

/**
 * An event message fires its jobs once, also when the broker delivers it again after the
 * coordinator restarted (a QoS 1 message it had not acknowledged): the store's event ledger
 * remembers it, where the coordinator's memory of recent messages is gone.
 */
describe("events: the store's ledger fires each message once, across a restart", () => {
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
});
