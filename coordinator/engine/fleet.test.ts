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

/** A fleet on a real store, on a clock the test moves. */
function fleet() {
  const tmp = tempDir();
  cleanups.push(tmp.cleanup);
  const store = new SqliteStore({ path: join(tmp.dir, "ax.sqlite") });
  cleanups.push(() => store.close());
  const config = parseCoordinatorConfig({
    store: { path: join(tmp.dir, "ax.sqlite") },
    mqtt: { url: "mqtt://127.0.0.1:1" },
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
  const ctx = { config, store, link, clock, log: () => {}, events: new EngineEventBus() };
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
