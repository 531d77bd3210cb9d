import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod/mini";
import { FakeClock } from "../../shared/clock.js";
import { envelope } from "../../shared/message.js";
import {
  type Dispatch,
  type Finished,
  type Report,
  upMessageSchema,
} from "../../shared/protocol/index.js";
import { testDispatch } from "../../test/helpers/dispatch.js";
import { defineHandler, HandlerRegistry } from "../handlers/registry.js";
import { Journal } from "../journal/journal.js";
import { Executor } from "./executor.js";

/** Lets the handlers' promise chains settle. */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

const dirs: string[] = [];
const closers: (() => void)[] = [];

afterEach(() => {
  for (const close of closers.splice(0).reverse()) close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/**
 * One agent process: a Journal on `path` and an Executor over it, sharing the test's clock and
 * run counts. "Crashing" it closes both without finishing anything, as a killed process would
 * leave the file.
 */
function boot(path: string, clock: FakeClock, runs: Map<string, number>) {
  const published: Report[] = [];
  const invalid: unknown[] = [];
  const counted = (id: string) => runs.set(id, (runs.get(id) ?? 0) + 1);
  const count = defineHandler("count", z.object({}), async (ctx) => {
    counted(ctx.executionId);
    return { ok: true };
  });
  // Never settles, and ignores its signal: still running when the process dies.
  const hang = defineHandler("hang", z.object({}), (ctx) => {
    counted(ctx.executionId);
    return new Promise(() => {});
  });
  const journal = new Journal({ path, maxOpen: 100, now: () => clock.wallNow() });
  const ex = new Executor({
    journal,
    envelope: (body, seq) => ({ ...envelope(body, clock.wallNow()), seq }) as Report,
    clock,
    handlers: new HandlerRegistry([count, hang]),
    coordNow: () => clock.wallNow(),
    toMono: (t) => t - (clock.wallNow() - clock.monoNow()),
    concurrency: 1,
    queue: 4,
    tickMs: 20,
    publish: (message) => {
      published.push(message);
      const parsed = upMessageSchema.safeParse(message);
      if (!parsed.success) invalid.push({ message, issues: parsed.error.issues });
    },
    log: () => {},
  });
  let up = true;
  const crash = () => {
    if (!up) return;
    up = false;
    ex.close();
    journal.close();
  };
  closers.push(crash);
  const dispatch = (executionId: string, p: Partial<Dispatch>) => {
    ex.dispatch(testDispatch(executionId, clock.wallNow(), "count", p));
    clock.advance(0); // a command due on arrival starts on the wheel's next turn
  };
  const finished = (id: string) =>
    published.filter((r): r is Finished => r.type === "finished" && r.executionId === id);
  return { journal, ex, published, invalid, crash, dispatch, finished };
}

const seqOf = (r: Report) => ("seq" in r ? r.seq : undefined);

describe("Executor.recover after a crash (DESIGN §5.1 rules 1, 3, 5, 13)", () => {
  it("interrupts the running one once, expires the overdue one, and runs the rest on time", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ax-recover-"));
    dirs.push(dir);
    const path = join(dir, "journal.sqlite");
    const clock = new FakeClock();
    const runs = new Map<string, number>();
    const t0 = clock.wallNow();

    // Before the crash: one running (never settles), one queued behind it (concurrency 1), one
    // that will be overdue by the restart, and one for later.
    const a = boot(path, clock, runs);
    a.dispatch("running", { handler: "hang" });
    a.dispatch("queued", {});
    a.dispatch("overdue", { fireAt: t0 + 1000, deadline: t0 + 2000 });
    a.dispatch("future", { fireAt: t0 + 10_000, deadline: t0 + 20_000 });
    await flush();
    expect(runs).toEqual(new Map([["running", 1]]));
    expect(a.ex.counts).toEqual({ running: 1, queued: 1, scheduled: 2, open: 4 });
    const startedBefore = a.published.find((r) => r.type === "started");
    expect(startedBefore).toMatchObject({ executionId: "running", startedAt: t0, seq: 2 });
    // The coordinator stored the first two; the rest are unacknowledged when the process dies.
    a.journal.ack(2);
    const unacked = a.journal.pendingReports();
    expect(unacked.map((r) => [r.type, "executionId" in r && r.executionId, seqOf(r)])).toEqual([
      ["accepted", "queued", 3],
      ["accepted", "overdue", 4],
      ["accepted", "future", 5],
    ]);
    const journalId = a.journal.journalId;
    a.crash();

    // Down for 3 s: past the overdue one's deadline, before the future one's fireAt.
    clock.advance(3000);

    const b = boot(path, clock, runs);
    expect([b.journal.journalId, b.journal.lastSeq, b.journal.open]).toEqual([journalId, 5, 4]);
    expect(b.ex.recover()).toEqual({ rescheduled: 2, interrupted: 1, expired: 1, settled: 0 });
    expect(b.finished("running")).toEqual([
      expect.objectContaining({
        outcome: "interrupted",
        // Its handler was launched: what it did is unknown, and not done again.
        interruptedPhase: "in_handler",
        retryable: true,
        startedAt: t0,
        finishedAt: t0 + 3000,
        seq: 6,
      }),
    ]);
    expect(b.finished("overdue")).toEqual([
      expect.objectContaining({ outcome: "expired", retryable: false, seq: 7 }),
    ]);
    expect(b.finished("overdue")[0]).not.toHaveProperty("startedAt");

    // The queued one was due before the crash: it runs on the next tick after the restart.
    clock.advance(20);
    await flush();
    expect(runs).toEqual(
      new Map([
        ["running", 1],
        ["queued", 1],
      ]),
    );
    expect(b.finished("queued")).toEqual([expect.objectContaining({ outcome: "succeeded" })]);
    expect(b.published.map((r) => [r.type, "executionId" in r && r.executionId, seqOf(r)])).toEqual(
      [
        ["finished", "running", 6],
        ["finished", "overdue", 7],
        ["started", "queued", 8],
        ["finished", "queued", 9],
      ],
    );
    // The outbox: what was unacknowledged before the crash, unchanged, then the new reports.
    const outbox = b.journal.pendingReports();
    expect(outbox.slice(0, 3)).toEqual(unacked);
    expect(outbox.slice(3)).toEqual(b.published);
    expect(outbox.map(seqOf)).toEqual([3, 4, 5, 6, 7, 8, 9]);
    expect(b.invalid).toEqual([]);

    // Another crash and restart: nothing is reported again, and the future one stays scheduled.
    b.crash();
    const c = boot(path, clock, runs);
    expect(c.ex.recover()).toEqual({ rescheduled: 1, interrupted: 0, expired: 0, settled: 0 });
    expect(c.published).toEqual([]);
    expect(c.journal.pendingReports()).toEqual(outbox);
    expect(c.journal.lastSeq).toBe(9);

    // The future one fires at its fireAt, not before.
    clock.advance(t0 + 10_000 - 1 - clock.wallNow());
    await flush();
    expect(runs.get("future")).toBeUndefined();
    expect(c.published).toEqual([]);
    clock.advance(1);
    await flush();
    expect(runs.get("future")).toBe(1);
    const started = c.published.find((r) => r.type === "started");
    expect(started).toMatchObject({ executionId: "future", seq: 10 });
    expect((started as { startedAt: number }).startedAt).toBeGreaterThanOrEqual(t0 + 10_000);
    expect(c.finished("future")).toEqual([
      expect.objectContaining({ outcome: "succeeded", seq: 11 }),
    ]);

    // Over all three lives: the running one ran once and was reported interrupted once; the
    // overdue one never started.
    expect(runs).toEqual(
      new Map([
        ["running", 1],
        ["queued", 1],
        ["future", 1],
      ]),
    );
    const all = c.journal.pendingReports();
    expect(all.map(seqOf)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(
      all.filter((r) => r.type === "finished" && r.outcome === "interrupted").map(seqOf),
    ).toEqual([6]);
    expect(
      all.filter(
        (r) => (r.type === "started" || r.type === "finished") && r.executionId === "overdue",
      ),
    ).toEqual([expect.objectContaining({ type: "finished", outcome: "expired" })]);
    expect(c.ex.counts).toEqual({ running: 0, queued: 0, scheduled: 0, open: 0 });
    expect(c.invalid).toEqual([]);
  });
});
