import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { seal, unseal } from "../../shared/protocol/mac.js";
import { AgentAuth } from "./auth.js";

const key = randomBytes(32);
const down = "ax/v1/agents/A/down";
const msg = (n: number) => `{"v":1,"type":"ack","msgId":"m${n}","sentAt":${n},"upTo":${n}}`;

describe("AgentAuth", () => {
  it("seals up messages at strictly rising times, presence at the time it is given", () => {
    const auth = new AgentAuth({ generation: 1, key }, 60_000);
    const at = (p: Buffer) => {
      const s = unseal(p);
      if (typeof s === "string") throw new Error(s);
      return s.at;
    };
    expect(at(auth.seal("t", '{"v":1}', 1000))).toBe(1000);
    expect(at(auth.seal("t", '{"v":1}', 1000))).toBe(1001);
    expect(at(auth.seal("t", '{"v":1}', 900))).toBe(1002); // the clock estimate stepped back
    expect(at(auth.seal("t", '{"v":1}', 5000, 42))).toBe(42);
    // Past the window ahead (signed before a correction of a clock 2 h fast): from now on.
    const fast = new AgentAuth({ generation: 1, key }, 60_000);
    expect(at(fast.seal("t", '{"v":1}', 7_200_000))).toBe(7_200_000);
    expect(at(fast.seal("t", '{"v":1}', 1000))).toBe(1000);
    expect(at(fast.seal("t", '{"v":1}', 1000))).toBe(1001);
  });

  it("opens a message MACed for it, once", () => {
    const auth = new AgentAuth({ generation: 1, key }, 60_000);
    const p = seal(msg(1), down, key, 1, 100);
    const first = auth.open(down, p, 100);
    expect(first.ok && first.body.toString()).toBe(msg(1));
    const again = auth.open(down, p, 100);
    expect(!again.ok && again.error).toEqual({
      code: "AX_AUTH_STALE",
      message: "replayed: this message was already received",
    });
  });

  it("refuses unsigned, another generation, another key and another agent's topic", () => {
    const auth = new AgentAuth({ generation: 1, key }, 60_000);
    const code = (p: Buffer) => {
      const r = auth.open(down, p, 100);
      return r.ok ? "ok" : r.error.code;
    };
    expect(code(Buffer.from(msg(2)))).toBe("AX_AUTH_UNSIGNED");
    expect(code(seal(msg(3), down, key, 2, 100))).toBe("AX_AUTH_BAD_MAC");
    expect(code(seal(msg(4), down, randomBytes(32), 1, 100))).toBe("AX_AUTH_BAD_MAC");
    expect(code(seal(msg(5), "ax/v1/agents/B/down", key, 1, 100))).toBe("AX_AUTH_BAD_MAC");
  });

  it("judges the window by the coordinator's clock as it knows it", () => {
    const auth = new AgentAuth({ generation: 1, key }, 60_000);
    expect(auth.stale(1_000_000, 1_059_000)).toBeUndefined();
    expect(auth.stale(1_000_000, 1_060_001)?.code).toBe("AX_AUTH_STALE");
    expect(auth.stale(1_070_000, 1_000_000)?.message).toBe(
      "signed -70000 ms from this agent's clock (window 60000 ms)",
    );
  });

  it("forgets the oldest of 4096 remembered messages, and then refuses anything signed before it", () => {
    const auth = new AgentAuth({ generation: 1, key }, 60_000);
    for (let i = 1; i <= 4097; i++)
      expect(auth.open(down, seal(msg(i), down, key, 1, i), i).ok).toBe(true);
    // The first was forgotten: its copy is still refused, by the floor.
    expect(auth.open(down, seal(msg(1), down, key, 1, 1), 4097).ok).toBe(false);
    expect(auth.open(down, seal(msg(9999), down, key, 1, 5000), 5000).ok).toBe(true);
  });

  it("lets go of a floor past the window ahead: the coordinator's clock was stepped back", () => {
    const auth = new AgentAuth({ generation: 1, key }, 60_000);
    const day = 86_400_000;
    for (let i = 1; i <= 4097; i++) {
      expect(auth.open(down, seal(msg(i), down, key, 1, 2 * day + i), 2 * day + i).ok).toBe(true);
    }
    // Stepped back a day: what it signs now is taken, once (a copy is refused by its tag).
    const now = day;
    const stepped = seal(msg(10_000), down, key, 1, now);
    expect(auth.open(down, stepped, now).ok).toBe(true);
    expect(auth.open(down, stepped, now).ok).toBe(false);
  });
});
