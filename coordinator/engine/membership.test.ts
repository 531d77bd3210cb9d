import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import type { Store } from "../store/port.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import { Membership, offsetClock } from "./membership.js";

/**
 * Membership on a real store (one SQLite file, a store object per coordinator, as each process
 * would open it) whose clock is the fake clock's wall time, so leases lapse when the test says.
 */
const stores: Store[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setUp() {
  const clock = new FakeClock();
  const dir = mkdtempSync(join(tmpdir(), "ax-membership-"));
  dirs.push(dir);
  const open = () => {
    const s = new SqliteStore({ path: join(dir, "ax.sqlite"), now: () => clock.wallNow() });
    stores.push(s);
    return s;
  };
  const logs: string[] = [];
  const member = (store: Store, id: string, leaseMs = 3_000) => {
    const m = new Membership(store, clock, { id, leaseMs, info: () => ({ id }) }, (_l, msg) =>
      logs.push(msg),
    );
    const events: string[] = [];
    m.onActive = () => events.push("active");
    m.onFenced = (reason) => events.push(`fenced: ${reason}`);
    return { m, events };
  };
  /** A member on a store of its own (as a process opens it), joined. */
  const joined = async (id: string) => {
    const j = member(open(), id);
    await j.m.join();
    return j;
  };
  return { clock, open, member, joined, logs };
}

/** Lets the promises a timer started settle (the store's calls are async). */
async function advance(clock: FakeClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 100) {
    clock.advance(100);
    for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
  }
}

describe("Membership", () => {
  it("the first member is active, a second stands by, and renews keep both", async () => {
    const { clock, joined } = setUp();
    const a = await joined("a");
    expect(a.m.role).toBe("active");
    expect(a.events).toEqual(["active"]);
    expect(a.m.epoch).toBe(1);
    const b = await joined("b");
    expect(b.m.role).toBe("standby");
    await advance(clock, 10_000);
    expect(a.m.role).toBe("active");
    expect(b.m.role).toBe("standby");
    expect(a.m.view().coordinators.map((c) => c.id)).toEqual(["a", "b"]);
    a.m.close();
    b.m.close();
  });

  it("a standby takes over once the active one's lease lapsed, not before", async () => {
    const { clock, joined } = setUp();
    const a = await joined("a");
    const b = await joined("b");
    expect(b.m.role).toBe("standby");
    // a's process dies: its renewals stop.
    a.m.close();
    const stoppedAt = clock.monoNow();
    let activeAt: number | undefined;
    b.m.onActive = () => {
      activeAt = clock.monoNow();
    };
    for (let i = 0; i < 60 && activeAt === undefined; i++) await advance(clock, 100);
    expect(activeAt).toBeDefined();
    // a's last renewal was at most 1 s before it stopped; its lease is 3 s; b renews every 1 s.
    expect((activeAt as number) - stoppedAt).toBeGreaterThanOrEqual(2_000);
    expect((activeAt as number) - stoppedAt).toBeLessThanOrEqual(4_200);
    expect(b.m.role).toBe("active");
    expect(b.m.view().coordinators.map((c) => c.id)).toEqual(["b"]);
    b.m.close();
  });

  it("lists only members whose lease holds by the store's clock, between renewals too", async () => {
    const { clock, joined } = setUp();
    const a = await joined("a");
    await advance(clock, 500);
    // b renews half a period after a, so a's lease lapses between two of b's renewals.
    const b = await joined("b");
    await advance(clock, 1_500);
    a.m.close(); // its renewals stop
    let listedA = false;
    const lapsedListed: number[] = [];
    for (let i = 0; i < 100; i++) {
      clock.advance(50);
      for (let k = 0; k < 5; k++) await new Promise<void>((r) => setImmediate(r));
      for (const c of b.m.view().coordinators) {
        if (c.id === "a") listedA = true;
        if (c.leaseUntil <= clock.wallNow()) lapsedListed.push(clock.wallNow() - c.leaseUntil);
      }
    }
    expect(listedA).toBe(true); // while its lease held
    expect(lapsedListed).toEqual([]);
    expect(b.m.view().coordinators.map((c) => c.id)).toEqual(["b"]);
    b.m.close();
  });

  it("fences itself when no renewal reaches the store, before its lease can lapse there", async () => {
    const { clock, open, member } = setUp();
    const store = open();
    const a = member(store, "a");
    await a.m.join();
    const b = member(open(), "b");
    await b.m.join();
    let bActiveAt: number | undefined;
    b.m.onActive = () => {
      bActiveAt = clock.monoNow();
    };
    // The store stops answering (a partition): every call hangs.
    const hang = new Promise<never>(() => {});
    const stuck = store as unknown as Record<string, unknown>;
    stuck.renewMembership = () => hang;
    stuck.listCoordinators = () => hang;
    stuck.clockNow = () => hang;
    let fencedAt: number | undefined;
    a.m.onFenced = () => {
      fencedAt = clock.monoNow();
    };
    for (let i = 0; i < 60 && bActiveAt === undefined; i++) await advance(clock, 100);
    expect(a.m.role).toBe("fenced");
    expect(fencedAt).toBeDefined();
    expect(bActiveAt).toBeDefined();
    // The cut-off one stopped before the other took over: never two active at once.
    expect(fencedAt as number).toBeLessThan(bActiveAt as number);
    b.m.close();
  });

  it("a second start under the same id fences the first", async () => {
    const { clock, open, member } = setUp();
    const first = member(open(), "a");
    await first.m.join();
    const again = member(open(), "a");
    await again.m.join();
    expect(again.m.epoch).toBe(2);
    await advance(clock, 1_200);
    expect(first.m.role).toBe("fenced");
    expect(first.events.at(-1)).toMatch(/^fenced: /);
    // The newer start is the active one: the older epoch is not among the live members.
    expect(again.m.view().coordinators.map((c) => [c.id, c.epoch])).toEqual([["a", 2]]);
    again.m.close();
  });

  it("a second start under the id of a standby fences the standby, which does not take the id back", async () => {
    const { clock, joined } = setUp();
    const active = await joined("a0");
    const first = await joined("b");
    expect(first.m.role).toBe("standby");
    const again = await joined("b");
    expect(again.m.epoch).toBe(2);
    await advance(clock, 5_000);
    expect(first.m.role).toBe("fenced");
    expect(first.events.at(-1)).toBe("fenced: another start of the same id joined (epoch 2)");
    // The newer start keeps its epoch: the two do not take the id from each other.
    expect(again.m.role).toBe("standby");
    expect(again.m.epoch).toBe(2);
    expect(again.events).toEqual([]);
    expect(active.m.view().coordinators.map((c) => [c.id, c.epoch])).toEqual([
      ["a0", 1],
      ["b", 2],
    ]);
    active.m.close();
    again.m.close();
  });

  it("a standby the store lost for longer than its lease joins again instead of stopping", async () => {
    const { clock, open, member, joined } = setUp();
    const a = await joined("a");
    const bStore = open();
    const b = member(bStore, "b");
    await b.m.join();
    const stuck = bStore as unknown as Record<string, unknown>;
    const real = {
      renew: stuck.renewMembership,
      list: stuck.listCoordinators,
      now: stuck.clockNow,
    };
    const hang = new Promise<never>(() => {});
    stuck.renewMembership = () => hang;
    stuck.listCoordinators = () => hang;
    stuck.clockNow = () => hang;
    await advance(clock, 5_000);
    expect(b.m.role).toBe("standby");
    // The store is back: b's next renewal finds its lease lapsed, and b joins as epoch 2.
    stuck.renewMembership = real.renew;
    stuck.listCoordinators = real.list;
    stuck.clockNow = real.now;
    await advance(clock, 2_000);
    expect(b.m.role).toBe("standby");
    expect(b.m.epoch).toBe(2);
    expect(b.events.some((e) => e.startsWith("fenced"))).toBe(false);
    expect(a.m.role).toBe("active");
    a.m.close();
    b.m.close();
  });

  it("firing shared: each job has one owner among the live members, a lost member's jobs move and only they, and a restart under the same id gets the same share back", async () => {
    const { clock, open } = setUp();
    const changes: string[] = [];
    const shared = (id: string) => {
      const m = new Membership(
        open(),
        clock,
        { id, leaseMs: 3_000, firing: "shared", info: () => ({}) },
        () => {},
      );
      m.onMembersChanged = () => changes.push(id);
      return m;
    };
    const a = shared("a");
    const b = shared("b");
    const c = shared("c");
    for (const m of [a, b, c]) await m.join();
    await advance(clock, 1_100);
    expect(a.view().firing).toBe("shared");
    const jobs = Array.from({ length: 3_000 }, (_, i) => `job-${i}`);
    const ownerOf = (ms: Membership[]) =>
      new Map(
        jobs.map((j) => {
          const owners = ms.filter((m) => m.firesJob(j)).map((m) => m.view().id);
          expect(owners, j).toHaveLength(1);
          return [j, owners[0] as string];
        }),
      );
    const before = ownerOf([a, b, c]);
    for (const id of ["a", "b", "c"]) {
      const n = [...before.values()].filter((o) => o === id).length;
      expect(n).toBeGreaterThan(800);
      expect(n).toBeLessThan(1_200);
    }
    // c dies: once its lease lapsed and a and b read the members, they own every job, and the
    // jobs that were theirs stay theirs.
    c.close();
    changes.length = 0;
    await advance(clock, 5_000);
    expect(changes.sort()).toEqual(["a", "b"]);
    const without = ownerOf([a, b]);
    for (const [j, o] of before) if (o !== "c") expect(without.get(j)).toBe(o);
    // c starts again (a new epoch, the same id): the same share as before.
    const c2 = shared("c");
    await c2.join();
    expect(c2.epoch).toBe(2);
    await advance(clock, 1_100);
    expect(ownerOf([a, b, c2])).toEqual(before);
    for (const m of [a, b, c2]) m.close();
  });

  /** Members on one store whose log lines (`level message`) go to `logs`. */
  function loggedMembers() {
    const { clock, open } = setUp();
    const logs: string[] = [];
    const make = (
      id: string,
      more: { firing?: "active" | "shared"; info: Record<string, unknown> },
    ) =>
      new Membership(
        open(),
        clock,
        {
          id,
          leaseMs: 3_000,
          ...(more.firing ? { firing: more.firing } : {}),
          info: () => more.info,
        },
        (level, msg) => logs.push(`${level} ${msg}`),
      );
    return { clock, logs, make };
  }

  it("warns once of a member whose cluster.firing differs", async () => {
    const { clock, logs, make } = loggedMembers();
    const a = make("a", { firing: "shared", info: { firing: "shared" } });
    const b = make("b", { firing: "active", info: { firing: "active" } });
    await a.join();
    await b.join();
    await advance(clock, 3_000);
    const warned = logs.filter((l) => l.includes("cluster.firing"));
    expect(warned.sort()).toEqual([
      'warn coordinator a has cluster.firing "shared", this one (b) "active": give every coordinator the same value',
      'warn coordinator b has cluster.firing "active", this one (a) "shared": give every coordinator the same value',
    ]);
    a.close();
    b.close();
  });

  it("warns once, as an error, of a member under this one's MQTT client id", async () => {
    const { clock, logs, make } = loggedMembers();
    const a = make("a", { info: { mqttClientId: "ax-c-same" } });
    const b = make("b", { info: { mqttClientId: "ax-c-same" } });
    const c = make("c", { info: { mqttClientId: "ax-c-own" } });
    await a.join();
    await b.join();
    await c.join();
    await advance(clock, 3_000);
    const warned = logs.filter((l) => l.includes("MQTT client id"));
    expect(warned.sort()).toEqual([
      "error coordinator a connects to the broker under this one's (b) MQTT client id \"ax-c-same\": give each coordinator its own mqtt.clientId, or each will end the other's connection",
      "error coordinator b connects to the broker under this one's (a) MQTT client id \"ax-c-same\": give each coordinator its own mqtt.clientId, or each will end the other's connection",
    ]);
    for (const m of [a, b, c]) m.close();
  });

  it("dispatch shared: every member is active at once, each key has one owner, the same as the job's firing, and only the oldest leads", async () => {
    const { clock, open } = setUp();
    const made: { m: Membership; events: string[] }[] = [];
    const shared = (id: string) => {
      const events: string[] = [];
      const m = new Membership(
        open(),
        clock,
        { id, leaseMs: 3_000, firing: "shared", dispatch: "shared", info: () => ({}) },
        () => {},
      );
      m.onActive = () => events.push("active");
      made.push({ m, events });
      return { m, events };
    };
    const a = shared("a");
    const b = shared("b");
    const c = shared("c");
    for (const x of [a, b, c]) await x.m.join();
    // No standby: each is active from its join, for its share.
    for (const x of [a, b, c]) {
      expect(x.m.role).toBe("active");
      expect(x.events).toEqual(["active"]);
    }
    await advance(clock, 1_100);
    expect(a.m.view().dispatch).toBe("shared");
    const keys = Array.from({ length: 3_000 }, (_, i) => `agent-${i}`);
    const counts: Record<string, number> = { a: 0, b: 0, c: 0 };
    for (const k of keys) {
      const owners = [a, b, c].filter((x) => x.m.owns(k)).map((x) => x.m.view().id);
      expect(owners, k).toHaveLength(1);
      counts[owners[0] as string] = (counts[owners[0] as string] ?? 0) + 1;
      // A job's dispatcher is the coordinator that fires it.
      for (const x of [a, b, c]) expect(x.m.owns(k)).toBe(x.m.firesJob(k));
    }
    for (const n of Object.values(counts)) expect(n).toBeGreaterThan(800);
    expect([a, b, c].map((x) => x.m.leads())).toEqual([true, false, false]);
    // The oldest is lost: once its lease lapsed, the next oldest leads, and a's keys moved.
    a.m.close();
    await advance(clock, 5_000);
    expect([b, c].map((x) => x.m.leads())).toEqual([true, false]);
    for (const k of keys) expect([b, c].filter((x) => x.m.owns(k))).toHaveLength(1);
    // Fenced, a member owns nothing.
    b.m.fence("test");
    expect(keys.some((k) => b.m.owns(k))).toBe(false);
    expect(b.m.leads()).toBe(false);
    for (const x of made) x.m.close();
  });

  it("firing and dispatch active: only the active member fires, owns every key and leads", async () => {
    const { joined } = setUp();
    const a = await joined("a");
    const b = await joined("b");
    expect(a.m.view()).toMatchObject({ firing: "active", dispatch: "active" });
    for (const j of ["x", "y", "z"]) {
      expect([a.m.firesJob(j), a.m.owns(j)]).toEqual([true, true]);
      expect([b.m.firesJob(j), b.m.owns(j)]).toEqual([false, false]);
    }
    expect([a.m.leads(), b.m.leads()]).toEqual([true, false]);
    a.m.fence("test");
    expect([a.m.firesJob("x"), a.m.owns("x"), a.m.leads()]).toEqual([false, false, false]);
    b.m.close();
  });

  it("offsetClock reads the store's time", () => {
    const clock = new FakeClock({ wall: 1_000_000 });
    let offset = 250;
    const c = offsetClock(clock, () => offset);
    expect(c.wallNow()).toBe(clock.wallNow() + 250);
    offset = -40;
    expect(c.wallNow()).toBe(clock.wallNow() - 40);
    expect(c.monoNow()).toBe(clock.monoNow());
  });
});
