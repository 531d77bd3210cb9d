import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import { envelope } from "../../shared/message.js";
import type { Hello } from "../../shared/protocol/index.js";
import { engineContext, newCommand } from "../../test/helpers/engine.js";
import { helloBody } from "../../test/helpers/env.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import { ExecutionLoop } from "./execution-loop.js";
import { Fleet } from "./fleet.js";
import { Leases } from "./leases.js";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("ExecutionLoop dispatch", () => {
  it("records a dispatch's time as when it was written, not when its pass began", async () => {
    const clock = new FakeClock({ wall: 1_900_000_000_000 });
    const store = new SqliteStore({ path: ":memory:", now: () => clock.wallNow() });
    cleanups.push(() => store.close());
    // Its link is never started: the dispatch's send, after its write, goes nowhere.
    const ctx = engineContext({ store, clock });
    const fleet = new Fleet(ctx);
    await fleet.hello(envelope(helloBody("a1"), clock.wallNow()) as Hello, clock.wallNow());
    const created = clock.wallNow();
    await store.createExecution(newCommand("ex-1", created), created);
    // The pass's read of due work takes 40 ms, as a busy store's can.
    const listDue = store.listDue.bind(store);
    store.listDue = async (...args) => {
      const due = await listDue(...args);
      clock.advance(40);
      return due;
    };
    const loop = new ExecutionLoop(ctx, fleet, new Leases(15_000, 10_000));
    cleanups.push(() => loop.close());
    loop.start();
    clock.advance(0);
    for (let i = 0; i < 50 && (await store.getExecution("ex-1"))?.state !== "DISPATCHED"; i++) {
      await new Promise((r) => setImmediate(r));
    }
    const e = await store.getExecution("ex-1");
    expect(e?.state).toBe("DISPATCHED");
    const entry = (await store.getTimeline("ex-1")).find((t) => t.toState === "DISPATCHED");
    expect(e?.dispatchedAt).toBe(created + 40);
    expect(entry?.at).toBe(e?.dispatchedAt);
  });
});
