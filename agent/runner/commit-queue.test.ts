import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod/mini";
import { FakeClock } from "../../shared/clock.js";
import { envelope } from "../../shared/message.js";
import type { Dispatch, Report } from "../../shared/protocol/index.js";
import { testDispatch } from "../../test/helpers/dispatch.js";
import { holdWal, walStats } from "../../test/helpers/wal.js";
import { defineHandler, HandlerRegistry } from "../handlers/registry.js";
import { Journal } from "../journal/journal.js";
import { RETRY_MS } from "./commit-queue.js";
import { Executor } from "./executor.js";

/**
 * How the executor folds its journal writes (CommitQueue), on real SQLite files: what a stream of
 * commands costs in commits, read from the WAL; that nothing reads the journal past a change
 * still pending; that reports keep their order and go out only once committed; and what a crash
 * or a failed commit leaves.
 */

const dirs: string[] = [];
const closers: (() => void)[] = [];

afterEach(() => {
  for (const close of closers.splice(0).reverse()) close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempPath(): string {
  const dir = mkdtempSync(join(tmpdir(), "ax-fold-"));
  dirs.push(dir);
  return join(dir, "journal.sqlite");
}

/** Lets handlers' promise chains settle without letting a setImmediate run. */
async function microtasks(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

/** Lets everything settle, the setImmediate flushes included. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * A journal on `path` and an executor over it. `block` runs until the test settles it. Each
 * published report is checked against a second connection, which sees only committed rows: a
 * report sent before its transaction committed is recorded in `uncommitted`.
 */
function boot(path: string, clock: FakeClock, runs = new Map<string, number>()) {
  const published: Report[] = [];
  const uncommitted: Report[] = [];
  /** Handler entries (`run e1`) and publishes (`started e1`), in the order they happened. */
  const order: string[] = [];
  const logs: string[] = [];
  const settlers = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
  const block = defineHandler(
    "block",
    z.object({}),
    (ctx) =>
      new Promise<undefined>((resolve, reject) => {
        runs.set(ctx.executionId, (runs.get(ctx.executionId) ?? 0) + 1);
        order.push(`run ${ctx.executionId}`);
        settlers.set(ctx.executionId, { resolve: () => resolve(undefined), reject });
      }),
  );
  const journal = new Journal({ path, maxOpen: 1000, now: () => clock.wallNow() });
  const reader = new Database(path, { readonly: true });
  const inOutbox = reader.prepare("SELECT 1 FROM outbox WHERE seq = ?");
  const ex = new Executor({
    journal,
    envelope: (body, seq) => ({ ...envelope(body, clock.wallNow()), seq }) as Report,
    clock,
    handlers: new HandlerRegistry([block]),
    coordNow: () => clock.wallNow(),
    toMono: (t) => t - (clock.wallNow() - clock.monoNow()),
    concurrency: 4,
    queue: 16,
    tickMs: 20,
    publish: (report) => {
      if (!("seq" in report) || inOutbox.get(report.seq) === undefined) uncommitted.push(report);
      published.push(report);
      order.push(`${report.type} ${"executionId" in report ? report.executionId : ""}`);
    },
    log: (_level, message) => logs.push(message),
  });
  let up = true;
  const close = () => {
    if (!up) return;
    up = false;
    ex.close();
    journal.close();
    reader.close();
  };
  closers.push(close);
  const dispatch = (executionId: string, p: Partial<Dispatch> = {}): Dispatch => {
    const d = testDispatch(executionId, clock.wallNow(), "block", p);
    ex.dispatch(d);
    return d;
  };
  /** Settles a `block` run; its finish is then made (in memory) but not yet journaled. */
  const resolve = async (id: string) => {
    const s = settlers.get(id);
    if (!s) throw new Error(`no block run for ${id}`);
    s.resolve();
    await microtasks();
  };
  const fail = async (id: string) => {
    settlers.get(id)?.reject(new Error("boom"));
    await microtasks();
  };
  /** The state the journal file holds for an execution (not what the executor knows). */
  const journaled = (id: string) => journal.latest(id)?.state;
  const seqs = () => published.map((r) => ("seq" in r ? r.seq : undefined));
  const kinds = (id?: string) =>
    published
      .filter((r) => id === undefined || ("executionId" in r && r.executionId === id))
      .map((r) => r.type);
  return {
    journal,
    ex,
    published,
    order,
    uncommitted,
    logs,
    runs,
    close,
    dispatch,
    resolve,
    fail,
    journaled,
    seqs,
    kinds,
  };
}

/** Boots an executor on `path` with execution e1 dispatched, due at once, and started. */
async function started(path = tempPath(), runs = new Map<string, number>()) {
  const clock = new FakeClock();
  const a = boot(path, clock, runs);
  a.dispatch("e1");
  clock.advance(0);
  await microtasks();
  return { a, clock };
}

describe("CommitQueue: what a stream of commands costs", () => {
  it("folds each finish into the next start's commit: N commands cost N + 1 commits, not 2N", async () => {
    const path = tempPath();
    const clock = new FakeClock();
    const a = boot(path, clock);
    const n = 40;
    const t0 = clock.wallNow();
    a.ex.batch(() => {
      for (let k = 0; k < n; k++) a.dispatch(`c${k}`, { fireAt: t0 + 100 * (k + 1) });
    });
    const release = holdWal(path);
    closers.push(release);
    const before = walStats(`${path}-wal`);

    clock.advance(100); // the first start
    await microtasks();
    for (let k = 0; k < n; k++) {
      await a.resolve(`c${k}`);
      // Finished in memory at once (its slot is free), journaled with the next commit.
      expect(a.ex.runningRefs()).toEqual([]);
      expect(a.journaled(`c${k}`)).toBe("running");
      if (k + 1 < n) {
        clock.advance(100); // the next start, in the same turn: one commit carries both
        await microtasks();
        expect(a.journaled(`c${k}`)).toBe("succeeded");
        expect(a.journaled(`c${k + 1}`)).toBe("running");
      }
    }
    await settle(); // the last finish goes on setImmediate, with no start to carry it
    const after = walStats(`${path}-wal`);

    expect(a.journaled(`c${n - 1}`)).toBe("succeeded");
    expect(after.commits - before.commits).toBe(n + 1);
    // Before folding this was a commit per start and one per finish.
    expect(after.commits - before.commits).toBeLessThan(2 * n);
    expect(a.published.filter((r) => r.type === "finished")).toHaveLength(n);
    expect(a.uncommitted).toEqual([]);
    expect(a.seqs()).toEqual([...a.seqs()].sort((x, y) => (x ?? 0) - (y ?? 0)));
  });

  it("journals a finish on setImmediate when nothing else commits: never held longer", async () => {
    const path = tempPath();
    const { a } = await started(path);
    await a.resolve("e1");
    expect(a.journaled("e1")).toBe("running");
    expect(a.kinds("e1")).toEqual(["accepted", "started"]);
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(a.journaled("e1")).toBe("succeeded");
    expect(a.kinds("e1")).toEqual(["accepted", "started", "finished"]);
    expect(a.uncommitted).toEqual([]);
  });

  it("starts the commands the wheel fires in one turn in one commit, each handler after it", async () => {
    const path = tempPath();
    const clock = new FakeClock();
    const a = boot(path, clock);
    const t0 = clock.wallNow();
    a.ex.batch(() => {
      for (const id of ["s1", "s2", "s3"]) a.dispatch(id, { fireAt: t0 + 100 });
    });
    const release = holdWal(path);
    closers.push(release);
    const before = walStats(`${path}-wal`);
    clock.advance(100);
    // The wheel has fired all three; no handler runs before their `running` has committed.
    expect(a.runs.size).toBe(0);
    expect(a.journaled("s1")).toBe("scheduled");
    await microtasks();
    expect([...a.runs.keys()]).toEqual(["s1", "s2", "s3"]);
    expect(walStats(`${path}-wal`).commits - before.commits).toBe(1);
    expect(a.kinds()).toEqual([
      "accepted",
      "accepted",
      "accepted",
      "started",
      "started",
      "started",
    ]);
    // The handlers are entered before the commit's reports go out: the start is what is timed.
    expect(a.order.slice(3)).toEqual([
      "run s1",
      "run s2",
      "run s3",
      "started s1",
      "started s2",
      "started s3",
    ]);
    expect(a.uncommitted).toEqual([]);
  });
});

describe("CommitQueue: reads never pass a pending change", () => {
  it("answers a cancel, a query and a duplicate right after a finish with its terminal state", async () => {
    const { a } = await started();
    await a.resolve("e1");
    expect(a.journaled("e1")).toBe("running"); // pending

    a.ex.cancel("e1", 1);
    expect(a.published.at(-2)).toMatchObject({ type: "finished", outcome: "succeeded" });
    expect(a.published.at(-1)).toMatchObject({
      type: "state",
      localState: "succeeded",
      reason: "too_late",
    });
    a.ex.query("e1", 1);
    expect(a.published.at(-1)).toMatchObject({ type: "state", localState: "succeeded" });
    a.dispatch("e1");
    expect(a.published.at(-1)).toMatchObject({ type: "state", localState: "succeeded" });
    await settle();
    expect(a.runs.get("e1")).toBe(1);
    expect(a.kinds("e1")).toEqual(["accepted", "started", "finished", "state", "state", "state"]);
    expect(a.seqs()).toEqual([1, 2, 3, 4, 5, 6]);
    expect(a.uncommitted).toEqual([]);
  });

  it("writes a pending failure before a new attempt is journaled, so the retry is accepted", async () => {
    const { a } = await started();
    await a.fail("e1");
    expect(a.journaled("e1")).toBe("running");
    a.dispatch("e1", { round: 2, attempt: 2 });
    expect(a.kinds("e1")).toEqual(["accepted", "started", "finished", "accepted"]);
    expect(a.published.at(-2)).toMatchObject({ type: "finished", outcome: "failed" });
    expect(a.uncommitted).toEqual([]);
  });

  it("counts a pending finish in counts", async () => {
    const { a } = await started();
    await a.resolve("e1");
    expect(a.ex.counts).toEqual({ running: 0, queued: 0, scheduled: 0, open: 0 });
    expect(a.journaled("e1")).toBe("succeeded");
  });
});

describe("CommitQueue: a crash or a failed commit", () => {
  it("leaves a finish that was never journaled running: the restart reports it interrupted, never runs it again", async () => {
    const path = tempPath();
    const runs = new Map<string, number>();
    const { a, clock } = await started(path, runs);
    await a.resolve("e1");
    expect(a.kinds("e1")).toEqual(["accepted", "started"]);

    // kill -9 now: the files as the process leaves them (committed pages are in the WAL file).
    const copy = join(tempPath(), "..", "after-kill.sqlite");
    copyFileSync(path, copy);
    if (existsSync(`${path}-wal`)) copyFileSync(`${path}-wal`, `${copy}-wal`);

    const b = boot(copy, clock, runs);
    expect(b.ex.recover()).toEqual({ rescheduled: 0, interrupted: 1, expired: 0, settled: 0 });
    expect(b.published).toEqual([
      expect.objectContaining({
        type: "finished",
        executionId: "e1",
        outcome: "interrupted",
        seq: 3,
      }),
    ]);
    clock.advance(1000);
    await settle();
    expect(runs.get("e1")).toBe(1);
  });

  it("keeps the changes of a commit that failed, logs it, and journals them in order on the retry", async () => {
    const path = tempPath();
    const clock = new FakeClock();
    const a = boot(path, clock);
    a.dispatch("e1");
    a.dispatch("e2");
    clock.advance(0);
    await microtasks();
    // Another connection makes the next write of a finished state fail, as a full disk would.
    const other = new Database(path);
    closers.push(() => other.close());
    other.exec(
      "CREATE TRIGGER refuse BEFORE UPDATE ON commands WHEN NEW.state = 'succeeded' BEGIN SELECT RAISE(ABORT, 'disk says no'); END",
    );
    await a.resolve("e1");
    await a.fail("e2");
    await settle();
    expect(a.logs).toEqual([expect.stringMatching(/^journaling 2 changes failed; kept to retry/)]);
    expect(a.journaled("e1")).toBe("running");
    expect(a.journaled("e2")).toBe("running");
    expect(a.kinds("e1")).toEqual(["accepted", "started"]);
    // A cancel cannot read e1 as still running (and end it a second time): it fails with them.
    expect(() => a.ex.cancel("e1", 1)).toThrow(/disk says no/);
    expect(a.kinds("e1")).toEqual(["accepted", "started"]);

    other.exec("DROP TRIGGER refuse");
    clock.advance(RETRY_MS);
    expect(a.journaled("e1")).toBe("succeeded");
    expect(a.journaled("e2")).toBe("failed");
    expect(a.kinds().slice(4)).toEqual(["finished", "finished"]);
    expect(a.published.slice(4).map((r) => "executionId" in r && r.executionId)).toEqual([
      "e1",
      "e2",
    ]);
    expect(a.seqs()).toEqual([1, 2, 3, 4, 5, 6]);
    expect(a.uncommitted).toEqual([]);
    a.ex.cancel("e1", 1);
    expect(a.published.at(-1)).toMatchObject({ type: "state", reason: "too_late" });
  });
});
