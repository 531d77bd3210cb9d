import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod/mini";
import { FakeClock } from "../../shared/clock.js";
import { envelope } from "../../shared/message.js";
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  type Dispatch,
  decode,
  dispatchSchema,
  encode,
  type Report,
  topics,
  upMessageSchema,
} from "../../shared/protocol/index.js";
import { BUILTIN_HANDLERS } from "../handlers/builtins.js";
import { defineHandler, HandlerFailure, HandlerRegistry } from "../handlers/registry.js";
import { Journal, type ReportBody } from "../journal/journal.js";
import { CANCEL_GRACE_MS, Executor } from "./executor.js";

/** Lets the handlers' promise chains settle. */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

type Body<T extends ReportBody["type"]> = Extract<ReportBody, { type: T }>;

interface Harness {
  clock: FakeClock;
  ex: Executor;
  reports: ReportBody[];
  /** What the executor logged. */
  logs: { level: string; message: string; fields?: Record<string, unknown> }[];
  /** How many times the `count` handler ran, per executionId. */
  runs: Map<string, number>;
  /** The signal each `block` / `hang` run got, per executionId. */
  signals: Map<string, AbortSignal>;
  /** Settles a `block` run (resolve with a result or reject with an error), then flushes. */
  release(
    id: string,
    outcome?: { result?: Record<string, unknown>; error?: unknown },
  ): Promise<void>;
  of<T extends ReportBody["type"]>(type: T, id?: string): Body<T>[];
  dispatch(p: Partial<Dispatch> & { executionId: string }): Dispatch;
}

/** Reports that do not pass the protocol schema once enveloped (rule 12); checked after each test. */
let invalidReports: unknown[] = [];
const executors: Executor[] = [];
const journals: Journal[] = [];

afterEach(() => {
  for (const ex of executors.splice(0)) ex.close();
  for (const j of journals.splice(0)) j.close();
  expect(invalidReports).toEqual([]);
  invalidReports = [];
});

function setup(
  capacity: { concurrency?: number; queue?: number; maxPending?: number } = {},
  clockUncertaintyMs: number | (() => number) = 0,
) {
  const clock = new FakeClock();
  const reports: ReportBody[] = [];
  const logs: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
  const runs = new Map<string, number>();
  const signals = new Map<string, AbortSignal>();
  const settlers = new Map<
    string,
    { resolve: (r: unknown) => void; reject: (e: unknown) => void }
  >();
  const count = defineHandler("count", z.object({}), async (ctx) => {
    runs.set(ctx.executionId, (runs.get(ctx.executionId) ?? 0) + 1);
    return { n: runs.get(ctx.executionId) };
  });
  const block = defineHandler(
    "block",
    z.object({}),
    (ctx) =>
      new Promise((resolve, reject) => {
        signals.set(ctx.executionId, ctx.signal);
        settlers.set(ctx.executionId, {
          resolve: (r) => resolve(r as Record<string, unknown>),
          reject,
        });
      }),
  );
  // Ignores its signal and never settles.
  const hang = defineHandler("hang", z.object({}), (ctx) => {
    signals.set(ctx.executionId, ctx.signal);
    return new Promise(() => {});
  });
  const boom = defineHandler("boom", z.object({}), async () => {
    throw new Error("boom");
  });
  const final = defineHandler("final", z.object({}), async () => {
    throw new HandlerFailure("bad input, do not retry", { retryable: false });
  });
  const progress = defineHandler("progress", z.object({}), async (ctx) => {
    ctx.progress(50, "half way");
    return { done: true };
  });
  // A handler in plain JavaScript may return a value that is not an object.
  const plain = defineHandler("plain", z.object({}), async () => "done" as never);
  // What a handler in plain JavaScript may pass: none of it may make an invalid report.
  const oddProgress = defineHandler("odd-progress", z.object({}), async (ctx) => {
    const loose = ctx.progress as (percent?: unknown, note?: unknown) => void;
    loose(Number.NaN);
    loose("50", "a string percent");
    loose(150);
    loose(Number.NEGATIVE_INFINITY, 42);
    return { done: true };
  });
  const journal = new Journal({
    path: ":memory:",
    maxOpen: capacity.maxPending ?? 100,
    now: () => clock.wallNow(),
  });
  journals.push(journal);
  const ex = new Executor({
    journal,
    envelope: (body, seq) => ({ ...envelope(body, clock.wallNow()), seq }) as Report,
    clock,
    handlers: new HandlerRegistry([
      ...BUILTIN_HANDLERS,
      count,
      block,
      hang,
      boom,
      final,
      progress,
      oddProgress,
      plain,
    ]),
    coordNow: () => clock.wallNow(),
    toMono: (t) => t - (clock.wallNow() - clock.monoNow()),
    uncertaintyMs: () =>
      typeof clockUncertaintyMs === "function" ? clockUncertaintyMs() : clockUncertaintyMs,
    concurrency: capacity.concurrency ?? 2,
    queue: capacity.queue ?? 4,
    tickMs: 20,
    publish: (message) => {
      const { v: _v, msgId: _m, sentAt: _s, seq: _q, ...body } = message;
      reports.push(body as ReportBody);
      const parsed = upMessageSchema.safeParse(message);
      if (!parsed.success) invalidReports.push({ message, issues: parsed.error.issues });
    },
    log: (level, message, fields) => logs.push({ level, message, ...(fields ? { fields } : {}) }),
  });
  executors.push(ex);
  const h: Harness = {
    clock,
    ex,
    reports,
    logs,
    runs,
    signals,
    async release(id, outcome = {}) {
      await flush();
      const s = settlers.get(id);
      if (!s) throw new Error(`no block run for ${id}`);
      if (outcome.error !== undefined) s.reject(outcome.error);
      else s.resolve(outcome.result);
      await flush();
    },
    of: <T extends ReportBody["type"]>(type: T, id?: string) =>
      reports.filter(
        (r): r is Body<T> => r.type === type && (id === undefined || r.executionId === id),
      ),
    dispatch(p) {
      const now = clock.wallNow();
      const d = dispatchSchema.parse({
        v: 1,
        type: "dispatch",
        msgId: `m-${p.executionId}-${p.round ?? 1}`,
        sentAt: now,
        round: 1,
        attempt: 1,
        handler: "echo",
        params: {},
        fireAt: now + 1000,
        deadline: now + 5000,
        timeoutMs: 10_000,
        priority: 0,
        ...p,
      });
      ex.dispatch(d);
      // A command due on arrival starts on the next turn of the wheel (after the journal
      // commits); let that turn happen, without moving time.
      clock.advance(0);
      return d;
    },
  };
  return h;
}

describe("Executor: firing at fireAt", () => {
  it("accepts a future dispatch, never starts it early, and reports echo's result", async () => {
    const h = setup();
    const d = h.dispatch({ executionId: "e1", params: { a: 1, b: "x" } });
    expect(h.reports).toEqual([{ type: "accepted", executionId: "e1", round: 1 }]);
    expect(h.ex.counts).toEqual({ running: 0, queued: 0, scheduled: 1, open: 1 });

    h.clock.advance(999);
    await flush();
    expect(h.of("started")).toEqual([]);

    h.clock.advance(1);
    await flush();
    const [started] = h.of("started", "e1");
    expect(started).toBeDefined();
    expect(started?.startedAt).toBeGreaterThanOrEqual(d.fireAt);
    expect(started?.lateMs).toBeGreaterThanOrEqual(0);
    expect(started?.lateMs).toBe((started?.startedAt ?? 0) - d.fireAt);

    const finished = h.of("finished", "e1");
    expect(finished).toHaveLength(1);
    expect(finished[0]).toMatchObject({
      round: 1,
      outcome: "succeeded",
      retryable: false,
      result: { echo: { a: 1, b: "x" } },
      startedAt: started?.startedAt,
    });
    expect(h.reports.map((r) => r.type)).toEqual(["accepted", "started", "finished"]);
    expect(h.ex.counts).toEqual({ running: 0, queued: 0, scheduled: 0, open: 0 });
  });

  it("starts a dispatch that is due on arrival at once, with its lateness", async () => {
    const h = setup();
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", fireAt: now - 30 });
    await flush();
    expect(h.of("started", "e1")[0]).toMatchObject({ startedAt: now, lateMs: 30 });
    expect(h.of("finished", "e1")[0]?.outcome).toBe("succeeded");
  });

  it("does not start early when the clock estimate moves back after scheduling", async () => {
    const h = setup();
    const d = h.dispatch({ executionId: "e1" });
    // The agent's estimate of coordinator time drops by 50 ms (a new clock sample).
    h.clock.jumpWall(-50);
    h.clock.advance(1000);
    await flush();
    expect(h.of("started")).toEqual([]);
    h.clock.advance(49);
    await flush();
    expect(h.of("started")).toEqual([]);
    h.clock.advance(1);
    await flush();
    const [started] = h.of("started", "e1");
    expect(started?.startedAt).toBeGreaterThanOrEqual(d.fireAt);
    expect(h.of("finished", "e1")[0]?.outcome).toBe("succeeded");
  });

  it("waits out the clock estimate's uncertainty, so it is not early even if the estimate is that far ahead", async () => {
    // The estimate may be ahead of the coordinator's true clock by up to 5 ms: a start at
    // fireAt + 5 on the estimate is at fireAt or later on the true clock.
    const h = setup({}, 5);
    const d = h.dispatch({ executionId: "e1" });
    h.clock.advance(d.fireAt - h.clock.wallNow() + 4);
    await flush();
    expect(h.of("started")).toEqual([]);
    h.clock.advance(1);
    await flush();
    const [started] = h.of("started", "e1");
    expect(started?.startedAt).toBeGreaterThanOrEqual(d.fireAt + 5);
  });

  it("keeps one wheel entry for a held command however often a better estimate brings it forward", async () => {
    let bound = 2_000;
    const h = setup({}, () => bound);
    const fireAt = h.clock.wallNow() + 3_600_000;
    const d = h.dispatch({
      executionId: "e1",
      handler: "count",
      fireAt,
      deadline: fireAt + 60_000,
    });
    const wheel = (h.ex as unknown as { wheel: { size: number } }).wheel;
    const before = wheel.size;
    // Samples narrow the bound a little each time, and each retime brings the start forward by
    // over 1 ms: the old entry used to stay on the wheel, one more per sample (a sample every
    // 25 s for a command held a day: thousands of entries, each a journal read when it came up).
    for (let i = 0; i < 1_000; i++) {
      bound -= 1.5;
      h.ex.retime();
    }
    expect(wheel.size).toBe(before);
    h.clock.advance(d.fireAt - h.clock.wallNow() + bound + 50);
    await flush();
    expect(h.of("started", "e1")).toHaveLength(1);
    expect(h.runs.get("e1")).toBe(1);
  });

  it("expires a scheduled one whose deadline has passed by the time it comes due", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "count" });
    h.clock.jumpWall(10_000);
    h.clock.advance(1000);
    await flush();
    expect(h.of("started")).toEqual([]);
    expect(h.runs.get("e1")).toBeUndefined();
    expect(h.of("finished", "e1")).toEqual([
      expect.objectContaining({ outcome: "expired", retryable: false }),
    ]);
    expect(h.of("finished", "e1")[0]).not.toHaveProperty("startedAt");
  });
});

describe("Executor: duplicates and rounds (rule 3)", () => {
  it("runs one (executionId, round) once however often it is delivered", async () => {
    const h = setup();
    for (let i = 0; i < 3; i++) h.dispatch({ executionId: "e1", handler: "count" });
    expect(h.of("accepted")).toHaveLength(1);
    expect(h.of("state")).toEqual([
      { type: "state", executionId: "e1", round: 1, localState: "scheduled" },
      { type: "state", executionId: "e1", round: 1, localState: "scheduled" },
    ]);
    h.clock.advance(1000);
    await flush();
    expect(h.runs.get("e1")).toBe(1);
    expect(h.of("started")).toHaveLength(1);
    expect(h.of("finished")).toHaveLength(1);

    // A fourth delivery after it finished: still not run again.
    h.dispatch({ executionId: "e1", handler: "count" });
    h.clock.advance(5000);
    await flush();
    expect(h.runs.get("e1")).toBe(1);
    expect(h.of("state").at(-1)).toEqual({
      type: "state",
      executionId: "e1",
      round: 1,
      localState: "succeeded",
    });
  });

  it("answers a duplicate of a running one with state running", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow() });
    await flush();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow() });
    expect(h.of("state")).toEqual([
      { type: "state", executionId: "e1", round: 1, localState: "running" },
    ]);
    expect(h.of("started")).toHaveLength(1);
  });

  it("replaces a not yet started one with a higher round; the old round never runs", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "count", round: 1 });
    h.dispatch({ executionId: "e1", handler: "count", round: 2 });
    expect(h.of("accepted")).toEqual([
      { type: "accepted", executionId: "e1", round: 1 },
      { type: "accepted", executionId: "e1", round: 2 },
    ]);
    expect(h.ex.counts.open).toBe(1);
    h.clock.advance(1000);
    await flush();
    expect(h.runs.get("e1")).toBe(1);
    expect(h.of("started").map((r) => r.round)).toEqual([2]);
    expect(h.of("finished").map((r) => r.round)).toEqual([2]);
  });

  it("replaces a queued one with a higher round", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "e1", handler: "count", fireAt: now, round: 1 });
    expect(h.ex.counts.queued).toBe(1);
    h.dispatch({ executionId: "e1", handler: "count", fireAt: now, round: 2 });
    expect(h.of("accepted", "e1").map((r) => r.round)).toEqual([1, 2]);
    expect(h.ex.counts).toMatchObject({ running: 1, queued: 1, open: 2 });
    await h.release("a");
    await flush();
    expect(h.runs.get("e1")).toBe(1);
    expect(h.of("started", "e1").map((r) => r.round)).toEqual([2]);
  });

  it("keeps the round it holds when it refuses the higher one: busy", async () => {
    const h = setup({ concurrency: 1, queue: 0 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    await flush();
    h.dispatch({ executionId: "e1", handler: "count", round: 1, fireAt: now + 1000 });
    h.clock.advance(1000);
    await flush();
    // Due, waiting for the one slot; a redispatch due now finds no room and is not taken.
    h.dispatch({ executionId: "e1", handler: "count", round: 2, fireAt: now + 1000 });
    expect(h.of("busy", "e1").map((r) => r.round)).toEqual([2]);
    await h.release("a");
    h.clock.advance(1000);
    await flush();
    expect(h.runs.get("e1")).toBe(1);
    expect(h.of("started", "e1").map((r) => r.round)).toEqual([1]);
  });

  it("keeps the round it holds when it refuses the higher one: shutting down", async () => {
    const h = setup();
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", handler: "count", round: 1, fireAt: now + 10_000 });
    h.ex.shuttingDown = true;
    h.dispatch({ executionId: "e1", handler: "count", round: 2, fireAt: now + 10_000 });
    expect(h.of("rejected", "e1")).toMatchObject([{ round: 2, reason: "shutting_down" }]);
    // Rule 13: it stays journaled, to fire after the restart.
    expect(h.ex.counts).toMatchObject({ scheduled: 1, open: 1 });
  });

  it("gives the place of a due command it let go in the same tick to the next (rule 7)", async () => {
    const h = setup({ concurrency: 1, queue: 0 });
    const now = h.clock.wallNow();
    // One batch of commands, handled in one turn: nothing has started between them.
    const due = (executionId: string, round = 1) =>
      dispatchSchema.parse({
        v: 1,
        type: "dispatch",
        msgId: `m-${executionId}-${round}`,
        sentAt: now,
        executionId,
        round,
        attempt: 1,
        handler: "count",
        params: {},
        fireAt: now,
        deadline: now + 5000,
        timeoutMs: 10_000,
        priority: 0,
      });
    h.ex.dispatch(due("a"));
    h.ex.cancel("a", 1);
    h.ex.dispatch(due("b"));
    // A replaced one frees its place the same way.
    h.ex.dispatch(due("b", 2));
    h.clock.advance(100);
    await flush();
    expect(h.of("busy")).toEqual([]);
    expect(h.of("finished", "a")).toMatchObject([{ outcome: "canceled" }]);
    expect(h.runs.get("a")).toBeUndefined();
    expect(h.of("started", "b").map((r) => r.round)).toEqual([2]);
    expect(h.runs.get("b")).toBe(1);
  });

  it("answers a higher round after start with the round it ran under", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow() });
    await flush();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow(), round: 2 });
    expect(h.of("state")).toEqual([
      { type: "state", executionId: "e1", round: 1, localState: "running" },
    ]);
    expect(h.of("accepted")).toHaveLength(1);
    await h.release("e1");
    await flush();
    expect(h.of("finished").map((r) => r.round)).toEqual([1]);

    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow(), round: 3 });
    expect(h.of("state").at(-1)).toEqual({
      type: "state",
      executionId: "e1",
      round: 1,
      localState: "succeeded",
    });
    expect(h.of("started")).toHaveLength(1);
  });

  it("runs a retry (a new attempt with a higher round) of an execution it finished", async () => {
    const h = setup();
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", handler: "boom", fireAt: now });
    await flush();
    expect(h.of("finished", "e1")[0]).toMatchObject({ outcome: "failed", retryable: true });

    h.dispatch({ executionId: "e1", handler: "count", fireAt: now, round: 2, attempt: 2 });
    await flush();
    expect(h.of("accepted").map((r) => r.round)).toEqual([1, 2]);
    expect(h.runs.get("e1")).toBe(1);
    expect(h.of("finished", "e1").map((r) => [r.round, r.outcome])).toEqual([
      [1, "failed"],
      [2, "succeeded"],
    ]);

    // The retry's own duplicate is still answered with state.
    h.dispatch({ executionId: "e1", handler: "count", fireAt: now, round: 2, attempt: 2 });
    expect(h.of("state").at(-1)).toMatchObject({ round: 2, localState: "succeeded" });
    expect(h.runs.get("e1")).toBe(1);
  });
});

describe("Executor: expired and invalid dispatches (rules 5, 6)", () => {
  it("reports a dispatch whose deadline passed before arrival expired, never started", async () => {
    const h = setup();
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", handler: "count", fireAt: now - 100, deadline: now - 1 });
    await flush();
    expect(h.reports).toHaveLength(1);
    const [finished] = h.of("finished", "e1");
    expect(finished).toMatchObject({ outcome: "expired", retryable: false, round: 1 });
    expect(finished).not.toHaveProperty("startedAt");
    expect(h.runs.get("e1")).toBeUndefined();
    expect(h.ex.counts.open).toBe(0);
    h.ex.query("e1", 1);
    expect(h.reports.at(-1)).toEqual({
      type: "state",
      executionId: "e1",
      round: 1,
      localState: "expired",
    });
  });

  it("rejects an unknown handler", () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "nope" });
    expect(h.reports).toEqual([
      {
        type: "rejected",
        executionId: "e1",
        round: 1,
        reason: "unknown_handler",
        message: 'no handler "nope" on this agent',
      },
    ]);
    expect(h.ex.counts.open).toBe(0);
    expect(h.logs).toEqual([
      {
        level: "warn",
        message: 'rejected e1: no handler "nope" on this agent',
        fields: { executionId: "e1", handler: "nope", code: "AX_HANDLER_UNKNOWN" },
      },
    ]);
  });

  it("rejects params that fail the handler's schema, naming the field", () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "sleep", params: { ms: "x" } });
    const [rejected] = h.of("rejected", "e1");
    expect(rejected?.reason).toBe("invalid_params");
    expect(rejected?.message).toBe("params.ms: expected number, got string");
    h.dispatch({ executionId: "e2", handler: "sleep", params: {} });
    expect(h.of("rejected", "e2")[0]?.message).toMatch(/^params\.ms: is required/);
    h.dispatch({ executionId: "e3", handler: "sleep", params: { ms: -1 } });
    expect(h.of("rejected", "e3")[0]?.message).toBe("params.ms: must be at least 0");
    expect(h.ex.counts.open).toBe(0);
    expect(h.logs.map((l) => l.fields?.code)).toEqual([
      "AX_HANDLER_PARAMS",
      "AX_HANDLER_PARAMS",
      "AX_HANDLER_PARAMS",
    ]);
  });

  it("rejects with journal_full when maxPending executions are held", () => {
    const h = setup({ maxPending: 2 });
    h.dispatch({ executionId: "e1" });
    h.dispatch({ executionId: "e2" });
    h.dispatch({ executionId: "e3" });
    expect(h.of("accepted").map((r) => r.executionId)).toEqual(["e1", "e2"]);
    expect(h.of("rejected")).toEqual([
      expect.objectContaining({ executionId: "e3", reason: "journal_full" }),
    ]);
    expect(h.ex.counts.open).toBe(2);
  });

  it("rejects with shutting_down once shutting down, but still answers duplicates", () => {
    const h = setup();
    h.dispatch({ executionId: "e1" });
    h.ex.shuttingDown = true;
    h.dispatch({ executionId: "e2" });
    h.dispatch({ executionId: "e1" });
    expect(h.of("rejected")).toEqual([
      {
        type: "rejected",
        executionId: "e2",
        round: 1,
        reason: "shutting_down",
        message: "the agent is shutting down",
      },
    ]);
    expect(h.of("state", "e1")).toHaveLength(1);
    expect(h.ex.counts.open).toBe(1);
  });
});

describe("Executor: slots and queue (rule 7)", () => {
  it("answers busy to a due-now dispatch when the slot is busy and the queue full, and forgets it", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "b", handler: "count", fireAt: now });
    h.dispatch({ executionId: "c", handler: "count", fireAt: now });
    expect(h.of("accepted").map((r) => r.executionId)).toEqual(["a", "b"]);
    expect(h.of("busy")).toEqual([{ type: "busy", executionId: "c", round: 1 }]);
    expect(h.ex.counts).toEqual({ running: 1, queued: 1, scheduled: 0, open: 2 });
    h.ex.query("c", 1);
    expect(h.reports.at(-1)).toEqual({
      type: "state",
      executionId: "c",
      round: 1,
      localState: "unknown",
    });
    h.ex.query("b", 1);
    expect(h.reports.at(-1)).toMatchObject({ localState: "queued" });

    await h.release("a");
    await flush();
    expect(h.runs.get("b")).toBe(1);
    expect(h.runs.get("c")).toBeUndefined();
  });

  it("counts the due-now dispatches of the same tick: a burst of 9 to 2 slots and a queue of 4 → 2 run, 4 wait, 3 busy", async () => {
    const h = setup({ concurrency: 2, queue: 4 });
    const now = h.clock.wallNow();
    const ids = Array.from({ length: 9 }, (_, i) => `burst-${i}`);
    // One batch, as the agent journals dispatches that arrive together: no wheel turn between.
    h.ex.batch(() => {
      for (const id of ids) {
        h.ex.dispatch(
          dispatchSchema.parse({
            v: 1,
            type: "dispatch",
            msgId: `m-${id}`,
            sentAt: now,
            executionId: id,
            round: 1,
            attempt: 1,
            handler: "block",
            params: {},
            fireAt: now,
            deadline: now + 5_000,
            timeoutMs: 10_000,
            priority: 0,
          }),
        );
      }
    });
    expect(h.of("accepted").map((r) => r.executionId)).toEqual(ids.slice(0, 6));
    expect(h.of("busy").map((r) => r.executionId)).toEqual(ids.slice(6));
    h.clock.advance(20);
    await flush();
    expect(h.ex.counts).toEqual({ running: 2, queued: 4, scheduled: 0, open: 6 });
    // Busy ones are not kept: the coordinator may route them elsewhere.
    h.ex.query("burst-8", 1);
    expect(h.reports.at(-1)).toMatchObject({ localState: "unknown" });
    // Once the tick has fired them, a slot that frees makes room for exactly one more.
    await h.release("burst-0");
    h.dispatch({ executionId: "late-1", handler: "count", fireAt: h.clock.wallNow() });
    h.dispatch({ executionId: "late-2", handler: "count", fireAt: h.clock.wallNow() });
    expect(h.of("accepted", "late-1")).toHaveLength(1);
    expect(h.of("busy", "late-2")).toHaveLength(1);
  });

  it("does not count a dispatch for later against the queue", () => {
    const h = setup({ concurrency: 1, queue: 0 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "soon", handler: "block", fireAt: now });
    for (let i = 0; i < 5; i++) h.dispatch({ executionId: `later-${i}`, fireAt: now + 1_000 });
    expect(h.of("accepted")).toHaveLength(6);
    expect(h.of("busy")).toHaveLength(0);
    h.dispatch({ executionId: "now-2", fireAt: now });
    expect(h.of("busy", "now-2")).toHaveLength(1);
  });

  it("keeps a scheduled one that comes due while slots are full, and starts it when one frees", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "b", handler: "block", fireAt: now });
    h.dispatch({ executionId: "s", handler: "count", fireAt: now + 100, deadline: now + 5000 });
    expect(h.of("accepted").map((r) => r.executionId)).toEqual(["a", "b", "s"]);
    h.clock.advance(100);
    await flush();
    // Waits beyond the queue bound: accepted work is never dropped.
    expect(h.ex.counts).toEqual({ running: 1, queued: 2, scheduled: 0, open: 3 });
    expect(h.of("started", "s")).toEqual([]);

    h.clock.advance(400);
    await h.release("a");
    await flush();
    expect(h.of("started").map((r) => r.executionId)).toEqual(["a", "b"]);
    await h.release("b");
    await flush();
    expect(h.runs.get("s")).toBe(1);
    const [started] = h.of("started", "s");
    expect(started?.lateMs).toBe(400);
    expect(h.of("finished", "s")[0]?.outcome).toBe("succeeded");
  });

  it("expires a queued one when its deadline passes before a slot frees", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "s", handler: "count", fireAt: now + 100, deadline: now + 300 });
    h.clock.advance(100);
    await flush();
    expect(h.ex.counts.queued).toBe(1);
    h.clock.advance(199);
    await flush();
    expect(h.of("finished", "s")).toEqual([]);
    h.clock.advance(2);
    await flush();
    expect(h.of("finished", "s")).toEqual([
      expect.objectContaining({ outcome: "expired", retryable: false }),
    ]);
    expect(h.of("finished", "s")[0]).not.toHaveProperty("startedAt");
    expect(h.ex.counts).toEqual({ running: 1, queued: 0, scheduled: 0, open: 1 });
    await h.release("a");
    await flush();
    expect(h.runs.get("s")).toBeUndefined();
    expect(h.of("started", "s")).toEqual([]);
  });

  it("does not expire a queued one early when the clock estimate moves back", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "q", handler: "count", fireAt: now, deadline: now + 300 });
    h.clock.jumpWall(-50);
    h.clock.advance(301);
    await flush();
    expect(h.of("finished", "q")).toEqual([]);
    h.clock.advance(50);
    await flush();
    expect(h.of("finished", "q")).toEqual([expect.objectContaining({ outcome: "expired" })]);
    expect(h.ex.counts).toMatchObject({ queued: 0, open: 1 });
  });

  it("expires a queued one whose deadline has passed when the slot frees", async () => {
    const h = setup({ concurrency: 1, queue: 2 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "q", handler: "count", fireAt: now, deadline: now + 300 });
    // The estimate of coordinator time jumps past q's deadline; the slot frees before its
    // deadline entry (on the monotonic clock) comes up.
    h.clock.jumpWall(1000);
    await h.release("a");
    await flush();
    expect(h.runs.get("q")).toBeUndefined();
    expect(h.of("finished", "q")).toEqual([expect.objectContaining({ outcome: "expired" })]);
    expect(h.ex.counts).toEqual({ running: 0, queued: 0, scheduled: 0, open: 0 });
  });

  it("starts queued ones by priority, higher first, in arrival order among equals", async () => {
    const h = setup({ concurrency: 1, queue: 4 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "low", handler: "block", fireAt: now, priority: -1 });
    h.dispatch({ executionId: "mid1", handler: "block", fireAt: now, priority: 0 });
    h.dispatch({ executionId: "high", handler: "block", fireAt: now, priority: 5 });
    h.dispatch({ executionId: "mid2", handler: "block", fireAt: now, priority: 0 });
    for (const id of ["a", "high", "mid1", "mid2"]) {
      await h.release(id);
      await flush();
    }
    expect(h.of("started").map((r) => r.executionId)).toEqual(["a", "high", "mid1", "mid2", "low"]);
  });
});

describe("Executor: timeout", () => {
  it("times out a handler that ignores its signal, after timeoutMs", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "hang", fireAt: h.clock.wallNow(), timeoutMs: 500 });
    await flush();
    const startedAt = h.of("started", "e1")[0]?.startedAt;
    h.clock.advance(499);
    await flush();
    expect(h.of("finished")).toEqual([]);
    expect(h.signals.get("e1")?.aborted).toBe(false);
    h.clock.advance(1);
    await flush();
    expect(h.of("finished", "e1")).toEqual([
      expect.objectContaining({
        outcome: "timed_out",
        retryable: true,
        message: "ran longer than timeoutMs 500",
        startedAt,
        finishedAt: (startedAt ?? 0) + 500,
      }),
    ]);
    expect(h.signals.get("e1")?.aborted).toBe(true);
    expect(h.ex.counts).toEqual({ running: 0, queued: 0, scheduled: 0, open: 0 });
    expect(h.ex.runningRefs()).toEqual([]);
    h.ex.query("e1", 1);
    expect(h.reports.at(-1)).toMatchObject({ type: "state", localState: "timed_out" });
  });

  it("frees the slot of a timed-out run for the next queued one", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", handler: "hang", fireAt: now, timeoutMs: 500 });
    h.dispatch({ executionId: "e2", handler: "count", fireAt: now });
    h.clock.advance(500);
    await flush();
    expect(h.runs.get("e2")).toBe(1);
  });
});

describe("Executor: cancel and query (rule 8)", () => {
  it("cancels a scheduled one: finished canceled, and it never runs", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "count" });
    h.ex.query("e1", 1);
    expect(h.reports.at(-1)).toMatchObject({ type: "state", localState: "scheduled" });
    h.ex.cancel("e1", 1);
    const [finished] = h.of("finished", "e1");
    expect(finished).toMatchObject({ outcome: "canceled", retryable: false, round: 1 });
    expect(finished).not.toHaveProperty("startedAt");
    h.clock.advance(2000);
    await flush();
    expect(h.runs.get("e1")).toBeUndefined();
    expect(h.of("started")).toEqual([]);
    expect(h.ex.counts.open).toBe(0);
  });

  it("cancels a queued one", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "a", handler: "block", fireAt: now });
    h.dispatch({ executionId: "q", handler: "count", fireAt: now });
    h.ex.cancel("q", 1);
    expect(h.of("finished", "q")).toEqual([expect.objectContaining({ outcome: "canceled" })]);
    expect(h.ex.counts).toEqual({ running: 1, queued: 0, scheduled: 0, open: 1 });
    await h.release("a");
    await flush();
    expect(h.runs.get("q")).toBeUndefined();
  });

  it("cancels a running one: aborts it, and reports canceled once it ends by throwing", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: now });
    h.dispatch({ executionId: "e2", handler: "count", fireAt: now });
    await flush();
    const startedAt = h.of("started", "e1")[0]?.startedAt;
    expect(h.ex.runningRefs()).toEqual([{ executionId: "e1", round: 1 }]);
    h.clock.advance(250);
    h.ex.cancel("e1", 1);
    expect(h.signals.get("e1")?.aborted).toBe(true);
    // Nothing is said until the handler ends: whether the cancel stopped it is its end's to say.
    expect(h.of("finished", "e1")).toEqual([]);
    h.ex.cancel("e1", 1); // a repeated cancel changes nothing
    h.clock.advance(50);
    await h.release("e1", { error: new Error("aborted") });
    await flush();
    expect(h.of("finished", "e1")).toEqual([
      expect.objectContaining({
        outcome: "canceled",
        retryable: false,
        startedAt,
        finishedAt: (startedAt ?? 0) + 300,
      }),
    ]);
    // Its slot went to the queued one.
    expect(h.runs.get("e2")).toBe(1);
    h.clock.advance(CANCEL_GRACE_MS);
    await flush();
    expect(h.of("finished", "e1")).toHaveLength(1);
    h.ex.query("e1", 1);
    expect(h.reports.at(-1)).toMatchObject({ type: "state", localState: "canceled" });
  });

  it("a running one that returns after the cancel came had finished: succeeded, not canceled", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow() });
    await flush();
    h.ex.cancel("e1", 1);
    await h.release("e1", { result: { done: true } });
    await flush();
    expect(h.of("finished", "e1")).toEqual([
      expect.objectContaining({
        outcome: "succeeded",
        result: { done: true },
        message: "ok: it finished before the cancel stopped it",
      }),
    ]);
    h.ex.query("e1", 1);
    expect(h.reports.at(-1)).toMatchObject({ type: "state", localState: "succeeded" });
  });

  it("one that ignores the cancel is reported canceled after the grace, and its later result ignored", async () => {
    const h = setup({ concurrency: 1, queue: 1 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: now, timeoutMs: 1_000 });
    h.dispatch({ executionId: "e2", handler: "count", fireAt: now });
    await flush();
    h.ex.cancel("e1", 1);
    // Its timeout passes meanwhile: still the cancel's to decide.
    h.clock.advance(CANCEL_GRACE_MS - 1);
    await flush();
    expect(h.of("finished", "e1")).toEqual([]);
    expect(h.runs.get("e2")).toBeUndefined();
    h.clock.advance(1);
    await flush();
    expect(h.of("finished", "e1")).toEqual([
      expect.objectContaining({ outcome: "canceled", message: "canceled by the coordinator" }),
    ]);
    expect(h.runs.get("e2")).toBe(1);
    await h.release("e1", { result: { late: true } });
    await flush();
    expect(h.of("finished", "e1")).toHaveLength(1);
  });

  it("ignores the later rejection of a canceled run too", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "block", fireAt: h.clock.wallNow() });
    await flush();
    h.ex.cancel("e1", 1);
    await h.release("e1", { error: new Error("aborted") });
    await flush();
    expect(h.of("finished", "e1").map((r) => r.outcome)).toEqual(["canceled"]);
  });

  it("answers a cancel after finish with state too_late and the final local state", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", fireAt: h.clock.wallNow() });
    await flush();
    h.ex.cancel("e1", 1);
    expect(h.reports.at(-1)).toEqual({
      type: "state",
      executionId: "e1",
      round: 1,
      localState: "succeeded",
      reason: "too_late",
    });
    expect(h.of("finished")).toHaveLength(1);
  });

  it("answers a cancel of an update that switched to its new version too_late: the next process reports it", async () => {
    const h = setup();
    h.dispatch({ executionId: "u1", handler: "block", fireAt: h.clock.wallNow() });
    await flush();
    // The updater switched the device to the new version; this process only drains now.
    h.ex.detach("u1");
    h.ex.cancel("u1", 1);
    expect(h.reports.at(-1)).toEqual({
      type: "state",
      executionId: "u1",
      round: 1,
      localState: "running",
      reason: "too_late",
    });
    // Nothing ended it here: it stays running in the journal for the next process to settle.
    expect(h.of("finished", "u1")).toEqual([]);
    expect(h.signals.get("u1")?.aborted).toBe(false);
  });

  it("answers a cancel or query for an unknown execution with state unknown", () => {
    const h = setup();
    h.ex.cancel("nope", 3);
    h.ex.query("nope", 3);
    expect(h.reports).toEqual([
      { type: "state", executionId: "nope", round: 3, localState: "unknown", reason: "unknown" },
      { type: "state", executionId: "nope", round: 3, localState: "unknown" },
    ]);
  });

  it("does not cancel on a stale round", () => {
    const h = setup();
    h.dispatch({ executionId: "e1", round: 2 });
    h.ex.cancel("e1", 1);
    expect(h.reports.at(-1)).toEqual({
      type: "state",
      executionId: "e1",
      round: 2,
      localState: "scheduled",
      reason: "stale_round",
    });
    expect(h.ex.counts.open).toBe(1);
  });
});

describe("Executor: handler outcomes", () => {
  it("reports a thrown plain Error as failed and retryable", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "boom", fireAt: h.clock.wallNow() });
    await flush();
    const [finished] = h.of("finished", "e1");
    expect(finished).toMatchObject({ outcome: "failed", retryable: true, message: "boom" });
    expect(finished?.startedAt).toBe(h.of("started", "e1")[0]?.startedAt);
  });

  it("honours HandlerFailure's retryable: false", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "final", fireAt: h.clock.wallNow() });
    await flush();
    expect(h.of("finished", "e1")[0]).toMatchObject({
      outcome: "failed",
      retryable: false,
      message: "bad input, do not retry",
    });
  });

  it("runs the fail built-in with its params", async () => {
    const h = setup();
    const now = h.clock.wallNow();
    h.dispatch({
      executionId: "f1",
      handler: "fail",
      fireAt: now,
      params: { retryable: false, message: "told to" },
    });
    h.dispatch({ executionId: "f2", handler: "fail", fireAt: now });
    await flush();
    expect(h.of("finished", "f1")[0]).toMatchObject({
      outcome: "failed",
      retryable: false,
      message: "told to",
    });
    expect(h.of("finished", "f2")[0]).toMatchObject({
      outcome: "failed",
      retryable: true,
      message: "failed on purpose",
    });
  });

  it("reports progress while running", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "progress", fireAt: h.clock.wallNow() });
    await flush();
    expect(h.reports.map((r) => r.type)).toEqual(["accepted", "started", "progress", "finished"]);
    expect(h.of("progress")[0]).toEqual({
      type: "progress",
      executionId: "e1",
      round: 1,
      percent: 50,
      note: "half way",
    });
  });

  it("sends only valid progress, whatever the handler passes (each report is checked after the test)", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "odd-progress", fireAt: h.clock.wallNow() });
    await flush();
    const base = { type: "progress", executionId: "e1", round: 1 };
    expect(h.of("progress")).toEqual([
      base,
      { ...base, note: "a string percent" },
      { ...base, percent: 100 },
      { ...base, percent: 0, note: "42" },
    ]);
    expect(h.of("finished")[0]?.outcome).toBe("succeeded");
  });

  it("says a result that is not an object was not sent, rather than dropping it unsaid", async () => {
    const h = setup();
    h.dispatch({ executionId: "e1", handler: "plain", fireAt: h.clock.wallNow() });
    await flush();
    const [finished] = h.of("finished", "e1");
    expect(finished?.outcome).toBe("succeeded");
    // "done" serialises, as 6 bytes of JSON: the marker says so.
    expect(finished?.result).toEqual({ truncated: true, reason: "not_json", bytes: 6 });
    expect(finished?.message).toMatch(/^ok \[result not sent: /);
  });
});

describe("Executor: counts and runningRefs", () => {
  it("reports what it holds", async () => {
    const h = setup({ concurrency: 2, queue: 4 });
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "r1", handler: "block", fireAt: now });
    h.dispatch({ executionId: "r2", handler: "block", fireAt: now, round: 3 });
    h.dispatch({ executionId: "q1", handler: "block", fireAt: now });
    h.dispatch({ executionId: "s1", handler: "block" });
    h.dispatch({ executionId: "s2", handler: "block" });
    await flush();
    expect(h.ex.counts).toEqual({ running: 2, queued: 1, scheduled: 2, open: 5 });
    expect(h.ex.runningRefs()).toEqual([
      { executionId: "r1", round: 1 },
      { executionId: "r2", round: 3 },
    ]);
    await h.release("r1");
    await flush();
    expect(h.ex.counts).toEqual({ running: 2, queued: 0, scheduled: 2, open: 4 });
    expect(h.ex.runningRefs().map((r) => r.executionId)).toEqual(["r2", "q1"]);
  });
});

describe("Executor: result size", () => {
  it("reports a handler's 1 MiB result once, as a marker, in a report that decodes (issue 15)", async () => {
    const h = setup();
    const now = h.clock.wallNow();
    h.dispatch({ executionId: "mib", handler: "block", fireAt: now });
    await h.release("mib", { result: { blob: "y".repeat(1024 * 1024) } });
    const finished = h.of("finished", "mib");
    expect(finished).toHaveLength(1);
    expect(finished[0]?.result).toEqual({
      truncated: true,
      reason: "too_large",
      bytes: 1024 * 1024 + 11,
    });
    // What the outbox holds, and will re-send until acknowledged, is a report the coordinator
    // accepts: within the payload limit and valid, so it is acknowledged and sent no more.
    const journal = journals[journals.length - 1] as Journal;
    const pending = journal.pendingReports().filter((r) => r.type === "finished");
    expect(pending).toHaveLength(1);
    const bytes = encode(pending[0] as Report);
    expect(bytes.length).toBeLessThan(DEFAULT_MAX_PAYLOAD_BYTES);
    expect(decode(topics().up("a1"), bytes).ok).toBe(true);
  });

  it("replaces a result too large for a report with a note of its size", async () => {
    const h = setup();
    h.dispatch({ executionId: "big", handler: "echo", params: { blob: "x".repeat(70_000) } });
    h.clock.advance(1000);
    await flush();
    const f = h.of("finished", "big")[0];
    expect(f?.outcome).toBe("succeeded");
    expect(f?.result).toEqual({ truncated: true, reason: "too_large", bytes: 70_020 });
    expect(f?.message).toBe(
      "ok [result not sent: its 70020 bytes would not fit the 65536-byte payload limit]",
    );
  });
});
