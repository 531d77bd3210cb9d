import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import type { ExecState } from "../../shared/fsm.js";
import { newExecution } from "../../test/contract/store.contract.js";
import { type CoordinatorConfigInput, parseCoordinatorConfig } from "../config.js";
import { CoordinatorLink } from "../link/mqtt-link.js";
import type { Store } from "../store/port.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import type { EngineContext, Logger } from "./context.js";
import { EngineEventBus } from "./events.js";
import { RETENTION_BATCH, RetentionLoop } from "./retention.js";
import { newExecutionId } from "./transitions.js";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

function context(
  store: Store,
  clock: FakeClock,
  over: Partial<CoordinatorConfigInput> = {},
  log: Logger = () => {},
): EngineContext {
  const config = parseCoordinatorConfig({ mqtt: { url: "mqtt://127.0.0.1:1" }, ...over });
  // Retention never talks to agents; the link is built but never started, so it opens nothing.
  const link = new CoordinatorLink(
    { url: config.mqtt.url, clientId: `ax-c-${Math.random().toString(36).slice(2)}` },
    () => clock.wallNow(),
  );
  return { config, store, link, clock, log, events: new EngineEventBus() };
}

/** Creates execution `id` and writes it into `state`, finished at wall time `at`. */
async function finished(
  store: Store,
  id: string,
  at: number,
  state: ExecState = "SUCCEEDED",
): Promise<void> {
  await store.createExecution(
    newExecution(id, {
      kind: "command",
      jobId: null,
      jobVersion: null,
      params: {},
      targetAgentId: "ag-1",
      fireAt: at - 10,
      deadline: at + 60_000,
      maxAttempts: 1,
      maxDispatches: 3,
      createdAt: at - 10,
    }),
    at - 10,
  );
  const written = await store.applyTransition({
    executionId: id,
    expected: { state: "PENDING", round: 0 },
    next: { state, round: 0, attempt: 1, maxAttempts: 1, dispatches: 0, maxDispatches: 3 },
    patch: { finishedAt: at, message: "done" },
    at,
    event: "finished",
  });
  if (!written) throw new Error(`could not finish ${id}`);
}

/** Lets promise callbacks and I/O callbacks run. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Settles `pending`, firing the loop's 0 ms yields on the fake clock as they come. */
async function drive<T>(clock: FakeClock, pending: Promise<T>): Promise<T> {
  let outcome = undefined as { value: T } | { error: unknown } | undefined;
  pending.then(
    (value) => {
      outcome = { value };
    },
    (error: unknown) => {
      outcome = { error };
    },
  );
  while (outcome === undefined) {
    clock.advance(0);
    await flush();
  }
  if ("error" in outcome) throw outcome.error;
  return outcome.value;
}

describe("RetentionLoop", () => {
  let dir: string;
  let clock: FakeClock;
  let store: SqliteStore;
  const loops: RetentionLoop[] = [];
  const raws: Database.Database[] = [];

  const loop = (ctx: EngineContext) => {
    const l = new RetentionLoop(ctx);
    loops.push(l);
    return l;
  };
  const count = (table: "executions" | "timeline" | "fires") => {
    const db = new Database(join(dir, "ax.sqlite"), { readonly: true });
    try {
      return (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
    } finally {
      db.close();
    }
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "ax-retention-"));
    clock = new FakeClock({ wall: 1_700_000_000_000 });
    store = new SqliteStore({ path: join(dir, "ax.sqlite"), now: () => clock.wallNow() });
  });
  afterEach(async () => {
    for (const l of loops.splice(0)) {
      l.close();
      await l.idle();
    }
    for (const db of raws.splice(0)) db.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("keeps what is younger than retentionDays and anything not yet finished", async () => {
    const now = clock.wallNow();
    await finished(store, "old-ok", now - 31 * DAY);
    await finished(store, "old-failed", now - 30 * DAY - 1, "FAILED");
    await finished(store, "young", now - 29 * DAY);
    await finished(store, "old-running", now - 40 * DAY, "RUNNING");
    const l = loop(context(store, clock, { retentionDays: 30 }));
    expect(await drive(clock, l.runOnce())).toBe(2);
    expect((await store.listExecutions()).map((e) => e.id).sort()).toEqual([
      "old-running",
      "young",
    ]);
    expect(await drive(clock, l.runOnce())).toBe(0);
  });

  it(`purges in batches of ${RETENTION_BATCH}, yielding to the clock between them`, async () => {
    const old = clock.wallNow() - 2 * DAY;
    for (let i = 0; i < 1_200; i++) await finished(store, `ex-${i}`, old + i);
    const l = loop(context(store, clock, { retentionDays: 1 }));
    let result: number | undefined;
    void l.runOnce().then((n) => {
      result = n;
    });
    await flush();
    // One batch went; the next waits for a 0 ms timer on the injected clock.
    expect(count("executions")).toBe(700);
    expect(clock.pendingTimers).toBe(1);
    await flush();
    expect(count("executions")).toBe(700);
    clock.advance(0);
    await flush();
    expect(count("executions")).toBe(200);
    expect(result).toBeUndefined();
    clock.advance(0);
    await flush();
    // A short batch ends the pass.
    expect(result).toBe(1_200);
    expect(count("executions")).toBe(0);
    expect(count("timeline")).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it("a call during a pass joins it", async () => {
    const old = clock.wallNow() - 2 * DAY;
    for (let i = 0; i < 600; i++) await finished(store, `ex-${i}`, old + i);
    const l = loop(context(store, clock, { retentionDays: 1 }));
    const first = l.runOnce();
    const second = l.runOnce();
    expect(second).toBe(first);
    expect(await drive(clock, second)).toBe(600);
  });

  it("close stops a pass at the next batch boundary and leaves no timer", async () => {
    const old = clock.wallNow() - 2 * DAY;
    for (let i = 0; i < 1_200; i++) await finished(store, `ex-${i}`, old + i);
    const l = loop(context(store, clock, { retentionDays: 1 }));
    const pass = l.runOnce();
    await flush();
    expect(clock.pendingTimers).toBe(1);
    l.close();
    expect(await pass).toBe(RETENTION_BATCH);
    expect(clock.pendingTimers).toBe(0);
    expect(count("executions")).toBe(700);
    expect(await l.runOnce()).toBe(0);
  });

  it("start runs a pass at once, then every min(1 h, retention / 24)", async () => {
    const l = loop(context(store, clock, { retentionDays: 1 }));
    expect(l.intervalMs).toBe(HOUR);
    expect(loop(context(store, clock, { retentionDays: 3650 })).intervalMs).toBe(HOUR);
    const cutoff = () => clock.wallNow() - DAY;
    await finished(store, "a", cutoff() - 1);
    l.start();
    clock.advance(0);
    await flush();
    expect(count("executions")).toBe(0);
    await finished(store, "b", cutoff() - 1);
    clock.advance(HOUR - 1);
    await flush();
    expect(count("executions")).toBe(1);
    clock.advance(1);
    await flush();
    expect(count("executions")).toBe(0);
    expect(clock.pendingTimers).toBe(1);
    l.close();
    expect(clock.pendingTimers).toBe(0);
  });

  it("logs a failed pass and keeps its schedule", async () => {
    const lines: string[] = [];
    const l = loop(
      context(store, clock, {}, (level, msg) => {
        lines.push(`${level} ${msg}`);
      }),
    );
    await store.close();
    l.start();
    clock.advance(0);
    await flush();
    expect(lines).toEqual([
      "error retention pass failed: store: purgeFinishedBefore failed: The database connection is not open",
    ]);
    expect(clock.pendingTimers).toBe(1);
    clock.advance(HOUR);
    await flush();
    expect(lines).toHaveLength(2);
  });

  it("config: retentionDays and maxErrorTextBytes have defaults and bounds", () => {
    const base = { mqtt: { url: "mqtt://127.0.0.1:1" } };
    expect(parseCoordinatorConfig(base)).toMatchObject({
      retentionDays: 30,
      maxErrorTextBytes: 2048,
    });
    const cases: [Record<string, unknown>, string][] = [
      [{ retentionDays: 0 }, "retentionDays: Too small: expected number to be >=1"],
      [{ retentionDays: 3651 }, "retentionDays: Too big: expected number to be <=3650"],
      [{ retentionDays: 1.5 }, "retentionDays: Invalid input: expected int, received number"],
      [{ maxErrorTextBytes: 255 }, "maxErrorTextBytes: Too small: expected number to be >=256"],
      [{ maxErrorTextBytes: 65_537 }, "maxErrorTextBytes: Too big: expected number to be <=65536"],
    ];
    for (const [over, line] of cases) {
      expect(() => parseCoordinatorConfig({ ...base, ...over })).toThrow(
        expect.objectContaining({
          code: "AX_CONFIG_INVALID",
          message: `config: invalid coordinator config\n${line}`,
        }),
      );
    }
  });

  /**
   * DESIGN §6, "the store never grows without bound": 120 simulated days of 1,000 executions a
   * day, each with 5 timeline entries, a ~1 KiB message and a fire record, 30 days' retention,
   * the loop run once a day. The load is written straight into the file in one transaction a day
   * (the store's one-transaction-per-call path would take minutes); the rows have the shape the
   * store writes, and the purge goes through the store. 1,000 a day rather than more keeps the
   * test near 10 s on a busy two-core machine; the plateau does not depend on the rate.
   */
  it("keeps the store bounded under a steady load: rows and file size plateau", async () => {
    const perDay = 1_000;
    const jobs = 20;
    const days = 120;
    const path = join(dir, "ax.sqlite");
    const db = new Database(path);
    raws.push(db);
    db.pragma("synchronous = NORMAL");
    const putJob = db.prepare(
      `INSERT INTO jobs (id, version, definition, next_fire_at, paused, created_at, updated_at)
       VALUES (?, 1, '{}', ?, 0, ?, ?)
       ON CONFLICT (id) DO UPDATE SET next_fire_at = excluded.next_fire_at`,
    );
    const putFire = db.prepare(
      "INSERT INTO fires (job_id, scheduled_for, fired_at, execution_id) VALUES (?, ?, ?, ?)",
    );
    const putExecution = db.prepare(
      `INSERT INTO executions (id, kind, job_id, job_version, handler, params, target_agent_id,
         agent_id, state, round, attempt, max_attempts, dispatches, max_dispatches, fire_at,
         deadline, timeout_ms, dispatch_timeout_ms, priority, retry_base_ms, retry_cap_ms,
         created_at, updated_at, dispatched_at, started_at, finished_at, late_ms, next_attempt_at,
         result, message, message_bytes)
       VALUES (@id, 'job', @jobId, 1, 'sensor.read', '{"pin":4}', NULL, 'agent-7', @state, 1, 1,
         3, 1, 3, @t, @t + 60000, 30000, 5000, 0, 1000, 60000, @t - 500, @t + 900, @t - 400,
         @t, @t + 900, 0, NULL, '{"ok":false}', @message, @bytes)`,
    );
    const putTimeline = db.prepare(
      `INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
       VALUES (?, ?, ?, ?, ?, ?, 1, 'agent-7', ?)`,
    );
    const steps = [
      ["created", null, "PENDING"],
      ["dispatch", "PENDING", "DISPATCHED"],
      ["accepted", "DISPATCHED", "SCHEDULED"],
      ["started", "SCHEDULED", "RUNNING"],
      ["finished", "RUNNING", "FAILED"],
    ] as const;
    const loadDay = db.transaction((start: number) => {
      const gap = DAY / perDay;
      for (let i = 0; i < perDay; i++) {
        const t = start + i * gap;
        const id = newExecutionId(t);
        const jobId = `job-${i % jobs}`;
        // ~1 KiB of error text, different every time (no page compresses better than another).
        const message = `E${i}: ${id.repeat(40)}`.slice(0, 1_000);
        putFire.run(jobId, t, t - 500, id);
        putExecution.run({
          id,
          jobId,
          t,
          state: i % 10 === 0 ? "SUCCEEDED" : "FAILED",
          message,
          bytes: message.length,
        });
        for (const [seq, [event, from, to]] of steps.entries()) {
          putTimeline.run(id, seq + 1, t + seq * 200, event, from, to, seq === 0 ? null : "{}");
        }
      }
      for (let j = 0; j < jobs; j++) putJob.run(`job-${j}`, start + DAY, start, start);
    });

    const l = loop(context(store, clock, { retentionDays: 30 }));
    const rows = (table: string) =>
      (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
    const sampled = new Set([10, 30, 35, 60, 90, 120]);
    const figures = new Map<number, { executions: number; timeline: number; fires: number }>();
    const fileBytes: number[] = [];
    const started = performance.now();
    for (let day = 1; day <= days; day++) {
      loadDay(clock.wallNow());
      clock.advance(DAY);
      await drive(clock, l.runOnce());
      // Everything into the main file, the WAL truncated: the file's size is the store's size.
      db.pragma("wal_checkpoint(TRUNCATE)");
      fileBytes.push(statSync(path).size);
      if (sampled.has(day)) {
        figures.set(day, {
          executions: rows("executions"),
          timeline: rows("timeline"),
          fires: rows("fires"),
        });
      }
    }
    const pageSize = db.pragma("page_size", { simple: true }) as number;
    expect(fileBytes.at(-1)).toBe(pageSize * (db.pragma("page_count", { simple: true }) as number));
    const at = (day: number) => ({ ...figures.get(day)!, bytes: fileBytes[day - 1]! });
    const mib = (b: number) => (b / 2 ** 20).toFixed(1);
    console.log(
      `retention simulation: ${days} days in ${((performance.now() - started) / 1000).toFixed(1)} s;`,
      [10, 30, 35, 60, 90, 120]
        .map((d) => `day ${d}: ${at(d).executions} executions, ${mib(at(d).bytes)} MiB`)
        .join("; "),
    );

    // 30 days are kept: the day's load times the retention, give or take the day in progress.
    expect(at(60).executions).toBeGreaterThanOrEqual(30 * perDay);
    expect(at(60).executions).toBeLessThanOrEqual(31 * perDay);
    for (const d of [90, 120]) {
      expect(Math.abs(at(d).executions / at(60).executions - 1)).toBeLessThan(0.1);
      expect(Math.abs(at(d).timeline / at(60).timeline - 1)).toBeLessThan(0.1);
      expect(Math.abs(at(d).fires / at(60).fires - 1)).toBeLessThan(0.1);
    }
    expect(at(120).timeline).toBe(at(120).executions * steps.length);
    // Before the first purge the file grows every day; after it, freed pages are reused.
    expect(at(30).bytes).toBeGreaterThan(at(10).bytes * 2);
    const plateau = at(35).bytes;
    for (let d = 36; d <= days; d++) {
      expect(at(d).bytes / plateau, `day ${d}`).toBeLessThan(1.15);
    }
  }, 60_000);
});
