import { describe, expect, it } from "vitest";
import { decodeAll, SCHEMAS_BY_CHANNEL, topics } from "../../shared/protocol/index.js";
import { type FuzzChannel, fuzzPayload } from "../../test/fuzz/payloads.js";
import { seededRandom } from "../../test/helpers/random.js";
import { compileSchemas } from "./compiled-schemas.js";

const T = topics();
const TOPIC: Record<FuzzChannel, string> = {
  up: T.up("agent-1"),
  down: T.down("agent-1"),
  presence: T.presence("agent-1"),
  event: T.event("door.opened"),
};

describe("compileSchemas", () => {
  const compiled = compileSchemas();

  it("compiles every object of the protocol, and keeps every message type", () => {
    for (const [channel, byType] of Object.entries(SCHEMAS_BY_CHANNEL)) {
      const mine = compiled[channel as keyof typeof compiled];
      expect(Object.keys(mine).sort()).toEqual(Object.keys(byType).sort());
      for (const type of Object.keys(byType)) {
        const schema = mine[type] as unknown as { _zod: { traits: Set<string> } };
        expect(schema._zod.traits.has("$ZodObjectJIT"), `${channel} ${type}`).toBe(true);
      }
    }
  });

  it("counts string bounds in UTF-16 units, as the plain schemas do", () => {
    const finished = (message: string) =>
      JSON.stringify({
        v: 1,
        msgId: "m1",
        sentAt: 1,
        type: "finished",
        executionId: "e1",
        round: 1,
        seq: 1,
        outcome: "failed",
        retryable: false,
        finishedAt: 2,
        message,
      });
    for (const [message, ok] of [
      ["😀".repeat(2048), true],
      ["😀".repeat(2049), false],
      [`${"a".repeat(4095)}😀`, false],
    ] as const) {
      const plain = decodeAll(TOPIC.up, finished(message));
      expect(decodeAll(TOPIC.up, finished(message), { schemas: compiled })).toStrictEqual(plain);
      expect(plain[0]?.ok).toBe(ok);
    }
  });

  // The fuzzer's payloads, valid and broken in every way it knows (wrong types, missing and
  // extra fields, bad ids, overflowing numbers, batches), decode to the same result, error
  // messages and fields included, through either set of schemas.
  it.each(["up", "down", "presence", "event"] as const)(
    "decodes %s payloads exactly as the schemas it was made from",
    (channel) => {
      const rand = seededRandom(0x5eed + channel.length);
      let ok = 0;
      let refused = 0;
      for (let n = 0; n < 1_000; n++) {
        const { payload } = fuzzPayload(rand, channel, n, () => false);
        const plain = decodeAll(TOPIC[channel], payload);
        const fast = decodeAll(TOPIC[channel], payload, { schemas: compiled });
        expect(fast).toStrictEqual(plain);
        for (const r of plain) {
          if (r.ok) ok++;
          else if (r.error.code === "AX_PROTO_INVALID_FIELD") refused++;
        }
      }
      // Both kinds were exercised, so the comparison meant something.
      expect(ok).toBeGreaterThan(20);
      expect(refused).toBeGreaterThan(100);
    },
  );
});
