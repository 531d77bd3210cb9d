import { join } from "node:path";
import { afterAll, beforeAll, describe, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import { type CoordinatorConfig, parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { JobDefinitionInput } from "../../coordinator/domain/job.js";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForAgentsOnline,
  waitForEnd,
} from "../helpers/env.js";

/**
 * The job policies of DESIGN §3 on real parts: a broker, a coordinator on a SQLite file, and two
 * agents as child processes (one tagged site=north). Assertions are on states, counts and order,
 * read back from the store; times are only compared with each other, never against tight bounds.
 */

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Agent timestamps come from two processes' estimates of coordinator time: allow a little. */
const CLOCK_SLACK_MS = 50;

type Ran = ExecutionRecord & { startedAt: number; finishedAt: number };

/** Executions that started and finished, in start order. */
function ranOf(execs: readonly ExecutionRecord[]): Ran[] {
  return execs
    .filter((e): e is Ran => e.startedAt !== null && e.finishedAt !== null)
    .sort((a, b) => a.startedAt - b.startedAt);
}

/** Pairs of executions whose run intervals overlap (by more than the clock slack). */
function overlaps(execs: readonly ExecutionRecord[]): [Ran, Ran][] {
  const ran = ranOf(execs);
  const out: [Ran, Ran][] = [];
  for (let i = 0; i < ran.length; i++) {
    for (let j = i + 1; j < ran.length; j++) {
      const a = ran[i] as Ran;
      const b = ran[j] as Ran;
      if (b.startedAt < a.finishedAt - CLOCK_SLACK_MS) out.push([a, b]);
    }
  }
  return out;
}

/** Oldest first, as the engine orders them (creation time, then id). */
function byCreation(execs: readonly ExecutionRecord[]): ExecutionRecord[] {
  return [...execs].sort((a, b) =>
    a.createdAt !== b.createdAt ? a.createdAt - b.createdAt : a.id < b.id ? -1 : 1,
  );
}

describe("job policies on real parts", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  const agents: AgentProcess[] = [];
  let plainAgent: string;
  let northAgent: string;

  const jobExecutions = (jobId: string, c: Coordinator = coordinator) =>
    c.store.listExecutions({ jobId, limit: 10_000 });

  /** Waits until `count` executions of `jobId` exist (any count when undefined) and all ended. */
  const allEnded = (jobId: string, count?: number, timeoutMs = 30_000) =>
    waitFor(
      `every execution of ${jobId} to end`,
      async () => {
        const all = await jobExecutions(jobId);
        const enough = count === undefined ? all.length > 0 : all.length === count;
        return enough && all.every((e) => TERMINAL_STATES.has(e.state)) ? all : undefined;
      },
      timeoutMs,
    );

  /**
   * Pauses `jobId` to stop it firing. The pause cancels the fires made ahead of their time
   * (dispatchLead) that have not started: the executions the pause let run are returned to be
   * checked, after checking that what it canceled was such a fire, due after the pause.
   */
  const pauseToStop = async (jobId: string) => {
    const pausedAt = Date.now();
    await coordinator.pauseJob(jobId);
    return async (execs: ExecutionRecord[]) => {
      const ran: ExecutionRecord[] = [];
      for (const e of execs) {
        const timeline = e.state === "CANCELED" ? await coordinator.store.getTimeline(e.id) : [];
        const byPause = timeline.some(
          (t) => t.event === "cancel" && t.detail?.reason === "job paused before its time",
        );
        if (!byPause) ran.push(e);
        else if (e.fireAt <= pausedAt - 5) {
          throw new Error(`${e.id} was canceled by the pause, though due before it (${e.fireAt})`);
        }
      }
      return ran;
    };
  };

  /** Stores `def`, lets it fire for `forMs`, pauses it and returns its executions once all ended. */
  const runJob = async (def: JobDefinitionInput, forMs: number): Promise<ExecutionRecord[]> => {
    await coordinator.putJob(def);
    await sleep(forMs);
    const ran = await pauseToStop(def.id);
    // A fire decided just before the pause may still be recording its execution.
    await sleep(300);
    return ran(byCreation(await allEnded(def.id)));
  };

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir("ax-policies-");
    coordinator = await startTestCoordinator(broker, tmp.dir, 1000);
    plainAgent = `${broker.prefix}-plain`;
    northAgent = `${broker.prefix}-north`;
    for (const [agentId, tags] of [
      [plainAgent, {}],
      [northAgent, { site: "north" }],
    ] as const) {
      agents.push(
        spawnAgentProcess(tmp.dir, {
          agentId,
          mqtt: { url: broker.url, prefix: broker.prefix, keepaliveS: 5 },
          heartbeatMs: 1000,
          capacity: { concurrency: 16, queue: 64 },
          tags,
        }),
      );
    }
    await waitForAgentsOnline(coordinator, 2);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop(5000)));
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  // The four overlap policies run side by side: each has its own job and the agents have room.
  describe.concurrent("overlap: a 2.5 s run fired every second", () => {
    const overlapJob = (
      id: string,
      overlap: JobDefinitionInput["overlap"],
    ): JobDefinitionInput => ({
      id,
      handler: "sleep",
      params: { ms: 2500 },
      trigger: { type: "every", every: "1s" },
      overlap,
    });

    it("SKIP: a fire while one runs is SKIPPED, and never two run at once", async ({ expect }) => {
      const execs = await runJob(overlapJob("overlap-skip", { policy: "SKIP" }), 5000);
      const skipped = execs.filter((e) => e.state === "SKIPPED");
      expect(skipped.length).toBeGreaterThan(0);
      for (const e of skipped) {
        expect(e.message).toMatch(/^overlap SKIP: /);
        expect(e.startedAt).toBeNull();
        expect(e.agentId).toBeNull();
      }
      const ran = execs.filter((e) => e.state !== "SKIPPED");
      expect(ran.length).toBeGreaterThanOrEqual(2);
      expect(ran.map((e) => e.state)).toEqual(ran.map(() => "SUCCEEDED"));
      expect(overlaps(execs)).toEqual([]);
    }, 40_000);

    it("PARALLEL: runs overlap", async ({ expect }) => {
      const execs = await runJob(overlapJob("overlap-parallel", { policy: "PARALLEL" }), 5000);
      expect(execs.length).toBeGreaterThanOrEqual(4);
      expect(execs.map((e) => e.state)).toEqual(execs.map(() => "SUCCEEDED"));
      expect(overlaps(execs).length).toBeGreaterThan(0);
    }, 40_000);

    it("QUEUE (queueMax 1): runs one after another in fire order; beyond the bound SKIPPED", async ({
      expect,
    }) => {
      const execs = await runJob(
        overlapJob("overlap-queue", { policy: "QUEUE", queueMax: 1 }),
        5000,
      );
      const skipped = execs.filter((e) => e.state === "SKIPPED");
      expect(skipped.length).toBeGreaterThan(0);
      for (const e of skipped) expect(e.message).toMatch(/^overlap QUEUE full: /);
      const ran = execs.filter((e) => e.state !== "SKIPPED");
      expect(ran.length).toBeGreaterThanOrEqual(2);
      expect(ran.map((e) => e.state)).toEqual(ran.map(() => "SUCCEEDED"));
      // Serial, and in the order they fired.
      expect(overlaps(execs)).toEqual([]);
      expect(ranOf(ran).map((e) => e.id)).toEqual(ran.map((e) => e.id));
      expect(ran.map((e) => e.scheduledFor)).toEqual(
        [...ran.map((e) => e.scheduledFor ?? 0)].sort((a, b) => a - b),
      );
      // At least one waited for the one before it: it started after its own fire time.
      expect(ran.some((e) => (e.startedAt ?? 0) > e.fireAt + 300)).toBe(true);
    }, 40_000);

    it("REPLACE: the running one ends CANCELED and the newer one runs", async ({ expect }) => {
      const execs = await runJob(overlapJob("overlap-replace", { policy: "REPLACE" }), 5000);
      const byId = new Map(execs.map((e) => [e.id, e]));
      const canceled = execs.filter((e) => e.state === "CANCELED");
      expect(canceled.length).toBeGreaterThan(0);
      let replacedWhileRunning = 0;
      for (const old of canceled) {
        const timeline = await coordinator.store.getTimeline(old.id);
        const cancel = timeline.find((t) => t.event === "cancel");
        const reason = String(cancel?.detail?.reason ?? "");
        expect(reason).toMatch(/^replaced by ex_/);
        const newer = byId.get(reason.slice("replaced by ".length));
        expect(newer).toBeDefined();
        expect(newer?.createdAt).toBeGreaterThanOrEqual(old.createdAt);
        expect(newer?.startedAt).not.toBeNull();
        if (old.startedAt !== null) {
          replacedWhileRunning++;
          // The newer one starts only once the replaced one has ended.
          expect(newer?.startedAt ?? 0).toBeGreaterThanOrEqual(
            (old.finishedAt ?? Number.POSITIVE_INFINITY) - CLOCK_SLACK_MS,
          );
        }
      }
      expect(replacedWhileRunning).toBeGreaterThan(0);
      // Nothing is skipped, nothing fails; the last one, replaced by none, runs to the end.
      expect(execs.every((e) => e.state === "CANCELED" || e.state === "SUCCEEDED")).toBe(true);
      expect(execs.at(-1)?.state).toBe("SUCCEEDED");
      expect(overlaps(execs)).toEqual([]);
    }, 40_000);
  });

  it("misfire: fires missed while the coordinator was down follow FIRE_ONCE, SKIP and CATCH_UP", async ({
    expect,
  }) => {
    const cases = [
      { policy: "FIRE_ONCE", misfire: { policy: "FIRE_ONCE" }, fired: 1 },
      { policy: "SKIP", misfire: { policy: "SKIP" }, fired: 0 },
      { policy: "CATCH_UP", misfire: { policy: "CATCH_UP", maxCatchUp: 2 }, fired: 2 },
    ] as const;

    const outcomes = await Promise.all(
      cases.map(async (c) => {
        // Its own store file and topic prefix: no agent sees these executions.
        const config: CoordinatorConfig = parseCoordinatorConfig({
          store: { path: join(tmp.dir, `misfire-${c.policy}.sqlite`) },
          mqtt: { url: broker.url, prefix: `${broker.prefix}m` },
          // Unsigned agents: this test is not about authentication (test/integration/security*.test.ts are).
          security: { messages: "off" },
          heartbeatMs: 1000,
          misfireThresholdMs: 1000,
        });
        const jobId = `misfire-${c.policy.toLowerCase()}`;
        const a = new Coordinator(config);
        try {
          await a.start();
          await a.putJob({
            id: jobId,
            handler: "echo",
            trigger: { type: "every", every: "1s" },
            misfire: c.misfire,
          });
          await waitFor(`${jobId} to fire on A`, async () =>
            (await jobExecutions(jobId, a)).length > 0 ? true : undefined,
          );
        } finally {
          await a.close();
        }
        await sleep(4000);

        const b = new Coordinator(config);
        try {
          const firstMissed = (await b.store.getJob(jobId))?.nextFireAt ?? 0;
          const missedBefore = (await b.store.counters()).missed_fires ?? 0;
          const late: number[] = [];
          const missed: number[][] = [];
          b.events.on("fired", (f) => {
            if (f.jobId === jobId && f.late) late.push(f.scheduledFor);
          });
          b.events.on("missed", (m) => {
            if (m.jobId === jobId) missed.push([...m.scheduledFor]);
          });
          const startedAt = Date.now();
          await b.start();
          // Every missed span has times that are not fired (FIRE_ONCE and CATCH_UP 2 fire at
          // most two of four), so the decision always announces them.
          await waitFor(`${jobId}'s misfire decided on B`, () =>
            missed.length > 0 ? true : undefined,
          );
          await b.pauseJob(jobId);
          await sleep(300);
          const execs = await jobExecutions(jobId, b);
          const counters = await b.store.counters();
          return { c, firstMissed, startedAt, missedBefore, counters, late, missed, execs };
        } finally {
          await b.close();
        }
      }),
    );

    for (const o of outcomes) {
      const { c, firstMissed, missed } = o;
      expect(firstMissed, c.policy).toBeGreaterThan(0);
      expect(missed, c.policy).toHaveLength(1);
      // Every nominal time from the first missed one up to B's decision, once: fired or missed.
      const span = [...(missed[0] ?? []), ...o.late].sort((x, y) => x - y);
      expect(span.length, c.policy).toBeGreaterThanOrEqual(3);
      expect(span, c.policy).toEqual(span.map((_, i) => firstMissed + i * 1000));
      const last = span.at(-1) ?? 0;
      expect(last + 1000, c.policy).toBeGreaterThan(o.startedAt);
      // The policy decides which of them fire: the latest ones.
      expect(o.late, c.policy).toEqual(span.slice(span.length - c.fired));
      expect(missed[0], c.policy).toEqual(span.slice(0, span.length - c.fired));
      expect((o.counters.missed_fires ?? 0) - o.missedBefore, c.policy).toBe(span.length - c.fired);
      // The store holds exactly the late executions for the span, fired late at B's start.
      const inSpan = o.execs.filter(
        (e) => (e.scheduledFor ?? 0) >= firstMissed && (e.scheduledFor ?? 0) <= last,
      );
      expect(
        inSpan.map((e) => e.scheduledFor ?? 0).sort((x, y) => x - y),
        c.policy,
      ).toEqual(o.late);
      for (const e of inSpan) expect(e.fireAt, c.policy).toBeGreaterThan(e.scheduledFor ?? 0);
      // The rest, fired on A before the stop or on B after the span, fired on time.
      const onTime = o.execs.filter((e) => !inSpan.includes(e));
      expect(
        onTime.some((e) => (e.scheduledFor ?? 0) < firstMissed),
        c.policy,
      ).toBe(true);
      for (const e of onTime) expect(e.fireAt, c.policy).toBe(e.scheduledFor);
    }
  }, 30_000);

  it("shards: one firing makes one execution per shard, spread over both agents", async ({
    expect,
  }) => {
    const at = Date.now() + 1500;
    await coordinator.putJob({
      id: "shards-ok",
      handler: "echo",
      trigger: { type: "at", at },
      shards: 4,
    });
    const execs = await allEnded("shards-ok", 4);
    expect(execs.map((e) => e.state)).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]);
    expect(execs.map((e) => e.scheduledFor)).toEqual([at, at, at, at]);
    expect(execs.map((e) => e.shardIndex).sort()).toEqual([0, 1, 2, 3]);
    expect(execs.map((e) => e.shardTotal)).toEqual([4, 4, 4, 4]);
    expect(new Set(execs.map((e) => e.agentId))).toEqual(new Set([plainAgent, northAgent]));
    // Each shard is sent ahead of the fire time (dispatchLead 500 ms), so the agents fire it from
    // their own wheels: a sibling shard in flight is the same firing, not an overlap to wait for.
    for (const e of execs) expect(e.dispatchedAt ?? Number.POSITIVE_INFINITY).toBeLessThan(at);
  }, 30_000);

  it("shards: a failing shard retries alone, as a new attempt of its own execution", async ({
    expect,
  }) => {
    await coordinator.putJob({
      id: "shards-fail",
      handler: "fail",
      params: { retryable: true, message: "shard down" },
      trigger: { type: "at", at: Date.now() + 1000 },
      shards: 4,
      retry: { maxAttempts: 2, baseMs: 100 },
    });
    const execs = await allEnded("shards-fail", 4);
    // Nothing more comes: the retries are attempts of the same four executions.
    await sleep(500);
    expect((await jobExecutions("shards-fail")).length).toBe(4);
    expect(new Set(execs.map((e) => e.scheduledFor)).size).toBe(1);
    expect(execs.map((e) => e.shardIndex).sort()).toEqual([0, 1, 2, 3]);
    for (const e of execs) {
      expect(e.state).toBe("FAILED");
      expect(e.attempt).toBe(2);
      expect(e.message).toBe("shard down");
      const events = (await coordinator.store.getTimeline(e.id)).map((t) => t.event);
      expect(events.filter((x) => x === "retry_due")).toHaveLength(1);
      expect(events.filter((x) => x === "dispatch")).toHaveLength(2);
    }
  }, 30_000);

  it("group: two jobs in one group run one at a time, in creation order", async ({ expect }) => {
    const groupJob = (id: string): JobDefinitionInput => ({
      id,
      handler: "sleep",
      params: { ms: 800 },
      trigger: { type: "every", every: "1s" },
      group: "g1",
    });
    await coordinator.putJob(groupJob("group-a"));
    await coordinator.putJob(groupJob("group-b"));
    await sleep(3500);
    const ranA = await pauseToStop("group-a");
    const ranB = await pauseToStop("group-b");
    await sleep(300);
    const a = await ranA(await allEnded("group-a"));
    const b = await ranB(await allEnded("group-b"));
    expect(a.length).toBeGreaterThanOrEqual(2);
    expect(b.length).toBeGreaterThanOrEqual(2);
    const all = byCreation([...a, ...b]);
    expect(all.map((e) => e.state)).toEqual(all.map(() => "SUCCEEDED"));
    expect(all.map((e) => e.groupKey)).toEqual(all.map(() => "g1"));
    expect(overlaps(all)).toEqual([]);
    // FIFO: start order is creation order.
    expect(ranOf(all).map((e) => e.id)).toEqual(all.map((e) => e.id));
  }, 40_000);

  it("concurrency 1 with PARALLEL overlap: never two running at once", async ({ expect }) => {
    const execs = await runJob(
      {
        id: "concurrency-1",
        handler: "sleep",
        params: { ms: 1500 },
        trigger: { type: "every", every: "1s" },
        overlap: { policy: "PARALLEL" },
        concurrency: 1,
      },
      4000,
    );
    expect(execs.length).toBeGreaterThanOrEqual(3);
    expect(execs.map((e) => e.state)).toEqual(execs.map(() => "SUCCEEDED"));
    expect(overlaps(execs)).toEqual([]);
    expect(ranOf(execs).map((e) => e.id)).toEqual(execs.map((e) => e.id));
  }, 40_000);

  it("misfire: a one-shot at already past when stored fires once now (FIRE_ONCE) or is recorded missed (SKIP)", async ({
    expect,
  }) => {
    const at = Date.now() - 60_000;
    const missed: { jobId: string; scheduledFor: number[] }[] = [];
    coordinator.events.on("missed", (m) => {
      missed.push({ jobId: m.jobId, scheduledFor: [...m.scheduledFor] });
    });
    const storedAt = Date.now();
    await coordinator.putJob({ id: "past-once", handler: "echo", trigger: { type: "at", at } });
    await coordinator.putJob({
      id: "past-skip",
      handler: "echo",
      trigger: { type: "at", at },
      misfire: { policy: "SKIP" },
    });
    const [fired] = await allEnded("past-once", 1);
    expect(fired?.state).toBe("SUCCEEDED");
    expect(fired?.scheduledFor).toBe(at);
    expect(fired?.fireAt).toBeGreaterThanOrEqual(storedAt); // fired now, late
    await waitFor("the SKIP job's missed time", () =>
      missed.some((m) => m.jobId === "past-skip") ? true : undefined,
    );
    expect(missed.filter((m) => m.jobId === "past-skip")).toEqual([
      { jobId: "past-skip", scheduledFor: [at] },
    ]);
    expect(missed.filter((m) => m.jobId === "past-once")).toEqual([]);
    await sleep(500);
    expect(await jobExecutions("past-skip")).toEqual([]);
    // Stored again unchanged (a jobs file at the next start): nothing fires a second time.
    await coordinator.putJob({ id: "past-once", handler: "echo", trigger: { type: "at", at } });
    await sleep(1_000);
    expect(await jobExecutions("past-once")).toHaveLength(1);
    for (const id of ["past-once", "past-skip"]) {
      expect((await coordinator.store.getJob(id))?.nextFireAt).toBeNull();
    }
  }, 30_000);

  it("tags: a job that requires site=north runs only on the agent tagged so", async ({
    expect,
  }) => {
    const execs = await runJob(
      {
        id: "tags-north",
        handler: "echo",
        trigger: { type: "every", every: "500ms" },
        tags: { site: "north" },
      },
      2500,
    );
    expect(execs.length).toBeGreaterThanOrEqual(3);
    expect(execs.map((e) => e.state)).toEqual(execs.map(() => "SUCCEEDED"));
    expect(execs.map((e) => e.agentId)).toEqual(execs.map(() => northAgent));
    expect(execs.map((e) => e.tags)).toEqual(execs.map(() => ({ site: "north" })));
  }, 30_000);

  it("retry: a retryable failure is retried with capped backoff until maxAttempts", async ({
    expect,
  }) => {
    const capMs = 400;
    await coordinator.putJob({
      id: "retry-timing",
      handler: "fail",
      params: { retryable: true, message: "flaky" },
      trigger: { type: "manual" },
      retry: { maxAttempts: 3, baseMs: 200, capMs },
    });
    const id = await coordinator.triggerJob("retry-timing");
    const done = await waitForEnd(coordinator, id);
    expect(done.state).toBe("FAILED");
    expect(done.attempt).toBe(3);
    expect(done.message).toBe("flaky");

    const timeline = await coordinator.store.getTimeline(id);
    const dispatches = timeline.filter((t) => t.event === "dispatch");
    expect(dispatches.map((t) => t.round)).toEqual([1, 2, 3]);
    expect(timeline.filter((t) => t.event === "retry_due").map((t) => t.toState)).toEqual([
      "PENDING",
      "PENDING",
    ]);
    const failures = timeline.filter((t) => t.event === "finished");
    expect(failures.map((t) => t.toState)).toEqual(["RETRY_WAITING", "RETRY_WAITING", "FAILED"]);
    // Each retry is dispatched within the backoff cap plus a dispatcher poll (100 ms), with slack
    // for a loaded machine; not a second later (the dispatcher once left a retry made PENDING
    // unread until its next quiet read, 1 s on).
    const slackMs = 350;
    for (const failure of failures.slice(0, 2)) {
      const next = timeline.find((t) => t.event === "dispatch" && t.seq > failure.seq);
      expect(next).toBeDefined();
      const gap = (next?.at ?? Number.POSITIVE_INFINITY) - failure.at;
      expect(gap).toBeGreaterThanOrEqual(0);
      expect(gap).toBeLessThanOrEqual(capMs + 100 + slackMs);
    }
  }, 30_000);
});
