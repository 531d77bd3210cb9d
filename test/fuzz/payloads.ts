/**
 * Hostile payloads for the protocol fuzzer, built from the protocol's own shapes so most of them
 * get past the JSON step and exercise the checks behind it: well-formed envelopes with wrong
 * fields, wrong versions, types of another channel, bad ids, overflowing numbers, duplicated
 * keys, deep nesting, huge strings, oversize payloads, batches; and plain random bytes.
 */

/** A channel the fuzzer publishes on. */
export type FuzzChannel = "down" | "up" | "presence" | "event";

export interface FuzzPayload {
  /** Which generator made it, for the failure message and the figures. */
  kind: string;
  payload: Buffer;
}

type Rand = () => number;
type Json = Record<string, unknown>;

const pick = <T>(rand: Rand, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;

/** `levels` arrays nested in each other, as text (a value built in memory would be as deep). */
export const nestedText = (levels: number) => `${"[".repeat(levels)}${"]".repeat(levels)}`;

const BAD_IDS = ["", "a/b", "$sys", "x y", "ü-agent", "a".repeat(129), "+", "#", "..", 17, null];
const WRONG_VALUES: unknown[] = [null, "7", -1, 0, 1.5, true, [], {}, [1, 2], "", 2 ** 60];

/** One message of each type of a channel, valid as it stands (each id made unique by `n`). */
function base(channel: FuzzChannel, n: number, rand: Rand): Json {
  const env = { v: 1, msgId: `fz-m-${n}`, sentAt: Date.now() };
  const ref = { executionId: `fz-${n}`, round: 1 + Math.floor(rand() * 5) };
  const down: Json[] = [
    {
      ...env,
      ...ref,
      type: "dispatch",
      attempt: 1,
      handler: "echo",
      params: { n },
      fireAt: Date.now(),
      deadline: Date.now() + 1000,
      timeoutMs: 1000,
      priority: 0,
    },
    { ...env, ...ref, type: "cancel" },
    { ...env, ...ref, type: "query" },
    { ...env, type: "ack", upTo: 1 },
    { ...env, type: "time", clock: { t0: 1, t1: 2, t2: 3 } },
    {
      ...env,
      type: "welcome",
      instanceId: "i-x",
      heartbeatMs: 1000,
      clock: { t0: 1, t1: 2, t2: 3 },
    },
  ];
  const up: Json[] = [
    { ...env, ...ref, type: "accepted", seq: n + 1 },
    { ...env, ...ref, type: "started", seq: n + 1, startedAt: Date.now(), lateMs: 0 },
    {
      ...env,
      ...ref,
      type: "finished",
      seq: n + 1,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      finishedAt: Date.now(),
    },
    { ...env, ...ref, type: "state", seq: n + 1, localState: "unknown" },
    {
      ...env,
      type: "hello",
      agentId: "fz-agent",
      instanceId: "i-fz",
      journalId: "j-fz",
      lastSeq: 0,
      profile: "dev",
      bundle: { version: "dev", sha256: "dev" },
      handlers: ["echo"],
      capacity: { concurrency: 1, queue: 0 },
      tags: {},
    },
  ];
  const presence: Json[] = [{ ...env, type: "presence", status: "online", instanceId: "i-fz" }];
  const event: Json[] = [{ ...env, type: "event", payload: { n } }];
  return structuredClone(pick(rand, { down, up, presence, event }[channel]));
}

/** A field of `msg` other than the envelope's, or `v`/`type` now and then. */
function someField(rand: Rand, msg: Json): string {
  const keys = Object.keys(msg);
  return rand() < 0.15 ? pick(rand, ["v", "type", "msgId"]) : pick(rand, keys);
}

/** Breaks one message so that it is no longer valid (the caller checks, and breaks again). */
function breakMessage(rand: Rand, msg: Json, channel: FuzzChannel): { kind: string; text: string } {
  const f = someField(rand, msg);
  const op = Math.floor(rand() * 10);
  switch (op) {
    case 0:
      msg[f] = pick(rand, WRONG_VALUES);
      return { kind: "wrong type", text: JSON.stringify(msg) };
    case 1:
      delete msg[f];
      return { kind: "missing field", text: JSON.stringify(msg) };
    case 2: {
      const key = pick(rand, [
        "round",
        "seq",
        "attempt",
        "priority",
        "timeoutMs",
        "upTo",
        "sentAt",
      ]);
      msg[key] = pick(rand, [0, -5, 1.25, 1e21, -1e-9, 1_000_001]);
      msg.extra = { unknown: [1, 2, 3] }; // an extra field on top: must not make it valid
      return { kind: "out of range", text: JSON.stringify(msg) };
    }
    case 3:
      msg.v = pick(rand, [0, 2, "1", 1.5, null, [1]]);
      return { kind: "wrong v", text: JSON.stringify(msg) };
    case 4: {
      const other: Record<FuzzChannel, string[]> = {
        down: ["accepted", "hello", "presence", "event"],
        up: ["dispatch", "ack", "presence", "event"],
        presence: ["hello", "dispatch", "event"],
        event: ["dispatch", "presence", "finished"],
      };
      msg.type = pick(rand, [...other[channel], "", "DISPATCH", "__proto__", 7]);
      return { kind: "wrong type for channel", text: JSON.stringify(msg) };
    }
    case 5: {
      const key = pick(rand, ["msgId", "executionId", "instanceId", "agentId", "journalId"]);
      msg[key] = pick(rand, BAD_IDS);
      if (key !== "msgId") msg.msgId = pick(rand, BAD_IDS); // makes it invalid even if absent
      return { kind: "bad id", text: JSON.stringify(msg) };
    }
    case 6: {
      // A literal JSON.stringify cannot write: overflows to Infinity when parsed.
      const key = pick(rand, ["round", "sentAt", "seq", "fireAt", "v"]);
      msg[key] = "@NUM@";
      return {
        kind: "1e400",
        text: JSON.stringify(msg).replace('"@NUM@"', pick(rand, ["1e400", "-1e400"])),
      };
    }
    case 7: {
      // Duplicated keys: JSON.parse keeps the last, here the bad one.
      const text = JSON.stringify(msg);
      return {
        kind: "duplicated keys",
        text: `{"v":1,"type":${JSON.stringify(msg.type)},${text.slice(1, -1)},"v":2}`,
      };
    }
    case 8: {
      // Nested thousands deep where a value is expected (params, payload, or any field).
      const levels = pick(rand, [33, 100, 10_000, 30_000]);
      const key = "params" in msg ? "params" : "payload" in msg ? "payload" : f;
      msg[key] = "@DEEP@";
      const inner = rand() < 0.5 ? nestedText(levels) : `{"a":${nestedText(levels - 1)}}`;
      return { kind: "deep nesting", text: JSON.stringify(msg).replace('"@DEEP@"', inner) };
    }
    default: {
      // A 1 MiB string in a field whose bound is far smaller (or in params, within no bound).
      msg[pick(rand, ["message", "note", "msgId", "reason", "profile"])] = "x".repeat(1024 * 1024);
      return { kind: "1 MiB string", text: JSON.stringify(msg) };
    }
  }
}

/** Random bytes, often not UTF-8. */
function randomBytes(rand: Rand): Buffer {
  const n = Math.floor(rand() * 300);
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * 256);
  return out;
}

/** Valid JSON text with a stray byte that makes it invalid UTF-8. */
function invalidUtf8(text: string, rand: Rand): Buffer {
  const bytes = Buffer.from(text);
  const at = Math.floor(rand() * bytes.length);
  return Buffer.concat([
    bytes.subarray(0, at),
    Buffer.from([0xc3, 0x28, 0xff]),
    bytes.subarray(at),
  ]);
}

/**
 * One hostile payload for `channel`. `isValid` tells whether the protocol's decoder would accept
 * it whole; the generator breaks the message again until it would not, unless `allowValid`
 * (only for batches on a fake agent's `up` topic, where a valid item is part of the test).
 */
export function fuzzPayload(
  rand: Rand,
  channel: FuzzChannel,
  n: number,
  isValid: (payload: Buffer) => boolean,
): FuzzPayload {
  const r = rand();
  if (r < 0.08) return { kind: "random bytes", payload: randomBytes(rand) };
  if (r < 0.12) {
    const p = invalidUtf8(JSON.stringify(base(channel, n, rand)), rand);
    if (!isValid(p)) return { kind: "invalid UTF-8", payload: p };
  }
  if (r < 0.16) {
    // Over the 64 KiB limit but otherwise a fine message.
    const msg = base(channel, n, rand);
    msg.pad = "p".repeat(70_000 + Math.floor(rand() * 200_000));
    return { kind: "oversize", payload: Buffer.from(JSON.stringify(msg)) };
  }
  if (r < 0.26) return batch(rand, channel, n, isValid);
  let msg = base(channel, n, rand);
  for (let tries = 0; ; tries++) {
    const broken = breakMessage(rand, msg, channel);
    const payload = Buffer.from(broken.text);
    if (!isValid(payload)) return { kind: broken.kind, payload };
    // Still valid (an extra field, a value that happened to fit): break it some more.
    msg = tries < 5 ? (JSON.parse(broken.text) as Json) : base(channel, n, rand);
  }
}

/** A JSON array: empty, 257 long, mixed good and bad reports, a hello inside. */
function batch(rand: Rand, channel: FuzzChannel, n: number, isValid: (p: Buffer) => boolean) {
  const shape = Math.floor(rand() * 4);
  const report = (i: number) => base("up", n * 1000 + i, rand);
  let items: unknown[];
  let kind: string;
  if (shape === 0) {
    items = [];
    kind = "batch: empty";
  } else if (shape === 1) {
    items = Array.from({ length: 257 }, (_, i) => ({ ...report(i), type: "accepted" }));
    kind = "batch: 257 items";
  } else if (shape === 2) {
    items = Array.from({ length: 2 + Math.floor(rand() * 6) }, (_, i) => {
      const m = report(i);
      if (rand() < 0.5) return m;
      const broken = breakMessage(rand, m, "up").text;
      // A nested payload stays in the batch as text, so it keeps its depth.
      return { "@": broken };
    });
    kind = "batch: mixed";
  } else {
    items = [report(0), base("up", n, rand), report(1)].map((m, i) =>
      i === 1 ? { ...m, type: "hello" } : m,
    );
    kind = "batch: hello inside";
  }
  let text = JSON.stringify(items).replace(/\{"@":("(?:[^"\\]|\\.)*")\}/g, (_, s: string) => {
    return JSON.parse(s) as string;
  });
  // Off the up channel a batch is just an array; on it, the fuzzer never sends one that is all
  // good (it would be acted on), so make the last item bad if it is.
  if (channel !== "up" || !isValid(Buffer.from(text))) return { kind, payload: Buffer.from(text) };
  text = `${text.slice(0, -1)}${items.length > 0 ? "," : ""}{"v":2}]`;
  return { kind, payload: Buffer.from(text) };
}
