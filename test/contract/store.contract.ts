import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type JobDefinition, jobDefinitionSchema } from "../../coordinator/domain/job.js";
import type { RolloutRecord } from "../../coordinator/domain/rollout.js";
import {
  type AgentRecord,
  type AlertRecord,
  type EventFiring,
  type ExecutionPatch,
  type ExecutionRecord,
  followUpKey,
  type NewExecution,
  type Store,
  type TransitionWrite,
} from "../../coordinator/store/port.js";
import {
  EXEC_STATES,
  type ExecSnapshot,
  type ExecState,
  TERMINAL_STATES,
} from "../../shared/fsm.js";
import { bundlesContract } from "./store-bundles.contract.js";
import { operatorContract } from "./store-operator.contract.js";

/** What an adapter's test file hands the contract suite: a fresh, empty store. */
export interface StoreFixture {
  store: Store;
  /** Closes the store (again, if a test closed it) and removes its database. */
  cleanup(): Promise<void>;
  /**
   * Opens a second store on the same database: a second coordinator, or the same one after a
   * restart. Tests that need it are skipped when an adapter cannot provide it.
   */
  openAnother?(): Promise<Store>;
}

/** A job definition as the coordinator stores it: parsed, defaults filled in. */
export function jobDef(id: string, over: Record<string, unknown> = {}): JobDefinition {
  return jobDefinitionSchema.parse({
    id,
    handler: "echo",
    trigger: { type: "every", every: 1000 },
    ...over,
  });
}

export function newExecution(id: string, over: Partial<NewExecution> = {}): NewExecution {
  return {
    id,
    kind: "job",
    jobId: "job-a",
    jobVersion: 1,
    handler: "echo",
    params: { n: 1, nested: { list: [1, "two"] } },
    targetAgentId: null,
    fireAt: 1_000,
    deadline: 61_000,
    timeoutMs: 60_000,
    dispatchTimeoutMs: 5_000,
    maxAttempts: 3,
    maxDispatches: 4,
    priority: 0,
    retryBaseMs: 1_000,
    retryCapMs: 60_000,
    createdAt: 900,
    ...over,
  };
}

export function agentRecord(agentId: string, over: Partial<AgentRecord> = {}): AgentRecord {
  return {
    agentId,
    instanceId: `${agentId}-i1`,
    journalId: `${agentId}-j1`,
    ackedSeq: 0,
    status: "online",
    profile: "linux-arm64",
    bundleVersion: "1.2.3",
    bundleSha256: "ab".repeat(32),
    handlers: ["echo", "mqtt.publish"],
    concurrency: 4,
    queue: 16,
    tags: { site: "north", rack: "7" },
    connectedAt: 1_000,
    lastSeenAt: 2_000,
    clockOffsetMs: -3.5,
    clockUncertaintyMs: 1.25,
    load: 0.5,
    journalDepth: 2,
    outboxDepth: 1,
    ...over,
  };
}

function snapshot(e: ExecSnapshot): ExecSnapshot {
  return {
    state: e.state,
    round: e.round,
    attempt: e.attempt,
    maxAttempts: e.maxAttempts,
    dispatches: e.dispatches,
    maxDispatches: e.maxDispatches,
  };
}

/** A transition write from `from` (as read) to `from` changed by `next`. */
function move(
  from: ExecutionRecord,
  next: Partial<ExecSnapshot>,
  event: string,
  at: number,
  patch: ExecutionPatch = {},
  detail?: Record<string, unknown>,
): TransitionWrite {
  return {
    executionId: from.id,
    expected: { state: from.state, round: from.round },
    next: { ...snapshot(from), ...next },
    patch,
    at,
    event,
    ...(detail === undefined ? {} : { detail }),
  };
}

/** A pending alert of an execution that failed (ex-1). */
function alertRecord(id: string, createdAt: number, over: Partial<AlertRecord> = {}): AlertRecord {
  return {
    id,
    kind: "execution.failed",
    url: "http://hooks.example/a",
    payload: { id, kind: "execution.failed", executionId: "ex-1" },
    status: "pending",
    attempts: 0,
    lastError: null,
    createdAt,
    updatedAt: createdAt,
    ...over,
  };
}

async function mustGet(store: Store, id: string): Promise<ExecutionRecord> {
  const e = await store.getExecution(id);
  if (!e) throw new Error(`execution ${id} not found`);
  return e;
}

/**
 * The Store port's contract, run against every adapter (SQLite now, PostgreSQL later). Each test
 * gets a fresh empty store from `makeStore`.
 */
export function storeContract(name: string, makeStore: () => Promise<StoreFixture>): void {
  describe(`Store contract: ${name}`, () => {
    let fx: StoreFixture;
    let store: Store;

    beforeEach(async () => {
      fx = await makeStore();
      store = fx.store;
    });
    afterEach(async () => {
      await fx.cleanup();
    });

    /** Opens a second store on the same database; `openAnother` exists where this is called. */
    const another = (): Promise<Store> => {
      if (!fx.openAnother) throw new Error(`${name} cannot open a second store`);
      return fx.openAnother();
    };

    /** Puts job `id` due at `nextFireAt` and fires it once, returning the execution. */
    async function firedExecution(
      id: string,
      over: Partial<NewExecution> = {},
    ): Promise<ExecutionRecord> {
      await store.putJob(jobDef(over.jobId ?? "job-a"), 1_000, 10);
      const fired = await store.recordFire({
        jobId: over.jobId ?? "job-a",
        scheduledFor: 1_000,
        nextFireAt: 2_000,
        execution: newExecution(id, over),
        at: 950,
      });
      expect(fired).toBe(true);
      return mustGet(store, id);
    }

    describe("jobs", () => {
      it("getJobVersion returns each stored version of a definition", async () => {
        const v1 = jobDef("job-v");
        const v2 = jobDef("job-v", { params: { v: 2 } });
        await store.putJob(v1, null, 10);
        await store.putJob(v2, null, 20);
        expect(await store.getJobVersion("job-v", 1)).toEqual(v1);
        expect(await store.getJobVersion("job-v", 2)).toEqual(v2);
        expect(await store.getJobVersion("job-v", 3)).toBeUndefined();
        expect(await store.getJobVersion("nope", 1)).toBeUndefined();
      });

      it("putJob creates version 1 and getJob returns it as stored", async () => {
        const def = jobDef("job-a", { params: { topic: "t/1", qos: 1 }, priority: 7 });
        const created = await store.putJob(def, 5_000, 100);
        expect(created).toEqual({
          id: "job-a",
          version: 1,
          definition: def,
          nextFireAt: 5_000,
          paused: false,
          createdAt: 100,
          updatedAt: 100,
          updatedBy: "system",
        });
        expect(await store.getJob("job-a")).toEqual(created);
        expect(await store.getJob("job-b")).toBeUndefined();
      });

      it("keeps a job's paused state apart from its versions", async () => {
        // A definition's `paused` is the state a new job starts in.
        expect((await store.putJob(jobDef("job-p", { paused: true }), 5_000, 100)).paused).toBe(
          true,
        );
        const resumed = await store.setJobPaused("job-p", false, 150, "ops");
        expect(resumed).toMatchObject({ version: 1, paused: false, nextFireAt: 5_000 });
        // A new version keeps the state, and `paused` alone makes no version.
        await store.setJobPaused("job-p", true, 200, "ops");
        const same = await store.putJob(jobDef("job-p", { paused: false }), 5_000, 250);
        expect(same).toMatchObject({ version: 1, paused: true, updatedAt: 100 });
        const v2 = await store.putJob(jobDef("job-p", { priority: 3 }), 6_000, 300);
        expect(v2).toMatchObject({ version: 2, paused: true, nextFireAt: 6_000 });
        expect(await store.getJob("job-p")).toEqual(v2);
        expect(await store.setJobPaused("nope", true, 300, "ops")).toBeUndefined();
        // Listed by id without their definitions.
        await store.putJob(jobDef("job-a"), 5_000, 300);
        await store.putJob(jobDef("job-o", { paused: true }), 5_000, 300);
        expect(await store.pausedJobIds()).toEqual(["job-o", "job-p"]);
        await store.setJobPaused("job-p", false, 400, "ops");
        expect(await store.pausedJobIds()).toEqual(["job-o"]);
      });

      it("putJob with an identical definition keeps the version and changes nothing", async () => {
        await store.putJob(jobDef("job-a"), 5_000, 100);
        const again = await store.putJob(jobDef("job-a"), 5_000, 200);
        expect(again.version).toBe(1);
        expect(again.updatedAt).toBe(100);
        expect(await store.getJob("job-a")).toEqual(again);
      });

      it("putJob treats the same definition with keys in another order as identical", async () => {
        const def = jobDef("job-a", { params: { a: 1, b: { c: 2, d: 3 } } });
        await store.putJob(def, 5_000, 100);
        // Same content, every object's keys reversed (a PostgreSQL jsonb column compares so too).
        const reversed = JSON.parse(JSON.stringify(def), (_k, v: unknown) =>
          v && typeof v === "object" && !Array.isArray(v)
            ? Object.fromEntries(Object.entries(v).reverse())
            : v,
        ) as JobDefinition;
        expect(JSON.stringify(reversed)).not.toBe(JSON.stringify(def));
        const again = await store.putJob(reversed, 5_000, 200);
        expect(again.version).toBe(1);
        expect(again.updatedAt).toBe(100);
      });

      it("putJob with a changed definition makes version 2 and keeps createdAt", async () => {
        await store.putJob(jobDef("job-a"), 5_000, 100);
        const def2 = jobDef("job-a", { params: { changed: true } });
        const v2 = await store.putJob(def2, 7_000, 200);
        expect(v2).toEqual({
          id: "job-a",
          version: 2,
          definition: def2,
          nextFireAt: 7_000,
          paused: false,
          createdAt: 100,
          updatedAt: 200,
          updatedBy: "system",
        });
        const v3 = await store.putJob(jobDef("job-a"), null, 300);
        expect(v3.version).toBe(3);
        expect(v3.nextFireAt).toBeNull();
        expect(await store.getJob("job-a")).toEqual(v3);
      });

      it("listJobs returns every job with its current version", async () => {
        await store.putJob(jobDef("job-b"), 2_000, 100);
        await store.putJob(jobDef("job-a"), 1_000, 100);
        await store.putJob(jobDef("job-a", { priority: 3 }), 1_000, 150);
        const jobs = await store.listJobs();
        expect(jobs.map((j) => [j.id, j.version, j.definition.priority]).sort()).toEqual([
          ["job-a", 2, 3],
          ["job-b", 1, 0],
        ]);
      });

      it("pageJobs pages by id; a cursor is the last id, so changes between pages shift nothing", async () => {
        for (const id of ["c", "a", "e", "b", "d"]) await store.putJob(jobDef(id), 1_000, 10);
        const first = await store.pageJobs({ limit: 2 });
        expect([first.items.map((j) => j.id), first.nextCursor]).toEqual([["a", "b"], "b"]);
        await store.putJob(jobDef("aa"), 1_000, 20);
        await store.deleteJob("c");
        const second = await store.pageJobs({ limit: 2, cursor: "b" });
        // The last page: nothing after it, so no cursor.
        expect([second.items.map((j) => j.id), second.nextCursor]).toEqual([["d", "e"], null]);
        const one = await store.pageJobs({ limit: 1, cursor: "b" });
        expect([one.items.map((j) => j.id), one.nextCursor]).toEqual([["d"], "d"]);
        expect(await store.pageJobs({ limit: 2, cursor: "e" })).toEqual({
          items: [],
          nextCursor: null,
        });
        const whole = await store.pageJobs({ limit: 10 });
        expect([whole.items.map((j) => j.id), whole.nextCursor]).toEqual([
          ["a", "aa", "b", "d", "e"],
          null,
        ]);
        expect(whole.items[0]).toEqual(await store.getJob("a"));
      });

      it("listListeningJobs returns the jobs with an event or after trigger, paused or not", async () => {
        await store.putJob(jobDef("plain"), 1_000, 10);
        await store.putJob(
          jobDef("on-door", { trigger: { type: "event", name: "door" } }),
          null,
          10,
        );
        await store.putJob(
          jobDef("then", { trigger: { type: "after", job: "plain" }, paused: true }),
          null,
          10,
        );
        await store.putJob(jobDef("by-hand", { trigger: { type: "manual" } }), null, 10);
        const ids = async () => (await store.listListeningJobs()).map((j) => j.id);
        expect(await ids()).toEqual(["on-door", "then"]);
        const [first] = await store.listListeningJobs();
        expect(first?.definition.trigger).toEqual({ type: "event", name: "door" });
        // A change of trigger moves a job in or out.
        await store.putJob(jobDef("on-door"), 2_000, 20);
        await store.putJob(jobDef("plain", { trigger: { type: "event", name: "bell" } }), null, 20);
        expect(await ids()).toEqual(["plain", "then"]);
      });

      it("listJobsDueBy returns unpaused jobs due at or before the time", async () => {
        await store.putJob(jobDef("a"), 1_000, 10);
        await store.putJob(jobDef("b"), 2_000, 10);
        await store.putJob(jobDef("c"), 3_000, 10);
        await store.putJob(jobDef("paused", { paused: true }), 500, 10);
        await store.putJob(jobDef("exhausted"), null, 10);
        const ids = async (until: number) =>
          (await store.listJobsDueBy(until)).map((j) => j.id).sort();
        expect(await ids(499)).toEqual([]);
        expect(await ids(999)).toEqual([]);
        expect(await ids(2_000)).toEqual(["a", "b"]);
        expect(await ids(1e15)).toEqual(["a", "b", "c"]);
        // Pausing is state; resuming brings the job back.
        await store.setJobPaused("a", true, 20, "ops");
        expect(await ids(2_000)).toEqual(["b"]);
        await store.setJobPaused("a", false, 30, "ops");
        expect(await ids(2_000)).toEqual(["a", "b"]);
      });
    });

    describe("recordFire", () => {
      it("fires a nominal time exactly once", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        const fire = (execId: string) =>
          store.recordFire({
            jobId: "job-a",
            scheduledFor: 1_000,
            nextFireAt: 2_000,
            execution: newExecution(execId),
            at: 950,
          });
        expect(await fire("ex-1")).toBe(true);
        expect(await fire("ex-2")).toBe(false);
        expect((await store.listExecutions({ jobId: "job-a" })).map((e) => e.id)).toEqual(["ex-1"]);
        expect(await store.getExecution("ex-2")).toBeUndefined();
        expect(await store.getTimeline("ex-2")).toEqual([]);
        expect((await store.getJob("job-a"))?.nextFireAt).toBe(2_000);
      });

      it("creates the execution PENDING, round 0, attempt 1, with a created timeline entry", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        const ne = newExecution("ex-1", { priority: 5, createdAt: 940 });
        expect(
          await store.recordFire({
            jobId: "job-a",
            scheduledFor: 1_000,
            nextFireAt: 2_000,
            execution: ne,
            at: 950,
          }),
        ).toBe(true);
        expect(await store.getExecution("ex-1")).toEqual({
          ...ne,
          state: "PENDING",
          round: 0,
          attempt: 1,
          dispatches: 0,
          updatedAt: 940,
          agentId: null,
          dispatchedAt: null,
          startedAt: null,
          finishedAt: null,
          lateMs: null,
          nextAttemptAt: null,
          result: null,
          message: null,
          messageBytes: null,
          scheduledFor: null,
          shardIndex: null,
          shardTotal: null,
          groupKey: null,
          tags: {},
        } satisfies ExecutionRecord);
        expect(await store.getTimeline("ex-1")).toEqual([
          {
            executionId: "ex-1",
            seq: 1,
            at: 950,
            event: "created",
            fromState: null,
            toState: "PENDING",
            round: 0,
            agentId: null,
            reason: null,
            detail: { scheduledFor: 1_000 },
            actor: null,
          },
        ]);
      });

      it("refuses a scheduledFor the job is not at, and an unknown job", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        const fire = (scheduledFor: number, execId: string, jobId = "job-a") =>
          store.recordFire({
            jobId,
            scheduledFor,
            nextFireAt: scheduledFor + 1_000,
            execution: newExecution(execId, { jobId }),
            at: 950,
          });
        expect(await fire(1_000, "ex-1")).toBe(true);
        // Stale: the job has moved on to 2000.
        expect(await fire(1_000, "ex-stale")).toBe(false);
        expect(await fire(500, "ex-older")).toBe(false);
        // Not yet: 3000 is not the job's next fire time.
        expect(await fire(3_000, "ex-ahead")).toBe(false);
        expect(await fire(1_000, "ex-unknown", "job-z")).toBe(false);
        expect((await store.listExecutions()).map((e) => e.id)).toEqual(["ex-1"]);
        expect((await store.getJob("job-a"))?.nextFireAt).toBe(2_000);
        expect(await store.getJob("job-z")).toBeUndefined();
      });

      it("an exhausted trigger (nextFireAt null) is never due again", async () => {
        await store.putJob(jobDef("job-a", { trigger: { type: "at", at: 1_000 } }), 1_000, 10);
        expect(
          await store.recordFire({
            jobId: "job-a",
            scheduledFor: 1_000,
            nextFireAt: null,
            execution: newExecution("ex-1"),
            at: 950,
          }),
        ).toBe(true);
        expect((await store.getJob("job-a"))?.nextFireAt).toBeNull();
        expect(await store.listJobsDueBy(1e15)).toEqual([]);
      });

      it("does not fire a nominal time twice when a new version resets the job to it", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        const fire = (execId: string) =>
          store.recordFire({
            jobId: "job-a",
            scheduledFor: 1_000,
            nextFireAt: 2_000,
            execution: newExecution(execId),
            at: 950,
          });
        expect(await fire("ex-1")).toBe(true);
        // Fires happen dispatchLead early, so a trigger changed just before 1000 can land on it.
        await store.putJob(jobDef("job-a", { params: { v: 2 } }), 1_000, 960);
        expect(await fire("ex-2")).toBe(false);
        expect((await store.listExecutions({ jobId: "job-a" })).map((e) => e.id)).toEqual(["ex-1"]);
        // The job moves past the time already fired; left at 1000 the firing loop would retry it forever.
        expect((await store.getJob("job-a"))?.nextFireAt).toBe(2_000);
      });

      it("two stores on one database firing the same times create one execution per time", async (ctx) => {
        if (!fx.openAnother) return ctx.skip();
        const other = await another();
        try {
          await store.putJob(jobDef("job-a"), 10_000, 10);
          const rounds = 50;
          const wins: string[] = [];
          for (let i = 0; i < rounds; i++) {
            const t = 10_000 + i * 1_000;
            const fireFrom = (s: Store, label: string) =>
              s
                .recordFire({
                  jobId: "job-a",
                  scheduledFor: t,
                  nextFireAt: t + 1_000,
                  execution: newExecution(`ex-${label}-${i}`, { fireAt: t }),
                  at: t - 50,
                })
                .then((won) => (won ? label : undefined));
            // Alternate who asks first so that both stores win some rounds.
            const pair = i % 2 === 0 ? [store, other] : [other, store];
            const results = await Promise.all([
              fireFrom(pair[0] as Store, i % 2 === 0 ? "a" : "b"),
              fireFrom(pair[1] as Store, i % 2 === 0 ? "b" : "a"),
            ]);
            const won = results.filter((r) => r !== undefined);
            expect(won, `round ${i}`).toHaveLength(1);
            wins.push(won[0] as string);
          }
          expect(new Set(wins)).toEqual(new Set(["a", "b"]));
          for (const s of [store, other]) {
            const execs = await s.listExecutions({ jobId: "job-a", limit: 1_000 });
            expect(execs).toHaveLength(rounds);
            expect(new Set(execs.map((e) => e.fireAt)).size).toBe(rounds);
            expect((await s.getJob("job-a"))?.nextFireAt).toBe(10_000 + rounds * 1_000);
          }
          const scheduled = await Promise.all(
            (await store.listExecutions({ jobId: "job-a", limit: 1_000 })).map(
              async (e) => (await store.getTimeline(e.id))[0]?.detail?.scheduledFor,
            ),
          );
          expect(scheduled.sort()).toEqual(
            Array.from({ length: rounds }, (_, i) => 10_000 + i * 1_000).sort(),
          );
        } finally {
          await other.close();
        }
      });
    });

    describe("createExecution", () => {
      it("creates a command execution PENDING with a created timeline entry", async () => {
        const ne = newExecution("cmd-1", {
          kind: "command",
          jobId: null,
          jobVersion: null,
          targetAgentId: "agent-1",
          params: {},
        });
        await store.createExecution(ne, 905);
        const e = await mustGet(store, "cmd-1");
        expect(e).toMatchObject({ ...ne, state: "PENDING", round: 0, attempt: 1, dispatches: 0 });
        const timeline = await store.getTimeline("cmd-1");
        expect(timeline).toHaveLength(1);
        expect(timeline[0]).toMatchObject({
          at: 905,
          event: "created",
          fromState: null,
          toState: "PENDING",
          round: 0,
        });
      });

      it("creates a batch at once, each with its created entry, or none when one id exists", async () => {
        const batch = ["cmd-a", "cmd-b", "cmd-c"].map((id, i) =>
          newExecution(id, {
            kind: "command",
            jobId: null,
            jobVersion: null,
            targetAgentId: `agent-${i}`,
          }),
        );
        await store.createExecutions(batch, 905, { actor: "ops" });
        for (const ne of batch) {
          expect(await mustGet(store, ne.id)).toMatchObject({ ...ne, state: "PENDING", round: 0 });
          expect(await store.getTimeline(ne.id)).toEqual([
            expect.objectContaining({ at: 905, event: "created", toState: "PENDING" }),
          ]);
        }
        const clash = [newExecution("cmd-d"), newExecution("cmd-b", { handler: "again" })];
        await expect(store.createExecutions(clash, 906)).rejects.toMatchObject({
          name: "AxError",
          code: "AX_STORE_FAILED",
          message: expect.stringContaining("createExecutions"),
        });
        expect(await store.getExecution("cmd-d")).toBeUndefined();
        expect((await mustGet(store, "cmd-b")).handler).toBe(batch[1]?.handler);
        await store.createExecutions([], 907);
      });

      it("stores a fan-out's batch (ids and targets differ, all else shared) as it stores each alone", async () => {
        const shared = {
          kind: "command" as const,
          jobId: null,
          jobVersion: null,
          params: { path: "/gpio/17", value: 1, nested: { list: [1, "two", null] } },
          tags: { site: "s-1", "odd key": 'quote " and \\ backslash' },
        };
        const ids = Array.from({ length: 40 }, (_, i) => i);
        await store.createExecutions(
          ids.map((i) => newExecution(`fan-${i}`, { ...shared, targetAgentId: `agent-${i} "é"` })),
          905,
          { actor: "ops" },
        );
        for (const i of [0, 39]) {
          await store.createExecution(
            newExecution(`one-${i}`, { ...shared, targetAgentId: `agent-${i} "é"` }),
            905,
            { actor: "ops" },
          );
        }
        const all = await store.listExecutions();
        const byId = new Map(all.map((e) => [e.id, e]));
        for (const i of [0, 39]) {
          const batched = byId.get(`fan-${i}`);
          const alone = byId.get(`one-${i}`);
          expect(batched).toBeDefined();
          expect({ ...batched, id: "x" }).toEqual({ ...alone, id: "x" });
          expect(await store.getExecution(`fan-${i}`)).toEqual(batched);
          const [entry] = await store.getTimeline(`fan-${i}`);
          const [entryAlone] = await store.getTimeline(`one-${i}`);
          expect({ ...entry, executionId: "x" }).toEqual({ ...entryAlone, executionId: "x" });
        }
        expect(ids.every((i) => byId.has(`fan-${i}`))).toBe(true);
        // One id that exists: the whole batch is refused, none of it written.
        const clash = ids.map((i) =>
          newExecution(i === 20 ? "fan-20" : `late-${i}`, { ...shared, targetAgentId: `a-${i}` }),
        );
        await expect(store.createExecutions(clash, 906)).rejects.toMatchObject({
          code: "AX_STORE_FAILED",
        });
        expect(await store.getExecution("late-0")).toBeUndefined();
        expect((await mustGet(store, "fan-20")).targetAgentId).toBe('agent-20 "é"');
      });

      it("writes an idempotency record with the executions it made, once per scope, or neither", async () => {
        const record = (scope: string, result: string, at = 900) => ({
          scope,
          request: "req-hash",
          result,
          at,
        });
        expect(await store.getIdempotency("scope-1")).toBeUndefined();
        await store.createExecutions(
          [newExecution("idem-1"), newExecution("idem-2")],
          900,
          { actor: "ops" },
          record("scope-1", '["idem-1","idem-2"]'),
        );
        expect(await store.getIdempotency("scope-1")).toEqual(
          record("scope-1", '["idem-1","idem-2"]'),
        );
        // The scope again: refused whole, none of its executions made.
        await expect(
          store.createExecutions(
            [newExecution("idem-3")],
            901,
            {},
            record("scope-1", '["idem-3"]', 901),
          ),
        ).rejects.toMatchObject({ code: "AX_STORE_FAILED" });
        expect(await store.getExecution("idem-3")).toBeUndefined();
        expect((await store.getIdempotency("scope-1"))?.result).toBe('["idem-1","idem-2"]');
        // An execution that exists refuses the record with it.
        await expect(
          store.createExecutions([newExecution("idem-1")], 902, {}, record("scope-2", "[]", 902)),
        ).rejects.toMatchObject({ code: "AX_STORE_FAILED" });
        expect(await store.getIdempotency("scope-2")).toBeUndefined();
        // Retention takes a key with the executions of its time.
        await store.purgeFinishedBefore(1_000, 100);
        expect(await store.getIdempotency("scope-1")).toBeUndefined();
      });

      it("refuses an id that exists with AX_STORE_FAILED and leaves the first untouched", async () => {
        await store.createExecution(newExecution("cmd-1", { handler: "first" }), 905);
        await expect(
          store.createExecution(newExecution("cmd-1", { handler: "second" }), 906),
        ).rejects.toMatchObject({
          name: "AxError",
          code: "AX_STORE_FAILED",
          message: expect.stringContaining("createExecution"),
        });
        expect((await mustGet(store, "cmd-1")).handler).toBe("first");
        expect(await store.getTimeline("cmd-1")).toHaveLength(1);
      });
    });

    describe("recordFires", () => {
      /** A firing of one nominal time with one execution, nothing missed. */
      const firing = (jobId: string, expectedNext: number, execId: string) => ({
        jobId,
        expectedNext,
        nextFireAt: expectedNext + 1_000,
        fires: [{ scheduledFor: expectedNext, executions: [newExecution(execId, { jobId })] }],
        missed: [],
        at: expectedNext - 50,
      });

      it("firings issued together are each recorded as they would be one by one", async () => {
        for (const id of ["job-a", "job-b", "job-c", "job-d"]) {
          await store.putJob(jobDef(id), 1_000, 10);
        }
        // job-d's 1000 is in the ledger already, though the job is still at 1000.
        expect(
          await store.recordFire({
            jobId: "job-d",
            scheduledFor: 1_000,
            nextFireAt: 1_000,
            execution: newExecution("ex-d0", { jobId: "job-d" }),
            at: 900,
          }),
        ).toBe(true);
        const results = await Promise.all([
          store.recordFires(firing("job-a", 1_000, "ex-a1")),
          store.recordFires(firing("job-b", 1_000, "ex-b1")),
          // Stale: job-c is at 1000, not 500.
          store.recordFires(firing("job-c", 500, "ex-c1")),
          // Advances, but the nominal time is fired already: no second execution.
          store.recordFires(firing("job-d", 1_000, "ex-d1")),
          // job-a's next, in the same burst: after its first.
          store.recordFires(firing("job-a", 2_000, "ex-a2")),
        ]);
        expect(results).toEqual([true, true, false, true, true]);
        const next = async (id: string) => (await store.getJob(id))?.nextFireAt;
        expect([await next("job-a"), await next("job-b"), await next("job-c")]).toEqual([
          3_000, 2_000, 1_000,
        ]);
        expect(await next("job-d")).toBe(2_000);
        expect(
          (await store.listExecutions({ jobId: "job-a" }))
            .map((e) => [e.id, e.scheduledFor])
            .sort(),
        ).toEqual([
          ["ex-a1", 1_000],
          ["ex-a2", 2_000],
        ]);
        expect((await store.listExecutions({ jobId: "job-b" })).map((e) => e.id)).toEqual([
          "ex-b1",
        ]);
        expect(await store.getExecution("ex-c1")).toBeUndefined();
        expect(await store.getExecution("ex-d1")).toBeUndefined();
        expect(await store.getTimeline("ex-d1")).toEqual([]);
        const b1 = await mustGet(store, "ex-b1");
        expect(b1).toMatchObject({ state: "PENDING", round: 0, attempt: 1, jobId: "job-b" });
        expect(await store.getTimeline("ex-a2")).toEqual([
          expect.objectContaining({
            seq: 1,
            at: 1_950,
            event: "created",
            toState: "PENDING",
            detail: { scheduledFor: 2_000 },
          }),
        ]);
      });

      it("records missed fires' alerts and count with them, only when the job advances, or neither", async () => {
        await store.putJob(jobDef("job-m"), 1_000, 10);
        /** 1000 and 2000 missed, 3000 fired late at 3500. */
        const late = (expectedNext: number, alerts: AlertRecord[]) => ({
          jobId: "job-m",
          expectedNext,
          nextFireAt: 4_000,
          fires: [{ scheduledFor: 3_000, executions: [newExecution("ex-m3", { jobId: "job-m" })] }],
          missed: [1_000, 2_000],
          at: 3_500,
          alerts,
        });
        // Stale (the job is at 1000): neither the fires, nor the alert, nor the count.
        expect(
          await store.recordFires({ ...late(500, [alertRecord("al-0", 3_500)]), missedCount: 2 }),
        ).toBe(false);
        expect(await store.listAlerts()).toEqual([]);
        expect((await store.counters()).missed_fires ?? 0).toBe(0);
        // An alert under an id already taken cannot be recorded: nor can the firing.
        await store.putAlert(alertRecord("al-taken", 1_000));
        await expect(
          store.recordFires({
            ...late(1_000, [alertRecord("al-1", 3_500), alertRecord("al-taken", 3_500)]),
            missedCount: 2,
          }),
        ).rejects.toThrow();
        expect((await store.getJob("job-m"))?.nextFireAt).toBe(1_000);
        expect(await store.getExecution("ex-m3")).toBeUndefined();
        expect((await store.listAlerts()).map((a) => a.id)).toEqual(["al-taken"]);
        expect((await store.counters()).missed_fires ?? 0).toBe(0);
        expect(
          await store.recordFires({ ...late(1_000, [alertRecord("al-1", 3_500)]), missedCount: 2 }),
        ).toBe(true);
        expect((await store.counters()).missed_fires).toBe(2);
        expect((await store.getJob("job-m"))?.nextFireAt).toBe(4_000);
        expect((await mustGet(store, "ex-m3")).scheduledFor).toBe(3_000);
        expect((await store.listAlerts({ pending: true })).map((a) => a.id)).toEqual([
          "al-taken",
          "al-1",
        ]);
      });
    });

    describe("recordEvent", () => {
      /** A message that fires `jobs`, each job its executions (ids) as [jobId, ids]. */
      const event = (
        msgId: string,
        jobs: [string, string[]][],
        extra: { name?: string; by?: string; at?: number } = {},
      ) => ({
        name: extra.name ?? "door-open",
        msgId,
        fires: jobs.map(([jobId, ids]) => ({
          jobId,
          executions: ids.map((id, i) =>
            newExecution(id, {
              jobId,
              ...(ids.length > 1 ? { shardIndex: i, shardTotal: ids.length } : {}),
            }),
          ),
        })),
        at: extra.at ?? 2_000,
        ...(extra.by === undefined ? {} : { by: extra.by }),
      });

      it("fires each job of a message once: its executions with the event in their first entry", async () => {
        expect(
          await store.recordEvent(
            event(
              "m-1",
              [
                ["job-a", ["ev-1"]],
                ["job-b", ["ev-2", "ev-3"]],
              ],
              { by: "c2" },
            ),
          ),
        ).toEqual({ first: true, fired: ["job-a", "job-b"] });
        expect((await mustGet(store, "ev-1")).state).toBe("PENDING");
        expect(await store.getTimeline("ev-1")).toEqual([
          expect.objectContaining({
            seq: 1,
            at: 2_000,
            event: "created",
            toState: "PENDING",
            detail: { event: "door-open", msgId: "m-1", coordinator: "c2" },
          }),
        ]);
        expect((await store.getTimeline("ev-3"))[0]?.detail).toEqual({
          event: "door-open",
          msgId: "m-1",
          shard: "1/2",
          coordinator: "c2",
        });
        // The same message again (a redelivery, or another coordinator's copy): nothing.
        expect(await store.recordEvent(event("m-1", [["job-a", ["ev-4"]]]))).toEqual({
          first: false,
          fired: [],
        });
        expect(await store.getExecution("ev-4")).toBeUndefined();
        expect(await store.getTimeline("ev-4")).toEqual([]);
        // A job the first reader did not know of yet (just created) is fired by one that does.
        expect(
          await store.recordEvent(
            event("m-1", [
              ["job-a", ["ev-5"]],
              ["job-c", ["ev-6"]],
            ]),
          ),
        ).toEqual({ first: false, fired: ["job-c"] });
        // Another message, or the same id under another name, is another event.
        expect(await store.recordEvent(event("m-2", [["job-a", ["ev-7"]]]))).toEqual({
          first: true,
          fired: ["job-a"],
        });
        expect(
          await store.recordEvent(event("m-1", [["job-a", ["ev-8"]]], { name: "door-shut" })),
        ).toEqual({ first: true, fired: ["job-a"] });
        expect((await store.listExecutions()).map((e) => e.id).sort()).toEqual([
          "ev-1",
          "ev-2",
          "ev-3",
          "ev-6",
          "ev-7",
          "ev-8",
        ]);
      });

      it("records a message that fires nothing, so that its copies are known", async () => {
        expect(await store.recordEvent(event("m-1", []))).toEqual({ first: true, fired: [] });
        expect(await store.recordEvent(event("m-1", []))).toEqual({ first: false, fired: [] });
        expect(await store.listExecutions()).toEqual([]);
      });

      it("copies of one message recorded together: each job fires exactly once", async () => {
        const results = await Promise.all(
          ["a", "b", "c"].map((copy) =>
            store.recordEvent(
              event("m-1", [
                ["job-a", [`ev-a-${copy}`]],
                ["job-b", [`ev-b-${copy}`]],
              ]),
            ),
          ),
        );
        expect(results.filter((r) => r.first)).toHaveLength(1);
        expect(results.flatMap((r) => r.fired).sort()).toEqual(["job-a", "job-b"]);
        expect(await store.listExecutions()).toHaveLength(2);
      });

      it("two stores on one database reading the same messages fire each job once", async (ctx) => {
        if (!fx.openAnother) return ctx.skip();
        const other = await another();
        try {
          const wins: string[] = [];
          for (let i = 0; i < 30; i++) {
            const pair =
              i % 2 === 0
                ? ([store, "a", other, "b"] as const)
                : ([other, "b", store, "a"] as const);
            const results = await Promise.all([
              pair[0].recordEvent(
                event(`m-${i}`, [["job-x", [`ev-${pair[1]}-${i}`]]], { by: pair[1] }),
              ),
              pair[2].recordEvent(
                event(`m-${i}`, [["job-x", [`ev-${pair[3]}-${i}`]]], { by: pair[3] }),
              ),
            ]);
            expect(
              results.map((r) => r.fired.length),
              `message ${i}`,
            ).toEqual(results[0]?.first ? [1, 0] : [0, 1]);
            wins.push(results[0]?.first ? pair[1] : pair[3]);
          }
          expect(new Set(wins)).toEqual(new Set(["a", "b"]));
          for (const s of [store, other]) {
            expect(await s.listExecutions({ limit: 100 })).toHaveLength(30);
          }
          for (let i = 0; i < 30; i++) {
            const by = wins[i] as string;
            expect((await store.getTimeline(`ev-${by}-${i}`))[0]?.detail).toMatchObject({
              msgId: `m-${i}`,
              coordinator: by,
            });
          }
        } finally {
          await other.close();
        }
      });

      it("retention forgets messages recorded before the cutoff, and only those", async () => {
        expect((await store.recordEvent(event("old", [], { at: 1_000 }))).first).toBe(true);
        expect(
          (await store.recordEvent(event("at-cutoff", [["job-a", ["ev-1"]]], { at: 5_000 }))).fired,
        ).toEqual(["job-a"]);
        await store.purgeFinishedBefore(5_000, 100);
        expect(await store.recordEvent(event("at-cutoff", [["job-a", ["ev-2"]]]))).toEqual({
          first: false,
          fired: [],
        });
        expect(await store.recordEvent(event("old", [["job-a", ["ev-3"]]]))).toEqual({
          first: true,
          fired: ["job-a"],
        });
        expect((await store.listExecutions()).map((e) => e.id).sort()).toEqual(["ev-1", "ev-3"]);
      });
    });

    describe("applyTransition", () => {
      /** An `after` trigger's follow-ups of ex-1 ending SUCCEEDED: job-b's executions `ids`. */
      const followUps = (ids: string[]): EventFiring => ({
        ...followUpKey({ jobId: "job-a", executionId: "ex-1" }, "SUCCEEDED"),
        fires: [
          { jobId: "job-b", executions: ids.map((id) => newExecution(id, { jobId: "job-b" })) },
        ],
        at: 1_001,
        cause: { after: "ex-1" },
        by: "c1",
      });
      const succeed = (e: ExecutionRecord, then: EventFiring): TransitionWrite => ({
        ...move(e, { state: "SUCCEEDED" }, "finished", 1_001, { finishedAt: 1_001 }),
        followUps: then,
      });

      it("writes what a transition fires with it, only when it is written, each follow-up once", async () => {
        const e = await firedExecution("ex-1");
        const stale = succeed(e, followUps(["fu-0"]));
        stale.expected = { state: "PENDING", round: 7 };
        expect(await store.applyTransition(stale)).toBe(false);
        expect(await store.getExecution("fu-0")).toBeUndefined();

        expect(await store.applyTransition(succeed(e, followUps(["fu-1"])))).toBe(true);
        expect(await mustGet(store, "ex-1")).toMatchObject({ state: "SUCCEEDED" });
        expect(await mustGet(store, "fu-1")).toMatchObject({ state: "PENDING", jobId: "job-b" });
        expect(await store.getTimeline("fu-1")).toEqual([
          expect.objectContaining({
            seq: 1,
            at: 1_001,
            event: "created",
            toState: "PENDING",
            detail: { after: "ex-1", coordinator: "c1" },
          }),
        ]);
        // The ledger holds them: the same follow-ups again fire nothing.
        expect(await store.recordEvent(followUps(["fu-2"]))).toEqual({ first: false, fired: [] });
        expect(await store.getExecution("fu-2")).toBeUndefined();
      });

      it("records a transition's alerts with it, only when it is written, or neither", async () => {
        const e = await firedExecution("ex-1");
        const fail = (alerts: AlertRecord[]): TransitionWrite => ({
          ...move(e, { state: "FAILED" }, "finished", 1_001, { finishedAt: 1_001 }),
          alerts,
        });
        const stale = fail([alertRecord("al-0", 1_001)]);
        stale.expected = { state: "PENDING", round: 7 };
        expect(await store.applyTransition(stale)).toBe(false);
        expect(await store.listAlerts()).toEqual([]);
        // An alert under an id already taken cannot be recorded: nor can the end.
        await store.putAlert(alertRecord("al-taken", 1_000));
        await expect(
          store.applyTransition(fail([alertRecord("al-1", 1_001), alertRecord("al-taken", 1_001)])),
        ).rejects.toThrow();
        expect(await mustGet(store, "ex-1")).toMatchObject({ state: "PENDING" });
        expect((await store.listAlerts()).map((a) => a.id)).toEqual(["al-taken"]);
        expect(await store.applyTransition(fail([alertRecord("al-1", 1_001)]))).toBe(true);
        expect(await mustGet(store, "ex-1")).toMatchObject({ state: "FAILED" });
        expect((await store.listAlerts({ pending: true })).map((a) => a.id)).toEqual([
          "al-taken",
          "al-1",
        ]);
      });

      it("adds a transition's counts with it, only when it is written, or neither", async () => {
        const e = await firedExecution("ex-1");
        const entry = (): TransitionWrite => ({
          ...move(e, { state: "PENDING" }, "report_unreadable", 1_001),
          counters: { unreadable_reports: 1, facts_adopted: 2 },
        });
        const stale = entry();
        stale.expected = { state: "PENDING", round: 7 };
        expect(await store.applyTransition(stale)).toBe(false);
        expect(await store.counters()).not.toHaveProperty("unreadable_reports");
        // An alert under an id already taken cannot be recorded: nor the entry, nor its counts.
        await store.putAlert(alertRecord("al-taken", 1_000));
        await expect(
          store.applyTransition({ ...entry(), alerts: [alertRecord("al-taken", 1_001)] }),
        ).rejects.toThrow();
        expect(await store.counters()).not.toHaveProperty("unreadable_reports");
        expect(await store.applyTransition(entry())).toBe(true);
        await store.bumpCounter("unreadable_reports");
        expect(await store.counters()).toMatchObject({ unreadable_reports: 2, facts_adopted: 2 });
        expect((await store.getTimeline("ex-1")).map((t) => t.event)).toEqual([
          "created",
          "report_unreadable",
        ]);
      });

      it("writes neither a transition nor what it fires when what it fires cannot be written", async () => {
        const e = await firedExecution("ex-1");
        await firedExecution("ex-2", { jobId: "job-c" });
        // A follow-up under an id already taken cannot be inserted.
        await expect(store.applyTransition(succeed(e, followUps(["ex-2"])))).rejects.toThrow();
        expect(await mustGet(store, "ex-1")).toMatchObject({ state: "PENDING", round: 0 });
        expect((await store.getTimeline("ex-1")).map((t) => t.event)).toEqual(["created"]);
        // Nothing of it was kept: written again, it fires.
        expect(await store.applyTransition(succeed(e, followUps(["fu-1"])))).toBe(true);
        expect((await mustGet(store, "fu-1")).state).toBe("PENDING");
      });

      it("is a compare-and-set on (state, round): the same write succeeds once", async () => {
        const e = await firedExecution("ex-1");
        const w = move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 1_001, {
          agentId: "agent-1",
          dispatchedAt: 1_001,
        });
        expect(await store.applyTransition(w)).toBe(true);
        expect(
          await store.applyTransition({ ...w, at: 1_002, patch: { agentId: "agent-2" } }),
        ).toBe(false);
        const after = await mustGet(store, "ex-1");
        expect(after).toMatchObject({
          state: "DISPATCHED",
          round: 1,
          dispatches: 1,
          agentId: "agent-1",
          updatedAt: 1_001,
        });
        expect((await store.getTimeline("ex-1")).map((t) => t.event)).toEqual([
          "created",
          "dispatch",
        ]);
      });

      it("transitions issued together each get their own result and entries, as one by one", async () => {
        const ex = await Promise.all(
          [1, 2, 3, 4, 5].map((n) => firedExecution(`ex-${n}`, { jobId: `job-${n}` })),
        );
        const [e1, e2, e3, e4, e5] = ex as [
          ExecutionRecord,
          ExecutionRecord,
          ExecutionRecord,
          ExecutionRecord,
          ExecutionRecord,
        ];
        const dispatch = (e: ExecutionRecord, agentId: string, at: number) =>
          move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", at, {
            agentId,
            dispatchedAt: at,
          });
        const stale = dispatch(e3, "agent-3", 1_001);
        stale.expected = { state: "PENDING", round: 7 };
        const dispatched4 = { ...e4, state: "DISPATCHED" as const, round: 1, dispatches: 1 };
        const results = await Promise.all([
          store.applyTransition(dispatch(e1, "agent-1", 1_001)),
          store.applyTransition(dispatch(e2, "agent-2", 1_002)),
          store.applyTransition(stale),
          store.applyTransition({ ...dispatch(e1, "agent-1", 1_001), executionId: "ex-none" }),
          // Two on one execution in one burst: the second is based on the first.
          store.applyTransition(dispatch(e4, "agent-4", 1_003)),
          store.applyTransition(
            move(dispatched4, { state: "SCHEDULED" }, "accepted", 1_004, {}, { queue: 1 }),
          ),
          // Folded steps, the agent not named: the entries name the row's.
          store.applyTransition({
            ...move(e5, { state: "RUNNING" }, "started", 1_005, { startedAt: 1_005 }),
            steps: [
              {
                event: "dispatch",
                from: "PENDING",
                to: "DISPATCHED",
                round: 1,
                agentId: null,
                at: 1_005,
              },
              {
                event: "started",
                from: "DISPATCHED",
                to: "RUNNING",
                round: 1,
                agentId: null,
                at: 1_006,
              },
            ],
          }),
        ]);
        expect(results).toEqual([true, true, false, false, true, true, true]);
        expect(await mustGet(store, "ex-1")).toMatchObject({
          state: "DISPATCHED",
          agentId: "agent-1",
          dispatchedAt: 1_001,
        });
        expect(await mustGet(store, "ex-2")).toMatchObject({
          state: "DISPATCHED",
          agentId: "agent-2",
        });
        expect(await mustGet(store, "ex-3")).toEqual(e3);
        expect(await store.getExecution("ex-none")).toBeUndefined();
        expect(await mustGet(store, "ex-4")).toMatchObject({
          state: "SCHEDULED",
          agentId: "agent-4",
        });
        expect(await mustGet(store, "ex-5")).toMatchObject({ state: "RUNNING", startedAt: 1_005 });
        const entries = async (id: string) =>
          (await store.getTimeline(id)).map((t) => [t.seq, t.event, t.agentId]);
        expect(await entries("ex-1")).toEqual([
          [1, "created", null],
          [2, "dispatch", "agent-1"],
        ]);
        expect(await entries("ex-3")).toEqual([[1, "created", null]]);
        expect(await entries("ex-4")).toEqual([
          [1, "created", null],
          [2, "dispatch", "agent-4"],
          [3, "accepted", "agent-4"],
        ]);
        expect(await entries("ex-5")).toEqual([
          [1, "created", null],
          [2, "dispatch", null],
          [3, "started", null],
        ]);
        expect((await store.getTimeline("ex-4"))[2]?.detail).toEqual({ queue: 1 });
      });

      it("fails when the state matches but the round does not, or the other way round", async () => {
        let e = await firedExecution("ex-1");
        await store.applyTransition(
          move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 1_001),
        );
        e = await mustGet(store, "ex-1");
        const staleRound = move(e, { state: "SCHEDULED" }, "accepted", 1_002);
        staleRound.expected = { state: "DISPATCHED", round: 0 };
        const wrongState = move(e, { state: "RUNNING" }, "started", 1_002);
        wrongState.expected = { state: "PENDING", round: 1 };
        expect(await store.applyTransition(staleRound)).toBe(false);
        expect(await store.applyTransition(wrongState)).toBe(false);
        expect(await store.applyTransition({ ...staleRound, executionId: "ex-none" })).toBe(false);
        expect(await mustGet(store, "ex-1")).toEqual(e);
        expect(await store.getTimeline("ex-1")).toHaveLength(2);
        expect(await store.getTimeline("ex-none")).toEqual([]);
      });

      it("writes the patch fields and leaves the others as they were", async () => {
        let e = await firedExecution("ex-1");
        const result = { ok: true, n: 1.5, text: "grüße ✓", list: [1, { deep: [null, "x"] }] };
        const long = "m".repeat(5_000);
        await store.applyTransition(
          move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 1_001, {
            agentId: "agent-1",
            dispatchedAt: 1_001,
            fireAt: 1_500,
            deadline: 9_000,
          }),
        );
        e = await mustGet(store, "ex-1");
        expect(e).toMatchObject({ agentId: "agent-1", dispatchedAt: 1_001, fireAt: 1_500 });
        expect(e.deadline).toBe(9_000);
        await store.applyTransition(
          move(e, { state: "RUNNING" }, "started", 1_510, { startedAt: 1_510, lateMs: 10 }),
        );
        e = await mustGet(store, "ex-1");
        await store.applyTransition(
          move(e, { state: "RETRY_WAITING" }, "finished", 1_600, {
            finishedAt: 1_600,
            nextAttemptAt: 2_600,
            result,
            message: long,
          }),
        );
        e = await mustGet(store, "ex-1");
        expect(e).toMatchObject({
          state: "RETRY_WAITING",
          round: 1,
          agentId: "agent-1",
          dispatchedAt: 1_001,
          startedAt: 1_510,
          lateMs: 10,
          finishedAt: 1_600,
          nextAttemptAt: 2_600,
          fireAt: 1_500,
          deadline: 9_000,
          updatedAt: 1_600,
          result,
        });
        expect(e.message).toBe("m".repeat(2_048));
        expect(e.messageBytes).toBe(5_000);
        // Explicit nulls clear fields; absent fields stay.
        await store.applyTransition(
          move(e, { state: "PENDING", attempt: 2, dispatches: 0 }, "retry_due", 2_600, {
            agentId: null,
            nextAttemptAt: null,
            result: null,
            message: null,
          }),
        );
        e = await mustGet(store, "ex-1");
        expect(e).toMatchObject({
          state: "PENDING",
          attempt: 2,
          dispatches: 0,
          agentId: null,
          nextAttemptAt: null,
          result: null,
          message: null,
          messageBytes: null,
          startedAt: 1_510,
          finishedAt: 1_600,
        });
      });

      it("caps a message at 2048 UTF-8 bytes without splitting a character, and keeps its size", async () => {
        const cases: [string, string, number][] = [
          // A 4-byte emoji straddling the cap is left out whole.
          [`${"x".repeat(2_046)}😀${"y".repeat(10)}`, "x".repeat(2_046), 2_060],
          // One ending exactly on the cap is kept.
          [`${"x".repeat(2_044)}😀`, `${"x".repeat(2_044)}😀`, 2_048],
          [`${"x".repeat(2_044)}😀z`, `${"x".repeat(2_044)}😀`, 2_049],
          // 3-byte and 2-byte characters across the cap.
          [`${"x".repeat(2_047)}€`, "x".repeat(2_047), 2_050],
          [`${"x".repeat(2_047)}é`, "x".repeat(2_047), 2_049],
          ["é", "é", 2],
          ["", "", 0],
        ];
        for (const [n, [message, stored, bytes]] of cases.entries()) {
          const e = await firedExecution(`ex-${n}`, { jobId: `job-${n}` });
          await store.applyTransition(
            move(e, { state: "FAILED" }, "finished", 1_001, { message, finishedAt: 1_001 }),
          );
          const after = await mustGet(store, `ex-${n}`);
          expect([after.message, after.messageBytes], message.slice(-4)).toEqual([stored, bytes]);
          expect(Buffer.byteLength(after.message ?? "", "utf8")).toBeLessThanOrEqual(2_048);
        }
      });

      it("messageBytes follows the message: null when cleared, unchanged when absent", async () => {
        let e = await firedExecution("ex-1");
        expect(e.messageBytes).toBeNull();
        await store.applyTransition(
          move(e, { state: "RETRY_WAITING" }, "finished", 1_001, { message: "grüße" }),
        );
        e = await mustGet(store, "ex-1");
        expect([e.message, e.messageBytes]).toEqual(["grüße", 7]);
        await store.applyTransition(move(e, { state: "PENDING", attempt: 2 }, "retry_due", 1_002));
        e = await mustGet(store, "ex-1");
        expect([e.message, e.messageBytes]).toEqual(["grüße", 7]);
        await store.applyTransition(
          move(e, { state: "FAILED" }, "expire", 1_003, { message: null }),
        );
        e = await mustGet(store, "ex-1");
        expect([e.message, e.messageBytes]).toEqual([null, null]);
      });

      it("replaces a timeline detail whose JSON is over 2048 bytes with its size", async () => {
        const e = await firedExecution("ex-1");
        const big = { reason: "ü".repeat(1_100) };
        const fits = { reason: "x".repeat(2_048 - '{"reason":""}'.length) };
        await store.applyTransition(
          move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 1_001, {}, big),
        );
        await store.applyTransition(
          move(
            { ...e, state: "DISPATCHED", round: 1 },
            { state: "FAILED", round: 1, dispatches: 1 },
            "expire",
            1_002,
            {},
            fits,
          ),
        );
        expect((await store.getTimeline("ex-1")).map((t) => t.detail)).toEqual([
          { scheduledFor: 1_000 },
          { truncated: true, bytes: Buffer.byteLength(JSON.stringify(big), "utf8") },
          fits,
        ]);
      });

      it("appends the timeline in order with states, round, agent and detail", async () => {
        let e = await firedExecution("ex-1");
        const steps: [Partial<ExecSnapshot>, string, ExecutionPatch, Record<string, unknown>?][] = [
          [{ state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", { agentId: "ag-1" }],
          [{ round: 2, dispatches: 2 }, "dispatch_timeout", {}, { resent: true }],
          [{ state: "SCHEDULED" }, "accepted", {}],
          [{ state: "RUNNING" }, "started", { startedAt: 1_040 }, { lateMs: 0 }],
          [{ state: "SUCCEEDED" }, "finished", { finishedAt: 1_050 }, { outcome: "succeeded" }],
        ];
        let at = 1_000;
        for (const [next, event, patch, detail] of steps) {
          at += 10;
          expect(await store.applyTransition(move(e, next, event, at, patch, detail))).toBe(true);
          e = await mustGet(store, "ex-1");
        }
        const timeline = await store.getTimeline("ex-1");
        expect(timeline.map((t) => t.seq)).toEqual([1, 2, 3, 4, 5, 6]);
        expect(
          timeline.map((t) => [
            t.at,
            t.event,
            t.fromState,
            t.toState,
            t.round,
            t.agentId,
            t.detail,
          ]),
        ).toEqual([
          [950, "created", null, "PENDING", 0, null, { scheduledFor: 1_000 }],
          [1_010, "dispatch", "PENDING", "DISPATCHED", 1, "ag-1", null],
          [1_020, "dispatch_timeout", "DISPATCHED", "DISPATCHED", 2, "ag-1", { resent: true }],
          [1_030, "accepted", "DISPATCHED", "SCHEDULED", 2, "ag-1", null],
          [1_040, "started", "SCHEDULED", "RUNNING", 2, "ag-1", { lateMs: 0 }],
          [1_050, "finished", "RUNNING", "SUCCEEDED", 2, "ag-1", { outcome: "succeeded" }],
        ]);
        expect(timeline.every((t) => t.executionId === "ex-1")).toBe(true);
      });
    });

    describe("retention", () => {
      /**
       * Creates execution `id` and writes it straight into `state` at `at` (the store does not
       * check the state machine), leaving three timeline entries.
       */
      async function ended(
        id: string,
        state: ExecState,
        at: number,
        patch: ExecutionPatch = { finishedAt: at },
      ): Promise<void> {
        await store.createExecution(newExecution(id, { createdAt: at - 20 }), at - 20);
        let e = await mustGet(store, id);
        await store.applyTransition(
          move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", at - 10),
        );
        e = await mustGet(store, id);
        await store.applyTransition(move(e, { state }, "end", at, { message: "bye", ...patch }));
      }
      const allIds = async () =>
        (await store.listExecutions({ limit: 1_000 })).map((e) => e.id).sort();

      it("purges only terminal executions finished before the cutoff, with their timelines", async () => {
        const cutoff = 3_000;
        for (const state of EXEC_STATES) {
          await ended(`old-${state}`, state, 1_000);
          await ended(`new-${state}`, state, 5_000);
        }
        // No finish time: the last update counts.
        await ended("old-unfinished", "EXPIRED", 1_000, {});
        await ended("new-unfinished", "EXPIRED", 5_000, {});
        // A finish time counts before the last update.
        await ended("finished-old-updated-new", "CANCELED", 5_000, { finishedAt: 1_000 });
        await ended("finished-new-updated-old", "CANCELED", 1_000, { finishedAt: 5_000 });
        // "Before" is strict.
        await ended("at-cutoff", "SUCCEEDED", cutoff);
        const before = await allIds();
        const purged = [
          ...[...TERMINAL_STATES].map((s) => `old-${s}`),
          "old-unfinished",
          "finished-old-updated-new",
        ].sort();

        expect(await store.purgeFinishedBefore(cutoff, 1_000)).toBe(purged.length);
        expect(await allIds()).toEqual(before.filter((id) => !purged.includes(id)));
        for (const id of purged) {
          expect(await store.getExecution(id), id).toBeUndefined();
          expect(await store.getTimeline(id), id).toEqual([]);
        }
        for (const id of await allIds()) expect(await store.getTimeline(id), id).toHaveLength(3);
        expect(purged).toHaveLength(8);
        expect(await store.purgeFinishedBefore(cutoff, 1_000)).toBe(0);
      });

      it("deletes at most `limit` executions per call, oldest first", async () => {
        for (const n of [4, 1, 7, 3, 6, 2, 5]) await ended(`e${n}`, "SUCCEEDED", n * 100);
        expect(await store.purgeFinishedBefore(10_000, 0)).toBe(0);
        expect(await store.purgeFinishedBefore(10_000, -1)).toBe(0);
        expect(await allIds()).toHaveLength(7);
        expect(await store.purgeFinishedBefore(10_000, 3)).toBe(3);
        expect(await allIds()).toEqual(["e4", "e5", "e6", "e7"]);
        expect(await store.purgeFinishedBefore(10_000, 3)).toBe(3);
        expect(await allIds()).toEqual(["e7"]);
        expect(await store.purgeFinishedBefore(10_000, 3)).toBe(1);
        expect(await store.purgeFinishedBefore(10_000, 3)).toBe(0);
        expect(await allIds()).toEqual([]);
      });

      it("purges commands like job executions", async () => {
        await store.createExecution(
          newExecution("cmd-1", { kind: "command", jobId: null, targetAgentId: "ag-1" }),
          900,
        );
        const e = await mustGet(store, "cmd-1");
        await store.applyTransition(move(e, { state: "SKIPPED" }, "skip", 1_000));
        expect(await store.purgeFinishedBefore(1_001, 10)).toBe(1);
        expect(await store.getExecution("cmd-1")).toBeUndefined();
      });

      it("keeps the fire record at or after a job's next fire time, so it never fires twice", async () => {
        await store.putJob(jobDef("job-a"), 1_000, 10);
        for (const [t, id] of [
          [1_000, "ex-1"],
          [2_000, "ex-2"],
        ] as const) {
          expect(
            await store.recordFire({
              jobId: "job-a",
              scheduledFor: t,
              nextFireAt: t + 1_000,
              execution: newExecution(id, { fireAt: t }),
              at: t,
            }),
          ).toBe(true);
          const e = await mustGet(store, id);
          await store.applyTransition(
            move(e, { state: "SUCCEEDED" }, "finished", t + 100, { finishedAt: t + 100 }),
          );
        }
        // A putJob from a stale read sets next_fire_at back to a time already fired.
        await store.putJob(jobDef("job-a", { params: { v: 2 } }), 2_000, 2_500);
        expect(await store.purgeFinishedBefore(1_000_000, 100)).toBe(2);
        expect(
          await store.recordFire({
            jobId: "job-a",
            scheduledFor: 2_000,
            nextFireAt: 3_000,
            execution: newExecution("ex-again", { fireAt: 2_000 }),
            at: 1_000_001,
          }),
        ).toBe(false);
        expect(await store.getExecution("ex-again")).toBeUndefined();
      });
    });

    describe("listing executions", () => {
      /** j1: e1..e3, j2: e4..e5, one command; e1 and e4 dispatched to ag-1, e2 to ag-2. */
      async function seed(): Promise<void> {
        const seeds = [
          ["e1", "j1"],
          ["e2", "j1"],
          ["e3", "j1"],
          ["e4", "j2"],
          ["e5", "j2"],
          ["c1", null],
        ] as const;
        for (const [n, [id, jobId]] of seeds.entries()) {
          await store.createExecution(
            newExecution(id, {
              jobId,
              kind: jobId === null ? "command" : "job",
              createdAt: 110 + n * 10,
            }),
            1,
          );
        }
        for (const [id, agentId] of [
          ["e1", "ag-1"],
          ["e4", "ag-1"],
          ["e2", "ag-2"],
        ] as const) {
          const e = await mustGet(store, id);
          await store.applyTransition(
            move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 500, { agentId }),
          );
        }
      }
      const ids = (list: ExecutionRecord[]) => list.map((e) => e.id);

      it("filters by job, states and agent, newest first", async () => {
        await seed();
        expect(ids(await store.listExecutions())).toEqual(["c1", "e5", "e4", "e3", "e2", "e1"]);
        expect(ids(await store.listExecutions({ jobId: "j1" }))).toEqual(["e3", "e2", "e1"]);
        expect(ids(await store.listExecutions({ states: ["DISPATCHED"] }))).toEqual([
          "e4",
          "e2",
          "e1",
        ]);
        expect(ids(await store.listExecutions({ states: ["PENDING", "SUCCEEDED"] }))).toEqual([
          "c1",
          "e5",
          "e3",
        ]);
        expect(ids(await store.listExecutions({ agentId: "ag-1" }))).toEqual(["e4", "e1"]);
        expect(
          ids(await store.listExecutions({ jobId: "j1", states: ["DISPATCHED"], agentId: "ag-1" })),
        ).toEqual(["e1"]);
        expect(ids(await store.listExecutions({ jobId: "nope" }))).toEqual([]);
      });

      it("limits to the newest", async () => {
        await seed();
        expect(ids(await store.listExecutions({ limit: 2 }))).toEqual(["c1", "e5"]);
        expect(ids(await store.listExecutions({ jobId: "j1", limit: 1 }))).toEqual(["e3"]);
      });

      it("listExecutionsInStates orders by priority (high first), then fire time", async () => {
        const rows: [string, number, number][] = [
          ["low", -1, 50],
          ["mid", 0, 300],
          ["hi-late", 5, 200],
          ["hi-early", 5, 100],
          ["mid-early", 0, 250],
        ];
        for (const [id, priority, fireAt] of rows) {
          await store.createExecution(newExecution(id, { priority, fireAt }), 1);
        }
        await store.createExecution(newExecution("other", { priority: 99, fireAt: 1 }), 1);
        const other = await mustGet(store, "other");
        await store.applyTransition(
          move(other, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 2),
        );
        expect(ids(await store.listExecutionsInStates(["PENDING"], 100))).toEqual([
          "hi-early",
          "hi-late",
          "mid-early",
          "mid",
          "low",
        ]);
        expect(ids(await store.listExecutionsInStates(["PENDING"], 2))).toEqual([
          "hi-early",
          "hi-late",
        ]);
        expect(ids(await store.listExecutionsInStates(["PENDING", "DISPATCHED"], 2))).toEqual([
          "other",
          "hi-early",
        ]);
        expect(await store.listExecutionsInStates([], 100)).toEqual([]);
        expect(await store.listExecutionsInStates(["RUNNING"], 100)).toEqual([]);
      });

      it("listDue returns only what is due, each list in dispatch order", async () => {
        // PENDING: due by fire time (pendingBy = 1,500), in priority then fire-time order.
        for (const [id, priority, fireAt] of [
          ["p-late", 0, 1_200],
          ["p-early", 0, 1_100],
          ["p-high", 5, 1_400],
          ["p-future", 9, 1_600],
        ] as const) {
          await store.createExecution(newExecution(id, { priority, fireAt }), 1);
        }
        // DISPATCHED at 500 with a 5,000 ms dispatch timeout: timed out from 5,500 on.
        for (const [id, dispatchTimeoutMs] of [
          ["d-slow", 5_000],
          ["d-fast", 200],
        ] as const) {
          await store.createExecution(newExecution(id, { dispatchTimeoutMs, fireAt: 2_000 }), 1);
          const e = await mustGet(store, id);
          await store.applyTransition(
            move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 500, {
              agentId: "ag-1",
              dispatchedAt: 500,
            }),
          );
        }
        // RETRY_WAITING: due when the next attempt comes, or, for a command, when its deadline
        // has passed. A job's retry is not ended by the first attempt's deadline (r-job-past).
        for (const [id, nextAttemptAt, deadline, kind] of [
          ["r-due", 900, 61_000, "job"],
          ["r-later", 9_000, 61_000, "job"],
          ["r-expired", 9_000, 800, "command"],
          ["r-job-past", 9_000, 800, "job"],
        ] as const) {
          await store.createExecution(
            newExecution(id, {
              deadline,
              fireAt: 700,
              ...(kind === "command"
                ? { kind, jobId: null, jobVersion: null, targetAgentId: "a-1" }
                : {}),
            }),
            1,
          );
          const e = await mustGet(store, id);
          await store.applyTransition(
            move(e, { state: "RETRY_WAITING", attempt: 1 }, "retry", 600, { nextAttemptAt }),
          );
        }
        const due = await store.listDue(1_000, 1_500, 100);
        expect(ids(due.pending)).toEqual(["p-high", "p-early", "p-late"]);
        expect(ids(due.dispatchTimedOut)).toEqual(["d-fast"]);
        expect(ids(due.retry).sort()).toEqual(["r-due", "r-expired"]);
        const later = await store.listDue(6_000, 1_500, 2);
        expect(ids(later.pending)).toEqual(["p-high", "p-early"]);
        expect(ids(later.dispatchTimedOut).sort()).toEqual(["d-fast", "d-slow"]);
        // pendingLimit bounds the pending list alone, first rows first; no limit (-1) lets it.
        const few = await store.listDue(6_000, 1_500, 100, { pendingLimit: 1 });
        expect(ids(few.pending)).toEqual(["p-high"]);
        expect(ids(few.dispatchTimedOut).sort()).toEqual(["d-fast", "d-slow"]);
        expect(ids(few.retry).sort()).toEqual(["r-due", "r-expired"]);
        const unbounded = await store.listDue(6_000, 1_500, -1, { pendingLimit: 2 });
        expect(ids(unbounded.pending)).toEqual(["p-high", "p-early"]);
        expect(ids((await store.listDue(6_000, 1_500, 1, { pendingLimit: 5 })).pending)).toEqual([
          "p-high",
        ]);
        // 0: no pending rows at all (the dispatcher has no reason to read them), the rest as ever.
        const none = await store.listDue(6_000, 1_500, 100, {
          pendingLimit: 0,
          skipTargets: ["a-gone"],
        });
        expect(none.pending).toEqual([]);
        expect(ids(none.dispatchTimedOut).sort()).toEqual(["d-fast", "d-slow"]);
        expect(ids(none.retry).sort()).toEqual(["r-due", "r-expired"]);
      });

      it("listDue leaves out commands for agents out of reach, until their deadline has passed", async () => {
        const command = (id: string, targetAgentId: string, deadline: number) =>
          newExecution(id, {
            kind: "command",
            jobId: null,
            jobVersion: null,
            targetAgentId,
            fireAt: 1_000,
            deadline,
          });
        await store.createExecution(command("c-live", "ag-live", 9_000), 1);
        await store.createExecution(command("c-away", "ag-away", 9_000), 1);
        await store.createExecution(command("c-away-late", "ag-away", 1_500), 1);
        const skipTargets = ["ag-away"];
        const at = (now: number) => store.listDue(now, now, 100, { commandsBy: now, skipTargets });
        expect(ids((await at(1_200)).pending).sort()).toEqual(["c-live"]);
        // Past its deadline it is read again, so that the dispatcher expires it.
        expect(ids((await at(2_000)).pending).sort()).toEqual(["c-away-late", "c-live"]);
      });

      it("listDue with onlyTargets reads the commands of those agents, those past their deadline, and what has no target, in due order", async () => {
        const command = (
          id: string,
          targetAgentId: string,
          o: { deadline?: number; priority?: number; fireAt?: number } = {},
        ) =>
          newExecution(id, {
            kind: "command",
            jobId: null,
            jobVersion: null,
            targetAgentId,
            fireAt: o.fireAt ?? 1_000,
            deadline: o.deadline ?? 9_000,
            ...(o.priority === undefined ? {} : { priority: o.priority }),
          });
        await store.createExecution(command("c-near", "ag-near", { fireAt: 1_100 }), 1);
        await store.createExecution(command("c-near-first", "ag-near", { priority: 5 }), 1);
        await store.createExecution(command("c-near-2", "ag-near-2", { fireAt: 900 }), 1);
        await store.createExecution(command("c-away", "ag-away"), 1);
        await store.createExecution(command("c-away-late", "ag-away", { deadline: 1_500 }), 1);
        // Queued for an agent nobody knows yet: no agent could take it before its deadline.
        await store.createExecution(command("c-unknown", "ag-unknown"), 1);
        await store.createExecution(command("c-near-late", "ag-near", { deadline: 1_500 }), 1);
        // A job's execution has no target: it is routed at dispatch, and always read.
        await store.createExecution(newExecution("j-1", { fireAt: 950 }), 1);
        // Past its horizon: not due, whoever it is for.
        await store.createExecution(command("c-near-later", "ag-near", { fireAt: 5_000 }), 1);
        const onlyTargets = ["ag-near", "ag-near-2"];
        const at = (now: number, pendingLimit?: number) =>
          store.listDue(now, now, 100, {
            commandsBy: now,
            onlyTargets,
            ...(pendingLimit === undefined ? {} : { pendingLimit }),
          });
        expect(ids((await at(1_200)).pending)).toEqual([
          "c-near-first",
          "c-near-2",
          "j-1",
          "c-near-late",
          "c-near",
        ]);
        // Past their deadline they are read, whoever they are for (to be expired), once each.
        expect(ids((await at(2_000)).pending)).toEqual([
          "c-near-first",
          "c-near-2",
          "j-1",
          "c-away-late",
          "c-near-late",
          "c-near",
        ]);
        expect(ids((await at(2_000, 2)).pending)).toEqual(["c-near-first", "c-near-2"]);
        expect((await at(2_000, 0)).pending).toEqual([]);
        // No agent in reach: only what has no target and what is past its deadline.
        const none = await store.listDue(2_000, 2_000, 100, { commandsBy: 2_000, onlyTargets: [] });
        expect(ids(none.pending)).toEqual(["j-1", "c-away-late", "c-near-late"]);
        // skipTargets wins when both are given, as the port says.
        const both = await store.listDue(1_200, 1_200, 100, {
          commandsBy: 1_200,
          onlyTargets,
          skipTargets: ["ag-near"],
        });
        expect(ids(both.pending).sort()).toEqual([
          "c-away",
          "c-away-late",
          "c-near-2",
          "c-unknown",
          "j-1",
        ]);
      });

      it("countInFlightByAgent counts what each agent holds, and nothing else", async () => {
        await seed();
        const e3 = await mustGet(store, "e3");
        await store.applyTransition(
          move(e3, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 500, {
            agentId: "ag-2",
          }),
        );
        const e4 = await mustGet(store, "e4");
        await store.applyTransition(
          move(e4, { state: "SUCCEEDED" }, "finished", 600, { finishedAt: 600 }),
        );
        // e1 (ag-1), e2 and e3 (ag-2) are held; e4 ended; the rest were never dispatched.
        expect(await store.countInFlightByAgent()).toEqual({ "ag-1": 1, "ag-2": 2 });
      });

      it("listOpenPeers lists a job's or a group's open executions, oldest first", async () => {
        for (const [id, jobId, groupKey, createdAt] of [
          ["a1", "ja", "g", 100],
          ["a2", "ja", null, 200],
          ["b1", "jb", "g", 150],
          ["a3", "ja", null, 300],
        ] as const) {
          await store.createExecution(newExecution(id, { jobId, groupKey, createdAt }), 1);
        }
        const a3 = await mustGet(store, "a3");
        await store.applyTransition(
          move(a3, { state: "CANCELED" }, "cancel", 400, { finishedAt: 400 }),
        );
        const a1 = await mustGet(store, "a1");
        await store.applyTransition(
          move(a1, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 400),
        );
        expect(await store.listOpenPeers({ jobId: "ja" })).toEqual([
          {
            id: "a1",
            state: "DISPATCHED",
            createdAt: 100,
            jobId: "ja",
            scheduledFor: null,
            shardTotal: null,
          },
          {
            id: "a2",
            state: "PENDING",
            createdAt: 200,
            jobId: "ja",
            scheduledFor: null,
            shardTotal: null,
          },
        ]);
        expect((await store.listOpenPeers({ groupKey: "g" })).map((p) => p.id)).toEqual([
          "a1",
          "b1",
        ]);
        expect(await store.listOpenPeers({ jobId: "none" })).toEqual([]);
        // Asked side by side (a store may answer them with one read), each gets its own.
        const side = await Promise.all([
          store.listOpenPeers({ jobId: "ja" }),
          store.listOpenPeers({ jobId: "jb" }),
          store.listOpenPeers({ groupKey: "g" }),
          store.listOpenPeers({ jobId: "none" }),
        ]);
        expect(side.map((l) => l.map((p) => p.id))).toEqual([
          ["a1", "a2"],
          ["b1"],
          ["a1", "b1"],
          [],
        ]);
      });

      it("listRecentlyRouted lists a job's executions that had an agent, newest first, up to a limit", async () => {
        const rows = [
          ["r1", "ja", 100, "ag-1", "SUCCEEDED", 0],
          ["r2", "ja", 200, "ag-2", "FAILED", 1],
          ["r3", "jb", 250, "ag-3", "SUCCEEDED", 0],
          ["r4", "ja", 300, "ag-3", "RUNNING", 0],
          ["r5", "ja", 400, null, "PENDING", 1],
        ] as const;
        for (const [id, jobId, createdAt, agentId, state, shardIndex] of rows) {
          await store.createExecution(
            newExecution(id, { jobId, createdAt, shardIndex, shardTotal: 2 }),
            1,
          );
          if (agentId === null) continue;
          const e = await mustGet(store, id);
          await store.applyTransition(
            move(e, { state, round: 1, dispatches: 1 }, "dispatch", createdAt + 10, { agentId }),
          );
        }
        expect(await store.listRecentlyRouted("ja", 10)).toEqual([
          { agentId: "ag-3", state: "RUNNING", shardIndex: 0, shardTotal: 2 },
          { agentId: "ag-2", state: "FAILED", shardIndex: 1, shardTotal: 2 },
          { agentId: "ag-1", state: "SUCCEEDED", shardIndex: 0, shardTotal: 2 },
        ]);
        expect((await store.listRecentlyRouted("ja", 2)).map((r) => r.agentId)).toEqual([
          "ag-3",
          "ag-2",
        ]);
        expect(await store.listRecentlyRouted("none", 10)).toEqual([]);
      });
    });

    describe("agents", () => {
      it("putAgent, getAgent and listAgents round-trip the record", async () => {
        const a = agentRecord("ag-2");
        const b = agentRecord("ag-1", { status: "offline", tags: {}, handlers: [] });
        await store.putAgent(a);
        await store.putAgent(b);
        expect(await store.getAgent("ag-2")).toEqual(a);
        expect(await store.getAgent("ag-1")).toEqual(b);
        expect(await store.getAgent("ag-3")).toBeUndefined();
        const listed = await store.listAgents();
        expect([...listed].sort((x, y) => x.agentId.localeCompare(y.agentId))).toEqual([b, a]);
        const a2 = { ...a, status: "offline" as const, lastSeenAt: 9_000, load: 0.9 };
        await store.putAgent(a2);
        expect(await store.getAgent("ag-2")).toEqual(a2);
        expect(await store.listAgents()).toHaveLength(2);
      });

      it("putAgents writes several agents in one go, new and known alike", async () => {
        await store.putAgent(agentRecord("ag-1"));
        const batch = [
          agentRecord("ag-1", { lastSeenAt: 7_000, load: 2.5, clockOffsetMs: -3 }),
          agentRecord("ag-2", { outboxDepth: 4 }),
          agentRecord("ag-3", { status: "offline" }),
        ];
        await store.putAgents(batch);
        await store.putAgents([]);
        const listed = await store.listAgents();
        expect([...listed].sort((x, y) => x.agentId.localeCompare(y.agentId))).toEqual(batch);
      });

      it("putAgent writes an agent's alerts with it, or neither", async () => {
        await store.putAgent(agentRecord("ag-1"));
        await store.putAlert(alertRecord("al-taken", 1_000));
        const offline = agentRecord("ag-1", { status: "offline", lastSeenAt: 9_000 });
        // An alert under an id already taken cannot be recorded: nor can the agent.
        await expect(
          store.putAgent(offline, [alertRecord("al-1", 9_000), alertRecord("al-taken", 9_000)]),
        ).rejects.toThrow();
        expect((await store.getAgent("ag-1"))?.status).toBe("online");
        expect((await store.listAlerts()).map((a) => a.id)).toEqual(["al-taken"]);
        await store.putAgent(offline, [alertRecord("al-1", 9_000)]);
        expect(await store.getAgent("ag-1")).toEqual(offline);
        expect((await store.listAlerts({ pending: true })).map((a) => a.id)).toEqual([
          "al-taken",
          "al-1",
        ]);
      });

      it("setAckedSeq only rises, and only for the agent's current journal", async () => {
        await store.putAgent(agentRecord("ag-1", { journalId: "j1", ackedSeq: 0 }));
        const acked = async () => (await store.getAgent("ag-1"))?.ackedSeq;
        await store.setAckedSeq("ag-1", "j1", 5);
        expect(await acked()).toBe(5);
        await store.setAckedSeq("ag-1", "j1", 3);
        expect(await acked()).toBe(5);
        await store.setAckedSeq("ag-1", "j-other", 9);
        expect(await acked()).toBe(5);
        await store.setAckedSeq("ag-1", "j1", 7);
        expect(await acked()).toBe(7);
        expect((await store.listAgents())[0]?.ackedSeq).toBe(7);
        // A new journal (the agent's disk was wiped) starts again from its own count.
        await store.putAgent(agentRecord("ag-1", { journalId: "j2", ackedSeq: 0 }));
        await store.setAckedSeq("ag-1", "j1", 10);
        expect(await acked()).toBe(0);
        await store.setAckedSeq("ag-1", "j2", 1);
        expect(await acked()).toBe(1);
        await store.setAckedSeq("ag-none", "j1", 4);
        // A record written back with an older acked seq of the same journal keeps the higher one:
        // the agent was told it, and has dropped those reports.
        await store.putAgent(agentRecord("ag-1", { journalId: "j2", ackedSeq: 0 }));
        expect(await acked()).toBe(1);
        await store.putAgents([
          agentRecord("ag-1", { journalId: "j2", ackedSeq: 0, status: "offline" }),
        ]);
        expect(await acked()).toBe(1);
        expect((await store.getAgent("ag-1"))?.status).toBe("offline");
        expect(await store.getAgent("ag-none")).toBeUndefined();
      });
    });

    describe("alerts", () => {
      const alert = alertRecord;

      it("records alerts and their attempts; lists newest first, or pending oldest first", async () => {
        await store.putAlert(alert("al-1", 100));
        await store.putAlert(alert("al-2", 200));
        await store.putAlert(alert("al-3", 300));
        await store.updateAlert("al-2", {
          status: "delivered",
          attempts: 2,
          lastError: "HTTP 500",
          updatedAt: 250,
        });
        expect((await store.listAlerts()).map((a) => a.id)).toEqual(["al-3", "al-2", "al-1"]);
        expect((await store.listAlerts({ pending: true })).map((a) => a.id)).toEqual([
          "al-1",
          "al-3",
        ]);
        expect((await store.listAlerts()).find((a) => a.id === "al-2")).toEqual(
          alert("al-2", 200, {
            status: "delivered",
            attempts: 2,
            lastError: "HTTP 500",
            updatedAt: 250,
          }),
        );
        expect(await store.listAlerts({ limit: 1 })).toHaveLength(1);
      });

      it("purges old alerts that are done, never a pending one", async () => {
        await store.putAlert(alert("old-done", 100, { status: "failed", attempts: 3 }));
        await store.putAlert(alert("old-pending", 100));
        await store.putAlert(alert("new-done", 5_000, { status: "delivered", attempts: 1 }));
        await store.purgeFinishedBefore(1_000, 100);
        expect((await store.listAlerts()).map((a) => a.id).sort()).toEqual([
          "new-done",
          "old-pending",
        ]);
      });
    });

    describe("job history", () => {
      it("records who created, changed, paused, fired and deleted a job, in order", async () => {
        await store.putJob(jobDef("job-h"), 5_000, 100, { actor: "alice" });
        // An identical definition is no change: no entry.
        await store.putJob(jobDef("job-h"), 5_000, 150, { actor: "bob" });
        const v2 = await store.putJob(jobDef("job-h", { priority: 5 }), 5_000, 200, {
          actor: "bob",
        });
        expect(v2.updatedBy).toBe("bob");
        expect((await store.getJob("job-h"))?.updatedBy).toBe("bob");
        // A pause is state: it is in the history with the version it paused, and makes none.
        const paused = await store.setJobPaused("job-h", true, 220, "erin");
        expect(paused).toMatchObject({
          version: 2,
          paused: true,
          updatedBy: "bob",
          nextFireAt: 5_000,
        });
        // Pausing a paused job is no change: no entry.
        await store.setJobPaused("job-h", true, 230, "erin");
        await store.appendJobHistory({
          jobId: "job-h",
          at: 250,
          action: "triggered",
          version: 2,
          actor: "carol",
          detail: { executionIds: ["e1"] },
        });
        expect(await store.deleteJob("job-h", { actor: "dave", at: 300 })).toBe(true);
        expect(await store.deleteJob("job-h", { actor: "dave", at: 301 })).toBe(false);
        const h = await store.listJobHistory("job-h");
        expect(h.map((e) => [e.seq, e.action, e.version, e.actor, e.at])).toEqual([
          [1, "created", 1, "alice", 100],
          [2, "updated", 2, "bob", 200],
          [3, "paused", 2, "erin", 220],
          [4, "triggered", 2, "carol", 250],
          [5, "deleted", 2, "dave", 300],
        ]);
        expect(h[3]?.detail).toEqual({ executionIds: ["e1"] });
        expect((await store.listJobHistory("job-h", 2)).map((e) => e.seq)).toEqual([4, 5]);
        // A page further back: the newest before an entry, oldest first.
        expect((await store.listJobHistory("job-h", 2, 4)).map((e) => e.seq)).toEqual([2, 3]);
        expect((await store.listJobHistory("job-h", 2, 2)).map((e) => e.seq)).toEqual([1]);
        expect(await store.listJobHistory("job-h", 2, 1)).toEqual([]);
        expect(await store.listJobHistory("nope")).toEqual([]);
      });
    });

    describe("API tokens", () => {
      it("keeps records by name, refuses a taken name, touches and deletes", async () => {
        const t = {
          name: "ci",
          role: "operator" as const,
          digest: "ab".repeat(32),
          createdAt: 10,
          createdBy: "admin",
          lastUsedAt: null,
        };
        await store.putApiToken(t);
        await expect(store.putApiToken({ ...t, digest: "cd".repeat(32) })).rejects.toMatchObject({
          code: "AX_API_TOKEN_EXISTS",
        });
        await store.touchApiToken("ci", 99);
        expect(await store.listApiTokens()).toEqual([{ ...t, lastUsedAt: 99 }]);
        expect(await store.deleteApiToken("ci")).toBe(true);
        expect(await store.deleteApiToken("ci")).toBe(false);
        expect(await store.listApiTokens()).toEqual([]);
      });
    });

    describe("counters", () => {
      it("bumpCounter accumulates and counters() returns every counter", async () => {
        expect(await store.counters()).toEqual({});
        await store.bumpCounter("stale_reports");
        await store.bumpCounter("invalid_messages", 5);
        await store.bumpCounter("stale_reports");
        await store.bumpCounter("stale_reports", 3);
        expect(await store.counters()).toEqual({ stale_reports: 5, invalid_messages: 5 });
      });
    });

    operatorContract(() => store, { jobDef, newExecution });
    bundlesContract(
      () => store,
      () => fx.openAnother?.(),
    );

    describe("lifecycle", () => {
      it("a closed store rejects with AX_STORE_FAILED; close is idempotent", async () => {
        await store.close();
        await store.close();
        await expect(store.getJob("job-a")).rejects.toMatchObject({
          code: "AX_STORE_FAILED",
          message: expect.stringContaining("getJob"),
        });
        await expect(store.putJob(jobDef("job-a"), 1, 1)).rejects.toMatchObject({
          code: "AX_STORE_FAILED",
        });
      });

      it("keeps everything across close and reopen", async (ctx) => {
        if (!fx.openAnother) return ctx.skip();
        const e = await firedExecution("ex-1");
        await store.applyTransition(
          move(e, { state: "DISPATCHED", round: 1, dispatches: 1 }, "dispatch", 1_001, {
            agentId: "ag-1",
            result: { kept: [1, 2] },
          }),
        );
        await store.putJob(jobDef("job-b", { paused: true }), 3_000, 20);
        await store.putAgent(agentRecord("ag-1", { journalId: "j1" }));
        await store.setAckedSeq("ag-1", "j1", 12);
        await store.bumpCounter("dropped", 2);
        const before = {
          jobs: await store.listJobs(),
          execs: await store.listExecutions(),
          timeline: await store.getTimeline("ex-1"),
          agents: await store.listAgents(),
          counters: await store.counters(),
        };
        await store.close();
        const reopened = await another();
        try {
          expect({
            jobs: await reopened.listJobs(),
            execs: await reopened.listExecutions(),
            timeline: await reopened.getTimeline("ex-1"),
            agents: await reopened.listAgents(),
            counters: await reopened.counters(),
          }).toEqual(before);
          expect(before.timeline).toHaveLength(2);
          expect(before.agents[0]?.ackedSeq).toBe(12);
          // The exactly-once record survives too.
          expect(
            await reopened.recordFire({
              jobId: "job-a",
              scheduledFor: 1_000,
              nextFireAt: 2_000,
              execution: newExecution("ex-again"),
              at: 960,
            }),
          ).toBe(false);
          expect((await reopened.putJob(jobDef("job-a"), 2_000, 30)).version).toBe(1);
        } finally {
          await reopened.close();
        }
      });
    });

    describe("rollouts", () => {
      const record = (id: string, over: Partial<RolloutRecord> = {}): RolloutRecord => ({
        id,
        description: null,
        version: 1,
        state: "IN_PROGRESS",
        selector: { tags: { site: "a" } },
        command: { handler: "echo", params: { n: 1 }, startWithin: 60_000, timeout: 30_000 },
        rate: { perMinute: 60 },
        waves: [{ percent: 100, soak: 0 }],
        abort: { thresholdPercent: 20, minExecuted: 5, on: ["FAILED"] },
        endsAt: null,
        wave: 0,
        soakUntil: null,
        createdAt: 1_000,
        updatedAt: 1_000,
        startedAt: 1_000,
        finishedAt: null,
        createdBy: "ops",
        reason: null,
        settled: false,
        ...over,
      });
      const created = (state: RolloutRecord["state"]) => ({
        at: 1_000,
        fromState: null,
        toState: state,
        event: "created",
        actor: "ops",
        reason: null,
        detail: null,
      });
      const target = (agentId: string, executionId: string, wave = 0) => ({
        agentId,
        wave,
        execution: newExecution(executionId, {
          kind: "command",
          jobId: null,
          jobVersion: null,
          targetAgentId: agentId,
        }),
      });

      it("creates a rollout once, reads it back, and refuses its id again", async () => {
        const r = record("ro-1");
        expect(await store.createRollout(r, created("IN_PROGRESS"))).toBe(true);
        expect(
          await store.createRollout(record("ro-1", { description: "x" }), created("CREATED")),
        ).toBe(false);
        expect(await store.getRollout("ro-1")).toEqual(r);
        expect(await store.getRollout("ro-none")).toBeUndefined();
        const timeline = await store.getRolloutTimeline("ro-1");
        expect(timeline).toEqual([{ seq: 1, ...created("IN_PROGRESS") }]);
      });

      it("writes a rollout's idempotency record with it, once per scope, or neither", async () => {
        const key = (scope: string, rolloutId: string) => ({
          scope,
          request: "req-hash",
          result: JSON.stringify({ rolloutId }),
          at: 1_000,
        });
        expect(
          await store.createRollout(record("ro-k1"), created("IN_PROGRESS"), key("rk-1", "ro-k1")),
        ).toBe(true);
        expect(await store.getIdempotency("rk-1")).toEqual(key("rk-1", "ro-k1"));
        // The scope again: refused whole, the second rollout not made.
        await expect(
          store.createRollout(record("ro-k2"), created("IN_PROGRESS"), key("rk-1", "ro-k2")),
        ).rejects.toMatchObject({ code: "AX_STORE_FAILED" });
        expect(await store.getRollout("ro-k2")).toBeUndefined();
        expect(await store.getRolloutTimeline("ro-k2")).toEqual([]);
        // A rollout id that is taken: false, and the key is not recorded either.
        expect(
          await store.createRollout(record("ro-k1"), created("IN_PROGRESS"), key("rk-2", "ro-k1")),
        ).toBe(false);
        expect(await store.getIdempotency("rk-2")).toBeUndefined();
      });

      it("updates by version only, appending its timeline entry, and bumps the version", async () => {
        await store.createRollout(record("ro-2"), created("IN_PROGRESS"));
        const paused = { ...record("ro-2"), state: "PAUSED" as const, reason: "look" };
        const entry = {
          ...created("PAUSED"),
          at: 2_000,
          fromState: "IN_PROGRESS" as const,
          event: "paused",
          detail: { by: "ops" },
        };
        expect(await store.updateRollout(paused, 1, entry)).toBe(true);
        // A writer that read version 1 loses: nothing written, no entry.
        expect(await store.updateRollout({ ...paused, state: "ABORTED" }, 1, entry)).toBe(false);
        const got = await store.getRollout("ro-2");
        expect(got?.state).toBe("PAUSED");
        expect(got?.version).toBe(2);
        expect(
          (await store.getRolloutTimeline("ro-2")).map((e) => [e.seq, e.event, e.detail]),
        ).toEqual([
          [1, "created", null],
          [2, "paused", { by: "ops" }],
        ]);
      });

      it("reaches each agent once, creating its execution, and only while IN_PROGRESS", async () => {
        await store.createRollout(record("ro-3"), created("IN_PROGRESS"));
        const first = await store.reachRolloutTargets(
          "ro-3",
          [target("a1", "ex-r1"), target("a2", "ex-r2")],
          5_000,
          { rolloutId: "ro-3" },
        );
        expect(first.sort()).toEqual(["a1", "a2"]);
        // a1 again (another execution id): not reached twice, and no execution created for it.
        const again = await store.reachRolloutTargets(
          "ro-3",
          [target("a1", "ex-r1b"), target("a3", "ex-r3", 1)],
          6_000,
        );
        expect(again).toEqual(["a3"]);
        expect(await store.getExecution("ex-r1b")).toBeUndefined();
        expect((await store.getExecution("ex-r3"))?.targetAgentId).toBe("a3");
        const targets = await store.listRolloutTargets("ro-3");
        expect(targets.map((t) => [t.agentId, t.executionId, t.wave, t.reachedAt])).toEqual([
          ["a1", "ex-r1", 0, 5_000],
          ["a2", "ex-r2", 0, 5_000],
          ["a3", "ex-r3", 1, 6_000],
        ]);
        expect(await store.countRolloutExecutions("ro-3")).toEqual([
          { wave: 0, state: "PENDING", count: 2 },
          { wave: 1, state: "PENDING", count: 1 },
        ]);
        // Paused: nothing reached, nothing created.
        await store.updateRollout({ ...record("ro-3"), state: "PAUSED" }, 1);
        expect(await store.reachRolloutTargets("ro-3", [target("a4", "ex-r4")], 7_000)).toEqual([]);
        expect(await store.getExecution("ex-r4")).toBeUndefined();
        expect(await store.reachRolloutTargets("ro-none", [target("a5", "ex-r5")], 7_000)).toEqual(
          [],
        );
      });

      it("retention deletes settled rollouts finished before the cutoff, with their timelines and targets", async () => {
        await store.createRollout(record("ro-old"), created("IN_PROGRESS"));
        await store.reachRolloutTargets("ro-old", [target("a1", "ex-old1")], 2_000);
        const old = (await store.getRollout("ro-old")) as RolloutRecord;
        const done = { ...old, state: "COMPLETED" as const, finishedAt: 3_000, settled: true };
        expect(await store.updateRollout(done, 1)).toBe(true);
        // Finished after the cutoff, or not settled: kept.
        await store.createRollout(record("ro-new"), created("IN_PROGRESS"));
        const fresh = {
          ...record("ro-new"),
          state: "COMPLETED" as const,
          finishedAt: 9_000,
          settled: true,
        };
        await store.updateRollout(fresh, 1);
        await store.createRollout(record("ro-open", { finishedAt: 3_000 }), created("IN_PROGRESS"));
        await store.purgeFinishedBefore(5_000, 100);
        expect(await store.getRollout("ro-old")).toBeUndefined();
        expect(await store.getRolloutTimeline("ro-old")).toEqual([]);
        expect(await store.listRolloutTargets("ro-old")).toEqual([]);
        expect((await store.getRollout("ro-new"))?.state).toBe("COMPLETED");
        expect((await store.getRolloutTimeline("ro-new")).length).toBe(1);
        expect((await store.getRollout("ro-open"))?.state).toBe("IN_PROGRESS");
      });

      it("pages newest first by state, and lists only the unsettled ones", async () => {
        for (let i = 0; i < 5; i++) {
          await store.createRollout(
            record(`ro-p${i}`, {
              createdAt: 1_000 + i,
              state: i % 2 === 0 ? "IN_PROGRESS" : "COMPLETED",
              settled: i % 2 === 1,
            }),
            created("IN_PROGRESS"),
          );
        }
        const p1 = await store.pageRollouts({ limit: 2 });
        expect(p1.items.map((r) => r.id)).toEqual(["ro-p4", "ro-p3"]);
        const p2 = await store.pageRollouts({ limit: 2, cursor: p1.nextCursor as string });
        expect(p2.items.map((r) => r.id)).toEqual(["ro-p2", "ro-p1"]);
        const p3 = await store.pageRollouts({ limit: 2, cursor: p2.nextCursor as string });
        expect(p3.items.map((r) => r.id)).toEqual(["ro-p0"]);
        expect(p3.nextCursor).toBeNull();
        const done = await store.pageRollouts({ limit: 10, state: "COMPLETED" });
        expect(done.items.map((r) => r.id)).toEqual(["ro-p3", "ro-p1"]);
        expect((await store.listUnsettledRollouts()).map((r) => r.id)).toEqual([
          "ro-p0",
          "ro-p2",
          "ro-p4",
        ]);
        await expect(store.pageRollouts({ limit: 2, cursor: "nope!" })).rejects.toMatchObject({
          code: "AX_STORE_BAD_CURSOR",
        });
      });
    });
  });
}
