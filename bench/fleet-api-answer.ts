import type { MqttClient } from "mqtt";
import { envelope } from "../shared/message.js";
import { decodeAll, encode, topics } from "../shared/protocol/index.js";

/**
 * The agents' side of bench/fleet-api.ts's fan-out, as little of it as the fan-out needs: on
 * `client`, every dispatch under `prefix` is answered `accepted` for its agent, with seq rising by
 * one per agent (the dispatcher paces itself by its answers). Subscribes; resolves with a count of
 * the answers sent so far.
 */
export async function answerDispatches(client: MqttClient, prefix: string): Promise<() => number> {
  const t = topics(prefix);
  const seqOf = new Map<string, number>();
  let answered = 0;
  client.on("message", (topic, payload) => {
    for (const d of decodeAll(topic, payload, { prefix })) {
      if (!d.ok || d.value.channel !== "down" || d.value.message.type !== "dispatch") continue;
      const { agentId } = d.value;
      const seq = (seqOf.get(agentId) ?? 0) + 1;
      seqOf.set(agentId, seq);
      const m = d.value.message;
      const accepted = { type: "accepted", executionId: m.executionId, round: m.round, seq };
      client.publish(t.up(agentId), encode(envelope(accepted, Date.now())), { qos: 1 });
      answered++;
    }
  });
  await client.subscribeAsync(`${t.prefix}/v1/agents/+/down`, { qos: 1 });
  return () => answered;
}
