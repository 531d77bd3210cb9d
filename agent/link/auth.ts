import type { ErrorCode } from "../../shared/errors.js";
import { seal, unseal, verifyTag } from "../../shared/protocol/mac.js";

/** Down messages remembered against replays; past it the oldest goes and raises the floor. */
const REMEMBERED = 4096;

/** An agent's key, from its identity file. */
export interface AgentKey {
  generation: number;
  key: Buffer;
}

/** Why a down message was refused. */
export interface AuthRefusal {
  code: ErrorCode;
  message: string;
}

/**
 * The agent side of message authentication (docs/protocol.md, "Authenticated messages"): seals
 * every up and presence payload, and opens every down payload, refusing one without a valid MAC
 * under this agent's key, one signed outside the window of the coordinator's clock (once the
 * agent has a clock sample to judge by), and one already seen.
 */
export class AgentAuth {
  /** Tags of accepted down messages, with their signing time. */
  private readonly seen = new Map<string, number>();
  /** Down messages signed at or before this are refused: their tags may have been forgotten. */
  private floor = -1;
  /** Last signing time used: up messages are signed at strictly rising times. */
  private lastAt = 0;

  constructor(
    private readonly key: AgentKey,
    private readonly windowMs: number,
  ) {}

  /** Seals `body` for `topic`; `at` (presence) is kept as given, else made strictly rising. */
  seal(topic: string, body: Uint8Array | string, now: number, fixedAt?: number): Buffer {
    let at = fixedAt;
    if (at === undefined) {
      // Rising, unless the last is past the window ahead: signed on a clock since corrected (a
      // step back, a first sample), it would keep every message outside the window until then.
      at = Math.max(Math.floor(now), this.lastAt - now > this.windowMs ? 0 : this.lastAt + 1);
      this.lastAt = at;
    }
    return seal(body, topic, this.key.key, this.key.generation, at);
  }

  /**
   * Opens a down payload: the bytes it authenticates and its signing time, or why it is refused
   * (no valid MAC under this agent's key, or a copy of one already received).
   */
  open(
    topic: string,
    payload: Uint8Array,
    coordNow: number,
  ): { ok: true; body: Buffer; at: number } | { ok: false; error: AuthRefusal } {
    const s = unseal(payload);
    if (s === "unsigned") return no("AX_AUTH_UNSIGNED", "message has no mac member");
    if (s === "malformed") return no("AX_AUTH_BAD_MAC", "mac member is malformed");
    if (s.kid !== this.key.generation) {
      return no(
        "AX_AUTH_BAD_MAC",
        `mac made with key generation ${s.kid}; this agent holds ${this.key.generation}`,
      );
    }
    if (!verifyTag(s, topic, this.key.key)) return no("AX_AUTH_BAD_MAC", "mac does not verify");
    const id = s.tagText;
    // A floor past the window ahead is of a coordinator clock since stepped back: what it kept
    // out is outside the window now anyway (stale), and it would refuse every new message.
    if (this.floor - coordNow > this.windowMs) this.floor = 0;
    if (s.at <= this.floor || this.seen.has(id)) {
      return no("AX_AUTH_STALE", "replayed: this message was already received");
    }
    this.seen.set(id, s.at);
    if (this.seen.size > REMEMBERED) {
      const [oldest, at] = this.seen.entries().next().value as [string, number];
      this.seen.delete(oldest);
      this.floor = Math.max(this.floor, at);
    }
    return { ok: true, body: s.body, at: s.at };
  }

  /**
   * Why a message signed at `at` is too old or too new for `coordNow` (the coordinator's time as
   * this agent knows it), or undefined when it is within the window. Not asked of a welcome or a
   * time answer: those carry the clock sample that corrects this agent's clock, and are matched
   * to a message it sent itself.
   */
  stale(at: number, coordNow: number): AuthRefusal | undefined {
    if (Math.abs(coordNow - at) <= this.windowMs) return undefined;
    return {
      code: "AX_AUTH_STALE",
      message: `signed ${Math.round(coordNow - at)} ms from this agent's clock (window ${this.windowMs} ms)`,
    };
  }
}

function no(code: ErrorCode, message: string): { ok: false; error: AuthRefusal } {
  return { ok: false, error: { code, message } };
}
