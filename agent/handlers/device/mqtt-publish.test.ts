import { createServer, type Server, type Socket } from "node:net";
import mqtt, { type IPublishPacket, type MqttClient } from "mqtt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type EmbeddedBroker, startEmbeddedBroker } from "../../../coordinator/broker/embedded.js";
import type { ClosableHandler } from "./common.js";
import { type MqttPublishParams, mqttPublishHandler } from "./mqtt-publish.js";
import { failureOf, paramsError, testContext } from "./test-context.js";

let broker: EmbeddedBroker;
const cleanups: (() => Promise<void>)[] = [];

beforeEach(async () => {
  broker = await startEmbeddedBroker(0);
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await broker.close();
});

function publisher(
  url = broker.url,
  connectTimeoutMs?: number,
): ClosableHandler<MqttPublishParams> {
  const built = mqttPublishHandler({ url, clientId: "ax-test-publisher", connectTimeoutMs });
  cleanups.push(built.close);
  return built;
}

async function subscriber(
  topic: string,
): Promise<{ client: MqttClient; next(): Promise<IPublishPacket> }> {
  const client = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
  cleanups.push(() => client.endAsync(true));
  const waiting: ((p: IPublishPacket) => void)[] = [];
  const got: IPublishPacket[] = [];
  client.on("message", (_t, _p, packet) => {
    const w = waiting.shift();
    if (w) w(packet);
    else got.push(packet);
  });
  await client.subscribeAsync(topic, { qos: 2 });
  return {
    client,
    next: () => {
      const p = got.shift();
      return p ? Promise.resolve(p) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

/** A TCP server that accepts connections and never answers: an MQTT broker that hangs. */
async function silentServer(): Promise<string> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const address = server.address();
  return `mqtt://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return typeof address === "object" && address ? address.port : 0;
}

describe("mqtt.publish", () => {
  it("publishes an object payload as JSON at QoS 1 by default", async () => {
    const sub = await subscriber("zigbee2mqtt/#");
    const { handler } = publisher();
    expect(handler.name).toBe("mqtt.publish");
    const result = await handler.run(testContext(), {
      topic: "zigbee2mqtt/lamp/set",
      payload: { state: "ON", brightness: 200 },
    });
    expect(result).toEqual({ topic: "zigbee2mqtt/lamp/set", bytes: 31 });
    const packet = await sub.next();
    expect(packet.topic).toBe("zigbee2mqtt/lamp/set");
    expect(packet.payload.toString()).toBe('{"state":"ON","brightness":200}');
    expect(JSON.parse(packet.payload.toString())).toEqual({ state: "ON", brightness: 200 });
    expect(packet.qos).toBe(1);
    expect(packet.retain).toBe(false);
  });

  it("sends a string payload as it is, at the QoS asked for", async () => {
    const sub = await subscriber("cmnd/plug/#");
    const { handler } = publisher();
    await expect(
      handler.run(testContext(), { topic: "cmnd/plug/POWER", payload: "ON", qos: 2 }),
    ).resolves.toEqual({ topic: "cmnd/plug/POWER", bytes: 2 });
    const first = await sub.next();
    expect([first.payload.toString(), first.qos]).toEqual(["ON", 2]);
    await expect(
      handler.run(testContext(), { topic: "cmnd/plug/POWER", payload: "ÄUS", qos: 0 }),
    ).resolves.toEqual({ topic: "cmnd/plug/POWER", bytes: 4 });
    const second = await sub.next();
    expect([second.payload.toString(), second.qos]).toEqual(["ÄUS", 0]);
  });

  it("retains the message when asked, so a later subscriber gets it", async () => {
    const { handler } = publisher();
    await handler.run(testContext(), { topic: "dev/state", payload: "idle", retain: true });
    const late = await subscriber("dev/state");
    const packet = await late.next();
    expect(packet.payload.toString()).toBe("idle");
    expect(packet.retain).toBe(true);
  });

  it("connects on the first run, not before, and reuses that connection", async () => {
    const clients: string[] = [];
    broker.broker.on("client", (c) => clients.push(c.id));
    const { handler } = publisher();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(clients).toEqual([]);
    await Promise.all([
      handler.run(testContext(), { topic: "a", payload: "1" }),
      handler.run(testContext(), { topic: "a", payload: "2" }),
    ]);
    await handler.run(testContext(), { topic: "a", payload: "3" });
    expect(clients).toEqual(["ax-test-publisher"]);
  });

  it("fails retryable while the broker is down, and recovers when it is back", async () => {
    const { handler } = publisher();
    await handler.run(testContext(), { topic: "a", payload: "1" });
    const port = broker.port;
    await broker.close();
    // The first run may still find the old connection open and lose it mid-publish.
    expect(await failureOf(handler.run(testContext(), { topic: "a", payload: "2" }))).toEqual({
      name: "HandlerFailure",
      message: expect.stringMatching(
        /^mqtt\.publish: (connection to mqtt:\/\/127\.0\.0\.1:\d+ lost before the broker acknowledged the message|cannot connect to .*ECONNREFUSED.*)$/,
      ),
      retryable: true,
    });
    expect(await failureOf(handler.run(testContext(), { topic: "a", payload: "2" }))).toEqual({
      name: "HandlerFailure",
      message: `mqtt.publish: cannot connect to mqtt://127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port}`,
      retryable: true,
    });
    broker = await startEmbeddedBroker(port);
    await expect(handler.run(testContext(), { topic: "a", payload: "3" })).resolves.toEqual({
      topic: "a",
      bytes: 1,
    });
  });

  it("names the broker when the connection is refused", async () => {
    const port = await freePort();
    const { handler } = publisher(`mqtt://127.0.0.1:${port}`);
    expect(await failureOf(handler.run(testContext(), { topic: "a", payload: "x" }))).toEqual({
      name: "HandlerFailure",
      message: `mqtt.publish: cannot connect to mqtt://127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port}`,
      retryable: true,
    });
  });

  it("gives up on a broker that never answers after connectTimeoutMs", async () => {
    const url = await silentServer();
    const { handler } = publisher(url, 200);
    expect(await failureOf(handler.run(testContext(), { topic: "a", payload: "x" }))).toEqual({
      name: "HandlerFailure",
      message: `mqtt.publish: cannot connect to ${url}: no answer within 200 ms`,
      retryable: true,
    });
  });

  it("stops waiting at once when the execution is aborted", async () => {
    const url = await silentServer();
    const { handler } = publisher(url, 20_000);
    const ctx = testContext();
    const run = handler.run(ctx, { topic: "a", payload: "x" });
    setTimeout(() => ctx.abort.abort(), 20);
    const aborted = { name: "HandlerFailure", message: "mqtt.publish: aborted", retryable: true };
    expect(await failureOf(run)).toEqual(aborted);

    const already = testContext();
    already.abort.abort();
    expect(await failureOf(handler.run(already, { topic: "a", payload: "x" }))).toEqual(aborted);
  });

  it("refuses to run after close, and close can be called twice", async () => {
    const built = publisher();
    await built.handler.run(testContext(), { topic: "a", payload: "1" });
    await built.close();
    await built.close();
    expect(await failureOf(built.handler.run(testContext(), { topic: "a", payload: "2" }))).toEqual(
      { name: "HandlerFailure", message: "mqtt.publish: the handler is closed", retryable: true },
    );
  });

  it("validates params with messages that name the field", () => {
    const { handler } = mqttPublishHandler({ url: "mqtt://127.0.0.1:1" });
    const check = (input: unknown) => paramsError(handler.params, input);
    expect(check({ topic: "a/b", payload: "x", qos: 0, retain: true })).toBe("ok");
    expect(check({ topic: "a/+/c", payload: "x" })).toBe(
      "params.topic: must not contain the wildcards + or #",
    );
    expect(check({ topic: "a/#", payload: "x" })).toBe(
      "params.topic: must not contain the wildcards + or #",
    );
    expect(check({ topic: "", payload: "x" })).toBe(
      "params.topic: must have at least 1 characters",
    );
    expect(check({ payload: "x" })).toBe("params.topic: is required (string)");
    expect(check({ topic: "a", payload: [1, 2] })).toBe(
      "params.payload: must be a string or a JSON object",
    );
    expect(check({ topic: "a", payload: 5 })).toBe(
      "params.payload: must be a string or a JSON object",
    );
    expect(check({ topic: "a", payload: "x", qos: 3 })).toBe("params.qos: must be one of 0, 1, 2");
    expect(check({ topic: "a", payload: "x", retain: "yes" })).toBe(
      "params.retain: expected boolean, got string",
    );
  });
});
