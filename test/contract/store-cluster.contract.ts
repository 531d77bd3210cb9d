import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ExecutionRecord, Store } from "../../coordinator/store/port.js";
import { jobDef, newExecution, type StoreFixture } from "./store.contract.js";

/** What an adapter's test file hands the cluster suite: {@link StoreFixture}, and maybe a clock. */
export interface StoreClusterFixture extends StoreFixture {
  /**
   * Moves the clock of every store of this fixture (their {@link Store.clockNow}) forward by
   * `ms`, where the adapter's clock can be set (SQLite: its `now` option). Without it, the tests
   * that need a lease or a claim to run out wait for real, a few hundred ms at most.
   */
  advanceClock?(ms: number): void;
}

/**
 * A lease or claim the tests let run out: long enough for the few calls a test makes inside it on
 * a loaded machine, where the clock cannot be moved and the tests wait for real.
 */
const SHORT_MS = 250;
/** How long the tests wait (or move the clock) for a {@link SHORT_MS} lease or claim to lapse. */
const PAST_SHORT_MS = 300;
/** A lease that no test outlives. */
const LONG_MS = 60_000;

/**
 * The contract of the port's methods for several coordinators sharing one store — membership
 * with epochs and fencing, claims on due work, version-checked job writes, the store's clock —
 * run against every adapter, from the port's documented semantics alone. Each test gets a fresh,
 * empty database from `makeStore`; tests that need a second store on it (`openAnother`) are
 * skipped when the adapter cannot open one.
 */
export function storeClusterContract(
  name: string,
  makeStore: () => Promise<StoreClusterFixture>,
): void {
  describe(`Store cluster contract: ${name}`, () => {
    let fx: StoreClusterFixture;
    let store: Store;

    beforeEach(async () => {
      fx = await makeStore();
      store = fx.store;
    });
    afterEach(async () => {
      await fx.cleanup();
    });

    /** Lets `ms` pass by the store's clock: moved where the fixture can, else waited for. */
    async function elapse(ms: number): Promise<void> {
      if (fx.advanceClock) fx.advanceClock(ms);
      else await sleep(ms);
    }

    /** A second store on the same database; `openAnother` exists where this is called. */
    const another = (): Promise<Store> => {
      if (!fx.openAnother) throw new Error(`${name} cannot open a second store`);
      return fx.openAnother();
    };

    /** What a write rejects with when the store is fenced. */
    const fenced = { code: "AX_STORE_FENCED", retryable: true };

    describe("the store's clock", () => {
      it("clockNow is close to the process's clock and does not go backwards", async () => {
        const first = await store.clockNow();
        const second = await store.clockNow();
        expect(typeof first).toBe("number");
        expect(Math.abs(first - Date.now())).toBeLessThan(5_000);
        expect(second).toBeGreaterThanOrEqual(first);
      });
    });

    describe("membership", () => {
      it("a join gives epoch 1, a rejoin of the same id epoch 2, another id its own epoch 1", async () => {
        const before = await store.clockNow();
        const first = await store.joinCoordinators("c1", LONG_MS, { host: "h1" });
        expect(first).toMatchObject({ id: "c1", epoch: 1, info: { host: "h1" } });
        expect(first.joinedAt).toBeGreaterThanOrEqual(before);
        expect(first.renewedAt).toBe(first.joinedAt);
        expect(first.leaseUntil).toBe(first.joinedAt + LONG_MS);
        expect((await store.joinCoordinators("c1", LONG_MS)).epoch).toBe(2);
        expect((await store.joinCoordinators("c2", LONG_MS)).epoch).toBe(1);
        expect((await store.joinCoordinators("c1", LONG_MS)).epoch).toBe(3);
      });

      it("listCoordinators shows the live members with their info, oldest joined first, and not lapsed or left ones", async (ctx) => {
        if (!fx.openAnother) return ctx.skip();
        const [a, b, c] = [await another(), await another(), await another()];
        await b.joinCoordinators("b", LONG_MS, { host: "hb" });
        await elapse(10);
        await a.joinCoordinators("a", LONG_MS, { host: "ha", holds: [1, 2] });
        await c.joinCoordinators("c", SHORT_MS, { host: "hc" });
        await store.joinCoordinators("s", LONG_MS);
        expect((await store.listCoordinators()).map((m) => m.id)).toEqual(["b", "a", "c", "s"]);
        const listed = await store.listCoordinators();
        expect(listed[1]).toMatchObject({ id: "a", epoch: 1, info: { host: "ha", holds: [1, 2] } });

        await elapse(PAST_SHORT_MS);
        await a.leaveCoordinators();
        expect((await store.listCoordinators()).map((m) => m.id)).toEqual(["b", "s"]);
        expect((await c.listCoordinators()).map((m) => m.id)).toEqual(["b", "s"]);
      });

      it("renewMembership extends the lease and replaces the info", async () => {
        // Renewed after 300 ms of a 500 ms lease, then looked at 300 ms later: past the first
        // lease, inside the renewed one.
        const joined = await store.joinCoordinators("c1", 2 * SHORT_MS, { v: 1 });
        await elapse(PAST_SHORT_MS);
        expect(await store.renewMembership({ v: 2 })).toBe(true);
        const [renewed] = await store.listCoordinators();
        expect(renewed?.leaseUntil).toBeGreaterThan(joined.leaseUntil);
        expect(renewed?.renewedAt).toBeGreaterThan(joined.renewedAt);
        expect(renewed).toMatchObject({ id: "c1", epoch: 1, info: { v: 2 } });
        await elapse(PAST_SHORT_MS);
        expect((await store.listCoordinators()).map((m) => m.id)).toEqual(["c1"]);
        await store.putJob(jobDef("job-a"), null, 10);
        expect((await store.getJob("job-a"))?.version).toBe(1);
        // Renewing without info keeps it.
        expect(await store.renewMembership()).toBe(true);
        expect((await store.listCoordinators())[0]?.info).toEqual({ v: 2 });
      });

      it("a lapsed lease fences: renew is false and every write rejects with AX_STORE_FENCED, writing nothing", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        await store.createExecution(newExecution("ex-1"), 10);
        const e = (await store.getExecution("ex-1")) as ExecutionRecord;
        await store.joinCoordinators("c1", SHORT_MS);
        await elapse(PAST_SHORT_MS);

        await expect(store.putJob(jobDef("job-b"), 1_000, 20)).rejects.toMatchObject(fenced);
        expect(await store.renewMembership()).toBe(false);
        await expect(store.createExecution(newExecution("ex-2"), 20)).rejects.toMatchObject(fenced);
        await expect(
          store.applyTransition({
            executionId: "ex-1",
            expected: { state: e.state, round: e.round },
            next: {
              state: "DISPATCHED",
              round: 1,
              attempt: 1,
              maxAttempts: e.maxAttempts,
              dispatches: 1,
              maxDispatches: e.maxDispatches,
            },
            patch: { agentId: "agent-1", dispatchedAt: 20 },
            at: 20,
            event: "dispatch",
          }),
        ).rejects.toMatchObject(fenced);
        await expect(store.bumpCounter("n")).rejects.toMatchObject(fenced);
        await store.flush();

        // Nothing of the refused writes is there, for this store or another.
        const readers = fx.openAnother ? [store, await another()] : [store];
        for (const s of readers) {
          expect(await s.getJob("job-b")).toBeUndefined();
          expect(await s.getExecution("ex-2")).toBeUndefined();
          expect((await s.getExecution("ex-1"))?.state).toBe("PENDING");
          expect((await s.getTimeline("ex-1")).map((t) => t.event)).toEqual(["created"]);
          expect(await s.counters()).toEqual({});
          expect(await s.listCoordinators()).toEqual([]);
        }
        // Fenced for good: renewing again changes nothing.
        expect(await store.renewMembership()).toBe(false);
        await expect(store.putJob(jobDef("job-b"), 1_000, 30)).rejects.toMatchObject(fenced);
      });

      it("a fenced store joins again with a new epoch and writes again", async () => {
        await store.joinCoordinators("c1", SHORT_MS);
        await elapse(PAST_SHORT_MS);
        await expect(store.putJob(jobDef("job-a"), 1_000, 10)).rejects.toMatchObject(fenced);
        expect((await store.joinCoordinators("c1", LONG_MS)).epoch).toBe(2);
        await store.putJob(jobDef("job-a"), 1_000, 20);
        expect((await store.getJob("job-a"))?.version).toBe(1);
        expect(await store.renewMembership()).toBe(true);
      });

      it("a newer epoch of the same id, joined through another store, fences the older one", async (ctx) => {
        if (!fx.openAnother) return ctx.skip();
        await store.joinCoordinators("c1", LONG_MS, { life: 1 });
        await store.putJob(jobDef("job-a"), 1_000, 10);
        const other = await another();
        expect((await other.joinCoordinators("c1", LONG_MS, { life: 2 })).epoch).toBe(2);

        await expect(store.putJob(jobDef("job-b"), 1_000, 20)).rejects.toMatchObject(fenced);
        await expect(store.createExecution(newExecution("ex-1"), 20)).rejects.toMatchObject(fenced);
        expect(await store.renewMembership()).toBe(false);
        expect(await other.getJob("job-b")).toBeUndefined();
        expect(await other.getExecution("ex-1")).toBeUndefined();

        // The newer life writes, and is the only c1 listed.
        await other.putJob(jobDef("job-b"), 1_000, 30);
        expect((await store.getJob("job-b"))?.version).toBe(1);
        const members = await store.listCoordinators();
        expect(members).toHaveLength(1);
        expect(members[0]).toMatchObject({ id: "c1", epoch: 2, info: { life: 2 } });
        // The older life leaving does not end the newer one's lease.
        await store.leaveCoordinators();
        expect((await other.listCoordinators()).map((m) => m.epoch)).toEqual([2]);
        expect(await other.renewMembership()).toBe(true);
      });

      it("writes before any join are not fenced, whoever else joins or lapses", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        await store.createExecution(newExecution("ex-1"), 10);
        if (fx.openAnother) {
          const other = await another();
          await other.joinCoordinators("c1", SHORT_MS);
          await elapse(PAST_SHORT_MS);
          await expect(other.putJob(jobDef("job-x"), 1_000, 15)).rejects.toMatchObject(fenced);
        } else {
          await elapse(PAST_SHORT_MS);
        }
        await store.putJob(jobDef("job-b"), 1_000, 20);
        await store.createExecution(newExecution("ex-2"), 20);
        await store.bumpCounter("n");
        await store.flush();
        expect((await store.listJobs()).map((j) => j.id)).toEqual(["job-a", "job-b"]);
        expect(await store.getExecution("ex-2")).toBeDefined();
        expect(await store.counters()).toEqual({ n: 1 });
        // Renewing what was never joined cannot succeed; leaving it is harmless.
        expect(await store.renewMembership()).toBe(false);
        await store.leaveCoordinators();
        await store.putJob(jobDef("job-c"), 1_000, 30);
        expect(await store.getJob("job-c")).toBeDefined();
      });

      it("after leaving, the member is not listed and its writes are fenced", async () => {
        await store.joinCoordinators("c1", LONG_MS);
        await store.leaveCoordinators();
        expect(await store.listCoordinators()).toEqual([]);
        expect(await store.renewMembership()).toBe(false);
        await expect(store.putJob(jobDef("job-a"), 1_000, 10)).rejects.toMatchObject(fenced);
        expect(await store.getJob("job-a")).toBeUndefined();
      });
    });

    describe("claims on due work", () => {
      /** Creates PENDING executions ex-1 … ex-n, all due. */
      async function pending(n: number): Promise<void> {
        for (let i = 1; i <= n; i++) {
          await store.createExecution(newExecution(`ex-${i}`, { fireAt: 1_000 + i }), 10);
        }
        await store.flush();
      }

      /** The ids of the PENDING work `s` lists for `holder`, claiming it for `ttlMs`. */
      async function claim(s: Store, holder: string, limit: number, ttlMs = LONG_MS) {
        const now = await s.clockNow();
        const due = await s.listDue(now, now, limit, { claim: { holder, ttlMs } });
        return due.pending.map((e) => e.id).sort();
      }

      it("two holders get disjoint rows, each its own again, and the other's once its claim expired", async (ctx) => {
        if (!fx.openAnother) return ctx.skip();
        await pending(4);
        const other = await another();
        await store.joinCoordinators("A", LONG_MS);
        await other.joinCoordinators("B", LONG_MS);

        const a = await claim(store, "A", 2, SHORT_MS);
        expect(a).toHaveLength(2);
        const b = await claim(other, "B", 10);
        expect(b).toHaveLength(2);
        expect(a.filter((id) => b.includes(id))).toEqual([]);
        expect([...a, ...b].sort()).toEqual(["ex-1", "ex-2", "ex-3", "ex-4"]);

        // Each holder is handed its own rows again, never the other's (B's claim holds).
        expect(await claim(store, "A", 10, SHORT_MS)).toEqual(a);
        expect(await claim(other, "B", 10)).toEqual(b);

        // A's claim runs out: B is handed A's rows too, and now claims them itself.
        await elapse(PAST_SHORT_MS);
        expect(await claim(other, "B", 10)).toEqual(["ex-1", "ex-2", "ex-3", "ex-4"]);
        expect(await claim(store, "A", 10)).toEqual([]);
      });

      it("listDue without a claim passes over nothing and claims nothing", async () => {
        await pending(3);
        await store.joinCoordinators("A", LONG_MS);
        const a = await claim(store, "A", 2);
        expect(a).toHaveLength(2);
        const now = await store.clockNow();
        const plain = await store.listDue(now, now, 10);
        expect(plain.pending.map((e) => e.id).sort()).toEqual(["ex-1", "ex-2", "ex-3"]);
        // The row A left is still there for another holder; A's two are not.
        const rest = ["ex-1", "ex-2", "ex-3"].filter((id) => !a.includes(id));
        expect(await claim(store, "B", 10)).toEqual(rest);
      });
    });

    describe("version-checked job writes", () => {
      it("putJob with the stored version writes the next one", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        const v2 = await store.putJob(jobDef("job-a", { priority: 2 }), 1_000, 20, {
          actor: "op",
          expectedVersion: 1,
        });
        expect(v2.version).toBe(2);
        expect((await store.getJob("job-a"))?.definition.priority).toBe(2);
      });

      it("putJob with another version writes nothing and rejects with AX_STORE_CONFLICT", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        await store.putJob(jobDef("job-a", { priority: 2 }), 1_000, 20);
        const history = await store.listJobHistory("job-a");
        const stale = store.putJob(jobDef("job-a", { priority: 7 }), 5_000, 30, {
          actor: "op",
          expectedVersion: 1,
        });
        await expect(stale).rejects.toMatchObject({
          code: "AX_STORE_CONFLICT",
          context: { jobId: "job-a", expected: 1, actual: 2 },
        });
        const message = await stale.catch((err: Error) => err.message);
        expect(message).toContain("job-a");
        expect(message).toMatch(/\b1\b/);
        expect(message).toMatch(/\b2\b/);
        const job = await store.getJob("job-a");
        expect(job).toMatchObject({ version: 2, nextFireAt: 1_000 });
        expect(job?.definition.priority).toBe(2);
        expect(await store.listJobHistory("job-a")).toEqual(history);
        expect(await store.getJobVersion("job-a", 3)).toBeUndefined();
      });

      it("expectedVersion 0: a conflict for an existing job, a creation for a new one", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        await expect(
          store.putJob(jobDef("job-a", { priority: 4 }), 1_000, 20, {
            actor: "op",
            expectedVersion: 0,
          }),
        ).rejects.toMatchObject({
          code: "AX_STORE_CONFLICT",
          context: { jobId: "job-a", expected: 0, actual: 1 },
        });
        expect((await store.getJob("job-a"))?.version).toBe(1);

        const created = await store.putJob(jobDef("job-b"), 2_000, 30, {
          actor: "op",
          expectedVersion: 0,
        });
        expect(created).toMatchObject({ id: "job-b", version: 1, nextFireAt: 2_000 });
        // A version expected of a job that does not exist is a conflict too.
        await expect(
          store.putJob(jobDef("job-c"), 1_000, 40, { actor: "op", expectedVersion: 3 }),
        ).rejects.toMatchObject({
          code: "AX_STORE_CONFLICT",
          context: { jobId: "job-c", expected: 3, actual: 0 },
        });
        expect(await store.getJob("job-c")).toBeUndefined();
      });
    });

    describe("watching others' work", () => {
      it("watchWork returns a stop function that can be called", async () => {
        const seen: string[] = [];
        const stop = store.watchWork((what) => seen.push(what));
        expect(typeof stop).toBe("function");
        await store.putJob(jobDef("job-a"), 1_000, 10);
        expect(() => stop()).not.toThrow();
        // Stopped: nothing more is delivered, and the store works on.
        const count = seen.length;
        await store.createExecution(newExecution("ex-1"), 20);
        await sleep(20);
        expect(seen.length).toBe(count);
        expect(await store.getExecution("ex-1")).toBeDefined();
      });
    });
  });
}
