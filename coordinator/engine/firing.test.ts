import { describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import { jobDef } from "../../test/contract/store.contract.js";
import { parseCoordinatorConfig } from "../config.js";
import { CoordinatorLink } from "../link/mqtt-link.js";
import type { Store, StoredJob } from "../store/port.js";
import type { EngineContext } from "./context.js";
import { EngineEventBus } from "./events.js";
import { FIRE_GRID_MS, FiringLoop, MAX_FIRES_IN_FLIGHT } from "./firing.js";

/** A store answering only the firing scan's two reads, with `listDueFires` as given. */
function scanStore(listDueFires: Store["listDueFires"]): Store {
  return { listDueFires, listLeadFires: async () => [] } as unknown as Store;
}

function context(store: Store, clock: FakeClock, storeUrl?: string): EngineContext {
  const config = parseCoordinatorConfig({
    mqtt: { url: "mqtt://127.0.0.1:1" },
    ...(storeUrl === undefined ? {} : { store: { url: storeUrl } }),
  });
  // The loop never talks to agents here; the link is built but never started.
  const link = new CoordinatorLink(
    { url: config.mqtt.url, clientId: `ax-c-${Math.random().toString(36).slice(2)}` },
    () => clock.wallNow(),
  );
  return { config, store, link, clock, log: () => {}, events: new EngineEventBus() };
}

/** A job as the store returns it, due at `at`. */
function storedJob(id: string, at: number): StoredJob {
  return {
    id,
    version: 1,
    definition: jobDef(id),
    nextFireAt: at,
    paused: false,
    createdAt: 0,
    updatedAt: 0,
  } as StoredJob;
}

/** Lets the promises the loop chained settle (the stores here answer without I/O). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

describe("FiringLoop scans", () => {
  it("a failed scan tells its caller alone: the next scan runs, and nothing is left unhandled", async () => {
    let calls = 0;
    const loop = new FiringLoop(
      context(
        scanStore(async () => {
          calls++;
          if (calls === 1) throw new Error("store unreachable");
          return [];
        }),
        new FakeClock(),
      ),
    );
    await expect(loop.rescan()).rejects.toThrow("store unreachable");
    await expect(loop.rescan()).resolves.toBeUndefined();
    expect(calls).toBe(2);
    loop.close();
  });

  it("a scan whose read returns after the loop closed plans nothing (its wheel is closed)", async () => {
    const clock = new FakeClock();
    let answer: (rows: Awaited<ReturnType<Store["listDueFires"]>>) => void = () => {};
    const loop = new FiringLoop(
      context(
        scanStore(
          () =>
            new Promise((resolve) => {
              answer = resolve;
            }),
        ),
        clock,
      ),
    );
    const scan = loop.rescan();
    await Promise.resolve();
    loop.close();
    answer([{ jobId: "j1", nextFireAt: clock.wallNow() + 1_000 }]);
    await expect(scan).resolves.toBeUndefined();
  });

  it("a scan while a fire is being recorded does not fire that time again", async () => {
    const clock = new FakeClock();
    const at = clock.wallNow() + 1_000;
    // The store as a scan sees it before the fire committed: the time still unfired.
    const job = storedJob("j1", at);
    let recording = 0;
    let commit: (ok: boolean) => void = () => {};
    const store = {
      listDueFires: async () => [{ jobId: "j1", nextFireAt: at }],
      listLeadFires: async () => [],
      getJob: async () => job,
      recordFires: () => {
        recording++;
        return new Promise<boolean>((resolve) => {
          commit = resolve;
        });
      },
    } as unknown as Store;
    const loop = new FiringLoop(context(store, clock));
    await loop.rescan();
    clock.advance(1_000);
    await settle();
    expect(recording).toBe(1);
    await loop.rescan();
    clock.advance(200);
    await settle();
    expect(recording).toBe(1);
    commit(true);
    loop.close();
  });

  it("records at most MAX_FIRES_IN_FLIGHT fires at once; the others wait their turn, in order", async () => {
    const clock = new FakeClock();
    const at = clock.wallNow() + 1_000;
    const n = MAX_FIRES_IN_FLIGHT + 100;
    const ids = Array.from({ length: n }, (_, i) => `j${String(i).padStart(4, "0")}`);
    const recording: string[] = [];
    const commits: ((ok: boolean) => void)[] = [];
    const store = {
      listDueFires: async () => ids.map((jobId) => ({ jobId, nextFireAt: at })),
      listLeadFires: async () => [],
      getJob: async (id: string) => storedJob(id, at),
      recordFires: (b: { jobId: string }) => {
        recording.push(b.jobId);
        return new Promise<boolean>((resolve) => commits.push(resolve));
      },
      bumpCounter: async () => {},
    } as unknown as Store;
    const loop = new FiringLoop(context(store, clock));
    await loop.rescan();
    clock.advance(1_000);
    await settle();
    expect(recording).toHaveLength(MAX_FIRES_IN_FLIGHT);
    expect(loop.queuedFires).toBe(100);
    // A scan meanwhile plans none of them again.
    await loop.rescan();
    clock.advance(200);
    await settle();
    expect(recording).toHaveLength(MAX_FIRES_IN_FLIGHT);
    // Each fire recorded lets one more start, the oldest waiting first.
    for (const c of commits.splice(0, 10)) c(true);
    await settle();
    expect(recording).toHaveLength(MAX_FIRES_IN_FLIGHT + 10);
    for (const c of commits.splice(0)) c(true);
    await settle();
    for (const c of commits.splice(0)) c(true);
    await settle();
    expect(loop.queuedFires).toBe(0);
    // Each once, and in the order they came due (here, the scan's).
    expect(recording).toEqual(ids);
    loop.close();
  });
});

/**
 * Jobs due (made `dispatchLead` ahead of their nominal time) 1, 7 and 19 ms into a cell of the
 * fire grid and 1 ms into the next, on PostgreSQL or SQLite; the clock is advanced to each
 * moment in `stops` in turn. Returns the jobs' reads, grouped by the turn they were issued in,
 * and each fire made, with the monotonic time it was made at.
 */
async function fireAround(storeUrl: string | undefined, stops: readonly number[]) {
  // Monotonic 1,000 is a grid line; wall time is monotonic time plus a fixed offset.
  const clock = new FakeClock({ mono: 1_000 });
  const lead = parseCoordinatorConfig({ mqtt: { url: "mqtt://127.0.0.1:1" } }).dispatchLeadMs;
  const cell = 1_000 + 50 * FIRE_GRID_MS;
  const wallOf = (mono: number) => mono - clock.monoNow() + clock.wallNow();
  const dueAt: Record<string, number> = { a: cell + 1, b: cell + 7, c: cell + 19 };
  dueAt.d = cell + FIRE_GRID_MS + 1;
  const made: { jobId: string; at: number }[] = [];
  const reads: string[][] = [];
  let turn: string[] | undefined;
  const store = {
    listDueFires: async () =>
      Object.entries(dueAt).map(([jobId, due]) => ({ jobId, nextFireAt: wallOf(due) + lead })),
    listLeadFires: async () => [],
    getJob: async (id: string) => {
      // The reads issued in one synchronous run (one turn of the loop) go together.
      if (turn === undefined) {
        turn = [];
        reads.push(turn);
        queueMicrotask(() => {
          turn = undefined;
        });
      }
      turn.push(id);
      return storedJob(id, wallOf(dueAt[id] as number) + lead);
    },
    recordFires: async (b: { jobId: string }) => {
      made.push({ jobId: b.jobId, at: clock.monoNow() });
      return true;
    },
    bumpCounter: async () => {},
  } as unknown as Store;
  const loop = new FiringLoop(context(store, clock, storeUrl));
  await loop.rescan();
  const seen: { reads: string[][]; made: string[] }[] = [];
  for (const stop of stops) {
    clock.advance(cell + stop - clock.monoNow());
    await settle();
    seen.push({ reads: reads.map((r) => [...r]), made: made.map((m) => m.jobId) });
  }
  loop.close();
  return { cell, dueAt, made, seen };
}

describe("FiringLoop fire times", () => {
  it("on PostgreSQL, makes the fires due within one 20 ms step together: never late, never a step early", async () => {
    const { cell, dueAt, made, seen } = await fireAround("postgres://ax@127.0.0.1:1/ax", [
      -1,
      0,
      FIRE_GRID_MS - 1,
      FIRE_GRID_MS,
    ]);
    expect(seen[0]?.made).toEqual([]);
    // All three of the step in one turn, at its start: one read of their jobs.
    expect(seen[1]).toEqual({ reads: [["a", "b", "c"]], made: ["a", "b", "c"] });
    expect(seen[2]?.made).toEqual(["a", "b", "c"]);
    expect(seen[3]?.made).toEqual(["a", "b", "c", "d"]);
    expect(made[3]?.at).toBe(cell + FIRE_GRID_MS);
    for (const m of made) {
      const due = dueAt[m.jobId] as number;
      expect(m.at).toBeLessThanOrEqual(due);
      expect(due - m.at).toBeLessThan(FIRE_GRID_MS);
    }
  });

  it("on SQLite, makes each fire at its due time", async () => {
    const { dueAt, made, seen } = await fireAround(undefined, [0, 1, 6, 7, 19, FIRE_GRID_MS + 1]);
    expect(seen.map((s) => s.made)).toEqual([
      [],
      ["a"],
      ["a"],
      ["a", "b"],
      ["a", "b", "c"],
      ["a", "b", "c", "d"],
    ]);
    for (const m of made) expect(m.at).toBe(dueAt[m.jobId]);
  });
});
