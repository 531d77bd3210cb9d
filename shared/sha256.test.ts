import { createHash, createHmac, randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { equalBytes, hmacKey, hmacSha256, sha256 } from "./sha256.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

describe("SHA-256 and HMAC-SHA256 in plain TypeScript", () => {
  it("gives the FIPS 180-4 and RFC 4231 answers", () => {
    expect(hex(sha256(Buffer.from("abc")))).toBe(
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    expect(hex(sha256(new Uint8Array(0)))).toBe(
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    );
    // RFC 4231, test case 2: key "Jefe".
    expect(
      hex(hmacSha256(hmacKey(Buffer.from("Jefe")), [Buffer.from("what do ya want for nothing?")])),
    ).toBe("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  });

  it("agrees with node:crypto on random lengths, keys and chunkings (property)", () => {
    for (let n = 0; n < 1500; n++) {
      const m = randomBytes(n % 330);
      expect(hex(sha256(m))).toBe(createHash("sha256").update(m).digest("hex"));
      const key = randomBytes(n % 130); // under, at and over the 64-byte block
      const cut = n % (m.length + 1);
      expect(hex(hmacSha256(hmacKey(key), [m.subarray(0, cut), m.subarray(cut)]))).toBe(
        createHmac("sha256", key).update(m).digest("hex"),
      );
    }
  });

  it("compares bytes whole", () => {
    expect(equalBytes(Buffer.from("abc"), Buffer.from("abc"))).toBe(true);
    expect(equalBytes(Buffer.from("abc"), Buffer.from("abd"))).toBe(false);
    expect(equalBytes(Buffer.from("abc"), Buffer.from("ab"))).toBe(false);
  });
});
