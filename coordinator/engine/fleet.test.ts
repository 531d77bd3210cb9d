import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { envelope } from "../../shared/message.js";
import type { Heartbeat, Hello } from "../../shared/protocol/index.js";
import { helloBody, idleHeartbeat, tempDir } from "../../test/helpers/env.js";
import { parseCoordinatorConfig } from "../config.js";
import { CoordinatorLink } from "../link/mqtt-link.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import { EngineEventBus } from "./events.js";
import { Fleet, PRESENCE_PERSIST_CHUNK, PRESENCE_PERSIST_MS } from "./fleet.js";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A fleet on a real store, on a clock the test moves; with `owned`, dispatch shared. */
function fleet(overrides: { idleHeartbeatMs?: number } = {}, owned?: Set<string>) {
  const tmp = tempDir();
  cleanups.push(tmp.cleanup);
  const store = new SqliteStore({ path: join(tmp.dir, "ax.sqlite") });
  cleanups.push(() => store.close());
  const config = parseCoordinatorConfig({
    store: { path: join(tmp.dir, "ax.sqlite") },
    mqtt: { url: "mqtt://127.0.0.1:1" },
    ...overrides,
  });
  let now = 1_000_000;
  const clock = {
    wallNow: () => now,
    monoNow: () => now,
    setTimer: () => ({}) as never,
    clearTimer: () => {},
  };
  // The link is never started: nothing here sends.
  const link = new CoordinatorLink(
    { url: config.mqtt.url, clientId: "ax-c-fleet-test" },
    () => now,
  );
  const share =
    owned === undefined
      ? undefined
      : { agent: (id: string) => owned.has(id), job: () => true, members: () => 2 };
  const ctx = {
    config,
    store,
    link,
    clock,
    log: () => {},
    events: new EngineEventBus(),
    ...(share === undefined ? {} : { share }),
  };
  const writes: number[] = [];
  const putAgents = store.putAgents.bind(store);
  store.putAgents = async (agents) => {
    writes.push(agents.length);
    await putAgents(agents);
  };
  return {
    fleet: new Fleet(ctx as never),
    store,
    writes,
    advance: (ms: number) => {
      now += ms;
    },
    now: () => now,
  };
}

/** An agent record as the store holds one, for a test to write before the fleet loads it. */
async function seed(f: ReturnType<typeof fleet>, agentId: string) {
  await f.fleet.hello(hello(agentId, f.now()), f.now());
  const a = f.fleet.get(agentId);
  if (a === undefined) throw new Error("no record");
  return { ...a };
}

const hello = (agentId: string, at: number): Hello => envelope(helloBody(agentId), at) as Hello;

const beat = (agentId: string, at: number, load: number): Heartbeat =>
  envelope(idleHeartbeat(`i-${agentId}`, load), at) as Heartbeat;

describe("Fleet: heartbeat figures", () => {
  it("keeps them in memory, then writes them in batches once a period has passed", async () => {
    const f = fleet();
    const n = PRESENCE_PERSIST_CHUNK + 10;
    for (let i = 0; i < n; i++) await f.fleet.hello(hello(`a${i}`, f.now()), f.now());
    for (let i = 0; i < n; i++) {
      expect(f.fleet.heartbeatInMemory(`a${i}`, beat(`a${i}`, f.now(), 2), f.now())).toBe(true);
    }
    expect(f.fleet.get("a0")?.load).toBe(2);
    // Within the period nothing is written.
    await f.fleet.sweep(f.now(), f.now());
    expect(f.writes).toEqual([]);
    expect((await f.store.getAgent("a0"))?.load).toBe(0);
    // After it, a chunk per sweep until every agent is written; then nothing until the next.
    f.advance(PRESENCE_PERSIST_MS);
    await f.fleet.sweep(f.now(), f.now());
    await f.fleet.sweep(f.now(), f.now());
    await f.fleet.sweep(f.now(), f.now());
    expect(f.writes).toEqual([PRESENCE_PERSIST_CHUNK, 10]);
    expect((await f.store.getAgent(`a${n - 1}`))?.load).toBe(2);
  });

  it("writes an agent coming back online at once, and everything left at shutdown", async () => {
    const f = fleet();
    await f.fleet.hello(hello("a1", f.now()), f.now());
    await f.fleet.hello(hello("a2", f.now()), f.now());
    // Three heartbeats missed: offline, written at once.
    f.advance(60_000);
    await f.fleet.sweep(f.now(), f.now() - 60_000);
    expect((await f.store.getAgent("a1"))?.status).toBe("offline");
    // The next heartbeat is not the in-memory kind: the agent comes back, and that is stored.
    expect(f.fleet.heartbeatInMemory("a1", beat("a1", f.now(), 1), f.now())).toBe(false);
    expect(await f.fleet.heartbeat("a1", beat("a1", f.now(), 1), f.now())).toBe(true);
    expect((await f.store.getAgent("a1"))?.status).toBe("online");
    // A superseded instance's heartbeat is not taken either way.
    const stale = envelope(idleHeartbeat("i-old", 5), f.now()) as Heartbeat;
    expect(f.fleet.heartbeatInMemory("a1", stale, f.now())).toBe(false);
    expect(await f.fleet.heartbeat("a1", stale, f.now())).toBe(false);
    expect(f.fleet.heartbeatInMemory("a1", beat("a1", f.now(), 4), f.now())).toBe(true);
    await f.fleet.persistSeen(f.now(), Number.POSITIVE_INFINITY);
    expect((await f.store.getAgent("a1"))?.load).toBe(4);
  });
});

describe("Fleet: who is out of reach", () => {
  it("answers from memory, and again after every change of status, instance or draining", async () => {
    const f = fleet();
    await f.fleet.hello(hello("a1", f.now()), f.now());
    await f.fleet.hello(hello("a2", f.now()), f.now());
    expect(f.fleet.unreachable()).toEqual([]);
    // Asked again with nothing changed: the same answer, not a new walk of the fleet.
    expect(f.fleet.unreachable()).toBe(f.fleet.unreachable());

    // Silent past three heartbeats: a1 goes offline (a2 kept beating).
    f.advance(16_000);
    expect(f.fleet.heartbeatInMemory("a2", beat("a2", f.now(), 0), f.now())).toBe(true);
    await f.fleet.sweep(f.now(), f.now() - 16_000);
    expect(f.fleet.unreachable()).toEqual(["a1"]);
    // Back with a heartbeat.
    expect(await f.fleet.heartbeat("a1", beat("a1", f.now(), 0), f.now())).toBe(true);
    expect(f.fleet.unreachable()).toEqual([]);
    // Shutting down, then a new instance.
    f.fleet.markDraining("a2");
    expect(f.fleet.unreachable()).toEqual(["a2"]);
    await f.fleet.hello({ ...hello("a2", f.now()), instanceId: "i-a2-next" }, f.now());
    expect(f.fleet.unreachable()).toEqual([]);
    // Its will, then a revocation.
    await f.fleet.presence("a2", "offline", "i-a2-next");
    expect(f.fleet.unreachable()).toEqual(["a2"]);
    await f.fleet.revoked("a1");
    expect([...f.fleet.unreachable()].sort()).toEqual(["a1", "a2"]);
  });

  it("takes offline exactly the silent agents, in whatever order they were heard", async () => {
    // Idle heartbeats off: every agent, loaded ones too, is held to three heartbeats.
    const f = fleet({ idleHeartbeatMs: 0 });
    const since = f.now();
    // Loaded from the store as at a start: one online but silent 20 s, one online and fresh.
    const base = { ...(await seed(f, "s-old")), status: "online" as const };
    await f.store.putAgent({ ...base, agentId: "s-old", lastSeenAt: f.now() - 20_000 });
    await f.store.putAgent({ ...base, agentId: "s-new", lastSeenAt: f.now() });
    await f.fleet.load();
    for (const id of ["a1", "a2", "a3", "a4"]) await f.fleet.hello(hello(id, f.now()), f.now());
    f.advance(8_000);
    // Heard again in another order than they said hello; a4 goes offline and comes back.
    f.fleet.heartbeatInMemory("a3", beat("a3", f.now(), 0), f.now());
    await f.fleet.presence("a4", "offline", "i-a4");
    f.advance(4_000);
    f.fleet.heartbeatInMemory("a1", beat("a1", f.now(), 0), f.now());
    await f.fleet.hello(hello("a4", f.now()), f.now());
    f.advance(4_000); // a2 and s-new silent 16 s; a3 8 s, a1 and a4 4 s
    await f.fleet.sweep(f.now(), since);
    const status = (id: string) => f.fleet.get(id)?.status;
    expect(["s-old", "s-new", "a1", "a2", "a3", "a4"].map(status)).toEqual([
      "offline",
      "offline",
      "online",
      "offline",
      "online",
      "online",
    ]);
    f.advance(8_000); // a3 silent 16 s
    await f.fleet.sweep(f.now(), since);
    expect(["a1", "a2", "a3", "a4"].map(status)).toEqual([
      "online",
      "offline",
      "offline",
      "online",
    ]);
  });

  it("holds an agent whose last heartbeat said idle to three idle periods, the others to three heartbeats", async () => {
    const f = fleet(); // heartbeatMs 5 s, idleHeartbeatMs 60 s (the defaults)
    const since = f.now();
    // Loaded from the store as at a start: whether it was idle is not stored.
    const base = { ...(await seed(f, "loaded")), status: "online" as const };
    await f.store.putAgent({ ...base, agentId: "loaded", lastSeenAt: f.now() });
    await f.fleet.load();
    for (const id of ["idle", "busy", "idle-then-busy", "idle-without-it"]) {
      await f.fleet.hello(hello(id, f.now()), f.now());
    }
    f.fleet.heartbeatInMemory("idle", { ...beat("idle", f.now(), 0), idle: true }, f.now());
    f.fleet.heartbeatInMemory("busy", beat("busy", f.now(), 0), f.now());
    f.fleet.heartbeatInMemory(
      "idle-then-busy",
      { ...beat("idle-then-busy", f.now(), 0), idle: true },
      f.now(),
    );
    f.advance(1_000);
    f.fleet.heartbeatInMemory("idle-then-busy", beat("idle-then-busy", f.now(), 0), f.now());
    const status = (id: string) => f.fleet.get(id)?.status;
    const ids = ["loaded", "idle", "busy", "idle-then-busy", "idle-without-it"];
    f.advance(15_500); // past three heartbeats (15 s) for all of them
    await f.fleet.sweep(f.now(), since);
    expect(ids.map(status)).toEqual(["online", "online", "offline", "offline", "offline"]);
    f.advance(180_000 - 16_500); // three idle periods (180 s) since "loaded" and "idle" were heard
    await f.fleet.sweep(f.now(), since);
    expect(ids.map(status)).toEqual(["online", "online", "offline", "offline", "offline"]);
    f.advance(1_000);
    await f.fleet.sweep(f.now(), since);
    expect(ids.map(status)).toEqual(["offline", "offline", "offline", "offline", "offline"]);
  });

  it("holds an agent to three heartbeats when it says idle but the coordinator offers no idle period", async () => {
    const f = fleet({ idleHeartbeatMs: 0 });
    const since = f.now();
    await f.fleet.hello(hello("a", f.now()), f.now());
    f.fleet.heartbeatInMemory("a", { ...beat("a", f.now(), 0), idle: true }, f.now());
    f.advance(15_500);
    await f.fleet.sweep(f.now(), since);
    expect(f.fleet.get("a")?.status).toBe("offline");
  });

  it("reads only the silent agents, and the first one that is not", async () => {
    const f = fleet();
    const since = f.now();
    for (let i = 0; i < 1_000; i++) await f.fleet.hello(hello(`a${i}`, f.now()), f.now());
    f.advance(10_000);
    for (let i = 0; i < 1_000; i++) {
      if (i !== 7) f.fleet.heartbeatInMemory(`a${i}`, beat(`a${i}`, f.now(), 0), f.now());
    }
    let reads = 0;
    for (let i = 0; i < 1_000; i++) {
      const a = f.fleet.get(`a${i}`) as { lastSeenAt: number };
      let value = a.lastSeenAt;
      Object.defineProperty(a, "lastSeenAt", {
        get: () => {
          reads++;
          return value;
        },
        set: (v: number) => {
          value = v;
        },
      });
    }
    f.advance(6_000); // a7 silent 16 s, the others 6 s
    await f.fleet.sweep(f.now(), since);
    expect(f.fleet.get("a7")?.status).toBe("offline");
    expect(f.fleet.get("a8")?.status).toBe("online");
    // a7's check and its write to the store, then a0's check; not the other 998.
    expect(reads).toBeLessThanOrEqual(10);
  });

  it("dispatch shared: counts a taken-up agent's silence from when it was taken, and no other's", async () => {
    const owned = new Set(["a1", "a2"]);
    // One limit for all (no idle period): an agent taken up is held to the idle one otherwise,
    // since whether it was idle is not stored.
    const f = fleet({ idleHeartbeatMs: 0 }, owned);
    const t0 = f.now();
    await f.fleet.hello(hello("a1", t0), t0);
    await f.fleet.hello(hello("a2", t0), t0);
    // a2 moves to another coordinator, then back: this one did not hear it in between.
    f.advance(10_000);
    owned.delete("a2");
    await f.fleet.reown();
    expect(f.fleet.takenUpAt("a2")).toBe(Number.NEGATIVE_INFINITY);
    f.advance(2_000);
    owned.add("a2");
    await f.fleet.reown();
    expect(f.fleet.takenUpAt("a2")).toBe(t0 + 12_000);
    expect(f.fleet.takenUpAt("a1")).toBe(Number.NEGATIVE_INFINITY);
    // 16 s after the last heartbeats (the limit is 3 × 5 s): a1, which stayed, is offline; a2
    // was taken up 4 s ago.
    f.advance(4_000);
    await f.fleet.sweep(f.now(), t0);
    expect(f.fleet.get("a1")?.status).toBe("offline");
    expect(f.fleet.get("a2")?.status).toBe("online");
    f.advance(12_000);
    await f.fleet.sweep(f.now(), t0);
    expect(f.fleet.get("a2")?.status).toBe("offline");
  });

  it("dispatch shared: never finds silent an agent of another coordinator's, though it read its hello", async () => {
    // The hello was read just before the share moved: the agent's heartbeats go to another
    // coordinator from then, and this one must not write it offline for their silence here.
    const owned = new Set<string>();
    const f = fleet({ idleHeartbeatMs: 0 }, owned);
    await f.fleet.hello(hello("a1", f.now()), f.now());
    f.advance(60_000);
    await f.fleet.sweep(f.now(), f.now() - 60_000);
    expect(f.fleet.get("a1")?.status).toBe("online");
    expect((await f.store.getAgent("a1"))?.status).toBe("online");
  });

  it("looks for silent agents a fifteenth of the silence limit apart, not every pass", async () => {
    const f = fleet();
    await f.fleet.hello(hello("a1", f.now()), f.now());
    const since = f.now();
    // The default heartbeat is 5 s: silence over 15 s takes an agent offline, and a sweep
    // looks at most once a second.
    f.advance(14_900);
    await f.fleet.sweep(f.now(), since);
    expect(f.fleet.get("a1")?.status).toBe("online");
    f.advance(200); // silent 15.1 s, but the last look was 200 ms ago
    await f.fleet.sweep(f.now(), since);
    expect(f.fleet.get("a1")?.status).toBe("online");
    f.advance(800);
    await f.fleet.sweep(f.now(), since);
    expect(f.fleet.get("a1")?.status).toBe("offline");
  });
});
