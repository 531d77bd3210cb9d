import type * as z from "zod/mini";
import { safeParse } from "zod/mini";
import type { ErrorCode } from "../errors.js";
import { DEFAULT_MAX_PAYLOAD_BYTES, PROTOCOL_VERSION } from "./envelope.js";
import type { Event } from "./event.js";
import { jsonDepth, MAX_JSON_DEPTH } from "./json-depth.js";
import { type DownMessage, SCHEMAS_BY_CHANNEL, type UpMessage } from "./messages.js";
import type { Presence } from "./presence.js";
import { parseTopic } from "./topics.js";

/** A decoded message, tagged with what its topic said. */
export type Decoded =
  | { channel: "up"; agentId: string; message: UpMessage }
  | { channel: "down"; agentId: string; message: DownMessage }
  | { channel: "presence"; agentId: string; message: Presence }
  | { channel: "event"; name: string; message: Event };

/** Why a message was rejected. `field` is the dotted path of the first bad field, if any. */
export interface ProtocolError {
  code: ErrorCode;
  message: string;
  field?: string;
  /** Present when the message's type could be read. */
  type?: string;
  /** Present when the executionId and round could be read, so the sender can be answered. */
  executionId?: string;
  round?: number;
  /** Present when a report's seq could be read, so that it can be acknowledged all the same. */
  seq?: number;
}

export type DecodeResult = { ok: true; value: Decoded } | { ok: false; error: ProtocolError };

export interface DecodeOptions {
  /** Topic prefix. @default "ax" */
  prefix?: string;
  /** Largest payload accepted, in bytes. @default 65536 */
  maxBytes?: number;
  /**
   * The schemas to check messages with, by channel and type: {@link SCHEMAS_BY_CHANNEL}, or the
   * same schemas compiled to check faster (the coordinator's). @default SCHEMAS_BY_CHANNEL
   */
  schemas?: SchemaTable;
}

/** The schema of each message type, per channel, as {@link SCHEMAS_BY_CHANNEL} holds them. */
export type SchemaTable = {
  readonly [C in keyof typeof SCHEMAS_BY_CHANNEL]: Readonly<Record<string, z.ZodMiniType>>;
};

/**
 * Strict UTF-8, and a byte order mark is kept, so that JSON.parse refuses it (protocol.md: UTF-8
 * without one), as it does a payload given as a string.
 */
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function fail(code: ErrorCode, message: string, extra: Partial<ProtocolError> = {}): DecodeResult {
  return { ok: false, error: { code, message, ...extra } };
}

function readRef(obj: Record<string, unknown>): Partial<ProtocolError> {
  const out: Partial<ProtocolError> = {};
  const { executionId, round, seq, type } = obj;
  if (typeof type === "string") out.type = type;
  if (typeof executionId === "string" && /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(executionId)) {
    out.executionId = executionId;
  }
  // Safe integers only, as the schema's: a round of 1e21 echoed in `rejected` would make the
  // agent's own report invalid, refused by the coordinator and re-sent forever.
  if (typeof round === "number" && Number.isSafeInteger(round) && round >= 1) out.round = round;
  if (typeof seq === "number" && Number.isSafeInteger(seq) && seq >= 1) out.seq = seq;
  return out;
}

type Issue = z.core.$ZodRawIssue;

/** A short, safe rendering of an untrusted value for an error message (never deep, never long). */
function brief(value: unknown): string {
  if (value === undefined) return "nothing";
  if (typeof value === "string")
    return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === "number" || typeof value === "boolean" || value === null)
    return String(value);
  return typeName(value);
}

function typeName(input: unknown): string {
  if (input === null) return "null";
  if (Array.isArray(input)) return "array";
  return typeof input;
}

/**
 * English messages for zod's issue codes. zod/mini ships no locale by default (that keeps the
 * agent bundle small), so without this every issue would read "Invalid input".
 */
export function describeIssue(issue: Issue): string {
  switch (issue.code) {
    case "invalid_type":
      return issue.input === undefined
        ? `is required (${issue.expected})`
        : `expected ${issue.expected}, got ${typeName(issue.input)}`;
    case "too_small":
      return issue.origin === "array" || issue.origin === "string"
        ? `must have at least ${issue.minimum} ${issue.origin === "array" ? "items" : "characters"}`
        : `must be ${issue.inclusive ? "at least" : "greater than"} ${issue.minimum}`;
    case "too_big":
      return issue.origin === "array" || issue.origin === "string"
        ? `must have at most ${issue.maximum} ${issue.origin === "array" ? "items" : "characters"}`
        : `must be ${issue.inclusive ? "at most" : "less than"} ${issue.maximum}`;
    case "invalid_value":
      return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "invalid_format":
      return `has an invalid format (${issue.format})`;
    case "not_multiple_of":
      return `must be a multiple of ${issue.divisor}`;
    case "unrecognized_keys":
      return `has unknown keys ${issue.keys.join(", ")}`;
    case "invalid_key":
      return "has an invalid key";
    case "invalid_union":
      return "matches none of the allowed shapes";
    default:
      return "is invalid";
  }
}

/** The most messages one batch payload (reports on `up`, commands on `down`) may hold. */
export const MAX_BATCH_REPORTS = 256;

/** The most commands one batch payload on a `down` topic may hold (as many as a report batch). */
export const MAX_BATCH_COMMANDS = MAX_BATCH_REPORTS;

/**
 * Message types that are never in a batch, by channel: on `up` the session messages (not
 * reports), on `down` the session messages (`welcome` and `time` carry a clock sample, `ack`
 * prunes the outbox). A session message of the other channel in a batch is a type of another
 * channel, as it would be alone (AX_PROTO_UNKNOWN_TYPE).
 */
const SESSION_TYPES: Readonly<Record<"up" | "down", ReadonlySet<string>>> = {
  up: new Set(["hello", "heartbeat"]),
  down: new Set(["welcome", "time", "ack"]),
};

/** A payload's topic and JSON value, or why it has none. */
type Parsed =
  | { ok: true; topic: NonNullable<ReturnType<typeof parseTopic>>; raw: unknown }
  | { ok: false; result: DecodeResult };

/** Steps 1-4 of decoding: size, topic, JSON, nesting depth. */
function parsePayload(topic: string, payload: Uint8Array | string, options: DecodeOptions): Parsed {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const size = typeof payload === "string" ? Buffer.byteLength(payload) : payload.byteLength;
  if (size > maxBytes) {
    return {
      ok: false,
      result: fail(
        "AX_PROTO_TOO_LARGE",
        `payload is ${size} bytes, more than the limit of ${maxBytes}`,
      ),
    };
  }
  const parsedTopic = parseTopic(topic, options.prefix);
  if (parsedTopic === null) {
    return { ok: false, result: fail("AX_PROTO_BAD_TOPIC", `topic "${topic}" is not a v1 topic`) };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(typeof payload === "string" ? payload : decoder.decode(payload));
  } catch (err) {
    return {
      ok: false,
      result: fail("AX_PROTO_BAD_JSON", `payload is not valid JSON: ${(err as Error).message}`),
    };
  }
  // JSON.parse itself builds deep values without recursing; what would recurse is whatever walks
  // the value later (JSON.stringify in the journal overflowed its stack at ~5,000 levels). So a
  // deep value goes no further than here; only its top-level ids are read, for rule 6.
  const depth = jsonDepth(payload);
  if (depth > MAX_JSON_DEPTH) {
    const ref =
      typeof raw === "object" && raw !== null && !Array.isArray(raw)
        ? readRef(raw as Record<string, unknown>)
        : {};
    return {
      ok: false,
      result: fail(
        "AX_PROTO_TOO_DEEP",
        `payload nests ${depth} levels deep, more than the limit of ${MAX_JSON_DEPTH}`,
        ref,
      ),
    };
  }
  return { ok: true, topic: parsedTopic, raw };
}

/**
 * Decodes one MQTT message of protocol v1: checks size, topic, JSON, nesting depth, version,
 * type and every field, and that a body naming an agent names the one in its topic. Never throws. A batch (a
 * JSON array, see {@link decodeAll}) is not one message: it fails with AX_PROTO_NOT_OBJECT.
 */
export function decode(
  topic: string,
  payload: Uint8Array | string,
  options: DecodeOptions = {},
): DecodeResult {
  const p = parsePayload(topic, payload, options);
  return p.ok ? decodeValue(p.topic, p.raw, options.schemas ?? SCHEMAS_BY_CHANNEL) : p.result;
}

/**
 * Decodes an MQTT message that may be a batch: on an `up` topic a JSON array of 1 to
 * {@link MAX_BATCH_REPORTS} reports (never `hello` or `heartbeat`), on a `down` topic one of 1 to
 * {@link MAX_BATCH_COMMANDS} commands (`dispatch`, `cancel`, `query`; never `welcome`, `time` or
 * `ack`), each checked as a message of its own, in order. One result per item, so one bad one
 * does not cost the others;
 * a bad item's error names its index (`field` `3.round`). Any other payload: one result, as
 * {@link decode} gives. Never throws.
 */
export function decodeAll(
  topic: string,
  payload: Uint8Array | string,
  options: DecodeOptions = {},
): DecodeResult[] {
  const p = parsePayload(topic, payload, options);
  if (!p.ok) return [p.result];
  const table = options.schemas ?? SCHEMAS_BY_CHANNEL;
  if (!Array.isArray(p.raw)) return [decodeValue(p.topic, p.raw, table)];
  if (p.topic.kind !== "agent" || (p.topic.channel !== "up" && p.topic.channel !== "down")) {
    return [
      fail(
        "AX_PROTO_NOT_OBJECT",
        "payload must be a JSON object (only an agent's up and down topics take a batch)",
      ),
    ];
  }
  const items: unknown[] = p.raw;
  const what = p.topic.channel === "up" ? "reports" : "commands";
  const session = SESSION_TYPES[p.topic.channel];
  if (items.length === 0 || items.length > MAX_BATCH_REPORTS) {
    return [
      fail(
        "AX_PROTO_BAD_BATCH",
        `a batch holds 1 to ${MAX_BATCH_REPORTS} ${what}, this one ${items.length}`,
      ),
    ];
  }
  return items.map((item, i) => {
    const type =
      typeof item === "object" && item !== null ? (item as { type?: unknown }).type : undefined;
    if (typeof type === "string" && session.has(type)) {
      return fail("AX_PROTO_BAD_BATCH", `batch item ${i}: a ${type} message is never batched`, {
        field: `${i}.type`,
        type,
      });
    }
    const r = decodeValue(p.topic, item, table);
    if (r.ok) return r;
    const { field, message } = r.error;
    return {
      ok: false,
      error: {
        ...r.error,
        message: `batch item ${i}: ${message}`,
        field: field === undefined || field === "" ? String(i) : `${i}.${field}`,
      },
    };
  });
}

/** Steps 5-9 of decoding, on one JSON value. */
function decodeValue(
  parsedTopic: NonNullable<ReturnType<typeof parseTopic>>,
  raw: unknown,
  table: SchemaTable,
): DecodeResult {
  const channel = parsedTopic.kind === "event" ? "event" : parsedTopic.channel;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return fail("AX_PROTO_NOT_OBJECT", "payload must be a JSON object");
  }
  const obj = raw as Record<string, unknown>;
  const ref = readRef(obj);
  if (obj.v !== PROTOCOL_VERSION) {
    return fail(
      "AX_PROTO_BAD_VERSION",
      `field v: expected ${PROTOCOL_VERSION}, got ${brief(obj.v)}`,
      { field: "v", ...ref },
    );
  }
  const schemas: Readonly<Record<string, z.ZodMiniType>> = table[channel];
  const schema = typeof obj.type === "string" ? schemas[obj.type] : undefined;
  if (schema === undefined || !Object.hasOwn(schemas, obj.type as string)) {
    return fail(
      "AX_PROTO_UNKNOWN_TYPE",
      `field type: ${brief(obj.type)} is not a message type on the ${channel} channel (expected one of ${Object.keys(schemas).join(", ")})`,
      { field: "type", ...ref },
    );
  }
  // Checked without the English messages first: a parse given them costs several times one that
  // is not (zod copies its context for each), and only a message that fails needs them.
  let result = safeParse(schema, obj);
  if (!result.success) {
    result = safeParse(schema, obj, { error: describeIssue });
  }
  if (!result.success) {
    const issues = result.error.issues;
    const first = issues[0];
    const field = first ? first.path.map(String).join(".") : "";
    const detail = issues
      .slice(0, 5)
      .map((i) => `field ${i.path.map(String).join(".") || "(root)"}: ${i.message}`)
      .join("; ");
    return fail("AX_PROTO_INVALID_FIELD", `${obj.type} message: ${detail}`, { field, ...ref });
  }
  const message = result.data as { type: string; agentId?: string };
  if (parsedTopic.kind === "agent") {
    if (message.agentId !== undefined && message.agentId !== parsedTopic.agentId) {
      return fail(
        "AX_PROTO_AGENT_MISMATCH",
        `field agentId: "${message.agentId}" does not match the topic's agent "${parsedTopic.agentId}"`,
        { field: "agentId", ...ref },
      );
    }
    return {
      ok: true,
      value: { channel: parsedTopic.channel, agentId: parsedTopic.agentId, message } as Decoded,
    };
  }
  return { ok: true, value: { channel: "event", name: parsedTopic.name, message } as Decoded };
}

/** Encodes a message as the JSON bytes sent on the wire. */
export function encode(message: { type: string }): Buffer {
  return Buffer.from(JSON.stringify(message));
}
