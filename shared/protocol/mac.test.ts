import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { seal, unseal, verifyTag } from "./mac.js";

/** The first test vector of docs/protocol.md, "Authenticated messages". */
const VECTOR = {
  key: Buffer.alloc(32, 0x2a).toString("base64url"),
  kid: 1,
  at: 1767225600000,
  topic: "ax/v1/agents/pump-7/up",
  body: '{"v":1,"type":"heartbeat","msgId":"m1","sentAt":1767225600000}',
};

const opened = (payload: Buffer) => {
  const s = unseal(payload);
  if (typeof s === "string") throw new Error(`not sealed: ${s}`);
  return s;
};

describe("message MAC", () => {
  const key = randomBytes(32);
  const topic = "ax/v1/agents/a-1/up";
  const body =
    '{"v":1,"type":"accepted","msgId":"x","sentAt":1,"executionId":"e","round":1,"seq":3}';

  it("seals an object as its first member, and opens to the exact bytes sealed", () => {
    const payload = seal(body, topic, key, 3, 1234.9);
    expect(payload.toString().startsWith('{"mac":"3.1234.')).toBe(true);
    // Still one JSON object, with the message's own fields.
    expect(JSON.parse(payload.toString())).toMatchObject({ type: "accepted", seq: 3 });
    const s = opened(payload);
    expect(s.body.toString()).toBe(body);
    expect(s.kid).toBe(3);
    expect(s.at).toBe(1234);
    expect(verifyTag(s, topic, key)).toBe(true);
  });

  it("seals a batch as its first element", () => {
    const batch = `[${body},${body.replace('"seq":3', '"seq":4')}]`;
    const payload = seal(batch, topic, key, 1, 99);
    const json = JSON.parse(payload.toString()) as unknown[];
    expect(json).toHaveLength(3);
    expect(Object.keys(json[0] as object)).toEqual(["mac"]);
    const s = opened(payload);
    expect(s.body.toString()).toBe(batch);
    expect(verifyTag(s, topic, key)).toBe(true);
  });

  it("fails when any single byte of the payload changes", () => {
    const payload = seal(body, topic, key, 1, 1_700_000_000_000);
    let refused = 0;
    for (let i = 0; i < payload.length; i++) {
      for (const flip of [0x01, 0x20, 0x80]) {
        const bad = Buffer.from(payload);
        bad[i] = (bad[i] as number) ^ flip;
        const s = unseal(bad);
        if (typeof s === "string" || !verifyTag(s, topic, key)) refused++;
      }
    }
    expect(refused).toBe(payload.length * 3);
  });

  it("fails for random bodies with a byte changed, inserted or cut (property)", () => {
    for (let n = 0; n < 300; n++) {
      const text = JSON.stringify({
        v: 1,
        type: "progress",
        note: randomBytes(1 + (n % 40)).toString("hex"),
      });
      const payload = seal(text, topic, key, 1 + (n % 5), n * 7919);
      const at = Math.floor(Math.random() * payload.length);
      const mutations = [
        Buffer.concat([
          payload.subarray(0, at),
          Buffer.from([0x41 + (n % 26)]),
          payload.subarray(at),
        ]),
        Buffer.concat([payload.subarray(0, at), payload.subarray(at + 1)]),
      ];
      for (const bad of mutations) {
        if (bad.equals(payload)) continue;
        const s = unseal(bad);
        expect(typeof s === "string" || !verifyTag(s, topic, key)).toBe(true);
      }
    }
  });

  it("a message valid for agent A fails for agent B: another topic, or another key", () => {
    const keyB = randomBytes(32);
    const forA = opened(seal(body, "ax/v1/agents/A/up", key, 1, 5));
    expect(verifyTag(forA, "ax/v1/agents/A/up", key)).toBe(true);
    expect(verifyTag(forA, "ax/v1/agents/B/up", key)).toBe(false);
    expect(verifyTag(forA, "ax/v1/agents/A/up", keyB)).toBe(false);
    expect(verifyTag(forA, "ax/v1/agents/A/down", key)).toBe(false);
  });

  it("tells an unsigned payload from a malformed auth member", () => {
    expect(unseal(Buffer.from(body))).toBe("unsigned");
    expect(unseal(Buffer.from("[1,2]"))).toBe("unsigned");
    expect(unseal(Buffer.from('{"mac":"1.2.short","v":1}'))).toBe("malformed");
    expect(
      unseal(Buffer.from('{"mac":"x.2.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","v":1}')),
    ).toBe("malformed");
    expect(unseal(Buffer.from('{"mac":"1.2.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}'))).toBe(
      "malformed",
    );
  });

  it("reads kid and at only as written in plain decimal, so one tag has one token", () => {
    const key = randomBytes(32);
    const topic = "ax/v1/agents/A/up";
    const payload = seal('{"v":1}', topic, key, 1, 1767225600000).toString();
    expect(verifyTag(opened(Buffer.from(payload)), topic, key)).toBe(true);
    // The same tag under "01" or a zero-padded at would verify if the numbers were read loosely.
    for (const token of [
      payload.replace('{"mac":"1.', '{"mac":"01.'),
      payload.replace(".1767225600000.", ".01767225600000."),
      payload.replace('{"mac":"1.', '{"mac":"0.'),
    ]) {
      expect(unseal(Buffer.from(token)), token.slice(0, 30)).toBe("malformed");
    }
  });

  it("matches the test vectors published in docs/protocol.md", () => {
    const doc = readFileSync(new URL("../../docs/protocol.md", import.meta.url), "utf8");
    const v = VECTOR;
    const payload = seal(v.body, v.topic, Buffer.from(v.key, "base64url"), v.kid, v.at).toString();
    expect(doc).toContain(`\n${payload}\n`);
    expect(doc).toContain(`(\`${v.key}\`)`);
    const batch = seal(
      '[{"v":1}]',
      "ax/v1/agents/pump-7/down",
      Buffer.from(v.key, "base64url"),
      3,
      v.at,
    );
    expect(doc).toContain(`\n${batch.toString()}\n`);
    // Computed independently (Python's hmac module), not by the code under test.
    expect(payload).toBe(
      '{"mac":"1.1767225600000.gyYYhr_OiDxk5sGSTClsFbl42mZr2s-CMfK52srptMU","v":1,"type":"heartbeat","msgId":"m1","sentAt":1767225600000}',
    );
  });
});
