import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enrolSimAgents, Simulator } from "../../bench/fleet-sim/simulator.js";
import { startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator, openStore } from "../../coordinator/coordinator.js";
import { type RolloutSpecInput, rolloutSpecSchema } from "../../coordinator/domain/rollout.js";
import type { RolloutView } from "../../coordinator/operations/rollouts.js";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import { newId } from "../../shared/ids.js";
import { tempDir, waitFor } from "../helpers/env.js";
import { describeOnPg, dropPgSchema, freshPgSchema } from "../helpers/postgres.js";

/**
 * Rollouts (issue "Fleet rollouts", items 1 and 4) against a real coordinator on the embedded
 * broker, with the fleet simulator's agents (one MQTT connection each, messages authenticated):
 * a rollout across 50 agents of which 20 % fail aborts at its threshold, having reached no more
 * agents than its rate allowed, and cancels what it left open; waves run in order with their
 * soak; pause holds it; a restart of the coordinator mid-way resumes it; an agent that comes
 * online later is reached. Each ends with the truth check: what the store recorded for every
 * execution is what the agent's journal says happened, and every agent ran what it was sent
 * exactly once. The same tests run on SQLite and, when AX_TEST_PG_URL names a server, on
 * PostgreSQL (a schema of their own).
 */
function rolloutTests(
  storeOf: (dir: string) => Record<string, unknown>,
  dropStore?: () => Promise<void>,
): void {
  const tmp = tempDir("ax-rollouts-");
  const prefix = `axr${newId().slice(-8)}`;
  let broker: Awaited<ReturnType<typeof startEmbeddedBroker>>;
  let coordinator: Coordinator;
  const sims: Simulator[] = [];
  const config = () =>
    parseCoordinatorConfig({
      store: storeOf(tmp.dir),
      mqtt: { url: broker.url, prefix },
      heartbeatMs: 1_000,
      // In the suite's folder on PostgreSQL too, where there is no store file for it to go beside.
      security: { dir: join(tmp.dir, "ax-secrets") },
    });

  /** A coordinator on the suite's store (PostgreSQL's is opened first and passed in). */
  const newCoordinator = async () => {
    const c = config();
    return new Coordinator(c, c.store.url === undefined ? {} : { store: await openStore(c) });
  };

  /** Enrols agents `ids` with `tags` and runs them in a simulator of their own. */
  async function agents(
    ids: string[],
    tags: Record<string, string>,
    fails: (id: string) => boolean = () => false,
    runMs = 0,
  ): Promise<Simulator> {
    const specs = await enrolSimAgents(coordinator, ids, tags, "test", (agentId) => ({
      fails: fails(agentId),
      runMs,
    }));
    const sim = new Simulator({ host: "127.0.0.1", port: broker.port, prefix, agents: specs });
    sims.push(sim);
    sim.start();
    await waitFor(`${ids.length} agents online`, () =>
      ids.every((id) => coordinator.fleet.get(id)?.status === "online") ? true : undefined,
    );
    return sim;
  }

  const create = (spec: RolloutSpecInput) =>
    coordinator.rollouts.create(rolloutSpecSchema.parse(spec), "test");

  async function until(id: string, states: string[], timeoutMs = 30_000): Promise<RolloutView> {
    return waitFor(
      `rollout ${id} ${states.join(" or ")}`,
      async () => {
        const r = await coordinator.rollouts.get(id);
        return states.includes(r.state) && r.settled === FINAL(r.state) ? r : undefined;
      },
      timeoutMs,
    );
  }
  const FINAL = (s: string) => s === "ABORTED" || s === "COMPLETED";

  /**
   * The truth check: every execution the rollout created is terminal, and its recorded state is
   * what the agent's journal says (ran once and succeeded or failed; canceled ones never ran).
   * Returns the executions.
   */
  async function truth(id: string): Promise<ExecutionRecord[]> {
    const targets = await coordinator.store.listRolloutTargets(id);
    const out: ExecutionRecord[] = [];
    for (const t of targets) {
      const e = await coordinator.store.getExecution(t.executionId);
      expect(e, t.executionId).toBeDefined();
      const exec = e as ExecutionRecord;
      expect(TERMINAL_STATES.has(exec.state), `${exec.id} ${exec.state}`).toBe(true);
      expect(exec.targetAgentId).toBe(t.agentId);
      const agent = sims.flatMap((s) => s.agents).find((a) => a.spec.agentId === t.agentId);
      const ran = agent?.journal.get(exec.id);
      if (exec.state === "SUCCEEDED" || exec.state === "FAILED") {
        expect(ran?.runs, `${exec.id} on ${t.agentId}`).toBe(1);
        expect(ran?.state).toBe(exec.state === "SUCCEEDED" ? "succeeded" : "failed");
        expect(exec.startedAt).toBe(ran?.startedAt);
      } else {
        // Canceled: it never started on the agent, or its handler was interrupted there.
        expect(exec.state, `${exec.id} on ${t.agentId}`).toBe("CANCELED");
        if (ran?.state === "canceled") {
          expect(ran.runs).toBe(1);
          expect(exec.startedAt).toBe(ran.startedAt);
        } else expect(ran?.runs ?? 0).toBe(0);
      }
      out.push(exec);
    }
    // No agent ran a command of the rollout it was not recorded as reached for.
    const reached = new Set(targets.map((t) => t.executionId));
    const ids = new Set(targets.map((t) => t.agentId));
    for (const a of sims.flatMap((s) => s.agents)) {
      for (const [executionId, c] of a.journal) {
        if (c.params.rollout !== id) continue;
        expect(reached.has(executionId), `${a.spec.agentId} ran ${executionId}`).toBe(true);
        expect(ids.has(a.spec.agentId)).toBe(true);
      }
    }
    return out;
  }

  beforeAll(async () => {
    broker = await startEmbeddedBroker(0);
    coordinator = await newCoordinator();
    await coordinator.start();
  });

  afterAll(async () => {
    for (const s of sims) s.close();
    await coordinator?.close();
    await broker?.close();
    await dropStore?.();
    tmp.cleanup();
  });

  it("aborts at the threshold across 50 agents of which 20 % fail, within the rate, and reaches no agent after", async () => {
    const ids = Array.from({ length: 50 }, (_, i) => `ab-${String(i).padStart(2, "0")}`);
    // Every fifth agent in the order the rollout reaches them (by id) fails the command.
    await agents(ids, { fleet: "abort" }, (id) => Number(id.slice(3)) % 5 === 0);
    const perMinute = 300;
    const r = await create({
      id: "ro-abort",
      selector: { tags: { fleet: "abort" } },
      command: { handler: "echo", params: { rollout: "ro-abort" } },
      rate: { perMinute },
      abort: { thresholdPercent: 15, minExecuted: 10, on: ["FAILED", "TIMED_OUT"] },
    });
    expect(r.state).toBe("IN_PROGRESS");
    expect(r.progress.matching).toBe(50);
    const done = await until("ro-abort", ["ABORTED"]);
    expect(done.reason).toMatch(/threshold 15 % of at least 10/);
    const execs = await truth("ro-abort");
    // It stopped: far from every agent, and never more than the rate allowed (one second's
    // worth at once, then perMinute / 60 a second) from its start to its abort.
    const elapsed = (done.finishedAt as number) - (done.startedAt as number);
    const allowed = Math.max(1, perMinute / 60) + (elapsed * perMinute) / 60_000;
    expect(execs.length).toBeLessThan(50);
    expect(execs.length).toBeLessThanOrEqual(Math.floor(allowed));
    // No agent was reached after the abort.
    for (const e of execs) expect(e.createdAt).toBeLessThanOrEqual(done.finishedAt as number);
    // The moment the threshold was crossed: the first end after which at least 10 had ended
    // and 15 % of them failed. The rollout stopped within a second of it.
    const ended = execs
      .filter((e) => e.state === "SUCCEEDED" || e.state === "FAILED")
      .sort((a, b) => (a.finishedAt as number) - (b.finishedAt as number));
    let crossedAt: number | undefined;
    let failed = 0;
    for (const [i, e] of ended.entries()) {
      if (e.state === "FAILED") failed++;
      if (i + 1 >= 10 && (failed / (i + 1)) * 100 >= 15) {
        crossedAt = e.finishedAt as number;
        break;
      }
    }
    expect(crossedAt).toBeDefined();
    const stopMs = (done.finishedAt as number) - (crossedAt as number);
    console.log(
      `rollout aborted ${stopMs} ms after its threshold was crossed; ${execs.length} of 50 reached in ${elapsed} ms at ${perMinute}/min; ${execs.filter((e) => e.state === "CANCELED").length} canceled`,
    );
    expect(stopMs).toBeLessThanOrEqual(1_000);
    const timeline = (await coordinator.rollouts.detail("ro-abort")).timeline;
    expect(timeline.map((e) => e.event)).toEqual(["created", "aborted"]);
    expect(timeline[1]?.actor).toBe("system");
  }, 60_000);

  it("cancels, when it aborts, the executions still running on the agents", async () => {
    const ids = Array.from({ length: 30 }, (_, i) => `rn-${String(i).padStart(2, "0")}`);
    // Every third agent fails at once; the others take 5 s, so they are running at the abort.
    await agents(ids, { fleet: "running" }, (id) => Number(id.slice(3)) % 3 === 0, 5_000);
    await create({
      id: "ro-running",
      selector: { tags: { fleet: "running" } },
      command: { handler: "echo", params: { rollout: "ro-running" } },
      rate: { perMinute: 6_000 },
      abort: { thresholdPercent: 50, minExecuted: 5 },
    });
    const done = await until("ro-running", ["ABORTED"]);
    const execs = await truth("ro-running");
    expect(execs).toHaveLength(30);
    expect(execs.filter((e) => e.state === "FAILED")).toHaveLength(10);
    // The 20 others were running: each was interrupted, none left open.
    expect(execs.filter((e) => e.state === "CANCELED")).toHaveLength(20);
    expect(done.progress.open).toBe(0);
    expect(done.progress.byState).toEqual({ FAILED: 10, CANCELED: 20 });
  }, 60_000);

  it("speeds up an exponential rate as executions succeed", async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `ex-${String(i).padStart(2, "0")}`);
    await agents(ids, { fleet: "exp" });
    // One a second at first (the bucket holds one); ×4 for every 2 successes, up to 600 a minute.
    await create({
      id: "ro-exp",
      selector: { tags: { fleet: "exp" } },
      command: { handler: "echo", params: { rollout: "ro-exp" } },
      rate: {
        exponential: { basePerMinute: 60, factor: 4, stepSuccesses: 2, maxPerMinute: 600 },
      },
    });
    const done = await until("ro-exp", ["COMPLETED"]);
    const execs = await truth("ro-exp");
    expect(execs.map((e) => e.state)).toEqual(Array(12).fill("SUCCEEDED"));
    const reached = (await coordinator.store.listRolloutTargets("ro-exp"))
      .map((t) => t.reachedAt)
      .sort((a, b) => a - b);
    // The second agent waited for the base rate's next token (a second, less a pass's slack);
    // at the base rate all twelve would have taken 11 s, with the steps it takes a few.
    expect((reached[1] as number) - (reached[0] as number)).toBeGreaterThanOrEqual(900);
    expect((done.finishedAt as number) - (done.startedAt as number)).toBeLessThan(8_000);
  }, 60_000);

  it("with a start time for all, reaches no agent once its start window passed, and completes", async () => {
    await agents(["sw-0"], { fleet: "window" });
    // sw-1 matches but is offline all through the window: it is not reached, and then must not be.
    const late = await agents(["sw-1"], { fleet: "window" });
    late.close();
    await waitFor("sw-1 offline", () =>
      coordinator.fleet.get("sw-1")?.status === "offline" ? true : undefined,
    );
    const at = Date.now() + 1_000;
    await create({
      id: "ro-window",
      selector: { tags: { fleet: "window" } },
      command: { handler: "echo", params: { rollout: "ro-window" }, at, startWithin: "1s" },
      rate: { perMinute: 6_000 },
    });
    const done = await until("ro-window", ["COMPLETED"]);
    expect(done.finishedAt as number).toBeGreaterThanOrEqual(at + 1_000);
    expect(done.reason).toBe("its start window passed: 1 of 2 matching agents reached");
    const execs = await truth("ro-window");
    expect(execs.map((e) => [e.targetAgentId, e.state])).toEqual([["sw-0", "SUCCEEDED"]]);
    expect(execs[0]?.deadline).toBe(at + 1_000);
    expect(execs[0]?.startedAt).toBeGreaterThanOrEqual(at);
  }, 60_000);

  it("completes only once every agent that still matches was reached, not when as many were", async () => {
    await agents(["rv-a", "rv-b"], { fleet: "revoke" });
    // rv-c matches but is offline: it is reached when it comes back.
    const gone = await agents(["rv-c"], { fleet: "revoke" });
    const cSpec = (gone.agents[0] as (typeof gone.agents)[number]).spec;
    gone.close();
    await waitFor("rv-c offline", () =>
      coordinator.fleet.get("rv-c")?.status === "offline" ? true : undefined,
    );
    await create({
      id: "ro-revoke",
      selector: { tags: { fleet: "revoke" } },
      command: { handler: "echo", params: { rollout: "ro-revoke" } },
      rate: { perMinute: 6_000 },
    });
    await waitFor("rv-a and rv-b reached and done", async () => {
      const p = (await coordinator.rollouts.get("ro-revoke")).progress;
      return p.reached === 2 && p.open === 0 ? true : undefined;
    });
    // Two reached of three matching; then one of the two is revoked. Two still match, and two
    // were reached: but rv-c, which matches, was not, so the rollout is not done.
    await coordinator.identities.revoke("rv-a", "test");
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await coordinator.rollouts.get("ro-revoke")).state).toBe("IN_PROGRESS");
    const back = new Simulator({ host: "127.0.0.1", port: broker.port, prefix, agents: [cSpec] });
    sims.push(back);
    back.start();
    const done = await until("ro-revoke", ["COMPLETED"]);
    const targets = await coordinator.store.listRolloutTargets("ro-revoke");
    expect(targets.map((t) => t.agentId).sort()).toEqual(["rv-a", "rv-b", "rv-c"]);
    expect(done.reason).toMatch(/^every matching agent reached/);
  }, 60_000);

  it("runs its waves in order, each after the one before ended and soaked, and reaches an agent that comes online later", async () => {
    const ids = Array.from({ length: 19 }, (_, i) => `wv-${String(i).padStart(2, "0")}`);
    await agents(ids, { fleet: "waves" });
    const r = await create({
      id: "ro-waves",
      selector: { tags: { fleet: "waves" } },
      command: { handler: "echo", params: { rollout: "ro-waves" } },
      rate: { perMinute: 6_000 },
      waves: [{ percent: 10, soak: 500 }, { percent: 50, soak: 0 }, { percent: 100 }],
    });
    expect(r.progress.waves.map((w) => w.cap)).toEqual([2, 10, 19]);
    // Wave 0 reached; a 20th agent comes online meanwhile, and is reached in the last wave.
    await waitFor("wave 0 reached", async () =>
      (await coordinator.rollouts.get("ro-waves")).progress.reached >= 2 ? true : undefined,
    );
    await agents(["wv-late"], { fleet: "waves" });
    const done = await until("ro-waves", ["COMPLETED"]);
    const execs = await truth("ro-waves");
    expect(execs).toHaveLength(20);
    expect(execs.every((e) => e.state === "SUCCEEDED")).toBe(true);
    const targets = await coordinator.store.listRolloutTargets("ro-waves");
    const byWave = [0, 1, 2].map((w) => targets.filter((t) => t.wave === w));
    expect(byWave.map((w) => w.length)).toEqual([2, 8, 10]);
    expect(targets.find((t) => t.agentId === "wv-late")?.wave).toBe(2);
    // Each wave was reached only after every execution of the one before ended (and wave 0's
    // soak of 500 ms passed).
    const finished = (w: number) =>
      Math.max(
        ...execs
          .filter((e) => byWave[w]?.some((t) => t.executionId === e.id))
          .map((e) => e.finishedAt as number),
      );
    const firstReach = (w: number) => Math.min(...(byWave[w] ?? []).map((t) => t.reachedAt));
    // finishedAt is the agent's stamp, on its estimate of the coordinator's clock; reachedAt the
    // coordinator's own, in whole ms. The two may differ by the estimate's uncertainty (a few ms
    // here), which is far below anything that could pass for a wave reached too early.
    const CLOCKS_MS = 5;
    expect(firstReach(1)).toBeGreaterThanOrEqual(finished(0) + 500 - CLOCKS_MS);
    expect(firstReach(2)).toBeGreaterThanOrEqual(finished(1) - CLOCKS_MS);
    const timeline = (await coordinator.rollouts.detail("ro-waves")).timeline;
    expect(timeline.map((e) => e.event)).toEqual([
      "created",
      "wave-soaking",
      "wave-started",
      "wave-started",
      "completed",
    ]);
    expect(done.reason).toBe("every matching agent reached (20)");
  }, 60_000);

  it("reaches no agent while paused, resumes where it was, and goes on after a coordinator restart", async () => {
    const ids = Array.from({ length: 6 }, (_, i) => `ps-${i}`);
    await agents(ids, { fleet: "pause" });
    // One agent a second (the bucket holds one): slow enough to pause between two reaches.
    await create({
      id: "ro-pause",
      selector: { tags: { fleet: "pause" } },
      command: { handler: "echo", params: { rollout: "ro-pause" } },
      rate: { perMinute: 60 },
    });
    await waitFor("one agent reached", async () =>
      (await coordinator.rollouts.get("ro-pause")).progress.reached >= 1 ? true : undefined,
    );
    const paused = await coordinator.rollouts.pause("ro-pause", "look at the canary", "test");
    expect(paused.state).toBe("PAUSED");
    await new Promise((r) => setTimeout(r, 2_500));
    const still = await coordinator.rollouts.get("ro-pause");
    expect(still.state).toBe("PAUSED");
    expect(still.progress.reached).toBe(paused.progress.reached);
    await expect(coordinator.rollouts.pause("ro-pause", undefined, "test")).rejects.toMatchObject({
      code: "AX_ROLLOUT_CONFLICT",
    });
    expect((await coordinator.rollouts.resume("ro-pause", "test")).state).toBe("IN_PROGRESS");
    await waitFor("another agent reached", async () =>
      (await coordinator.rollouts.get("ro-pause")).progress.reached > still.progress.reached
        ? true
        : undefined,
    );
    // The coordinator stops mid-way and starts again on the same store: the rollout goes on.
    await coordinator.close();
    coordinator = await newCoordinator();
    await coordinator.start();
    await waitFor("the agents back online", () =>
      ids.every((id) => coordinator.fleet.get(id)?.status === "online") ? true : undefined,
    );
    const done = await until("ro-pause", ["COMPLETED"], 30_000);
    expect(done.progress.reached).toBe(6);
    const execs = await truth("ro-pause");
    expect(execs.map((e) => e.state)).toEqual(Array(6).fill("SUCCEEDED"));
    const events = (await coordinator.rollouts.detail("ro-pause")).timeline.map((e) => e.event);
    expect(events).toEqual(["created", "paused", "resumed", "completed"]);
    await expect(coordinator.rollouts.abort("ro-pause", undefined, "test")).rejects.toMatchObject({
      code: "AX_ROLLOUT_CONFLICT",
    });
  }, 60_000);

  it("an operator's abort cancels what was not dispatched yet", async () => {
    const ids = Array.from({ length: 4 }, (_, i) => `op-${i}`);
    await agents(ids, { fleet: "op" });
    // A start time an hour ahead: the executions wait PENDING or SCHEDULED on the agents.
    await create({
      id: "ro-op",
      selector: { agentIds: ids },
      command: {
        handler: "echo",
        params: { rollout: "ro-op" },
        at: Date.now() + 3_600_000,
      },
      rate: { perMinute: 6_000 },
    });
    await waitFor("every agent reached", async () =>
      (await coordinator.rollouts.get("ro-op")).progress.reached === 4 ? true : undefined,
    );
    const aborted = await coordinator.rollouts.abort("ro-op", "wrong params", "test");
    expect(aborted.state).toBe("ABORTED");
    expect(aborted.reason).toBe("wrong params");
    await until("ro-op", ["ABORTED"]);
    const execs = await truth("ro-op");
    expect(execs.map((e) => e.state)).toEqual(Array(4).fill("CANCELED"));
  }, 60_000);

  it("records the first resume of one paused before it started as its start", async () => {
    const ids = ["pb-0", "pb-1"];
    await agents(ids, { fleet: "pb" });
    await create({
      id: "ro-pb",
      selector: { agentIds: ids },
      command: { handler: "echo", params: { rollout: "ro-pb" } },
      rate: { perMinute: 6_000 },
      start: false,
    });
    await coordinator.rollouts.pause("ro-pb", "not tonight", "test");
    expect((await coordinator.rollouts.get("ro-pb")).startedAt).toBeNull();
    const started = await coordinator.rollouts.resume("ro-pb", "test");
    expect(started.startedAt).toEqual(expect.any(Number));
    await coordinator.rollouts.pause("ro-pb", "again", "test");
    await coordinator.rollouts.resume("ro-pb", "test");
    await until("ro-pb", ["COMPLETED"]);
    const changes = (await coordinator.rollouts.detail("ro-pb")).timeline
      .filter((t) => t.fromState !== t.toState)
      .map((t) => [t.event, t.fromState, t.toState]);
    expect(changes).toEqual([
      ["created", null, "CREATED"],
      ["paused", "CREATED", "PAUSED"],
      ["started", "PAUSED", "IN_PROGRESS"],
      ["paused", "IN_PROGRESS", "PAUSED"],
      ["resumed", "PAUSED", "IN_PROGRESS"],
      ["completed", "IN_PROGRESS", "COMPLETED"],
    ]);
  }, 60_000);
}

describe("rollouts on SQLite", () => rolloutTests((dir) => ({ path: join(dir, "ax.sqlite") })));

await describeOnPg("rollouts on PostgreSQL", (url) => {
  const schema = freshPgSchema();
  rolloutTests(
    () => ({ url, schema }),
    () => dropPgSchema(url, schema),
  );
});
