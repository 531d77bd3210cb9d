import { afterEach, describe, expect, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { ChaosHarness, closeOpenHarnesses, poll, sleep } from "../helpers/chaos/harness.js";
import { listExecutions } from "../helpers/chaos/record.js";

/**
 * A rollout survives kill -9 of its coordinator (issue "Fleet rollouts", item 1): six real agent
 * processes, a rollout of a 1 s `exec` of the chaos effect script to all of them at one agent a
 * second in two waves (2 agents, a 500 ms soak, then the rest), the coordinator killed -9 once
 * the first agents are reached and started again on the same store 3 s later. The rollout goes
 * on where it was and completes; each agent was reached once, and the chaos suite's truth check
 * holds (every recorded state is what the agents' journals say, every effect happened as often
 * as recorded, nothing is open). Common settings: test/helpers/chaos/harness.ts.
 */
afterEach(closeOpenHarnesses);

const SCENARIO = { name: "rollout-coordinator-kill", allowsTwoRounds: false };

interface RolloutAnswer {
  state: string;
  settled: boolean;
  progress: { reached: number; matching: number; byState: Record<string, number> };
}

describe(`chaos: ${SCENARIO.name}`, () => {
  it("rollout to 6 agents, coordinator kill -9 mid-way, restarted after 3 s", async () => {
    const h = await ChaosHarness.start({ scenario: SCENARIO.name, agents: 6 });
    try {
      const agentIds = h.agents.map((a) => a.agentId);
      await h.coordinator.api("POST", "/api/rollouts", {
        id: "ro-chaos",
        selector: { agentIds },
        command: { ...h.params({ kind: "exec", seconds: 1 }, "ro-chaos") },
        rate: { perMinute: 60 },
        waves: [{ percent: 34, soak: 500 }, { percent: 100 }],
      });
      const show = async () =>
        (
          await h.coordinator.api<{ rollout: RolloutAnswer; timeline: { event: string }[] }>(
            "GET",
            "/api/rollouts/ro-chaos",
          )
        ).rollout;
      await poll(
        "the first agents reached",
        async () => ((await show()).progress.reached >= 3 ? true : undefined),
        20_000,
      );
      await h.coordinator.kill();
      await sleep(3_000);
      await h.coordinator.start();
      const done = await poll(
        "the rollout completed",
        async () => {
          const r = await show().catch(() => undefined);
          return r?.state === "COMPLETED" && r.settled ? r : undefined;
        },
        40_000,
      );
      expect(done.progress.reached).toBe(6);
      expect(done.progress.byState).toEqual({ SUCCEEDED: 6 });
      // One execution per agent: none reached twice across the kill.
      const mine = (await listExecutions(h.coordinator)).filter((e) =>
        JSON.stringify(e.params).includes("ro-chaos"),
      );
      expect(mine.map((e) => e.targetAgentId).sort()).toEqual([...agentIds].sort());
      expectTruth(SCENARIO, await h.truth());
    } finally {
      await h.close();
    }
  }, 120_000);
});
