import { describe, expect, it } from "vitest";
import { seededRandom } from "../../test/helpers/random.js";
import { ERROR_CODES } from "../errors.js";
import { ID_PATTERN } from "../ids.js";
import {
  type DecodeOptions,
  type DecodeResult,
  decode,
  decodeAll,
  encode,
  MAX_BATCH_COMMANDS,
  MAX_BATCH_REPORTS,
} from "./codec.js";
import { DEFAULT_MAX_PAYLOAD_BYTES, MAX_OBJECT_KEYS, MAX_TAGS } from "./envelope.js";
import type { Event } from "./event.js";
import { jsonDepth, MAX_JSON_DEPTH } from "./json-depth.js";
import { type DownMessage, SCHEMAS_BY_CHANNEL, type UpMessage } from "./messages.js";
import type { Presence } from "./presence.js";
import { parseTopic, topics } from "./topics.js";

type Channel = keyof typeof SCHEMAS_BY_CHANNEL;
type Json = Record<string, unknown>;
/** A message as plain JSON, to break at will. */
type Msg = Json & { type: string };

const AGENT = "agent-1";
const EVENT_NAME = "door.opened";
const T = topics();
const TOPIC: Record<Channel, string> = {
  up: T.up(AGENT),
  down: T.down(AGENT),
  presence: T.presence(AGENT),
  event: T.event(EVENT_NAME),
};

interface Sample {
  channel: Channel;
  variant: string;
  message: { type: string };
}

/**
 * One valid message of every type, with the optional fields both present ("full") and absent
 * ("minimal") where a type has any. Typed against the schemas' types, so a schema change that
 * breaks a sample fails to compile.
 */
function samples(): Sample[] {
  const env = (msgId: string) => ({ v: 1 as const, msgId, sentAt: 1_700_000_000_000.25 });
  const ref = { executionId: "ex_0001", round: 3 };
  const up: Array<[string, UpMessage]> = [
    [
      "full",
      {
        ...env("m-hello"),
        type: "hello",
        agentId: AGENT,
        instanceId: "inst-1",
        journalId: "jr-1",
        lastSeq: 41,
        profile: "pi-zero",
        bundle: { version: "0.1.0", sha256: "a".repeat(64) },
        handlers: ["echo", "sleep", "mqtt.publish"],
        capacity: { concurrency: 2, queue: 8 },
        tags: { site: "north", "rack.3": "b" },
      },
    ],
    [
      "minimal",
      {
        ...env("m-hello-2"),
        type: "hello",
        agentId: AGENT,
        instanceId: "inst-1",
        journalId: "jr-1",
        lastSeq: 0,
        profile: "dev",
        bundle: { version: "dev", sha256: "dev" },
        handlers: [],
        capacity: { concurrency: 1, queue: 0 },
        tags: {},
      },
    ],
    [
      "full",
      {
        ...env("m-hb"),
        type: "heartbeat",
        instanceId: "inst-1",
        running: [
          { executionId: "ex_0001", round: 3 },
          { executionId: "ex_0002", round: 1 },
        ],
        queued: 1,
        scheduled: 4,
        load: 0.75,
        clockOffset: { offsetMs: -12.5, uncertaintyMs: 1.25 },
        journal: { depth: 5, outboxDepth: 2 },
      },
    ],
    ["full", { ...env("m-acc"), ...ref, seq: 7, type: "accepted" }],
    [
      "full",
      {
        ...env("m-rej"),
        ...ref,
        seq: 8,
        type: "rejected",
        reason: "unknown_handler",
        message: "x",
      },
    ],
    ["minimal", { ...env("m-rej-2"), ...ref, seq: 9, type: "rejected", reason: "shutting_down" }],
    ["full", { ...env("m-busy"), ...ref, seq: 10, type: "busy" }],
    [
      "full",
      {
        ...env("m-start"),
        ...ref,
        seq: 11,
        type: "started",
        startedAt: 1_700_000_000_020.5,
        lateMs: 0.5,
      },
    ],
    [
      "full",
      { ...env("m-prog"), ...ref, seq: 12, type: "progress", percent: 42.5, note: "halfway" },
    ],
    ["minimal", { ...env("m-prog-2"), ...ref, seq: 13, type: "progress" }],
    [
      "full",
      {
        ...env("m-fin"),
        ...ref,
        seq: 14,
        type: "finished",
        outcome: "succeeded",
        retryable: false,
        message: "",
        result: { echo: { a: [1, 2, { b: null }] } },
        startedAt: 1_700_000_000_020,
        finishedAt: 1_700_000_000_120,
      },
    ],
    [
      "minimal",
      {
        ...env("m-fin-2"),
        ...ref,
        seq: 15,
        type: "finished",
        outcome: "expired",
        retryable: false,
        message: "deadline passed before start",
        finishedAt: 1_700_000_000_120,
      },
    ],
    [
      "full",
      {
        ...env("m-state"),
        ...ref,
        seq: 16,
        type: "state",
        localState: "failed",
        reason: "too_late",
      },
    ],
    ["minimal", { ...env("m-state-2"), ...ref, seq: 17, type: "state", localState: "unknown" }],
  ];
  const clock = { t0: 1_700_000_000_000.25, t1: 1_700_000_000_003, t2: 1_700_000_000_003.5 };
  const down: Array<[string, DownMessage]> = [
    ["full", { ...env("m-wel"), type: "welcome", instanceId: "inst-1", heartbeatMs: 5000, clock }],
    ["full", { ...env("m-time"), type: "time", clock }],
    [
      "full",
      {
        ...env("m-disp"),
        ...ref,
        type: "dispatch",
        attempt: 2,
        handler: "mqtt.publish",
        params: { topic: "relay/1", payload: { on: true } },
        fireAt: 1_700_000_060_000,
        deadline: 1_700_000_061_000,
        timeoutMs: 30_000,
        shard: { index: 1, total: 4 },
        priority: -5,
        sig: "ed25519:abcdef",
      },
    ],
    [
      "minimal",
      {
        ...env("m-disp-2"),
        ...ref,
        type: "dispatch",
        attempt: 1,
        handler: "echo",
        params: {},
        fireAt: 1_700_000_060_000,
        deadline: 1_700_000_060_000,
        timeoutMs: 1,
        priority: 0,
      },
    ],
    ["full", { ...env("m-cancel"), ...ref, type: "cancel" }],
    ["full", { ...env("m-query"), ...ref, type: "query" }],
    ["full", { ...env("m-ack"), type: "ack", upTo: 17 }],
  ];
  const presence: Array<[string, Presence]> = [
    ["online", { ...env("m-pres"), type: "presence", status: "online", instanceId: "inst-1" }],
    ["offline", { ...env("m-pres-2"), type: "presence", status: "offline", instanceId: "inst-0" }],
  ];
  const event: Array<[string, Event]> = [
    ["full", { ...env("m-ev"), type: "event", payload: { door: 3, open: true } }],
    ["minimal", { ...env("m-ev-2"), type: "event" }],
  ];
  const tag =
    (channel: Channel) =>
    ([variant, message]: [string, { type: string }]) => ({
      channel,
      variant,
      message,
    });
  return [
    ...up.map(tag("up")),
    ...down.map(tag("down")),
    ...presence.map(tag("presence")),
    ...event.map(tag("event")),
  ];
}

/** A deep copy of the first sample of `type`, as plain JSON to break at will. */
function sample(type: string, variant = "full"): Msg {
  const found =
    samples().find((s) => s.message.type === type && s.variant === variant) ??
    samples().find((s) => s.message.type === type);
  if (found === undefined) throw new Error(`no sample of type ${type}`);
  return structuredClone(found.message) as Msg;
}

const DROP = Symbol("drop");

/** `sample(type)` with each dotted path set to a value, or removed when the value is DROP. */
function broken(type: string, patches: Record<string, unknown>): Msg {
  const msg = sample(type);
  for (const [path, value] of Object.entries(patches)) {
    const keys = path.split(".");
    const last = keys.pop() as string;
    let node = msg as Json;
    for (const k of keys) node = node[k] as Json;
    if (value === DROP) delete node[last];
    else node[last] = value;
  }
  return msg;
}

function expectOk(result: DecodeResult) {
  if (!result.ok) throw new Error(`expected ok, got ${JSON.stringify(result.error)}`);
  return result.value;
}

function expectError(result: DecodeResult) {
  if (result.ok) throw new Error(`expected an error, got ${JSON.stringify(result.value)}`);
  return result.error;
}

describe("decode/encode round trip", () => {
  const all = samples();

  it("has a sample of every message type of every channel", () => {
    for (const [channel, schemas] of Object.entries(SCHEMAS_BY_CHANNEL)) {
      const have = new Set(all.filter((s) => s.channel === channel).map((s) => s.message.type));
      expect([...have].sort()).toEqual(Object.keys(schemas).sort());
    }
  });

  it.each(all.map((s) => ({ ...s, label: `${s.channel} ${s.message.type} (${s.variant})` })))(
    "$label",
    ({ channel, message }) => {
      const bytes = encode(message);
      expect(Buffer.isBuffer(bytes)).toBe(true);
      const expected =
        channel === "event"
          ? { channel, name: EVENT_NAME, message }
          : { channel, agentId: AGENT, message };
      expect(expectOk(decode(TOPIC[channel], bytes))).toStrictEqual(expected);
      // A string payload decodes the same as its bytes.
      expect(expectOk(decode(TOPIC[channel], bytes.toString("utf8")))).toStrictEqual(expected);
    },
  );

  it("leaves optional fields absent (not undefined) when they were not sent", () => {
    const cases: Array<[string, string[]]> = [
      ["dispatch", ["shard", "sig"]],
      ["finished", ["result", "startedAt"]],
      ["progress", ["percent", "note"]],
      ["state", ["reason"]],
      ["rejected", ["message"]],
    ];
    for (const [type, fields] of cases) {
      const channel = type === "dispatch" ? "down" : "up";
      const msg = expectOk(decode(TOPIC[channel], encode(sample(type, "minimal")))).message;
      for (const f of fields) expect(Object.hasOwn(msg, f), `${type}.${f}`).toBe(false);
    }
  });

  it("accepts the edges of every range", () => {
    const ok: Array<[Channel, Msg]> = [
      ["up", broken("hello", { msgId: `A${"b".repeat(127)}` })],
      ["up", broken("hello", { msgId: "a", sentAt: 0, lastSeq: 0 })],
      ["up", broken("hello", { agentId: AGENT, tags: { [`${"t".repeat(64)}`]: "v".repeat(128) } })],
      ["up", broken("hello", { handlers: Array.from({ length: 256 }, (_, i) => `h${i}`) })],
      ["up", broken("progress", { percent: 0 })],
      ["up", broken("progress", { percent: 100 })],
      ["up", broken("started", { lateMs: 0 })],
      ["down", broken("welcome", { heartbeatMs: 100 })],
      ["down", broken("welcome", { heartbeatMs: 600_000 })],
      ["down", broken("dispatch", { priority: -1000, shard: { index: 0, total: 1 } })],
      ["down", broken("dispatch", { priority: 1000, shard: { index: 3, total: 4 } })],
      ["down", broken("dispatch", { round: 1, attempt: 1, timeoutMs: 1 })],
      ["down", broken("ack", { upTo: 0 })],
    ];
    for (const [channel, msg] of ok) expectOk(decode(TOPIC[channel], encode(msg)));
  });

  it("accepts a payload of exactly the limit", () => {
    const msg = { ...sample("ack"), pad: "" };
    const size = encode(msg).byteLength;
    msg.pad = "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES - size);
    expect(encode(msg).byteLength).toBe(DEFAULT_MAX_PAYLOAD_BYTES);
    expectOk(decode(TOPIC.down, encode(msg)));
    const small: Msg = { ...msg, pad: "" };
    expectOk(decode(TOPIC.down, encode(small), { maxBytes: size }));
    expect(expectError(decode(TOPIC.down, encode(small), { maxBytes: size - 1 })).code).toBe(
      "AX_PROTO_TOO_LARGE",
    );
  });

  it("counts string bounds in UTF-16 code units, as JavaScript's length does", () => {
    // An emoji is one code point and two UTF-16 units: 2,048 of them are 4,096 units, the most
    // `finished.message` may hold, and one more is over it (as one more ASCII letter is).
    const finished = (message: string) => ({ ...sample("finished"), message });
    expectOk(decode(TOPIC.up, encode(finished("😀".repeat(2048)))));
    expectOk(decode(TOPIC.up, encode(finished("a".repeat(4096)))));
    for (const over of ["😀".repeat(2049), "a".repeat(4097), `${"a".repeat(4095)}😀`]) {
      expect(expectError(decode(TOPIC.up, encode(finished(over))))).toMatchObject({
        code: "AX_PROTO_INVALID_FIELD",
        field: "message",
        message: "finished message: field message: must have at most 4096 characters",
      });
    }
    // A tag value of 65 emoji is 130 units, over its 128; a profile of one emoji is 2 units, in.
    const hello = (over: Partial<Msg>) => broken("hello", { agentId: AGENT, ...over });
    expect(
      expectError(decode(TOPIC.up, encode(hello({ tags: { t: "😀".repeat(65) } })))).field,
    ).toBe("tags.t");
    expectOk(decode(TOPIC.up, encode(hello({ profile: "😀" }))));
    expect(expectError(decode(TOPIC.up, encode(hello({ profile: "" })))).message).toContain(
      "field profile: must have at least 1 characters",
    );
  });

  it("refuses a byte order mark, in bytes as in a string", () => {
    const text = JSON.stringify(sample("ack"));
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]);
    expect(expectError(decode(TOPIC.down, bom)).code).toBe("AX_PROTO_BAD_JSON");
    expect(expectError(decode(TOPIC.down, `\uFEFF${text}`)).code).toBe("AX_PROTO_BAD_JSON");
    expectOk(decode(TOPIC.down, Buffer.from(text)));
  });

  it("counts the limit in bytes, not characters", () => {
    // "é" is 2 bytes in UTF-8: the string is under the limit in characters, over it in bytes.
    const msg = { ...sample("ack"), pad: "é".repeat(DEFAULT_MAX_PAYLOAD_BYTES / 2) };
    const text = JSON.stringify(msg);
    expect(text.length).toBeLessThan(DEFAULT_MAX_PAYLOAD_BYTES);
    expect(expectError(decode(TOPIC.down, text)).code).toBe("AX_PROTO_TOO_LARGE");
  });
});

interface BadCase {
  name: string;
  topic: string;
  payload: Msg | string | Uint8Array;
  code: keyof typeof ERROR_CODES;
  field?: string;
  /** The error message word for word, where it is part of the contract. */
  message?: string;
  options?: DecodeOptions;
}

const up = TOPIC.up;
const down = TOPIC.down;
const rawHello = JSON.stringify(sample("hello"));

const badCases: BadCase[] = [
  // Bytes and JSON.
  { name: "invalid JSON", topic: up, payload: '{"v":1,', code: "AX_PROTO_BAD_JSON" },
  { name: "empty payload", topic: up, payload: "", code: "AX_PROTO_BAD_JSON" },
  {
    name: "invalid UTF-8 bytes",
    topic: up,
    payload: Buffer.concat([
      Buffer.from(rawHello.slice(0, 20)),
      Buffer.from([0xff, 0xfe, 0xc3]),
      Buffer.from(rawHello.slice(20)),
    ]),
    code: "AX_PROTO_BAD_JSON",
  },
  { name: "JSON array", topic: up, payload: "[]", code: "AX_PROTO_NOT_OBJECT" },
  { name: "JSON string", topic: up, payload: '"hello"', code: "AX_PROTO_NOT_OBJECT" },
  {
    name: "JSON null",
    topic: up,
    payload: "null",
    code: "AX_PROTO_NOT_OBJECT",
    message: "payload must be a JSON object",
  },
  { name: "JSON number", topic: down, payload: "42", code: "AX_PROTO_NOT_OBJECT" },
  // Version and type.
  {
    name: "missing v",
    topic: up,
    payload: broken("hello", { v: DROP }),
    code: "AX_PROTO_BAD_VERSION",
    field: "v",
    message: "field v: expected 1, got nothing",
  },
  {
    name: "v: 2",
    topic: up,
    payload: broken("hello", { v: 2 }),
    code: "AX_PROTO_BAD_VERSION",
    field: "v",
    message: "field v: expected 1, got 2",
  },
  {
    name: 'v: "1"',
    topic: up,
    payload: broken("hello", { v: "1" }),
    code: "AX_PROTO_BAD_VERSION",
    field: "v",
    message: 'field v: expected 1, got "1"',
  },
  {
    name: "unknown type",
    topic: up,
    payload: broken("accepted", { type: "reboot" }),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
    message:
      'field type: "reboot" is not a message type on the up channel (expected one of hello, heartbeat, accepted, rejected, busy, started, progress, finished, state)',
  },
  {
    name: "missing type",
    topic: up,
    payload: broken("accepted", { type: DROP }),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
  },
  {
    name: "type inherited from Object.prototype",
    topic: up,
    payload: broken("accepted", { type: "constructor" }),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
  },
  {
    name: "down type (dispatch) on the up channel",
    topic: up,
    payload: sample("dispatch"),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
  },
  {
    name: "up type (accepted) on the down channel",
    topic: down,
    payload: sample("accepted"),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
  },
  {
    name: "presence type on the up channel",
    topic: up,
    payload: sample("presence"),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
  },
  {
    name: "hello on the presence channel",
    topic: TOPIC.presence,
    payload: sample("hello"),
    code: "AX_PROTO_UNKNOWN_TYPE",
    field: "type",
  },
  // Envelope fields.
  {
    name: "missing msgId",
    topic: up,
    payload: broken("hello", { msgId: DROP }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "msgId",
    message: "hello message: field msgId: is required (string)",
  },
  ...["a/b", "a+b", "a#", "$SYS", "", "m".repeat(129), "-lead", "a b"].map(
    (msgId): BadCase => ({
      name: `msgId ${JSON.stringify(msgId.length > 20 ? `${msgId.length} chars` : msgId)}`,
      topic: up,
      payload: broken("accepted", { msgId }),
      code: "AX_PROTO_INVALID_FIELD",
      field: "msgId",
      message: "accepted message: field msgId: must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)",
    }),
  ),
  {
    name: "sentAt negative",
    topic: up,
    payload: broken("accepted", { sentAt: -1 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "sentAt",
    message: "accepted message: field sentAt: must be at least 0",
  },
  {
    name: "sentAt a string",
    topic: up,
    payload: broken("accepted", { sentAt: "1700000000000" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "sentAt",
    message: "accepted message: field sentAt: expected number, got string",
  },
  {
    name: "sentAt overflowing to Infinity",
    topic: up,
    payload: JSON.stringify(sample("accepted")).replace(/"sentAt":[0-9.]+/, '"sentAt":1e400'),
    code: "AX_PROTO_INVALID_FIELD",
    field: "sentAt",
  },
  // Execution references and counters.
  {
    name: "missing round",
    topic: down,
    payload: broken("dispatch", { round: DROP }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "round",
  },
  {
    name: "negative round",
    topic: down,
    payload: broken("dispatch", { round: -3 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "round",
  },
  {
    name: "non-integer round",
    topic: down,
    payload: broken("dispatch", { round: 1.5 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "round",
    message: "dispatch message: field round: expected int, got number",
  },
  {
    name: "round 0",
    topic: down,
    payload: broken("cancel", { round: 0 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "round",
    message: "cancel message: field round: must be at least 1",
  },
  {
    name: "attempt 0",
    topic: down,
    payload: broken("dispatch", { attempt: 0 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "attempt",
  },
  {
    name: "seq 0 on a report",
    topic: up,
    payload: broken("accepted", { seq: 0 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "seq",
  },
  {
    name: "seq missing on a report",
    topic: up,
    payload: broken("finished", { seq: DROP }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "seq",
    message: "finished message: field seq: is required (number)",
  },
  {
    name: "executionId with a slash",
    topic: down,
    payload: broken("query", { executionId: "ex/1" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "executionId",
  },
  // Dispatch body.
  {
    name: "fireAt as a string",
    topic: down,
    payload: broken("dispatch", { fireAt: "2024-01-01T00:00:00Z" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "fireAt",
  },
  {
    name: "params as an array",
    topic: down,
    payload: broken("dispatch", { params: [1, 2] }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "params",
    message: "dispatch message: field params: expected record, got array",
  },
  {
    name: "params null",
    topic: down,
    payload: broken("dispatch", { params: null }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "params",
  },
  {
    name: "handler with spaces",
    topic: down,
    payload: broken("dispatch", { handler: "mqtt publish" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "handler",
    message: "dispatch message: field handler: must be a handler name such as mqtt.publish",
  },
  {
    name: "shard index equal to total",
    topic: down,
    payload: broken("dispatch", { shard: { index: 4, total: 4 } }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "shard.index",
    message: "dispatch message: field shard.index: index must be less than total",
  },
  {
    name: "shard total 0",
    topic: down,
    payload: broken("dispatch", { shard: { index: 0, total: 0 } }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "shard.total",
  },
  {
    name: "priority out of range",
    topic: down,
    payload: broken("dispatch", { priority: 1001 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "priority",
    message: "dispatch message: field priority: must be at most 1000",
  },
  {
    name: "timeoutMs 0",
    topic: down,
    payload: broken("dispatch", { timeoutMs: 0 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "timeoutMs",
  },
  {
    // Past a timer's longest delay an agent's timer would fire at once.
    name: "timeoutMs past a timer's longest delay",
    topic: down,
    payload: broken("dispatch", { timeoutMs: 2_147_483_648 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "timeoutMs",
  },
  // Reports.
  {
    name: "outcome not in the enum",
    topic: up,
    payload: broken("finished", { outcome: "done" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "outcome",
    message:
      'finished message: field outcome: must be one of "succeeded", "failed", "timed_out", "expired", "canceled", "interrupted"',
  },
  {
    name: "reject reason not in the enum",
    topic: up,
    payload: broken("rejected", { reason: "because" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "reason",
  },
  {
    name: "finished retryable missing",
    topic: up,
    payload: broken("finished", { retryable: DROP }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "retryable",
    message: "finished message: field retryable: is required (boolean)",
  },
  {
    name: "progress percent 101",
    topic: up,
    payload: broken("progress", { percent: 101 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "percent",
    message: "progress message: field percent: must be at most 100",
  },
  {
    name: "state localState not in the enum",
    topic: up,
    payload: broken("state", { localState: "sleeping" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "localState",
  },
  {
    name: "started lateMs negative",
    topic: up,
    payload: broken("started", { lateMs: -0.5 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "lateMs",
  },
  // Session messages.
  {
    name: "hello bundle.sha256 not hex",
    topic: up,
    payload: broken("hello", { "bundle.sha256": "z".repeat(64) }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "bundle.sha256",
    message: "hello message: field bundle.sha256: must be 64 hex digits or 'dev'",
  },
  {
    name: "hello bundle.sha256 upper-case hex",
    topic: up,
    payload: broken("hello", { "bundle.sha256": "A".repeat(64) }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "bundle.sha256",
  },
  {
    name: "hello handlers not an array",
    topic: up,
    payload: broken("hello", { handlers: "echo" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "handlers",
    message: "hello message: field handlers: expected array, got string",
  },
  {
    name: "hello handlers[1] not a handler name",
    topic: up,
    payload: broken("hello", { handlers: ["echo", "9lives"] }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "handlers.1",
  },
  {
    name: "hello capacity.concurrency 0",
    topic: up,
    payload: broken("hello", { "capacity.concurrency": 0 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "capacity.concurrency",
    message: "hello message: field capacity.concurrency: must be at least 1",
  },
  {
    name: "hello tags with a bad tag name",
    topic: up,
    payload: broken("hello", { tags: { "bad tag": "x" } }),
    code: "AX_PROTO_INVALID_FIELD",
    // The path ends in the offending key itself.
    field: "tags.bad tag",
  },
  {
    name: "hello tag value not a string",
    topic: up,
    payload: broken("hello", { tags: { site: 7 } }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "tags.site",
  },
  {
    name: "hello agentId other than the topic's",
    topic: up,
    payload: broken("hello", { agentId: "agent-2" }),
    code: "AX_PROTO_AGENT_MISMATCH",
    field: "agentId",
    message: 'field agentId: "agent-2" does not match the topic\'s agent "agent-1"',
  },
  {
    name: "heartbeat running[0].round missing",
    topic: up,
    payload: broken("heartbeat", { "running.0.round": DROP }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "running.0.round",
    message: "heartbeat message: field running.0.round: is required (number)",
  },
  {
    name: "heartbeat clockOffset.uncertaintyMs negative",
    topic: up,
    payload: broken("heartbeat", { "clockOffset.uncertaintyMs": -1 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "clockOffset.uncertaintyMs",
  },
  {
    name: "welcome heartbeatMs 50",
    topic: down,
    payload: broken("welcome", { heartbeatMs: 50 }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "heartbeatMs",
    message: "welcome message: field heartbeatMs: must be at least 100",
  },
  {
    name: "time clock.t1 missing",
    topic: down,
    payload: broken("time", { "clock.t1": DROP }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "clock.t1",
  },
  {
    name: "presence status not in the enum",
    topic: TOPIC.presence,
    payload: broken("presence", { status: "away" }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "status",
  },
  {
    name: "event payload an array",
    topic: TOPIC.event,
    payload: broken("event", { payload: [1] }),
    code: "AX_PROTO_INVALID_FIELD",
    field: "payload",
  },
  // Size.
  {
    name: "payload over 64 KiB",
    topic: up,
    payload: { ...sample("hello"), pad: "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES) },
    code: "AX_PROTO_TOO_LARGE",
  },
  {
    name: "one byte over 64 KiB",
    topic: up,
    payload: "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES + 1),
    code: "AX_PROTO_TOO_LARGE",
    message: "payload is 65537 bytes, more than the limit of 65536",
  },
  {
    name: "over a custom maxBytes",
    topic: up,
    payload: sample("accepted"),
    options: { maxBytes: 64 },
    code: "AX_PROTO_TOO_LARGE",
  },
  // Topics.
  ...[
    ["wrong prefix", "xx/v1/agents/agent-1/up"],
    ["wrong version", "ax/v2/agents/agent-1/up"],
    ["extra level", "ax/v1/agents/agent-1/up/extra"],
    ["agent id +", "ax/v1/agents/+/up"],
    ["agent id #", "ax/v1/agents/#/up"],
    ["agent id starting with $", "ax/v1/agents/$agent/up"],
    ["empty agent id", "ax/v1/agents//up"],
    ["unknown channel", "ax/v1/agents/agent-1/sideways"],
    ["no channel", "ax/v1/agents/agent-1"],
    ["event with an extra level", "ax/v1/events/door/opened"],
    ["event name +", "ax/v1/events/+"],
    ["unknown family", "ax/v1/devices/agent-1/up"],
    ["leading slash", "/ax/v1/agents/agent-1/up"],
  ].map(
    ([name, topic]): BadCase => ({
      name: `topic: ${name}`,
      topic: topic as string,
      payload: sample("accepted"),
      code: "AX_PROTO_BAD_TOPIC",
      message: `topic "${topic}" is not a v1 topic`,
    }),
  ),
  {
    name: "topic: default prefix when a custom prefix is configured",
    topic: up,
    payload: sample("accepted"),
    options: { prefix: "site/7" },
    code: "AX_PROTO_BAD_TOPIC",
  },
];

describe("decode rejects malformed input", () => {
  it("has at least 35 cases", () => {
    expect(badCases.length).toBeGreaterThanOrEqual(35);
  });

  it.each(badCases)("$name → $code", ({ topic, payload, code, field, message, options }) => {
    const bytes =
      typeof payload === "string" || payload instanceof Uint8Array ? payload : encode(payload);
    const error = expectError(decode(topic, bytes, options));
    expect(error.code).toBe(code);
    expect(ERROR_CODES[error.code]).toBeTypeOf("string");
    if (field === undefined) {
      expect(error).not.toHaveProperty("field");
    } else {
      expect(error.field).toBe(field);
      expect(error.message).toContain(`field ${field}`);
    }
    if (message !== undefined) expect(error.message).toBe(message);
  });
});

describe("decode names the execution of an invalid message (rule 6)", () => {
  it("carries executionId, round and type when they are readable", () => {
    const error = expectError(
      decode(down, encode(broken("dispatch", { handler: "no such handler", round: 9 }))),
    );
    expect(error).toMatchObject({
      code: "AX_PROTO_INVALID_FIELD",
      field: "handler",
      type: "dispatch",
      executionId: "ex_0001",
      round: 9,
    });
  });

  it("carries them on version and type errors too", () => {
    const badVersion = expectError(decode(down, encode(broken("dispatch", { v: 2 }))));
    expect(badVersion).toMatchObject({ code: "AX_PROTO_BAD_VERSION", executionId: "ex_0001" });
    expect(badVersion.round).toBe(3);
    const badType = expectError(decode(down, encode(broken("dispatch", { type: "dispatch2" }))));
    expect(badType).toMatchObject({
      code: "AX_PROTO_UNKNOWN_TYPE",
      type: "dispatch2",
      executionId: "ex_0001",
      round: 3,
    });
  });

  it.each([
    ["both missing", { executionId: DROP, round: DROP }],
    ["executionId with a slash, round 0", { executionId: "ex/1", round: 0 }],
    ["executionId a number, round a string", { executionId: 17, round: "3" }],
    ["executionId empty, round fractional", { executionId: "", round: 2.5 }],
    ["executionId too long, round past 2^53", { executionId: "e".repeat(129), round: 1e21 }],
  ])("leaves them out when they are not readable: %s", (_, patch) => {
    const error = expectError(decode(down, encode(broken("dispatch", patch))));
    expect(error.code).toBe("AX_PROTO_INVALID_FIELD");
    expect(error.type).toBe("dispatch");
    expect(error).not.toHaveProperty("executionId");
    expect(error).not.toHaveProperty("round");
  });

  it("carries a report's seq when it is a whole number from 1, so the report can be acknowledged", () => {
    const upTopic = "ax/v1/agents/pump-7/up";
    const bad = {
      v: 1,
      type: "progress",
      msgId: "m1",
      sentAt: 1,
      executionId: "ex_0001",
      round: 2,
    };
    const withSeq = expectError(decode(upTopic, JSON.stringify({ ...bad, seq: 7, percent: null })));
    expect(withSeq).toMatchObject({ code: "AX_PROTO_INVALID_FIELD", field: "percent", seq: 7 });
    for (const seq of [0, 1.5, "7", 2 ** 53]) {
      const error = expectError(decode(upTopic, JSON.stringify({ ...bad, seq, percent: null })));
      expect(error).not.toHaveProperty("seq");
    }
  });

  it("reads each of the two on its own", () => {
    const onlyRound = expectError(decode(down, encode(broken("dispatch", { executionId: "a b" }))));
    expect(onlyRound).not.toHaveProperty("executionId");
    expect(onlyRound.round).toBe(3);
    const onlyId = expectError(decode(down, encode(broken("dispatch", { round: -1 }))));
    expect(onlyId.executionId).toBe("ex_0001");
    expect(onlyId).not.toHaveProperty("round");
  });

  it("carries neither before the payload is an object", () => {
    for (const payload of ["{", "[1]", "null"]) {
      const error = expectError(decode(down, payload));
      expect(Object.keys(error).sort()).toEqual(["code", "message"]);
    }
  });
});

describe("decodeAll: batches of reports on an up topic", () => {
  const batch = (items: unknown[]) => JSON.stringify(items);

  it("decodes each report of a batch, in order, as decode decodes it alone", () => {
    const items = [sample("accepted"), sample("started"), sample("finished")];
    const results = decodeAll(up, batch(items));
    expect(results.map((r) => expectOk(r))).toEqual(
      items.map((m) => expectOk(decode(up, JSON.stringify(m)))),
    );
  });

  it("answers a single message with one result, the same as decode", () => {
    const hello = JSON.stringify(sample("hello"));
    expect(decodeAll(up, hello)).toEqual([decode(up, hello)]);
    expect(decodeAll(down, "{}")).toEqual([decode(down, "{}")]);
    expect(decodeAll(up, "not json")).toEqual([decode(up, "not json")]);
  });

  it("keeps the good reports of a batch with a bad one, whose error names its index", () => {
    const results = decodeAll(
      up,
      batch([sample("accepted"), broken("started", { round: 0 }), 7, sample("finished")]),
    );
    expect(results.map((r) => r.ok)).toEqual([true, false, false, true]);
    const bad = expectError(results[1] as DecodeResult);
    expect(bad).toMatchObject({
      code: "AX_PROTO_INVALID_FIELD",
      field: "1.round",
      type: "started",
    });
    expect(bad.message).toMatch(/^batch item 1: started message: field round/);
    expect(expectError(results[2] as DecodeResult)).toMatchObject({
      code: "AX_PROTO_NOT_OBJECT",
      field: "2",
    });
  });

  it("refuses an empty or too long batch, a session message in one, and a batch off the up topic", () => {
    expect(expectError(decodeAll(up, "[]")[0] as DecodeResult)).toMatchObject({
      code: "AX_PROTO_BAD_BATCH",
    });
    const many = Array.from({ length: MAX_BATCH_REPORTS + 1 }, () => sample("accepted"));
    const tooMany = decodeAll(up, batch(many), { maxBytes: 1 << 24 });
    expect(tooMany).toHaveLength(1);
    expect(expectError(tooMany[0] as DecodeResult).message).toContain(`this one ${many.length}`);
    const [session, report] = decodeAll(up, batch([sample("heartbeat"), sample("accepted")]));
    expect(expectError(session as DecodeResult)).toMatchObject({
      code: "AX_PROTO_BAD_BATCH",
      field: "0.type",
      type: "heartbeat",
    });
    expect(report?.ok).toBe(true);
    for (const topic of [TOPIC.presence, TOPIC.event]) {
      const [r] = decodeAll(topic, batch([sample("accepted")]));
      expect(expectError(r as DecodeResult).code).toBe("AX_PROTO_NOT_OBJECT");
    }
    // A report in a batch on a down topic is a message of the wrong channel, item by item.
    const [onDown] = decodeAll(down, batch([sample("accepted")]));
    expect(expectError(onDown as DecodeResult)).toMatchObject({
      code: "AX_PROTO_UNKNOWN_TYPE",
      field: "0.type",
    });
    // So is a session message of the down channel in a batch on up, and the other way round.
    for (const [topic, type] of [
      [up, "welcome"],
      [up, "time"],
      [up, "ack"],
      [down, "hello"],
      [down, "heartbeat"],
    ] as const) {
      const other = topic === up ? sample("accepted") : sample("dispatch");
      const [wrong, good] = decodeAll(topic, batch([sample(type), other]));
      expect(expectError(wrong as DecodeResult), type).toMatchObject({
        code: "AX_PROTO_UNKNOWN_TYPE",
        field: "0.type",
      });
      expect(good?.ok, type).toBe(true);
    }
    // decode itself never takes a batch.
    expect(expectError(decode(up, batch([sample("accepted")]))).code).toBe("AX_PROTO_NOT_OBJECT");
  });

  it("checks the size of the whole batch first", () => {
    const items = Array.from({ length: 100 }, () => sample("accepted"));
    const [r] = decodeAll(up, batch(items), { maxBytes: 2048 });
    expect(expectError(r as DecodeResult).code).toBe("AX_PROTO_TOO_LARGE");
  });
});

describe("decodeAll: batches of commands on a down topic", () => {
  const batch = (items: unknown[]) => JSON.stringify(items);

  it("decodes each dispatch, cancel and query of a batch, in order, as decode does alone", () => {
    const items = [sample("dispatch"), sample("cancel"), sample("query"), sample("dispatch")];
    const results = decodeAll(down, batch(items));
    expect(results.map((r) => expectOk(r))).toEqual(
      items.map((m) => expectOk(decode(down, JSON.stringify(m)))),
    );
  });

  it("refuses welcome, time and ack in a batch, and keeps the good commands beside them", () => {
    const results = decodeAll(
      down,
      batch([sample("welcome"), sample("dispatch"), sample("time"), sample("ack")]),
    );
    expect(results.map((r) => r.ok)).toEqual([false, true, false, false]);
    for (const [i, type] of [
      [0, "welcome"],
      [2, "time"],
      [3, "ack"],
    ] as const) {
      expect(expectError(results[i] as DecodeResult)).toMatchObject({
        code: "AX_PROTO_BAD_BATCH",
        field: `${i}.type`,
        type,
      });
    }
  });

  it("names the execution of a bad dispatch in a batch, so it can be answered rejected", () => {
    const [good, bad] = decodeAll(
      down,
      batch([
        sample("dispatch"),
        broken("dispatch", { executionId: "ex_0002", round: 4, timeoutMs: 0 }),
      ]),
    );
    expect(good?.ok).toBe(true);
    expect(expectError(bad as DecodeResult)).toMatchObject({
      code: "AX_PROTO_INVALID_FIELD",
      field: "1.timeoutMs",
      executionId: "ex_0002",
      round: 4,
    });
  });

  it("refuses an empty or too long batch whole", () => {
    expect(expectError(decodeAll(down, "[]")[0] as DecodeResult)).toMatchObject({
      code: "AX_PROTO_BAD_BATCH",
    });
    const many = Array.from({ length: MAX_BATCH_COMMANDS + 1 }, () => sample("cancel"));
    const tooMany = decodeAll(down, batch(many), { maxBytes: 1 << 24 });
    expect(tooMany).toHaveLength(1);
    expect(expectError(tooMany[0] as DecodeResult).message).toBe(
      `a batch holds 1 to ${MAX_BATCH_COMMANDS} commands, this one ${many.length}`,
    );
  });
});

describe("forward compatibility", () => {
  it("accepts unknown fields, top-level and nested, and strips them", () => {
    const cases: Array<[Channel, string, Record<string, unknown>]> = [
      ["up", "hello", { firmware: "2.1", "bundle.signedBy": "ci", "capacity.gpu": 1 }],
      ["up", "heartbeat", { temperatureC: 61, "running.0.pid": 42, "journal.bytes": 9 }],
      ["up", "finished", { exitCode: 0 }],
      ["down", "dispatch", { traceId: "t-1", "shard.key": "k" }],
      ["down", "welcome", { features: ["x"], "clock.t4": 1 }],
      ["presence", "presence", { since: 1 }],
      ["event", "event", { source: "door" }],
    ];
    for (const [channel, type, extra] of cases) {
      const original = sample(type);
      const decoded = expectOk(decode(TOPIC[channel], encode(broken(type, extra))));
      expect(decoded.message, type).toStrictEqual(original);
    }
  });

  it("keeps every key of open JSON objects (params, result, event payload)", () => {
    const params = { anything: { deep: [1, "two", null] }, v: 2, type: "x" };
    const decoded = expectOk(decode(down, encode(broken("dispatch", { params }))));
    expect((decoded.message as { params: unknown }).params).toStrictEqual(params);
  });
});

describe("topics and parseTopic", () => {
  it("builds the v1 topics under the default prefix", () => {
    expect(T.prefix).toBe("ax");
    expect(T.up("a1")).toBe("ax/v1/agents/a1/up");
    expect(T.down("a1")).toBe("ax/v1/agents/a1/down");
    expect(T.presence("a1")).toBe("ax/v1/agents/a1/presence");
    expect(T.event("door.opened")).toBe("ax/v1/events/door.opened");
    expect(T.allUp).toBe("ax/v1/agents/+/up");
    expect(T.allPresence).toBe("ax/v1/agents/+/presence");
    expect(T.allEvents).toBe("ax/v1/events/+");
  });

  it("builds topics under a custom multi-level prefix", () => {
    const t = topics("acme/site-7");
    expect(t.up("a1")).toBe("acme/site-7/v1/agents/a1/up");
    expect(t.allEvents).toBe("acme/site-7/v1/events/+");
  });

  it.each(["", "a/+", "#", "$SYS", "/ax", "ax/", "a//b", "a b"])(
    "refuses the prefix %j",
    (prefix) => {
      expect(() => topics(prefix)).toThrow(TypeError);
      expect(() => topics(prefix)).toThrow(`topic prefix "${prefix}"`);
    },
  );

  it("parses what it builds", () => {
    expect(parseTopic(T.up("a1"))).toEqual({ kind: "agent", agentId: "a1", channel: "up" });
    expect(parseTopic(T.down("a1"))).toEqual({ kind: "agent", agentId: "a1", channel: "down" });
    expect(parseTopic(T.presence("a.b:c_d-e"))).toEqual({
      kind: "agent",
      agentId: "a.b:c_d-e",
      channel: "presence",
    });
    expect(parseTopic(T.event("door.opened"))).toEqual({ kind: "event", name: "door.opened" });
    const custom = topics("acme/site-7");
    expect(parseTopic(custom.up("a1"), "acme/site-7")).toEqual({
      kind: "agent",
      agentId: "a1",
      channel: "up",
    });
  });

  it.each([
    "ax/v1/agents/a1",
    "ax/v1/agents/a1/up/x",
    "ax/v1/agents/+/up",
    "ax/v1/agents/#",
    "ax/v1/agents/$a/up",
    "ax/v1/agents/a1/UP",
    "ax/v1/events",
    "ax/v1/events/",
    "ax/v1/events/a/b",
    "ax/v1/agents/a1/events",
    "ax/v1",
    "ax",
    "",
    `ax/v1/agents/${"a".repeat(129)}/up`,
  ])("parseTopic(%j) is null", (topic) => {
    expect(parseTopic(topic)).toBeNull();
  });

  it("parses nothing under another prefix", () => {
    expect(parseTopic(T.up("a1"), "acme")).toBeNull();
    expect(parseTopic(topics("acme").up("a1"))).toBeNull();
    // The prefix must match whole levels.
    expect(parseTopic("axe/v1/agents/a1/up")).toBeNull();
  });

  it("decodes on a custom prefix", () => {
    const t = topics("acme/site-7");
    const decoded = expectOk(
      decode(t.up(AGENT), encode(sample("accepted")), { prefix: "acme/site-7" }),
    );
    expect(decoded).toMatchObject({ channel: "up", agentId: AGENT });
    const event = expectOk(
      decode(t.event("tick"), encode(sample("event")), { prefix: "acme/site-7" }),
    );
    expect(event).toMatchObject({ channel: "event", name: "tick" });
  });
});

describe("decode never throws", () => {
  const all = samples();
  const allTypes = all.map((s) => s.message.type);
  const oddStrings = [
    "",
    "x",
    "a/b",
    "+",
    "#",
    "$x",
    "💥",
    "\u0000",
    "\ud800",
    "__proto__",
    "constructor",
    "dev",
    "y".repeat(300),
    ...allTypes,
  ];
  const oddNumbers = [0, -0, 1, -1, 1.5, 100, 101, 2 ** 53, -(2 ** 53), 1e308, -1e-308];
  const oddKeys = ["__proto__", "constructor", "toString", "v", "type", "round", "x", ""];

  function pick<X>(rand: () => number, xs: readonly X[]): X {
    return xs[Math.floor(rand() * xs.length)] as X;
  }

  function randomValue(rand: () => number, depth = 0): unknown {
    const r = rand();
    if (r < 0.1) return null;
    if (r < 0.2) return rand() < 0.5;
    if (r < 0.45) return pick(rand, oddNumbers);
    if (r < 0.7) return pick(rand, oddStrings);
    if (depth >= 3) return pick(rand, oddNumbers);
    const n = Math.floor(rand() * 4);
    if (r < 0.85) return Array.from({ length: n }, () => randomValue(rand, depth + 1));
    const o: Json = {};
    for (let i = 0; i < n; i++) o[pick(rand, oddKeys)] = randomValue(rand, depth + 1);
    return o;
  }

  /** Every container in the value, with its keys, for picking a random place to change. */
  function containers(value: unknown, out: Array<Json | unknown[]> = []) {
    if (typeof value === "object" && value !== null) {
      out.push(value as Json | unknown[]);
      for (const v of Object.values(value)) containers(v, out);
    }
    return out;
  }

  function mutateJson(rand: () => number, msg: Msg): Msg {
    const target = pick(rand, containers(msg));
    const keys = Object.keys(target);
    const op = rand();
    if (op < 0.15 || keys.length === 0) {
      // Own property even for "__proto__", as JSON.parse would make it.
      Object.defineProperty(target, pick(rand, oddKeys), {
        value: randomValue(rand),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    } else if (op < 0.3) {
      delete (target as Json)[pick(rand, keys)];
    } else if (op < 0.4) {
      msg.type = pick(rand, allTypes);
    } else {
      (target as Json)[pick(rand, keys)] = randomValue(rand);
    }
    return msg;
  }

  function mutateBytes(rand: () => number, bytes: Buffer): Buffer {
    const op = rand();
    const at = Math.floor(rand() * bytes.length);
    if (op < 0.4) {
      const copy = Buffer.from(bytes);
      copy[at] = Math.floor(rand() * 256);
      return copy;
    }
    if (op < 0.7) return bytes.subarray(0, at);
    if (op < 0.85) return Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + 1)]);
    return Buffer.concat([
      bytes.subarray(0, at),
      Buffer.from([Math.floor(rand() * 256)]),
      bytes.subarray(at),
    ]);
  }

  it("returns a result with a registered code for 2,000 mutated messages", () => {
    // AX_FUZZ_SEED replays or widens a run; the default keeps CI deterministic.
    const rand = seededRandom(Number(process.env.AX_FUZZ_SEED ?? 0x5eed));
    const channels = Object.keys(TOPIC) as Channel[];
    let oks = 0;
    let fails = 0;
    for (let i = 0; i < 2000; i++) {
      const base = pick(rand, all);
      let msg = structuredClone(base.message) as Msg;
      const jsonMutations = Math.floor(rand() * 4);
      for (let m = 0; m < jsonMutations; m++) msg = mutateJson(rand, msg);
      let bytes = encode(msg);
      if (rand() < 0.3) bytes = mutateBytes(rand, bytes);
      // Mostly the message's own channel, sometimes another one.
      const channel = rand() < 0.8 ? base.channel : pick(rand, channels);
      const payload = rand() < 0.5 ? bytes : bytes.toString("utf8");
      const input = `#${i} ${channel} ${bytes.toString("base64")}`;

      let result: DecodeResult;
      try {
        result = decode(TOPIC[channel], payload);
      } catch (err) {
        throw new Error(`decode threw on ${input}: ${(err as Error).message}`);
      }
      if (result.ok) {
        oks++;
        expect(result.value.channel, input).toBe(channel);
        expect(Object.keys(SCHEMAS_BY_CHANNEL[channel])).toContain(result.value.message.type);
        // What decode accepts, it accepts again unchanged after encoding.
        // (Compared as JSON: toStrictEqual misreads an own "constructor" key inside params.)
        const again = decode(TOPIC[channel], encode(result.value.message));
        expect(JSON.stringify(again), input).toBe(JSON.stringify(result));
      } else {
        fails++;
        const { code, message, executionId, round } = result.error;
        expect(Object.hasOwn(ERROR_CODES, code), input).toBe(true);
        expect(code.startsWith("AX_PROTO_"), input).toBe(true);
        expect(message.length, input).toBeGreaterThan(0);
        if (executionId !== undefined) expect(executionId).toMatch(ID_PATTERN);
        if (round !== undefined) expect(Number.isInteger(round) && round >= 1).toBe(true);
      }
    }
    // The mutations must reach both outcomes, or the loop tests little.
    expect(oks).toBeGreaterThan(100);
    expect(fails).toBeGreaterThan(500);
    expect(oks + fails).toBe(2000);
  });

  it("survives topics and options it was not built for", () => {
    const bytes = encode(sample("accepted"));
    for (const topic of [
      "",
      "/",
      "ax/v1/agents/\u0000/up",
      "ax/v1/agents/💥/up",
      "a".repeat(70_000),
    ]) {
      expect(expectError(decode(topic, bytes)).code).toBe("AX_PROTO_BAD_TOPIC");
    }
    expect(expectError(decode(up, new Uint8Array(0))).code).toBe("AX_PROTO_BAD_JSON");
    expect(expectError(decode(up, bytes, { maxBytes: 0 })).code).toBe("AX_PROTO_TOO_LARGE");
  });

  // The BAD_VERSION and UNKNOWN_TYPE messages quote the offending value; a deeply nested array
  // that still fits in 64 KiB must not overflow the stack while doing so.
  it.each(["v", "type"])("does not throw on a deeply nested %s", (key) => {
    const deep = `${"[".repeat(30_000)}${"]".repeat(30_000)}`;
    const payload = key === "v" ? `{"v":${deep}}` : `{"v":1,"type":${deep}}`;
    expect(Buffer.byteLength(payload)).toBeLessThan(DEFAULT_MAX_PAYLOAD_BYTES);
    expect(() => decode(up, payload)).not.toThrow();
  });
});

describe("bounded nesting depth and sizes (issue 15)", () => {
  /** `levels` arrays nested inside each other: `[[…]]`, depth `levels`. */
  const nested = (levels: number) => `${"[".repeat(levels)}${"]".repeat(levels)}`;
  /** A dispatch whose params nest to a total payload depth of `depth`. */
  const dispatchOfDepth = (depth: number, patch: Json = {}) => {
    const text = JSON.stringify({ ...sample("dispatch"), params: { a: "@" }, ...patch });
    // The envelope is level 1, params level 2: the nested arrays bring it to `depth`.
    return text.replace('"@"', nested(depth - 2));
  };

  it("counts the depth of JSON text in bytes and strings alike, ignoring brackets in strings", () => {
    expect(jsonDepth("1")).toBe(0);
    expect(jsonDepth("{}")).toBe(1);
    expect(jsonDepth('{"a":[{"b":[]}]}')).toBe(4);
    expect(jsonDepth('{"a":"[[[{{{","b":"\\"[[["}')).toBe(1);
    expect(jsonDepth(Buffer.from('{"é[":["ü{"]}'))).toBe(2);
    expect(jsonDepth(nested(10_000))).toBe(10_000);
  });

  it(`accepts a payload ${MAX_JSON_DEPTH} levels deep`, () => {
    const text = dispatchOfDepth(MAX_JSON_DEPTH);
    expect(jsonDepth(text)).toBe(MAX_JSON_DEPTH);
    expect(expectOk(decode(down, text)).message.type).toBe("dispatch");
  });

  it.each([
    [MAX_JSON_DEPTH + 1, "one level too many"],
    [10_000, "10,000 levels"],
    [30_000, "30,000 levels, within 64 KiB"],
  ])("refuses a dispatch %i deep (%s), naming it so it can be answered rejected", (depth) => {
    const text = dispatchOfDepth(depth);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(DEFAULT_MAX_PAYLOAD_BYTES);
    const error = expectError(decode(down, text));
    expect(error).toEqual({
      code: "AX_PROTO_TOO_DEEP",
      message: `payload nests ${depth} levels deep, more than the limit of ${MAX_JSON_DEPTH}`,
      type: "dispatch",
      executionId: "ex_0001",
      round: 3,
    });
  });

  it("checks depth after JSON and before the object check", () => {
    expect(expectError(decode(down, `${nested(40)}x`)).code).toBe("AX_PROTO_BAD_JSON");
    const array = expectError(decode(down, nested(40)));
    expect(array).toEqual({
      code: "AX_PROTO_TOO_DEEP",
      message: `payload nests 40 levels deep, more than the limit of ${MAX_JSON_DEPTH}`,
    });
    expect(expectError(decode(down, `{"v":${nested(40)}}`)).code).toBe("AX_PROTO_TOO_DEEP");
  });

  it("refuses a deep batch whole, and counts the batch's array as a level", () => {
    const report = (extra: string) =>
      JSON.stringify({ ...sample("finished"), result: { r: "@" } }).replace('"@"', extra);
    // Alone the report is 32 deep; in a batch, 33.
    const r32 = report(nested(MAX_JSON_DEPTH - 2));
    expect(expectOk(decode(up, r32)).message.type).toBe("finished");
    const results = decodeAll(up, `[${r32}]`);
    expect(results).toHaveLength(1);
    expect(expectError(results[0] as DecodeResult).code).toBe("AX_PROTO_TOO_DEEP");
    const fits = decodeAll(
      up,
      `[${report(nested(MAX_JSON_DEPTH - 3))},${r32.replace(nested(MAX_JSON_DEPTH - 2), "1")}]`,
    );
    expect(fits.map((r) => r.ok)).toEqual([true, true]);
  });

  it("bounds the keys of params, result, event payload and tags", () => {
    const keys = (n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, `v${i}`]));
    const most: Msg = { ...sample("dispatch"), params: keys(MAX_OBJECT_KEYS) };
    expect(decode(down, encode(most)).ok).toBe(true);
    const cases: Array<[string, Msg, string]> = [
      [down, { ...sample("dispatch"), params: keys(MAX_OBJECT_KEYS + 1) }, "params"],
      [up, { ...sample("finished"), result: keys(MAX_OBJECT_KEYS + 1) }, "result"],
      [TOPIC.event, { ...sample("event"), payload: keys(MAX_OBJECT_KEYS + 1) }, "payload"],
      [up, { ...sample("hello"), tags: keys(MAX_TAGS + 1) }, "tags"],
    ];
    for (const [topic, msg, field] of cases) {
      const error = expectError(decode(topic, encode(msg)));
      const limit = field === "tags" ? MAX_TAGS : MAX_OBJECT_KEYS;
      expect(error.code, field).toBe("AX_PROTO_INVALID_FIELD");
      expect(error.field, field).toBe(field);
      expect(error.message, field).toBe(
        `${msg.type} message: field ${field}: must have at most ${limit} keys`,
      );
    }
  });

  it("refuses numbers that overflow and keeps the last of duplicated keys", () => {
    const overflow = JSON.stringify(sample("dispatch")).replace('"round":3', '"round":1e400');
    const error = expectError(decode(down, overflow));
    expect(error).toMatchObject({ code: "AX_PROTO_INVALID_FIELD", field: "round" });
    const dup = JSON.stringify(sample("dispatch")).replace('"round":3', '"round":0,"round":4');
    expect((expectOk(decode(down, dup)).message as { round: number }).round).toBe(4);
  });
});
