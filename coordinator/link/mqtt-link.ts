import mqtt, { type MqttClient } from "mqtt";
import { AxError } from "../../shared/errors.js";
import { newId } from "../../shared/ids.js";
import {
  type Decoded,
  type DownMessage,
  decode,
  encode,
  type ProtocolError,
  type Topics,
  topics,
} from "../../shared/protocol/index.js";

export interface CoordinatorLinkOptions {
  url: string;
  /** @default "ax" */
  prefix?: string;
  /** @default 65536 */
  maxPayloadBytes?: number;
  /** When set, subscribe through `$share/<group>/…` so several coordinators split the load. */
  sharedGroup?: string;
  username?: string;
  password?: string;
}

export interface LinkHandlers {
  message(decoded: Decoded, receivedAt: number): void;
  invalid(error: ProtocolError, topic: string): void;
}

/** The coordinator's MQTT connection: subscribes to every agent's up and presence topics. */
export class CoordinatorLink {
  readonly topics: Topics;
  private client: MqttClient | undefined;

  constructor(
    private readonly options: CoordinatorLinkOptions,
    private readonly now: () => number,
  ) {
    this.topics = topics(options.prefix ?? "ax");
  }

  async start(handlers: LinkHandlers): Promise<void> {
    const { url, sharedGroup } = this.options;
    const client = mqtt.connect(url, {
      clientId: `ax-coord-${newId()}`.slice(0, 23),
      clean: true,
      keepalive: 10,
      reconnectPeriod: 1000,
      connectTimeout: 10_000,
      ...(this.options.username === undefined ? {} : { username: this.options.username }),
      ...(this.options.password === undefined ? {} : { password: this.options.password }),
    });
    this.client = client;
    // Rule 10: without TCP_NODELAY two small publishes in a row wait on the peer's delayed ACK.
    client.on("connect", () => {
      (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
    });
    client.on("message", (topic, payload) => {
      const receivedAt = this.now();
      const result = decode(topic, payload, {
        prefix: this.topics.prefix,
        maxBytes: this.options.maxPayloadBytes ?? 65_536,
      });
      if (result.ok) handlers.message(result.value, receivedAt);
      else handlers.invalid(result.error, topic);
    });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        client.removeListener("connect", onConnect);
        reject(
          new AxError("AX_LINK_FAILED", `cannot connect to MQTT broker ${url}: ${err.message}`, {
            cause: err,
          }),
        );
      };
      const onConnect = () => {
        client.removeListener("error", onError);
        resolve();
      };
      client.once("connect", onConnect);
      client.once("error", onError);
    });
    const share = (t: string) => (sharedGroup ? `$share/${sharedGroup}/${t}` : t);
    await client.subscribeAsync(
      [this.topics.allUp, this.topics.allPresence, this.topics.allEvents].map(share),
      { qos: 1 },
    );
  }

  /** True while the client is connected to the broker (it reconnects by itself when not). */
  get connected(): boolean {
    return this.client?.connected === true;
  }

  /** Publishes a message on an agent's down topic, QoS 1. */
  async send(agentId: string, message: DownMessage): Promise<void> {
    const client = this.client;
    if (!client) throw new AxError("AX_LINK_FAILED", "link not started");
    await client.publishAsync(this.topics.down(agentId), encode(message), { qos: 1 });
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) await client.endAsync();
  }
}
