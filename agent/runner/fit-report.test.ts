import { describe, expect, it } from "vitest";
import { envelope } from "../../shared/message.js";
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  decode,
  decodeAll,
  MAX_JSON_DEPTH,
  MAX_OBJECT_KEYS,
  topics,
} from "../../shared/protocol/index.js";
import { type FinishedBody, fitFinished, MAX_MESSAGE_CHARS } from "./fit-report.js";

const UP = topics().up("agent-1");

function body(patch: Partial<FinishedBody> = {}): FinishedBody {
  return {
    type: "finished",
    executionId: "ex_1",
    round: 2,
    outcome: "succeeded",
    retryable: false,
    message: "ok",
    startedAt: 1_700_000_000_000,
    finishedAt: 1_700_000_000_050,
    ...patch,
  };
}

/** The report as the agent sends it: envelope and seq added, alone and in a batch. */
function sent(b: FinishedBody): { alone: string; batch: string } {
  const json = JSON.stringify({ ...envelope(b, 1_700_000_000_100), seq: 123_456_789 });
  return { alone: json, batch: `[${json}]` };
}

/** Asserts the coordinator would accept the fitted report alone and in a batch. */
function expectDeliverable(b: FinishedBody): void {
  const { alone, batch } = sent(b);
  expect(Buffer.byteLength(alone)).toBeLessThanOrEqual(DEFAULT_MAX_PAYLOAD_BYTES);
  const one = decode(UP, alone);
  expect(one.ok, JSON.stringify(one.ok ? "" : one.error)).toBe(true);
  expect(decodeAll(UP, batch).map((r) => r.ok)).toEqual([true]);
}

/** An object nested `levels` deep: `{ d: { d: … {} } }`, built without recursion. */
function deep(levels: number): Record<string, unknown> {
  const root: Record<string, unknown> = {};
  let node = root;
  for (let i = 1; i < levels; i++) {
    const next: Record<string, unknown> = {};
    node.d = next;
    node = next;
  }
  return root;
}

describe("fitFinished", () => {
  it("leaves a report that fits as it is (the result a plain JSON copy)", () => {
    const result = { temperature: 21.5, ok: true, list: [1, "two", { three: 3 }] };
    const fitted = fitFinished(body({ result }));
    expect(fitted).toEqual(body({ result }));
    expect(fitted.result).not.toBe(result);
    expectDeliverable(fitted);
  });

  it("replaces a 1 MiB result with a marker of its size, and says so in the message", () => {
    const fitted = fitFinished(body({ result: { blob: "x".repeat(1024 * 1024) } }));
    expect(fitted.result).toEqual({ truncated: true, reason: "too_large", bytes: 1_048_587 });
    expect(fitted.message).toBe(
      "ok [result not sent: its 1048587 bytes would not fit the 65536-byte payload limit]",
    );
    expectDeliverable(fitted);
  });

  it("keeps the largest result that still fits, and truncates one byte more", () => {
    // Find the blob size at the edge by bisection: fitted whole below it, marked above it.
    let lo = 0;
    let hi = DEFAULT_MAX_PAYLOAD_BYTES;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      const r = fitFinished(body({ result: { b: "x".repeat(mid) } })).result;
      if (r && "truncated" in r) hi = mid;
      else lo = mid;
    }
    expect(lo).toBeGreaterThan(60_000);
    expectDeliverable(fitFinished(body({ result: { b: "x".repeat(lo) } })));
    expect(fitFinished(body({ result: { b: "x".repeat(hi) } })).result).toMatchObject({
      truncated: true,
      reason: "too_large",
    });
  });

  it("honours a smaller payload limit", () => {
    const fitted = fitFinished(body({ result: { b: "x".repeat(5000) } }), 4096);
    expect(fitted.result).toEqual({ truncated: true, reason: "too_large", bytes: 5008 });
  });

  it("cuts a long message with a marker, never splitting a surrogate pair", () => {
    const fitted = fitFinished(body({ outcome: "failed", message: "é".repeat(10_000) }));
    expect(fitted.message.length).toBeLessThanOrEqual(MAX_MESSAGE_CHARS);
    expect(fitted.message.endsWith(" …[cut: 10000 chars]")).toBe(true);
    expectDeliverable(fitted);
    const emoji = fitFinished(body({ message: "😀".repeat(3000) })).message;
    expect(emoji.length).toBeLessThanOrEqual(MAX_MESSAGE_CHARS);
    expect(emoji).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
  });

  it("keeps its note readable when both the message and the result are too long", () => {
    const fitted = fitFinished(
      body({ message: "m".repeat(9000), result: { b: "x".repeat(100_000) } }),
    );
    expect(fitted.message.length).toBeLessThanOrEqual(MAX_MESSAGE_CHARS);
    expect(fitted.message).toMatch(/…\[cut: 9000 chars\] \[result not sent: its 100008 bytes/);
    expectDeliverable(fitted);
  });

  // Each case builds its value when it runs: vitest would walk a 100,000-deep one to name it.
  const odd: Array<[string, () => unknown, string]> = [
    ["nested past the depth a batch allows", () => deep(MAX_JSON_DEPTH - 1), "too_deep"],
    ["nested 100,000 deep (JSON.stringify overflows)", () => deep(100_000), "not_json"],
    [
      "with too many keys",
      () => Object.fromEntries(Array.from({ length: MAX_OBJECT_KEYS + 1 }, (_, i) => [`k${i}`, i])),
      "too_many_keys",
    ],
    ["that is an array", () => [1, 2, 3], "not_json"],
    ["that is a string", () => "done", "not_json"],
    ["that is a number", () => 5, "not_json"],
    ["that is null", () => null, "not_json"],
    ["holding a BigInt", () => ({ n: 10n }), "not_json"],
    [
      "with a cycle",
      () => {
        const o: Record<string, unknown> = {};
        o.self = o;
        return o;
      },
      "not_json",
    ],
  ];
  it.each(odd)("replaces a result %s with a marker", (_, make, reason) => {
    const fitted = fitFinished(body({ result: make() as Record<string, unknown> }));
    expect(fitted.result).toMatchObject({ truncated: true, reason });
    expect(fitted.message).toMatch(/^ok \[result not sent: /);
    expectDeliverable(fitted);
  });

  it("gives a result that serialises but is not an object its size, and one that does not none", () => {
    expect(fitFinished(body({ result: [1, 2, 3] as never })).result).toEqual({
      truncated: true,
      reason: "not_json",
      bytes: 7,
    });
    expect(fitFinished(body({ result: { n: 10n } })).result).toEqual({
      truncated: true,
      reason: "not_json",
    });
  });

  it("keeps a result exactly as deep as a batch allows", () => {
    const result = deep(MAX_JSON_DEPTH - 2);
    const fitted = fitFinished(body({ result }));
    expect(fitted.result).toEqual(result);
    expectDeliverable(fitted);
  });
});
