import { mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { AxError } from "../../shared/errors.js";
import { ID_PATTERN } from "../../shared/ids.js";
import { envelope } from "../../shared/message.js";
import type { Dispatch, Report } from "../../shared/protocol/index.js";
import { Journal, type JournalOptions, OPEN_SQL, type ReportBody } from "./journal.js";

const T0 = 1_700_000_000_000;

const dirs: string[] = [];
const journals: Journal[] = [];
const connections: Database.Database[] = [];

afterEach(() => {
  for (const j of journals.splice(0)) j.close();
  for (const c of connections.splice(0)) if (c.open) c.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A fresh journal file in its own temp folder, removed after the test. */
function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "ax-journal-"));
  dirs.push(dir);
  return join(dir, "journal.sqlite");
}

/** The time the journal sees; tests move it by hand. */
interface TestClock {
  t: number;
}

function openJournal(
  path: string,
  clock: TestClock,
  options: Partial<Omit<JournalOptions, "path" | "now">> = {},
): Journal {
  const j = new Journal({ path, maxOpen: 100, ...options, now: () => clock.t });
  journals.push(j);
  return j;
}

/** Closes a journal the test opened (so afterEach does not close it twice). */
function closeJournal(j: Journal): void {
  j.close();
  journals.splice(journals.indexOf(j), 1);
}

/** A second connection to the same file, as another process would have. */
function otherConnection(path: string): Database.Database {
  const c = new Database(path);
  connections.push(c);
  return c;
}

function envelopeAt(clock: TestClock): (body: ReportBody, seq: number) => Report {
  return (body, seq) => ({ ...envelope(body, clock.t), seq }) as Report;
}

function dispatch(executionId: string, p: Partial<Dispatch> = {}): Dispatch {
  return {
    v: 1,
    type: "dispatch",
    msgId: `m-${executionId}-${p.round ?? 1}`,
    sentAt: T0,
    executionId,
    round: 1,
    attempt: 1,
    handler: "echo",
    params: { pin: 17, level: "high" },
    fireAt: T0 + 1000,
    deadline: T0 + 5000,
    timeoutMs: 10_000,
    priority: 0,
    ...p,
  };
}

function finishedBody(executionId: string, outcome: "succeeded" | "expired", at: number) {
  return {
    type: "finished" as const,
    executionId,
    round: 1,
    outcome,
    retryable: false,
    message: outcome === "succeeded" ? "ok" : "deadline passed before arrival",
    finishedAt: at,
  };
}

/** The error `fn` throws (fails the test when it does not throw). */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error("expected an error, none was thrown");
}

function accept(j: Journal, clock: TestClock, d: Dispatch): { id: number; report: Report } {
  const r = j.accept(d, envelopeAt(clock));
  if (!r) throw new Error(`${d.executionId} was not accepted`);
  return r;
}

/** Moves row `id` (execution e1, round 1) from scheduled to running; returns its report. */
function startE1(j: Journal, clock: TestClock, id: number): Report {
  const started = j.transition(
    id,
    "scheduled",
    "running",
    { type: "started", executionId: "e1", round: 1, startedAt: clock.t, lateMs: 0 },
    envelopeAt(clock),
    clock.t,
  );
  if (!started) throw new Error("no started report");
  return started;
}

const seqs = (reports: Report[]) => reports.map((r) => ("seq" in r ? r.seq : undefined));

describe("Journal: identity and storage", () => {
  it("creates a journalId once and keeps it across reopen; a new file gets a new one", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const first = openJournal(path, clock);
    const id = first.journalId;
    expect(id).toMatch(ID_PATTERN);
    closeJournal(first);
    expect(openJournal(path, clock).journalId).toBe(id);
    expect(openJournal(tempFile(), clock).journalId).not.toBe(id);
  });

  it("runs in WAL mode, synchronous NORMAL by default and FULL when asked", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    expect(otherConnection(path).pragma("journal_mode", { simple: true })).toBe("wal");
    // synchronous is per connection, so it is read from the journal's own.
    const own = (x: Journal) => (x as unknown as { db: Database.Database }).db;
    expect(own(j).pragma("synchronous", { simple: true })).toBe(1);
    const full = openJournal(tempFile(), clock, { synchronous: "FULL" });
    expect(own(full).pragma("synchronous", { simple: true })).toBe(2);
  });
});

describe("Journal: accept", () => {
  it("writes the command as scheduled and an accepted report numbered 1, 2, 3", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    const out = ["e1", "e2", "e3"].map((id) => accept(j, clock, dispatch(id)));
    expect(out.map((o) => o.report)).toEqual([
      expect.objectContaining({ type: "accepted", executionId: "e1", round: 1, seq: 1 }),
      expect.objectContaining({ type: "accepted", executionId: "e2", round: 1, seq: 2 }),
      expect.objectContaining({ type: "accepted", executionId: "e3", round: 1, seq: 3 }),
    ]);
    expect(j.get(out[0]?.id ?? -1)).toEqual({
      id: out[0]?.id,
      executionId: "e1",
      round: 1,
      attempt: 1,
      state: "scheduled",
      dispatch: dispatch("e1"),
      startedAt: null,
    });
    expect(j.pendingReports()).toEqual(out.map((o) => o.report));
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([3, 3, 3]);
  });

  it("returns undefined for an (executionId, round) it already holds, and adds nothing", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    const first = accept(j, clock, dispatch("e1"));
    expect(
      j.accept(dispatch("e1", { params: { other: true } }), envelopeAt(clock)),
    ).toBeUndefined();
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([1, 1, 1]);
    expect(j.pendingReports()).toEqual([first.report]);
    expect(j.countsByState()).toEqual({ scheduled: 1, queued: 0, running: 0 });
    expect(j.get(first.id)?.dispatch.params).toEqual(dispatch("e1").params);
    // A higher round of the same execution is a different key.
    expect(j.accept(dispatch("e1", { round: 2 }), envelopeAt(clock))?.report).toMatchObject({
      round: 2,
      seq: 2,
    });
  });
});

describe("Journal: transition", () => {
  it("changes the state and outboxes the report together", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    const { id } = accept(j, clock, dispatch("e1"));
    clock.t = T0 + 1000;
    const started = startE1(j, clock, id);
    expect(started).toMatchObject({ type: "started", seq: 2, startedAt: T0 + 1000 });
    expect(j.get(id)).toMatchObject({ state: "running", startedAt: T0 + 1000 });
    expect(j.pendingReports().at(-1)).toEqual(started);
    // A transition without a report numbers nothing.
    const { id: id2 } = accept(j, clock, dispatch("e2"));
    expect(j.transition(id2, "scheduled", "queued", undefined, envelopeAt(clock))).toBeUndefined();
    expect(j.get(id2)?.state).toBe("queued");
    expect(j.lastSeq).toBe(3);
  });

  it("changes neither state, outbox nor counters when the outbox write fails", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    const { id } = accept(j, clock, dispatch("e1"));
    j.transition(
      id,
      "scheduled",
      "running",
      { type: "started", executionId: "e1", round: 1, startedAt: T0, lateMs: 0 },
      envelopeAt(clock),
      T0,
    );
    const before = j.pendingReports();
    // Another writer takes seq 3, so the report of the next transition cannot be inserted.
    const other = otherConnection(path);
    other.prepare("INSERT INTO outbox (seq, message) VALUES (3, '{}')").run();

    const err = thrown(() =>
      j.transition(
        id,
        "running",
        "succeeded",
        finishedBody("e1", "succeeded", T0),
        envelopeAt(clock),
      ),
    );
    expect(err).toBeInstanceOf(AxError);
    expect(err).toMatchObject({
      code: "AX_STORE_FAILED",
      message: "journal: transition failed: UNIQUE constraint failed: outbox.seq",
    });
    expect(j.get(id)).toMatchObject({ state: "running", startedAt: T0 });
    expect(
      other.prepare("SELECT finished_at FROM commands WHERE id = ?").get(id) as {
        finished_at: number | null;
      },
    ).toEqual({ finished_at: null });
    expect(other.prepare("SELECT seq FROM outbox ORDER BY seq").pluck().all()).toEqual([1, 2, 3]);
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([2, 1, 2]);
    expect(j.countsByState()).toEqual({ scheduled: 0, queued: 0, running: 1 });

    // A dispatch fails the same way and leaves no command behind to be taken for a duplicate.
    expect(thrown(() => j.accept(dispatch("e2"), envelopeAt(clock)))).toMatchObject({
      code: "AX_STORE_FAILED",
      message: "journal: accept failed: UNIQUE constraint failed: outbox.seq",
    });
    expect(j.latest("e2")).toBeUndefined();
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([2, 1, 2]);

    // Once the seq is free again both go through, with seq continuing from 3.
    other.prepare("DELETE FROM outbox WHERE seq = 3").run();
    expect(
      j.transition(
        id,
        "running",
        "succeeded",
        finishedBody("e1", "succeeded", T0),
        envelopeAt(clock),
      ),
    ).toMatchObject({ seq: 3 });
    expect(accept(j, clock, dispatch("e2")).report).toMatchObject({ seq: 4 });
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([4, 1, 4]);
    expect(j.pendingReports().slice(0, 2)).toEqual(before);
  });

  it("fails with AX_STORE_FAILED once closed, and the file keeps the state before", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    const { id, report } = accept(j, clock, dispatch("e1"));
    j.close();
    expect(
      thrown(() =>
        j.transition(
          id,
          "scheduled",
          "succeeded",
          finishedBody("e1", "succeeded", T0),
          envelopeAt(clock),
        ),
      ),
    ).toMatchObject({
      code: "AX_STORE_FAILED",
      message: "journal: transition failed: The database connection is not open",
    });
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([1, 1, 1]);
    for (const call of [() => j.ack(1), () => j.get(id), () => j.purge()]) {
      expect(thrown(call)).toMatchObject({ code: "AX_STORE_FAILED" });
    }

    const again = openJournal(path, clock);
    expect(again.get(id)?.state).toBe("scheduled");
    expect(again.pendingReports()).toEqual([report]);
    expect([again.lastSeq, again.open, again.outboxDepth]).toEqual([1, 1, 1]);
  });
});

describe("Journal: batch", () => {
  const own = (x: Journal) => (x as unknown as { db: Database.Database }).db;
  const startedBody = (at: number) => ({
    type: "started" as const,
    executionId: "e1",
    round: 1,
    startedAt: at,
    lateMs: 0,
  });

  it("marks a command running inside a durable batch, whose commit is fsynced (FULL), then NORMAL again", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    const { id } = accept(j, clock, dispatch("e1"));
    const levels: unknown[] = [];
    j.batch(
      () => {
        levels.push(own(j).pragma("synchronous", { simple: true }));
        j.transition(id, "scheduled", "running", startedBody(T0), envelopeAt(clock), T0);
        // A batch inside joins the durable one.
        j.batch(() => j.report(startedBody(T0), envelopeAt(clock)), { durable: true });
      },
      { durable: true },
    );
    expect(levels).toEqual([2]);
    expect(own(j).pragma("synchronous", { simple: true })).toBe(1);
    expect(j.get(id)?.state).toBe("running");
    expect(j.lastSeq).toBe(3);
  });

  it("rolls back only the dispatch that fails to journal; the others of its batch commit (issue 15)", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    // A value JSON.stringify cannot write (a cycle; before the decoder bounded depth, a dispatch
    // nested 10,000 deep did the same with a stack overflow).
    const params: Record<string, unknown> = {};
    params.self = params;
    const errors: string[] = [];
    j.batch(() => {
      for (const d of [dispatch("e1"), dispatch("bad", { params }), dispatch("e2")]) {
        try {
          j.accept(d, envelopeAt(clock));
        } catch (err) {
          errors.push((err as AxError).code);
        }
      }
    });
    expect(errors).toEqual(["AX_STORE_FAILED"]);
    expect(j.latest("e1")?.state).toBe("scheduled");
    expect(j.latest("bad")).toBeUndefined();
    expect(j.latest("e2")?.state).toBe("scheduled");
    // No gap in seq, and the counters match the file.
    expect(j.pendingReports().map((r) => [r.seq, r.executionId])).toEqual([
      [1, "e1"],
      [2, "e2"],
    ]);
    expect([j.lastSeq, j.open, j.outboxDepth]).toEqual([2, 2, 2]);
  });

  it("refuses to mark a command running inside a plain batch, whose commit would not be fsynced", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    const { id } = accept(j, clock, dispatch("e1"));
    const err = thrown(() =>
      j.batch(() =>
        j.transition(id, "scheduled", "running", startedBody(T0), envelopeAt(clock), T0),
      ),
    );
    expect(err).toBeInstanceOf(AxError);
    expect((err as AxError).code).toBe("AX_STORE_FAILED");
    expect((err as AxError).message).toBe(
      "journal: batch failed: journal: a command marked running inside a batch needs batch(fn, { durable: true })",
    );
    expect(j.get(id)?.state).toBe("scheduled");
    expect([j.lastSeq, j.open]).toEqual([1, 1]);
    // Without syncStart no commit is fsynced for a start, and a plain batch may hold one.
    const plain = openJournal(tempFile(), clock, { syncStart: false });
    const other = accept(plain, clock, dispatch("e1"));
    plain.batch(() =>
      plain.transition(other.id, "scheduled", "running", startedBody(T0), envelopeAt(clock), T0),
    );
    expect(plain.get(other.id)?.state).toBe("running");
  });
});

describe("Journal: seq and the outbox (rule 1)", () => {
  it("keeps lastSeq across reopen and continues without a gap, even with the outbox empty", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    accept(j, clock, dispatch("e1"));
    accept(j, clock, dispatch("e2"));
    j.report({ type: "busy", executionId: "e3", round: 1 }, envelopeAt(clock));
    j.ack(3);
    expect(j.outboxDepth).toBe(0);
    closeJournal(j);

    const again = openJournal(path, clock);
    expect([again.lastSeq, again.outboxDepth, again.open]).toEqual([3, 0, 2]);
    expect(accept(again, clock, dispatch("e4")).report).toMatchObject({ seq: 4 });
    expect(
      again.report({ type: "busy", executionId: "e5", round: 1 }, envelopeAt(clock)),
    ).toMatchObject({ seq: 5 });
    expect(seqs(again.pendingReports())).toEqual([4, 5]);
  });

  it("returns pending reports exactly as first written (same msgId, sentAt, seq), in seq order", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    const written: Report[] = [];
    const a = accept(j, clock, dispatch("e1"));
    written.push(a.report);
    clock.t += 1000;
    written.push(startE1(j, clock, a.id));
    clock.t += 5;
    written.push(
      j.report(
        { type: "progress", executionId: "e1", round: 1, percent: 50, note: "half" },
        envelopeAt(clock),
      ),
    );
    closeJournal(j);

    clock.t += 60_000;
    const again = openJournal(path, clock);
    const pending = again.pendingReports();
    expect(pending).toEqual(written);
    expect(seqs(pending)).toEqual([1, 2, 3]);
    expect(new Set(pending.map((r) => r.msgId)).size).toBe(3);
    expect(again.oldestReport()).toEqual(written[0]);
  });

  it("hands back each report's outboxed JSON for its publish, and knows no report it did not write", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    const a = accept(j, clock, dispatch("e1"));
    const started = startE1(j, clock, a.id);
    const rows = otherConnection(path).prepare("SELECT message FROM outbox ORDER BY seq").all() as {
      message: string;
    }[];
    expect(rows.map((r) => r.message)).toEqual([j.encoded(a.report), j.encoded(started)]);
    expect(JSON.parse(j.encoded(started) ?? "null")).toEqual(started);
    // A copy, or a report read back after a restart, is serialised afresh by its publisher.
    expect(j.encoded({ ...started })).toBeUndefined();
    expect(j.encoded(j.pendingReports()[0] as Report)).toBeUndefined();
  });

  it("ack(upTo) removes the reports with seq ≤ upTo only, and outboxDepth follows", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    for (let i = 1; i <= 5; i++) accept(j, clock, dispatch(`e${i}`));
    j.ack(2);
    expect(seqs(j.pendingReports())).toEqual([3, 4, 5]);
    expect(j.outboxDepth).toBe(3);
    j.ack(2);
    j.ack(0);
    expect(j.outboxDepth).toBe(3);
    expect(j.oldestReport()).toMatchObject({ seq: 3 });
    j.ack(4);
    expect(seqs(j.pendingReports())).toEqual([5]);
    expect(j.outboxDepth).toBe(1);
    j.ack(100);
    expect(j.pendingReports()).toEqual([]);
    expect(j.oldestReport()).toBeUndefined();
    expect([j.outboxDepth, j.lastSeq, j.open]).toEqual([0, 5, 5]);
    closeJournal(j);
    expect(openJournal(path, clock).outboxDepth).toBe(0);
  });
});

describe("Journal: limits", () => {
  it("is full at maxOpen open commands, and has room again when one ends", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock, { maxOpen: 2 });
    const { id } = accept(j, clock, dispatch("e1"));
    expect(j.fullReason()).toBeUndefined();
    accept(j, clock, dispatch("e2"));
    expect(j.fullReason()).toBe("holding 2 open commands (maxPending 2)");
    j.transition(id, "scheduled", "canceled", undefined, envelopeAt(clock));
    expect(j.fullReason()).toBeUndefined();
  });

  it("is full at maxOutbox unacknowledged reports, and has room again after an ack", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock, { maxOutbox: 3 });
    for (let i = 1; i <= 2; i++) accept(j, clock, dispatch(`e${i}`));
    expect(j.fullReason()).toBeUndefined();
    j.report({ type: "busy", executionId: "e3", round: 1 }, envelopeAt(clock));
    expect(j.fullReason()).toBe("3 reports await acknowledgement (limit 3)");
    j.ack(1);
    expect(j.fullReason()).toBeUndefined();
  });
});

describe("Journal: open commands", () => {
  it("writes a command without building a temporary b-tree, and finds open ones by index", () => {
    const path = tempFile();
    openJournal(path, { t: T0 });
    const c = otherConnection(path);
    // An IN list of three constants in the partial index's WHERE clause was evaluated through a
    // temporary b-tree built on every insert and every change of state: five per command.
    const temporaryTrees = (sql: string) =>
      (c.prepare(`EXPLAIN ${sql}`).all() as { opcode: string }[]).filter(
        (op) => op.opcode === "OpenEphemeral",
      ).length;
    expect(temporaryTrees("UPDATE commands SET state = 'running' WHERE id = 1")).toBe(0);
    expect(
      temporaryTrees(
        `INSERT INTO commands (execution_id, round, attempt, state, dispatch, fire_at, deadline,
           priority, received_at) VALUES ('e', 1, 1, 'scheduled', '{}', 1, 2, 0, 1)`,
      ),
    ).toBe(0);
    const plan = (
      c.prepare(`EXPLAIN QUERY PLAN SELECT COUNT(*) FROM commands WHERE ${OPEN_SQL}`).all() as {
        detail: string;
      }[]
    )
      .map((r) => r.detail)
      .join("; ");
    expect(plan).toContain("USING COVERING INDEX commands_open");
  });

  it("counts a command open from scheduled through running, and not once it succeeded", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    const { id } = accept(j, clock, dispatch("e1"));
    expect(j.open).toBe(1);
    expect(j.countsByState()).toEqual({ scheduled: 1, queued: 0, running: 0 });
    j.transition(id, "scheduled", "queued", undefined, envelopeAt(clock));
    expect(j.open).toBe(1);
    expect(j.countsByState()).toEqual({ scheduled: 0, queued: 1, running: 0 });
    j.transition(id, "queued", "running", undefined, envelopeAt(clock), T0);
    expect(j.open).toBe(1);
    expect(j.countsByState()).toEqual({ scheduled: 0, queued: 0, running: 1 });
    j.transition(
      id,
      "running",
      "succeeded",
      finishedBody("e1", "succeeded", T0),
      envelopeAt(clock),
    );
    expect(j.open).toBe(0);
    expect(j.countsByState()).toEqual({ scheduled: 0, queued: 0, running: 0 });
    expect(j.openCommands()).toEqual([]);
    closeJournal(j);
    expect(openJournal(path, clock).open).toBe(0);
  });

  it("lists open commands earliest fire time first, and counts them after a reopen", () => {
    const clock = { t: T0 };
    const path = tempFile();
    const j = openJournal(path, clock);
    const late = accept(j, clock, dispatch("late", { fireAt: T0 + 3000 }));
    const done = accept(j, clock, dispatch("done", { fireAt: T0 + 1000 }));
    accept(j, clock, dispatch("early", { fireAt: T0 + 2000 }));
    j.transition(late.id, "scheduled", "running", undefined, envelopeAt(clock), T0);
    j.transition(done.id, "scheduled", "canceled", undefined, envelopeAt(clock));
    closeJournal(j);
    const again = openJournal(path, clock);
    expect(again.openCommands().map((r) => [r.executionId, r.state, r.startedAt])).toEqual([
      ["early", "scheduled", null],
      ["late", "running", T0],
    ]);
    expect(again.open).toBe(2);
    expect(again.countsByState()).toEqual({ scheduled: 1, queued: 0, running: 1 });
  });

  it("latest() returns the highest round of an execution", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock);
    for (const round of [1, 3, 2]) accept(j, clock, dispatch("e1", { round }));
    expect(j.latest("e1")).toMatchObject({ executionId: "e1", round: 3 });
    expect(j.latest("nope")).toBeUndefined();
    expect(j.get(9999)).toBeUndefined();
  });
});

describe("Journal: recordFinished (rule 5)", () => {
  it("journals an expired-on-arrival dispatch so a redelivery is a duplicate", () => {
    const clock = { t: T0 + 10_000 };
    const j = openJournal(tempFile(), clock);
    const d = dispatch("e1");
    const report = j.recordFinished(
      d,
      "expired",
      finishedBody("e1", "expired", clock.t),
      envelopeAt(clock),
    );
    expect(report).toMatchObject({ type: "finished", outcome: "expired", seq: 1 });
    expect(j.latest("e1")).toMatchObject({ state: "expired", startedAt: null });
    expect(j.open).toBe(0);
    expect(j.accept(d, envelopeAt(clock))).toBeUndefined();
    expect(
      j.recordFinished(d, "expired", finishedBody("e1", "expired", clock.t), envelopeAt(clock)),
    ).toBeUndefined();
    expect([j.lastSeq, j.outboxDepth, j.open]).toEqual([1, 1, 0]);
    expect(j.pendingReports()).toEqual([report]);
  });
});

describe("Journal: purge (retention)", () => {
  it("deletes only terminal commands finished more than retainMs ago", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock, { retainMs: 1000 });
    const env = envelopeAt(clock);
    const succeeded = accept(j, clock, dispatch("succeeded"));
    j.transition(succeeded.id, "scheduled", "running", undefined, env, T0);
    j.transition(
      succeeded.id,
      "running",
      "succeeded",
      finishedBody("succeeded", "succeeded", T0),
      env,
    );
    j.recordFinished(dispatch("expired"), "expired", finishedBody("expired", "expired", T0), env);
    const running = accept(j, clock, dispatch("running"));
    j.transition(running.id, "scheduled", "running", undefined, env, T0);
    const scheduled = accept(j, clock, dispatch("scheduled"));
    clock.t = T0 + 500;
    const recent = accept(j, clock, dispatch("recent"));
    j.transition(recent.id, "scheduled", "canceled", undefined, env);

    clock.t = T0 + 1000;
    expect(j.purge()).toBe(0);
    clock.t = T0 + 1001;
    expect(j.purge()).toBe(2);
    expect(j.latest("succeeded")).toBeUndefined();
    expect(j.latest("expired")).toBeUndefined();
    expect(j.get(running.id)?.state).toBe("running");
    expect(j.get(scheduled.id)?.state).toBe("scheduled");
    expect(j.get(recent.id)?.state).toBe("canceled");
    clock.t = T0 + 1_000_000;
    expect(j.purge()).toBe(1);
    expect(j.openCommands().map((r) => r.executionId)).toEqual(["running", "scheduled"]);
    expect(j.open).toBe(2);
  });

  it("deletes at most `limit` per call", () => {
    const clock = { t: T0 };
    const j = openJournal(tempFile(), clock, { retainMs: 1000 });
    for (let i = 1; i <= 5; i++) {
      j.recordFinished(
        dispatch(`e${i}`),
        "expired",
        finishedBody(`e${i}`, "expired", T0),
        envelopeAt(clock),
      );
    }
    clock.t = T0 + 2000;
    expect([j.purge(2), j.purge(2), j.purge(2), j.purge(2)]).toEqual([2, 2, 1, 0]);
  });
});

describe("Journal: errors", () => {
  it("fails with AX_STORE_FAILED for a path in a missing directory", () => {
    const path = join(tempFile(), "..", "missing", "journal.sqlite");
    const err = thrown(() => openJournal(path, { t: T0 }));
    expect(err).toBeInstanceOf(AxError);
    expect(err).toMatchObject({
      code: "AX_STORE_FAILED",
      message: `journal ${path}: cannot open: Cannot open database because the directory does not exist`,
    });
  });

  /** Descriptors this process holds on `path` (Linux; undefined elsewhere). */
  function handlesOn(path: string): number | undefined {
    let fds: string[];
    try {
      fds = readdirSync("/proc/self/fd");
    } catch {
      return undefined;
    }
    return fds.filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === path;
      } catch {
        return false;
      }
    }).length;
  }

  it("fails with AX_STORE_FAILED for a file that is not a database, and keeps no handle on it", () => {
    const path = tempFile();
    writeFileSync(path, "not a database ".repeat(500));
    const err = thrown(() => openJournal(path, { t: T0 }));
    expect(err).toMatchObject({
      code: "AX_STORE_FAILED",
      message: `journal ${path}: cannot open: file is not a database`,
    });
    const handles = handlesOn(path);
    if (handles !== undefined) expect(handles).toBe(0);
  });

  it("refuses a journal written by a newer build with AX_STORE_MIGRATION, and keeps no handle", () => {
    const path = tempFile();
    closeJournal(openJournal(path, { t: T0 }));
    const other = otherConnection(path);
    other
      .prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'x', 0)")
      .run();
    other.close();
    const err = thrown(() => openJournal(path, { t: T0 }));
    expect(err).toBeInstanceOf(AxError);
    expect(err).toMatchObject({ code: "AX_STORE_MIGRATION" });
    const handles = handlesOn(path);
    if (handles !== undefined) expect(handles).toBe(0);
  });
});
