import type { QoS } from "../../link/mqtt-codec.js";
import { MqttSession } from "../../link/mqtt-session.js";
import type { Transports } from "../../link/transport.js";

/** One connection to a device broker, as `mqtt.publish` uses it. */
export interface PublishConnection {
  readonly connected: boolean;
  /**
   * Resolves when the broker has acknowledged (QoS 1, 2) or the message is written (QoS 0);
   * rejects when the connection is lost first.
   */
  publish(topic: string, payload: Buffer, options: { qos: QoS; retain: boolean }): Promise<void>;
  /** Closes the connection; publishes still waiting are rejected. */
  end(): Promise<void>;
}

export interface PublishConnectOptions {
  url: string;
  clientId: string;
  username?: string | undefined;
  password?: string | undefined;
  /** A backstop; the handler's own timer answers first. */
  connectTimeoutMs: number;
  /** Called once when the connection ends after it was ready. */
  onClose(): void;
}

/**
 * Opens a connection: returns it at once (so it can be closed while connecting) and a promise
 * that settles when it is ready or has failed.
 */
export type PublishConnector = (o: PublishConnectOptions) => {
  connection: PublishConnection;
  ready: Promise<void>;
};

/** `mqtt://` and, with the tls feature, `mqtts://`: the agent's own MQTT client. */
export function sessionConnector(transports: Transports): PublishConnector {
  return (o) => {
    const session = new MqttSession(
      {
        url: o.url,
        clientId: o.clientId,
        clean: true,
        // The connection may sit idle between commands; a long keepalive keeps it cheap.
        keepaliveS: 60,
        connectTimeoutMs: o.connectTimeoutMs,
        username: o.username,
        password: o.password,
        transports,
      },
      { close: () => o.onClose() },
    );
    return { connection: session, ready: session.connect().then(() => undefined) };
  };
}
