import { parseTopic } from "../../shared/protocol/topics.js";

/*
 * Who may publish and subscribe where (docs/security.md, "The broker"). One set of rules: the
 * embedded broker enforces them in its hooks, and `ax broker config` writes them as Mosquitto's
 * ACL, so the demo runs under the same rules as production.
 */

/** A broker login, as the rules see it. */
export type BrokerUser = { kind: "coordinator" } | { kind: "agent"; agentId: string };

/**
 * An agent may publish only on its own `up` and `presence` topics (and its Last Will, which is its
 * presence), and on event topics (an event must still carry its MAC, docs/protocol.md). The
 * coordinator publishes only on agents' `down` topics.
 */
export function mayPublish(user: BrokerUser, topic: string, prefix: string): boolean {
  const t = parseTopic(topic, prefix);
  if (t === null) return false;
  if (user.kind === "coordinator") return t.kind === "agent" && t.channel === "down";
  if (t.kind === "event") return true;
  return t.agentId === user.agentId && (t.channel === "up" || t.channel === "presence");
}

/** Strips a shared-subscription prefix (`$share/<group>/`), which only the coordinator uses. */
function unshare(filter: string): { shared: boolean; filter: string } | null {
  if (!filter.startsWith("$share/")) return { shared: false, filter };
  const rest = filter.slice("$share/".length);
  const slash = rest.indexOf("/");
  if (slash <= 0) return null;
  return { shared: true, filter: rest.slice(slash + 1) };
}

/**
 * An agent may subscribe only to its own `down` topic, exactly (no wildcards). The coordinator may
 * subscribe to every agent's `up` and `presence` and to events, plain or shared; nothing else.
 */
export function maySubscribe(user: BrokerUser, filter: string, prefix: string): boolean {
  const u = unshare(filter);
  if (u === null) return false;
  const base = `${prefix}/v1`;
  if (user.kind === "coordinator") {
    return [`${base}/agents/+/up`, `${base}/agents/+/presence`, `${base}/events/+`].includes(
      u.filter,
    );
  }
  return !u.shared && u.filter === `${base}/agents/${user.agentId}/down`;
}
