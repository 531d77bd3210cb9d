import type { ErrorCode } from "../../shared/errors.js";
import { type Decoded, decode, type ProtocolError } from "../../shared/protocol/codec.js";
import { type Sealed, seal, unseal, verifyTag } from "../../shared/protocol/mac.js";
import { parseTopic } from "../../shared/protocol/topics.js";
import { COMPILED_SCHEMAS } from "./compiled-schemas.js";

/** Where the link finds an agent's key: an enrolled, unrevoked agent's, else undefined. */
export interface KeyRing {
  keyOf(agentId: string): { generation: number; key: Buffer } | undefined;
}

/** A message refused by authentication: why, and who it claimed to come from. */
export interface Refusal extends ProtocolError {
  code: ErrorCode;
  /** The agent the message claimed to be from (its topic, or an event's `from`). */
  source: string;
  /** The agent should be sent a clock sample: its message was authentic but stale. */
  resync?: { agentId: string; t0: number };
  /**
   * Counted, but logged at debug, not as a warning: a hello of the agent's current instance
   * signed before a heartbeat already accepted, which is a hello sent again while the first
   * waited for its welcome and overtaken by the heartbeat that followed the welcome (a QoS 0
   * heartbeat may pass QoS 1 messages the broker holds back). A fleet reconnecting logs one per
   * agent otherwise.
   */
  quiet?: boolean;
}

/** Per-agent memory of the last accepted session messages, against replays inside the window. */
interface Seen {
  /** Signing time of the last accepted hello or heartbeat. */
  sessionAt: number;
  /** Signing time of the last accepted presence. */
  presenceAt: number;
  /** Instances whose hello was accepted, the current one last. */
  instances: string[];
  /**
   * When each superseded instance (all but the last) may be forgotten: the window after it was
   * superseded, when every hello it signed before is outside the window. Until then its hello,
   * replayed, is refused however many instances came after it.
   */
  forgetAt: number[];
}

/** Superseded instances kept in any case, however long ago (the most recent). */
const RECENT_INSTANCES = 4;

/**
 * The coordinator side of message authentication (docs/protocol.md, "Authenticated messages").
 * `open` checks a payload's MAC against the key of the agent its topic names (an event: the
 * identity its `from` names) and the freshness window; `admit` then refuses replays of session
 * messages, which carry no seq to deduplicate them by. Reports carry seq: a replayed one is a
 * duplicate the engine drops, so they need only the window.
 */
export class LinkAuth {
  private readonly seen = new Map<string, Seen>();

  constructor(
    private readonly keys: KeyRing,
    private readonly windowMs: number,
    private readonly prefix: string,
  ) {}

  /** Seals a down message for `agentId`; undefined when the agent has no key (not enrolled). */
  seal(agentId: string, topic: string, body: Uint8Array, at: number): Buffer | undefined {
    const k = this.keys.keyOf(agentId);
    return k === undefined ? undefined : seal(body, topic, k.key, k.generation, at);
  }

  /**
   * Opens a payload: the bytes it authenticates and when it was signed, or why it is refused.
   * An event is decoded here (its key is named inside it); everything else is left to the caller.
   */
  open(
    topic: string,
    payload: Uint8Array,
    now: number,
    maxBytes: number,
  ): { ok: true; body: Buffer; at: number; event?: Decoded } | { ok: false; error: Refusal } {
    const parsed = parseTopic(topic, this.prefix);
    // Not a v1 topic: the decoder says so, as it does without authentication.
    if (parsed === null) return { ok: true, body: Buffer.from(payload), at: now };
    const sealed = unseal(payload);
    const claimed = parsed.kind === "agent" ? parsed.agentId : "event";
    if (sealed === "unsigned") {
      return refuse("AX_AUTH_UNSIGNED", "message has no mac member", claimed);
    }
    if (sealed === "malformed") {
      return refuse("AX_AUTH_BAD_MAC", "mac member is malformed", claimed);
    }
    let agentId: string;
    let event: Decoded | undefined;
    if (parsed.kind === "event") {
      const d = decode(topic, sealed.body, {
        prefix: this.prefix,
        maxBytes,
        schemas: COMPILED_SCHEMAS,
      });
      if (!d.ok) return { ok: false, error: { ...d.error, source: claimed } };
      const from = (d.value.message as { from?: string }).from;
      if (from === undefined) {
        return refuse("AX_AUTH_BAD_MAC", "an event must name its sender in from", claimed);
      }
      agentId = from;
      event = d.value;
    } else {
      if (parsed.channel === "down") {
        return refuse("AX_AUTH_BAD_MAC", "a down message is not for the coordinator", claimed);
      }
      agentId = parsed.agentId;
    }
    // A presence is exempt from the window's past side, ordered by `at` alone (admit): the Last
    // Will is signed when its connection opened and published when it ends, often hours later;
    // held to the window it was refused, and a dead agent waited out its missed heartbeats.
    const pastToo = parsed.kind === "event" || parsed.channel !== "presence";
    const check = this.verify(sealed, topic, agentId, now, pastToo);
    if (check !== undefined) return { ok: false, error: check };
    return event === undefined
      ? { ok: true, body: sealed.body, at: sealed.at }
      : { ok: true, body: sealed.body, at: sealed.at, event };
  }

  private verify(
    sealed: Sealed,
    topic: string,
    agentId: string,
    now: number,
    pastToo: boolean,
  ): Refusal | undefined {
    const k = this.keys.keyOf(agentId);
    if (k === undefined) {
      return refusal(
        "AX_AUTH_NOT_ENROLLED",
        `agent "${agentId}" is not enrolled or is revoked`,
        agentId,
      );
    }
    if (sealed.kid !== k.generation) {
      return refusal(
        "AX_AUTH_BAD_MAC",
        `mac made with key generation ${sealed.kid}; agent "${agentId}" holds generation ${k.generation}`,
        agentId,
      );
    }
    if (!verifyTag(sealed, topic, k.key)) {
      return refusal("AX_AUTH_BAD_MAC", "mac does not verify", agentId);
    }
    if (sealed.at - now > this.windowMs || (pastToo && now - sealed.at > this.windowMs)) {
      return {
        ...refusal(
          "AX_AUTH_STALE",
          `signed at ${sealed.at}, ${Math.round(now - sealed.at)} ms from this coordinator's clock (window ${this.windowMs} ms)`,
          agentId,
        ),
        resync: { agentId, t0: sealed.at },
      };
    }
    return undefined;
  }

  /**
   * Refuses a replayed session message: a hello or heartbeat must be signed after the last one
   * accepted from its agent (a hello from an instance not seen before is accepted, since a
   * restarted device may sign before its clock is corrected; one from an instance it superseded
   * never is); a presence after the last presence,
   * or (an `offline`, which is also the Last Will signed at connect time) at the same time.
   */
  admit(d: Decoded, at: number, now = at): Refusal | undefined {
    if (d.channel === "event" || d.channel === "down") return undefined;
    const m = d.message;
    if (m.type !== "hello" && m.type !== "heartbeat" && m.type !== "presence") return undefined;
    let s = this.seen.get(d.agentId);
    if (s === undefined) {
      s = { sessionAt: -1, presenceAt: -1, instances: [], forgetAt: [] };
      this.seen.set(d.agentId, s);
    }
    // A mark past the window ahead was signed on a clock since corrected (stepped back, or an
    // agent's before its first sample): kept, it would refuse every message until then.
    if (s.sessionAt - now > this.windowMs) s.sessionAt = -1;
    if (s.presenceAt - now > this.windowMs) s.presenceAt = -1;
    if (m.type === "presence") {
      const fresh = m.status === "offline" ? at >= s.presenceAt : at > s.presenceAt;
      if (!fresh) return replayed(d.agentId, at, s.presenceAt);
      s.presenceAt = at;
      return undefined;
    }
    if (m.type === "hello" && m.instanceId !== s.instances.at(-1)) {
      // A process that restarts takes a new instanceId, so one superseded never speaks again.
      if (s.instances.includes(m.instanceId)) {
        return refusal(
          "AX_AUTH_STALE",
          `replayed: a hello of instance ${m.instanceId}, which a later one superseded`,
          d.agentId,
        );
      }
      if (s.instances.length > 0) s.forgetAt.push(now + this.windowMs);
      s.instances.push(m.instanceId);
      // Forgotten only once out of the window, and beyond the few most recent.
      while (s.forgetAt.length > RECENT_INSTANCES && (s.forgetAt[0] as number) < now) {
        s.forgetAt.shift();
        s.instances.shift();
      }
      s.sessionAt = at;
      return undefined;
    }
    if (at <= s.sessionAt) {
      const r = replayed(d.agentId, at, s.sessionAt);
      return m.type === "hello" ? { ...r, quiet: true } : r;
    }
    s.sessionAt = at;
    return undefined;
  }
}

function refusal(code: ErrorCode, message: string, source: string): Refusal {
  return { code, message, source };
}

function refuse(code: ErrorCode, message: string, source: string): { ok: false; error: Refusal } {
  return { ok: false, error: refusal(code, message, source) };
}

function replayed(agentId: string, at: number, last: number): Refusal {
  return refusal(
    "AX_AUTH_STALE",
    `replayed: signed at ${at}, not after the last accepted (${last})`,
    agentId,
  );
}
