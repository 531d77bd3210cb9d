import mqtt, { type MqttClient } from "mqtt";
import { encode, type Topics } from "../../shared/protocol/index.js";

export interface AgentLinkOptions {
  url: string;
  agentId: string;
  topics: Topics;
  keepaliveS: number;
  username?: string | undefined;
  password?: string | undefined;
  /** The retained `offline` presence the broker publishes if this connection dies. */
  will: Buffer;
}

export interface AgentLinkEvents {
  /** Connected and subscribed to the down topic: safe to say hello. */
  ready(): void;
  message(topic: string, payload: Buffer): void;
  down(): void;
}

/**
 * The agent's MQTT connection. Its client id is the agentId so a broker ACL can pin it to its own
 * topics. On every (re)connect it subscribes before reporting ready, so a hello is never sent by
 * a connection that cannot hear the answer.
 */
export class AgentLink {
  private client: MqttClient | undefined;

  constructor(private readonly options: AgentLinkOptions) {}

  start(events: AgentLinkEvents): void {
    const o = this.options;
    const client = mqtt.connect(o.url, {
      clientId: o.agentId,
      clean: true,
      keepalive: o.keepaliveS,
      reconnectPeriod: 1000,
      connectTimeout: 10_000,
      resubscribe: false,
      will: { topic: o.topics.presence(o.agentId), payload: o.will, qos: 1, retain: true },
      ...(o.username === undefined ? {} : { username: o.username }),
      ...(o.password === undefined ? {} : { password: o.password }),
    });
    this.client = client;
    client.on("connect", () => {
      // Rule 10: TCP_NODELAY, or back-to-back small publishes wait on delayed ACKs.
      (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
      client
        .subscribeAsync(o.topics.down(o.agentId), { qos: 1 })
        .then(() => events.ready())
        .catch(() => client.reconnect());
    });
    client.on("message", (topic, payload) => events.message(topic, payload));
    client.on("close", () => events.down());
    client.on("error", () => {}); // reconnects on its own; errors surface as close
  }

  get connected(): boolean {
    return this.client?.connected ?? false;
  }

  /** Publishes QoS 1 on the up topic; resolves on PUBACK (which is not delivery, see rule 1). */
  async publishUp(message: { type: string }): Promise<void> {
    const client = this.client;
    if (!client?.connected) return;
    await client.publishAsync(this.options.topics.up(this.options.agentId), encode(message), {
      qos: 1,
    });
  }

  async publishPresence(payload: Buffer): Promise<void> {
    const client = this.client;
    if (!client?.connected) return;
    await client.publishAsync(this.options.topics.presence(this.options.agentId), payload, {
      qos: 1,
      retain: true,
    });
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) await client.endAsync();
  }
}
