import mqtt from "mqtt";
import { MqttConnectionClosed } from "../../link/mqtt-session.js";
import type { PublishConnection, PublishConnector } from "./publish-connection.js";

/**
 * The `websocket` feature: `ws://` and `wss://` device brokers for `mqtt.publish`, through
 * mqtt.js and its WebSocket transport. Only bundles whose profile enables the feature contain
 * it (it is most of their size, see docs/bundles.md).
 */
export const websocketConnector: PublishConnector = (o) => {
  const client = mqtt.connect(o.url, {
    clientId: o.clientId,
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: o.connectTimeoutMs,
    ...(o.username === undefined ? {} : { username: o.username }),
    ...(o.password === undefined ? {} : { password: o.password }),
  });
  // Always listen: an EventEmitter with no "error" listener throws.
  client.on("error", () => {});
  /** With reconnectPeriod 0 mqtt.js never settles a publish lost with its connection. */
  const pending = new Set<(err: Error) => void>();
  let wasReady = false;
  const ready = new Promise<void>((resolve, reject) => {
    client.once("connect", () => {
      wasReady = true;
      resolve();
    });
    client.once("close", () => reject(new MqttConnectionClosed("connection closed")));
  });
  client.on("close", () => {
    for (const fail of pending) fail(new MqttConnectionClosed("connection closed"));
    pending.clear();
    if (wasReady) {
      wasReady = false;
      o.onClose();
    }
  });
  const connection: PublishConnection = {
    get connected() {
      return client.connected;
    },
    publish: (topic, payload, options) =>
      new Promise<void>((resolve, reject) => {
        pending.add(reject);
        client.publishAsync(topic, payload, options).then(
          () => {
            pending.delete(reject);
            resolve();
          },
          (err: unknown) => {
            pending.delete(reject);
            reject(err);
          },
        );
      }),
    end: () => client.endAsync(true),
  };
  return { connection, ready };
};
