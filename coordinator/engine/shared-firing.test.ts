import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import { jobDef } from "../../test/contract/store.contract.js";
import { engineContext } from "../../test/helpers/engine.js";
import { parseCoordinatorConfig } from "../config.js";
import type { Store } from "../store/port.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import { FiringLoop } from "./firing.js";
import { type Firing, Membership } from "./membership.js";

/**
 * Firing shared among coordinators (`cluster.firing: "shared"`), on a real store: one SQLite
 * file with a store object per coordinator, as each process would open it, each with its own
 * membership and firing loop, on a fake clock. Every nominal time must be recorded exactly once,
 * by the member its job hashes to, and a member that stops has its share taken by the others.
 */
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function advance(clock: FakeClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 100) {
    clock.advance(100);
    for (let i = 0; i < 10; i++) await new Promise<void>((r) => setImmediate(r));
  }
}

function setUp(firing: Firing) {
  const clock = new FakeClock();
  const dir = mkdtempSync(join(tmpdir(), "ax-shared-firing-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "ax.sqlite");
  const config = parseCoordinatorConfig({ mqtt: { url: "mqtt://127.0.0.1:1" } });
  const member = async (id: string) => {
    const store: Store = new SqliteStore({ path, now: () => clock.wallNow() });
    const membership = new Membership(
      store,
      clock,
      { id, leaseMs: 3_000, firing, info: () => ({}) },
      () => {},
    );
    const ctx = engineContext({ store, clock, config, coordinatorId: id });
    const loop = new FiringLoop(ctx);
    loop.owns = (jobId) => membership.firesJob(jobId);
    membership.onMembersChanged = () => void loop.rescan();
    await membership.join();
    loop.start();
    let closed = false;
    const stop = async () => {
      if (closed) return;
      closed = true;
      loop.close();
      membership.close();
      await store.close();
    };
    cleanups.push(stop);
    return { id, store, membership, loop, stop };
  };
  /** Each fire row's job, time and the coordinator its execution's first entry names. */
  const fires = () => {
    const db = new Database(path, { readonly: true });
    try {
      return db
        .prepare(
          `SELECT f.job_id AS jobId, f.scheduled_for AS at, json_extract(t.detail, '$.coordinator') AS by
             FROM fires f JOIN timeline t ON t.execution_id = f.execution_id AND t.seq = 1`,
        )
        .all() as { jobId: string; at: number; by: string | null }[];
    } finally {
      db.close();
    }
  };
  return { clock, member, fires };
}

const JOBS = 30;

describe("firing shared among coordinators", () => {
  it("each member fires the jobs that hash to it, every nominal time once; a member lost, the others fire its share", async () => {
    const { clock, member, fires } = setUp("shared");
    const a = await member("a");
    const b = await member("b");
    const c = await member("c");
    // Jobs created once every member is in (b and c saw the members at their join; a at its
    // next renewal, a second later).
    await advance(clock, 1_100);
    const start = clock.wallNow();
    for (let i = 0; i < JOBS; i++) {
      await a.store.putJob(jobDef(`job-${i}`), Math.ceil((start + 2_000) / 1_000) * 1_000, start);
    }
    for (const m of [a, b, c]) await m.loop.rescan();
    // Each job is one member's, and all three have some.
    const owners = new Map<string, string[]>();
    for (let i = 0; i < JOBS; i++) {
      owners.set(
        `job-${i}`,
        [a, b, c].filter((m) => m.membership.firesJob(`job-${i}`)).map((m) => m.id),
      );
    }
    for (const [, o] of owners) expect(o).toHaveLength(1);
    const shares = new Set([...owners.values()].map((o) => o[0]));
    expect(shares).toEqual(new Set(["a", "b", "c"]));

    await advance(clock, 5_000);
    const before = fires();
    // Every job fired each second, once per nominal time, by the member it hashes to.
    const seen = new Set<string>();
    for (const f of before) {
      const key = `${f.jobId}@${f.at}`;
      expect(seen.has(key)).toBe(false);
      seen.add(key);
      expect(f.by).toBe(owners.get(f.jobId)?.[0]);
    }
    for (let i = 0; i < JOBS; i++) {
      expect(before.filter((f) => f.jobId === `job-${i}`).length).toBeGreaterThanOrEqual(3);
    }

    // b stops renewing (its process died): once its lease lapses, a and c fire its share.
    await b.stop();
    const lostAt = clock.wallNow();
    await advance(clock, 8_000);
    const after = fires().filter((f) => f.at > lostAt + 5_000);
    const bJobs = [...owners].filter(([, o]) => o[0] === "b").map(([j]) => j);
    expect(bJobs.length).toBeGreaterThan(0);
    for (const j of bJobs) {
      const late = after.filter((f) => f.jobId === j);
      expect(late.length).toBeGreaterThanOrEqual(2);
      for (const f of late) expect(["a", "c"]).toContain(f.by);
    }
    // Still once per nominal time, across the handover.
    const all = fires();
    expect(new Set(all.map((f) => `${f.jobId}@${f.at}`)).size).toBe(all.length);
    // And no nominal time of the whole run was skipped: each job's times are consecutive.
    for (let i = 0; i < JOBS; i++) {
      const times = all
        .filter((f) => f.jobId === `job-${i}`)
        .map((f) => f.at)
        .sort((x, y) => x - y);
      for (let k = 1; k < times.length; k++) {
        expect((times[k] as number) - (times[k - 1] as number)).toBe(1_000);
      }
    }
  });

  it("with firing `active`, a standby's rescan (a job changed through its API) fires nothing", async () => {
    const { clock, member, fires } = setUp("active");
    const a = await member("a");
    const b = await member("b");
    // a is the active member, but its loop does not run here: any fire would be b's.
    a.loop.close();
    const start = clock.wallNow();
    for (let i = 0; i < 10; i++) {
      await b.store.putJob(jobDef(`job-${i}`), Math.ceil((start + 2_000) / 1_000) * 1_000, start);
    }
    await b.loop.rescan();
    await advance(clock, 4_000);
    expect(fires()).toEqual([]);
  });

  it("with firing `active`, only the active member fires", async () => {
    const { clock, member, fires } = setUp("active");
    const a = await member("a");
    const b = await member("b");
    const start = clock.wallNow();
    for (let i = 0; i < 10; i++) {
      await a.store.putJob(jobDef(`job-${i}`), Math.ceil((start + 2_000) / 1_000) * 1_000, start);
    }
    await a.loop.rescan();
    await b.loop.rescan();
    expect(b.membership.firesJob("job-1")).toBe(false);
    await advance(clock, 4_000);
    const all = fires();
    expect(all.length).toBeGreaterThanOrEqual(20);
    for (const f of all) expect(f.by).toBe("a");
  });
});
