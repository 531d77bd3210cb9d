import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  type Finished,
  jsonDepth,
  MAX_JSON_DEPTH,
  MAX_OBJECT_KEYS,
} from "../../shared/protocol/index.js";

/** A `finished` report's body, before the envelope and seq are added. */
export type FinishedBody = Omit<Finished, "v" | "msgId" | "sentAt" | "seq">;

/** The longest `finished.message` the protocol takes, in UTF-16 code units. */
export const MAX_MESSAGE_CHARS = 4096;

/**
 * Bytes kept free for what is added after the body is fitted: the envelope (`v`, `msgId`,
 * `sentAt`), `seq`, and the comma of a batch. About 90 bytes today; the rest is margin.
 */
const ENVELOPE_RESERVE = 512;

/**
 * Levels a `result` may nest on its own: a report in a batch puts it under the batch's array
 * and the report's object (protocol.md, Depth).
 */
const MAX_RESULT_DEPTH = MAX_JSON_DEPTH - 2;

/** Why a result was replaced by its marker. */
export type TruncatedReason = "too_large" | "too_deep" | "too_many_keys" | "not_json";

/** What stands in for a result that could not be sent. */
export interface TruncatedResult {
  truncated: true;
  reason: TruncatedReason;
  /** The result's size as JSON, in bytes, when it could be serialised. */
  bytes?: number;
}

/** Cuts `text` to at most `max` UTF-16 units, ending in a marker, never splitting a surrogate pair. */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const marker = ` …[cut: ${text.length} chars]`;
  let end = max - marker.length;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--; // a high surrogate without its pair
  return text.slice(0, end) + marker;
}

/** The result as the JSON it will be sent as, or why it cannot be. */
function serialise(
  result: unknown,
): { json: string } | { reason: TruncatedReason; bytes?: number } {
  let json: string | undefined;
  try {
    // Throws on a cycle or a BigInt, and (RangeError) on a value nested a few thousand deep.
    json = JSON.stringify(result);
  } catch {
    return { reason: "not_json" };
  }
  // undefined: a function or symbol; anything but an object (an array, a string, a number)
  // serialises, but is not what `result` may be: its size is still worth telling.
  if (json === undefined) return { reason: "not_json" };
  if (!json.startsWith("{")) return { reason: "not_json", bytes: Buffer.byteLength(json) };
  return { json };
}

/**
 * Makes a `finished` report fit what the coordinator will accept, before it is journaled: a
 * report the coordinator refuses is never acknowledged, so it would stay in the outbox and be
 * re-sent forever. `message` is cut to {@link MAX_MESSAGE_CHARS} with a marker; a `result` that
 * is not a JSON object, nests too deep, has too many keys, or would take the payload past
 * `maxBytes` is replaced by a {@link TruncatedResult} marker, and the message says so. Whatever
 * the handler returned, the report sent is valid and delivered once. Pure.
 */
export function fitFinished(
  body: FinishedBody,
  maxBytes: number = DEFAULT_MAX_PAYLOAD_BYTES,
): FinishedBody {
  const { result, ...rest } = body;
  if (result === undefined) return { ...rest, message: cut(rest.message, MAX_MESSAGE_CHARS) };
  const s = serialise(result);
  let marker: TruncatedResult | undefined;
  let bytes: number | undefined;
  if ("reason" in s) {
    marker = { truncated: true, ...s };
  } else {
    bytes = Buffer.byteLength(s.json);
    const message = cut(rest.message, MAX_MESSAGE_CHARS);
    const others = Buffer.byteLength(JSON.stringify({ ...rest, message }));
    if (others + bytes + ",'result':".length + ENVELOPE_RESERVE > maxBytes) {
      marker = { truncated: true, reason: "too_large", bytes };
    } else if (jsonDepth(s.json) > MAX_RESULT_DEPTH) {
      marker = { truncated: true, reason: "too_deep", bytes };
    } else {
      const parsed = JSON.parse(s.json) as Record<string, unknown>;
      if (Object.keys(parsed).length > MAX_OBJECT_KEYS) {
        marker = { truncated: true, reason: "too_many_keys", bytes };
      } else {
        // The parsed copy, not the handler's object: what is journaled and sent is exactly the
        // JSON checked here (no toJSON or getter can change it later).
        return { ...rest, message, result: parsed };
      }
    }
  }
  const why = {
    too_large: `its ${bytes} bytes would not fit the ${maxBytes}-byte payload limit`,
    too_deep: `it nests deeper than ${MAX_RESULT_DEPTH} levels`,
    too_many_keys: `it has more than ${MAX_OBJECT_KEYS} keys`,
    not_json: "it is not a JSON object",
  }[marker.reason];
  const note = ` [result not sent: ${why}]`;
  return {
    ...rest,
    // The note goes last and survives the cut: it is what the operator needs to read.
    message: cut(rest.message, MAX_MESSAGE_CHARS - note.length) + note,
    result: { ...marker },
  };
}
