import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import { FakeClock } from "../../shared/clock.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";

const MINUTE = 60_000;
// A minute boundary, so that `every 1m` fires at whole minutes.
const T0 = 1_800_000_000_000 - (1_800_000_000_000 % MINUTE) + 10_000;

/**
 * Issue 17: pausing is state, not a new definition version; a paused job fires nothing; resuming
 * hands the times missed to the job's misfire policy at once. Time is a fake clock; the broker
 * and the store are real.
 */
describe("pause and resume", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let clock: FakeClock;
  let coordinator: Coordinator;

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    clock = new FakeClock({ wall: T0 });
    coordinator = new Coordinator(
      parseCoordinatorConfig({
        store: { path: `${tmp.dir}/ax.sqlite` },
        mqtt: { url: broker.url, prefix: broker.prefix },
        security: { messages: "off" },
      }),
      { clock },
    );
    await coordinator.start();
  });

  afterAll(async () => {
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  /** Each misfire policy, and how many of the times missed in a pause it fires (maxCatchUp 3). */
  const POLICIES = [
    ["SKIP", 0],
    ["FIRE_ONCE", 1],
    ["CATCH_UP", 3],
  ] as const;

  const executions = async (jobId: string) =>
    coordinator.store.listExecutions({ jobId, limit: 1000 });

  it.each(POLICIES)(
    "keeps the version, fires nothing while paused, and resumes by policy %s",
    async (policy, fired) => {
      const id = `paused-${policy.toLowerCase()}`;
      const created = await coordinator.putJob(
        {
          id,
          handler: "echo",
          trigger: { type: "every", every: "1m", anchor: 0 },
          misfire: { policy, maxCatchUp: 3 },
        },
        "alice",
      );
      const firstFire = created.nextFireAt as number;
      expect(firstFire).toBeGreaterThan(clock.wallNow());

      const paused = await coordinator.pauseJob(id, "bob");
      expect(paused).toMatchObject({ version: 1, paused: true, nextFireAt: firstFire });
      // Pausing again changes nothing.
      expect(await coordinator.pauseJob(id, "bob")).toEqual(paused);

      // Ten minutes pass: ten nominal times, none fired.
      const missedBefore = (await coordinator.store.counters()).missed_fires ?? 0;
      for (let i = 0; i < 10; i++) clock.advance(MINUTE);
      await coordinator.settle();
      expect(await executions(id)).toEqual([]);

      const resumedAt = clock.wallNow();
      const resumed = await coordinator.resumeJob(id, "carol");
      expect(resumed.version).toBe(1);
      expect(resumed.paused).toBe(false);
      // The next fire is the first nominal time after now, whatever the policy fired.
      expect(resumed.nextFireAt).toBe(resumedAt - (resumedAt % MINUTE) + MINUTE);
      const runs = await executions(id);
      expect(runs).toHaveLength(fired);
      // Fired late, they fire now; the rest of the ten are recorded as missed.
      for (const e of runs) expect(e.fireAt).toBe(resumedAt);
      expect((await coordinator.store.counters()).missed_fires).toBe(missedBefore + 10 - fired);

      const history = await coordinator.store.listJobHistory(id);
      expect(history.map((h) => [h.action, h.version, h.actor])).toEqual([
        ["created", 1, "alice"],
        ["paused", 1, "bob"],
        ["resumed", 1, "carol"],
      ]);
      expect((await coordinator.store.getJob(id))?.version).toBe(1);
      // Gone, it fires nothing while the next case moves the clock.
      await coordinator.deleteJob(id);
    },
  );

  it.each(POLICIES)(
    "hands every time missed in a pause shorter than the misfire threshold to policy %s too",
    async (policy, fired) => {
      const id = `short-${policy.toLowerCase()}`;
      // Half a second past a whole one, so that the pause below spans four of the job's times.
      clock.advance(1_500 - (clock.wallNow() % 1_000));
      await coordinator.settle();
      await coordinator.putJob({
        id,
        handler: "echo",
        trigger: { type: "every", every: "1s", anchor: 0 },
        misfire: { policy, maxCatchUp: 3 },
      });
      await coordinator.pauseJob(id);
      const missedBefore = (await coordinator.store.counters()).missed_fires ?? 0;
      // Four nominal times pass, each less than the 5 s threshold ago at the resume.
      clock.advance(4_300);
      await coordinator.settle();
      const resumedAt = clock.wallNow();
      const resumed = await coordinator.resumeJob(id);
      expect(resumed.nextFireAt).toBeGreaterThan(resumedAt);
      const runs = await executions(id);
      expect(runs).toHaveLength(fired);
      for (const e of runs) expect(e.fireAt).toBe(resumedAt);
      expect((await coordinator.store.counters()).missed_fires).toBe(missedBefore + 4 - fired);
      await coordinator.deleteJob(id);
    },
  );

  it("cancels with the pause the fires made ahead of their time, and leaves a fire whose time came", async () => {
    const id = "ahead";
    clock.advance(1_500 - (clock.wallNow() % 1_000));
    await coordinator.settle();
    await coordinator.putJob({
      id,
      handler: "echo",
      trigger: { type: "every", every: "2s", anchor: 0 },
      dispatchLead: "10s",
      overlap: { policy: "PARALLEL" },
    });
    // The firing loop makes each fire 10 s ahead: five are waiting for their time.
    for (let i = 0; i < 10; i++) {
      clock.advance(100);
      await coordinator.settle();
    }
    const made = await executions(id);
    expect(made.length).toBeGreaterThanOrEqual(5);
    const pausedAt = clock.wallNow();
    await coordinator.pauseJob(id, "bob");
    const after = await executions(id);
    for (const e of after) {
      // A fire whose time came before the pause is the job's run; every later one is canceled.
      if (e.fireAt > pausedAt) expect(e.state, e.id).toBe("CANCELED");
      else expect(e.state, e.id).not.toBe("CANCELED");
    }
    expect(after.filter((e) => e.state === "CANCELED").length).toBeGreaterThanOrEqual(4);
    const timeline = await coordinator.store.getTimeline(
      (after.find((e) => e.state === "CANCELED") as { id: string }).id,
    );
    expect(timeline.at(-1)).toMatchObject({ event: "cancel", actor: "bob" });
    await coordinator.deleteJob(id);
  });

  it("keeps a paused job paused when its definition is stored again (a jobs file re-read)", async () => {
    const def = { id: "reloaded", handler: "echo", trigger: { type: "every", every: "1m" } };
    await coordinator.putJob(def, "jobs-file");
    await coordinator.pauseJob("reloaded", "ops");
    const again = await coordinator.putJob(def, "jobs-file");
    expect(again).toMatchObject({ version: 1, paused: true });
    const changed = await coordinator.putJob({ ...def, params: { v: 2 } }, "jobs-file");
    expect(changed).toMatchObject({ version: 2, paused: true });
  });

  it("changes nothing when resuming a job that is not paused", async () => {
    const job = await coordinator.putJob({
      id: "never-paused",
      handler: "echo",
      trigger: { type: "every", every: "1m" },
    });
    const fired = (await executions("never-paused")).length;
    const history = await coordinator.store.listJobHistory("never-paused");
    const resumed = await coordinator.resumeJob("never-paused", "ops");
    expect(resumed).toMatchObject({ version: job.version, paused: false });
    expect(resumed.nextFireAt).toBe(job.nextFireAt);
    expect(await coordinator.store.listJobHistory("never-paused")).toEqual(history);
    expect(await executions("never-paused")).toHaveLength(fired);
  });

  it("starts a job paused when its first definition says so", async () => {
    const job = await coordinator.putJob({
      id: "born-paused",
      handler: "echo",
      trigger: { type: "every", every: "1m" },
      paused: true,
    });
    expect(job).toMatchObject({ version: 1, paused: true });
    clock.advance(2 * MINUTE);
    await coordinator.settle();
    expect(await executions("born-paused")).toEqual([]);
  });
});

/**
 * A pause commits before it cancels the fires made ahead of their time, one write each: a crash
 * in between leaves them to run after the pause. The next start (where what runs once for the
 * cluster runs) cancels them, as the pause would have.
 */
describe("pause: what a crash between the pause and its cancels left", () => {
  it("is canceled at the next start, and a run asked for after the pause is not", async () => {
    const broker = await testBroker();
    const tmp = tempDir();
    const config = parseCoordinatorConfig({
      store: { path: `${tmp.dir}/ax.sqlite` },
      mqtt: { url: broker.url, prefix: broker.prefix },
      security: { messages: "off" },
    });
    const jobId = "ahead";
    try {
      const a = new Coordinator(config);
      await a.start();
      // Every second, each fire made 10 s ahead: no agent has the handler, so they wait.
      await a.putJob({
        id: jobId,
        handler: "not-on-any-agent",
        trigger: { type: "every", every: "1s" },
        dispatchLead: "10s",
      });
      const list = () => a.store.listExecutions({ jobId, limit: 1000 });
      await waitFor("three fires made ahead", async () =>
        (await list()).filter((e) => e.fireAt > Date.now()).length >= 3 ? true : undefined,
      );
      // The pause's own write, and then the crash: its cancels never ran.
      const pausedAt = Date.now();
      await a.store.setJobPaused(jobId, true, pausedAt, "test");
      await a.store.flush();
      const runNow = await a.jobs.trigger(jobId, "test");
      await a.close();
      const ahead = listOf(`${tmp.dir}/ax.sqlite`, jobId).filter((e) => e.fireAt > pausedAt);
      expect(ahead.filter((e) => e.state === "PENDING").length).toBeGreaterThanOrEqual(3);

      const b = new Coordinator(config);
      await b.start();
      try {
        const after = await b.store.listExecutions({ jobId, limit: 1000 });
        for (const e of after) {
          const made = e.createdAt <= pausedAt;
          if (made && e.fireAt > pausedAt) {
            // Made before the pause for a time after it: canceled, never dispatched.
            expect(e.state).toBe("CANCELED");
            expect(e.dispatches).toBe(0);
            const timeline = await b.store.getTimeline(e.id);
            expect(timeline.at(-1)?.detail?.reason).toBe(
              "job paused before its time (found at start)",
            );
          }
        }
        // The run asked for after the pause stands.
        for (const id of runNow) {
          expect((await b.store.getExecution(id))?.state).toBe("PENDING");
        }
        // Nothing more to cancel at the next start.
        expect(await b.jobs.repairPauses()).toBe(0);
      } finally {
        await b.close();
      }
    } finally {
      await broker.close();
      tmp.cleanup();
    }
  }, 30_000);
});

/** The job's executions as the store file holds them, read with no coordinator running. */
function listOf(path: string, jobId: string): { state: string; fireAt: number }[] {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare("SELECT state, fire_at AS fireAt FROM executions WHERE job_id = ?")
      .all(jobId) as { state: string; fireAt: number }[];
  } finally {
    db.close();
  }
}
