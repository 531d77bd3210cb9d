import { createHmac, timingSafeEqual } from "node:crypto";

/*
 * Message authentication (docs/protocol.md, "Authenticated messages"). Every payload on an
 * agent's topics carries, as the first member of its JSON text, an HMAC-SHA256 over the topic and
 * the rest of the payload's exact bytes, under the agent's message key:
 *
 *   object:  {"mac":"<kid>.<at>.<tag>",  …the message's own members…}
 *   batch:   [{"mac":"<kid>.<at>.<tag>"}, …the reports…]
 *
 * The authenticated bytes are the payload with that auth member cut out (what a sender had before
 * it was inserted), so a device in another language needs no canonical JSON: it serialises its
 * message once, MACs those bytes, and inserts the member after the opening bracket.
 */

/** Bytes of an HMAC-SHA256 tag. */
export const MAC_BYTES = 32;

/**
 * The most bytes sealing adds to a payload: `[{"mac":"`, a kid of 9 digits, `.`, a time of 16
 * digits, `.`, the tag, `"},`. Senders keep payloads this far under the receiver's limit.
 */
export const MAX_SEAL_BYTES = 9 + 9 + 1 + 16 + 1 + 43 + 3;

/** Length of a tag in unpadded base64url. */
const TAG_CHARS = 43;

const OBJECT_HEAD = '{"mac":"';
const BATCH_HEAD = '[{"mac":"';

/** What a payload's auth member says, and the bytes it covers. */
export interface Sealed {
  /** The key generation the sender used. */
  kid: number;
  /** When the sender signed, UTC ms on the coordinator's clock as the sender knows it. */
  at: number;
  /** The tag, 32 bytes. */
  tag: Buffer;
  /** The tag as it was spelt in the token (canonical base64url). */
  tagText: string;
  /** The payload with the auth member cut out: the message as its sender serialised it. */
  body: Buffer;
}

/** Why a payload could not be opened. */
export type UnsealFailure = "unsigned" | "malformed";

/**
 * The HMAC-SHA256 tag of a body on a topic. The bytes it covers: `ax1`, kid, at and the topic,
 * each ended by a line feed, then the body. Binding the topic binds the agent (named in it) and
 * the direction (up, down or presence).
 */
export function macTag(
  key: Uint8Array,
  kid: number,
  at: number,
  topic: string,
  body: Uint8Array,
): Buffer {
  return createHmac("sha256", key)
    .update(`ax1\n${kid}\n${at}\n${topic}\n`, "utf8")
    .update(body)
    .digest();
}

/**
 * Inserts the auth member into `body` (a JSON object, or a batch: an array of objects), MACed
 * under `key`. `at` is rounded down to whole milliseconds.
 */
export function seal(
  body: Uint8Array | string,
  topic: string,
  key: Uint8Array,
  kid: number,
  at: number,
): Buffer {
  const bytes =
    typeof body === "string"
      ? Buffer.from(body, "utf8")
      : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const ms = Math.floor(at);
  const token = `${kid}.${ms}.${macTag(key, kid, ms, topic, bytes).toString("base64url")}`;
  const first = bytes[0];
  if (first === 0x7b /* { */ && bytes[1] === 0x22 /* " */) {
    return Buffer.concat([Buffer.from(`${OBJECT_HEAD}${token}",`), bytes.subarray(1)]);
  }
  if (first === 0x5b /* [ */ && bytes[1] === 0x7b /* { */) {
    return Buffer.concat([Buffer.from(`${BATCH_HEAD}${token}"},`), bytes.subarray(1)]);
  }
  throw new TypeError("seal: body must be a JSON object with members, or an array of objects");
}

/** Base64url characters whose value's low two bits are zero: the last of a canonical 32-byte tag. */
const CANONICAL_LAST: ReadonlySet<number> = new Set(
  [..."AEIMQUYcgkosw048"].map((c) => c.charCodeAt(0)),
);

/**
 * `kid.at.tag`, each number in plain decimal without leading zeros: the tag is made over them as
 * written, and the verifier writes them back from their values, so `01` must not stand for `1`.
 */
const TOKEN = /^([1-9]\d{0,8})\.(0|[1-9]\d{0,15})\.([A-Za-z0-9_-]{43})$/;

/**
 * Reads a payload's auth member without checking it: `unsigned` when there is none, `malformed`
 * when there is one that cannot be read. Check the tag with {@link verifyTag}.
 */
export function unseal(payload: Uint8Array): Sealed | UnsealFailure {
  const buf = Buffer.isBuffer(payload)
    ? payload
    : Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  let head: number;
  let close: string;
  if (startsWith(buf, OBJECT_HEAD)) {
    head = OBJECT_HEAD.length;
    close = '",';
  } else if (startsWith(buf, BATCH_HEAD)) {
    head = BATCH_HEAD.length;
    close = '"},';
  } else {
    return "unsigned";
  }
  // The token is at most 9 + 1 + 16 + 1 + 43 characters and never holds a quote.
  const end = buf.indexOf(0x22 /* " */, head);
  if (end < 0 || end - head > 70) return "malformed";
  if (buf.toString("latin1", end, end + close.length) !== close) return "malformed";
  const m = TOKEN.exec(buf.toString("latin1", head, end));
  if (!m) return "malformed";
  const kid = Number(m[1]);
  const at = Number(m[2]);
  if (!Number.isSafeInteger(at)) return "malformed";
  const text = m[3] as string;
  // Only the canonical spelling: the last character's two spare bits must be zero, or one tag
  // would have four spellings and a changed payload byte could still verify.
  if (text.length !== TAG_CHARS || !CANONICAL_LAST.has(text.charCodeAt(TAG_CHARS - 1))) {
    return "malformed";
  }
  const tag = Buffer.from(text, "base64url");
  if (tag.length !== MAC_BYTES) return "malformed";
  const rest = buf.subarray(end + close.length);
  const body = Buffer.concat([buf.subarray(0, 1), rest]);
  return { kid, at, tag, tagText: text, body };
}

/** True when `sealed`'s tag is right for `topic` under `key` (compared in constant time). */
export function verifyTag(sealed: Sealed, topic: string, key: Uint8Array): boolean {
  const want = macTag(key, sealed.kid, sealed.at, topic, sealed.body);
  return want.length === sealed.tag.length && timingSafeEqual(want, sealed.tag);
}

function startsWith(buf: Buffer, ascii: string): boolean {
  if (buf.length < ascii.length) return false;
  for (let i = 0; i < ascii.length; i++) if (buf[i] !== ascii.charCodeAt(i)) return false;
  return true;
}
