import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { Decoded } from "../../shared/protocol/codec.js";
import { seal } from "../../shared/protocol/mac.js";
import { LinkAuth } from "./auth.js";

const keyA = randomBytes(32);
const keys = {
  keyOf: (id: string) => (id === "A" ? { generation: 2, key: keyA } : undefined),
};
const up = "ax/v1/agents/A/up";
const hb = (instanceId = "i1") =>
  ({
    channel: "up",
    agentId: "A",
    message: { type: "heartbeat", instanceId },
  }) as unknown as Decoded;
const hello = (instanceId: string) =>
  ({ channel: "up", agentId: "A", message: { type: "hello", instanceId } }) as unknown as Decoded;
const pres = (status: "online" | "offline") =>
  ({
    channel: "presence",
    agentId: "A",
    message: { type: "presence", status, instanceId: "i1" },
  }) as unknown as Decoded;

describe("LinkAuth.open", () => {
  const auth = new LinkAuth(keys, 60_000, "ax");
  const body = '{"v":1,"type":"heartbeat"}';

  it("opens a payload MACed by the agent its topic names, within the window", () => {
    const r = auth.open(up, seal(body, up, keyA, 2, 1_000_000), 1_000_500, 65536);
    expect(r.ok && r.body.toString()).toBe(body);
  });

  it("names why it refuses: unsigned, wrong generation, wrong key, not enrolled, stale", () => {
    const code = (topic: string, payload: Buffer | string, now = 1_000_000) => {
      const r = auth.open(topic, Buffer.from(payload), now, 65536);
      return r.ok ? "ok" : `${r.error.code} ${r.error.message}`;
    };
    expect(code(up, body)).toBe("AX_AUTH_UNSIGNED message has no mac member");
    expect(code(up, seal(body, up, keyA, 1, 1_000_000))).toBe(
      'AX_AUTH_BAD_MAC mac made with key generation 1; agent "A" holds generation 2',
    );
    expect(code(up, seal(body, up, randomBytes(32), 2, 1_000_000))).toBe(
      "AX_AUTH_BAD_MAC mac does not verify",
    );
    const upB = "ax/v1/agents/B/up";
    expect(code(upB, seal(body, upB, keyA, 2, 1_000_000))).toBe(
      'AX_AUTH_NOT_ENROLLED agent "B" is not enrolled or is revoked',
    );
    expect(code(up, seal(body, up, keyA, 2, 1_000_000), 1_060_001)).toMatch(
      /^AX_AUTH_STALE signed at 1000000, -?60001 ms from this coordinator's clock \(window 60000 ms\)$/,
    );
    // A down message on the coordinator's side is someone else's.
    const down = "ax/v1/agents/A/down";
    expect(code(down, seal(body, down, keyA, 2, 1_000_000))).toMatch(/^AX_AUTH_BAD_MAC/);
  });

  it("opens a presence signed long ago: a Last Will is signed when its connection opens", () => {
    const topic = "ax/v1/agents/A/presence";
    const will = '{"v":1,"type":"presence","status":"offline","instanceId":"i1"}';
    // Connected for six hours, well past the 60 s window: the will it left is still authentic.
    const r = auth.open(
      topic,
      seal(will, topic, keyA, 2, 1_000_000),
      1_000_000 + 6 * 3_600_000,
      65536,
    );
    expect(r.ok && r.body.toString()).toBe(will);
    // Its MAC is still checked.
    const forged = auth.open(
      topic,
      seal(will, topic, randomBytes(32), 2, 1_000_000),
      1_000_500,
      65536,
    );
    expect(forged.ok ? "ok" : forged.error.code).toBe("AX_AUTH_BAD_MAC");
  });

  it("asks for a clock sample only for an authentic stale message", () => {
    const r = auth.open(up, seal(body, up, keyA, 2, 0), 10_000_000, 65536);
    expect(!r.ok && r.error.resync).toEqual({ agentId: "A", t0: 0 });
    const forged = auth.open(up, seal(body, up, randomBytes(32), 2, 0), 10_000_000, 65536);
    expect(!forged.ok && forged.error.resync).toBeUndefined();
  });
});

describe("LinkAuth.admit: replays of session messages", () => {
  it("takes heartbeats only at rising signing times", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    expect(auth.admit(hb(), 10)).toBeUndefined();
    expect(auth.admit(hb(), 11)).toBeUndefined();
    expect(auth.admit(hb(), 11)?.code).toBe("AX_AUTH_STALE");
    expect(auth.admit(hb(), 5)?.message).toBe(
      "replayed: signed at 5, not after the last accepted (11)",
    );
  });

  it("takes a hello from a new instance even signed earlier (a restarted device's clock), not a recent one's again", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    expect(auth.admit(hello("i1"), 100)).toBeUndefined();
    expect(auth.admit(hb("i1"), 150)).toBeUndefined();
    expect(auth.admit(hello("i2"), 90)).toBeUndefined();
    expect(auth.admit(hb("i2"), 95)).toBeUndefined();
    // i1's hello replayed, at its own old time: refused.
    expect(auth.admit(hello("i1"), 100)?.code).toBe("AX_AUTH_STALE");
  });

  it("refuses a hello of the current instance signed before an accepted heartbeat, quietly: a retry its welcome overtook", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    expect(auth.admit(hello("i1"), 100)).toBeUndefined();
    expect(auth.admit(hb("i1"), 102)).toBeUndefined();
    const retried = auth.admit(hello("i1"), 101);
    expect(retried?.code).toBe("AX_AUTH_STALE");
    expect(retried?.quiet).toBe(true);
    // A heartbeat out of order, or a superseded instance's hello, is still a warning's worth.
    expect(auth.admit(hb("i1"), 101)?.quiet).toBeUndefined();
    expect(auth.admit(hello("i2"), 200)).toBeUndefined();
    expect(auth.admit(hello("i1"), 300)?.quiet).toBeUndefined();
  });

  it("refuses a superseded instance's hello however many came after it, while inside the window", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    expect(auth.admit(hello("first"), 1_000)).toBeUndefined();
    for (let i = 0; i < 6; i++) expect(auth.admit(hello(`later-${i}`), 2_000 + i)).toBeUndefined();
    // Six instances later (it was forgotten after four), still within the window: refused.
    expect(auth.admit(hello("first"), 1_000, 3_000)?.code).toBe("AX_AUTH_STALE");
    // Once the window after its supersession passed, nothing it signed can pass the window, and
    // it may be forgotten: the list shrinks back to the few most recent.
    expect(auth.admit(hello("later-6"), 70_000)).toBeUndefined();
    const seen = (auth as unknown as { seen: Map<string, { instances: string[] }> }).seen.get("A");
    expect(seen?.instances.length).toBe(5);
  });

  it("lets go of marks past the window ahead: signed on a clock since corrected", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    const hour = 3_600_000;
    // An agent whose clock ran 2 h fast before its first sample, or a coordinator stepped back.
    expect(auth.admit(hello("i1"), 2 * hour, 1_000)).toBeUndefined();
    expect(auth.admit(pres("online"), 2 * hour, 1_000)).toBeUndefined();
    expect(auth.admit(hb("i1"), 1_500, 1_500)).toBeUndefined();
    expect(auth.admit(pres("offline"), 1_200, 1_500)).toBeUndefined();
    // Inside the window, the order holds as before.
    expect(auth.admit(hb("i1"), 1_400, 1_600)?.code).toBe("AX_AUTH_STALE");
  });

  it("refuses a presence signed past the window ahead: only its past is exempt", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    const topic = "ax/v1/agents/A/presence";
    const online = '{"v":1,"type":"presence","status":"online","instanceId":"i1"}';
    const r = auth.open(topic, seal(online, topic, keyA, 2, 1_000_000 + 60_001), 1_000_000, 65536);
    expect(r.ok ? "ok" : r.error.code).toBe("AX_AUTH_STALE");
  });

  it("takes the Last Will signed with its connection's online presence, not an older one", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    expect(auth.admit(pres("online"), 500)).toBeUndefined();
    expect(auth.admit(pres("online"), 500)?.code).toBe("AX_AUTH_STALE"); // replayed online
    expect(auth.admit(pres("offline"), 500)).toBeUndefined(); // this connection's will
    expect(auth.admit(pres("online"), 700)).toBeUndefined(); // reconnected
    expect(auth.admit(pres("offline"), 500)?.code).toBe("AX_AUTH_STALE"); // the old will again
  });

  it("leaves reports to seq: they pass whatever their signing time", () => {
    const auth = new LinkAuth(keys, 60_000, "ax");
    const report = {
      channel: "up",
      agentId: "A",
      message: { type: "accepted" },
    } as unknown as Decoded;
    expect(auth.admit(report, 5)).toBeUndefined();
    expect(auth.admit(report, 5)).toBeUndefined();
  });
});
