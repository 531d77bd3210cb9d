import { ID_PATTERN } from "../ids.js";

/** The three per-agent channels of DESIGN §5. */
export type AgentChannel = "up" | "down" | "presence";

/** A topic of protocol v1, parsed. */
export type ParsedTopic =
  | { kind: "agent"; agentId: string; channel: AgentChannel }
  | { kind: "event"; name: string };

/** Topic builders for one prefix (default `ax`). */
export interface Topics {
  readonly prefix: string;
  up(agentId: string): string;
  down(agentId: string): string;
  presence(agentId: string): string;
  event(name: string): string;
  /** Wildcard filters the coordinator subscribes to. */
  readonly allUp: string;
  readonly allPresence: string;
  readonly allEvents: string;
}

/**
 * A topic prefix: one or more topic levels separated by `/`, each of letters, digits, `.`, `_`
 * and `-` (so no wildcard, no `$`, no empty level). Both configs check `mqtt.prefix` with it.
 */
export const PREFIX_PATTERN = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;

/** What {@link PREFIX_PATTERN} allows, as a config error says it. */
export const PREFIX_RULE =
  "must be one or more topic levels separated by /, each of letters, digits, '.', '_' or '-' (no +, #, $ or empty level)";

/** Builds the topics of protocol v1 under `prefix`. Throws on a prefix with wildcards. */
export function topics(prefix = "ax"): Topics {
  if (!PREFIX_PATTERN.test(prefix)) {
    throw new TypeError(`topic prefix "${prefix}" ${PREFIX_RULE}`);
  }
  const base = `${prefix}/v1`;
  return {
    prefix,
    up: (agentId) => `${base}/agents/${agentId}/up`,
    down: (agentId) => `${base}/agents/${agentId}/down`,
    presence: (agentId) => `${base}/agents/${agentId}/presence`,
    event: (name) => `${base}/events/${name}`,
    allUp: `${base}/agents/+/up`,
    allPresence: `${base}/agents/+/presence`,
    allEvents: `${base}/events/+`,
  };
}

const CHANNELS: ReadonlySet<string> = new Set(["up", "down", "presence"]);

/**
 * Parses a topic of protocol v1 under `prefix`; `null` when it is not one. Ids in topics must
 * match {@link ID_PATTERN}, so a topic can never smuggle a wildcard or an extra level.
 */
export function parseTopic(topic: string, prefix = "ax"): ParsedTopic | null {
  const head = `${prefix}/v1/`;
  if (!topic.startsWith(head)) return null;
  const rest = topic.slice(head.length).split("/");
  if (rest.length === 3 && rest[0] === "agents") {
    const [, agentId, channel] = rest as [string, string, string];
    if (!ID_PATTERN.test(agentId) || !CHANNELS.has(channel)) return null;
    return { kind: "agent", agentId, channel: channel as AgentChannel };
  }
  if (rest.length === 2 && rest[0] === "events") {
    const name = rest[1] as string;
    if (!ID_PATTERN.test(name)) return null;
    return { kind: "event", name };
  }
  return null;
}
