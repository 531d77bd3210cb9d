import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { HashRing, placeShards } from "../../coordinator/domain/routing.js";
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

/** Routing strategies end to end: real agent processes, a real broker and store. */
describe("routing across the fleet", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  const agents = new Map<string, AgentProcess>();

  const start = (agentId: string, tags: Record<string, string> = {}) => {
    const a = spawnAgentProcess(tmp.dir, {
      agentId,
      mqtt: {
        url: broker.url,
        prefix: broker.prefix,
        keepaliveS: 2,
        reconnect: { baseMs: 100, capMs: 1000 },
      },
      heartbeatMs: 300,
      tags,
    });
    agents.set(agentId, a);
    return a;
  };
  const ended = (id: string, timeoutMs = 20_000) => waitForEnd(coordinator, id, timeoutMs);

  beforeEach(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 300);
  });
  afterEach(async () => {
    for (const a of agents.values()) await a.kill();
    agents.clear();
    await coordinator.close();
    await broker.close();
    tmp.cleanup();
  });

  it("FAILOVER: an agent killed mid-run → the execution completes on the next agent with a higher round, and the dead agent's late report is recorded without undoing the retry", async () => {
    const [first, second] = [`${broker.prefix}-fo-a`, `${broker.prefix}-fo-b`];
    start(first);
    start(second);
    await waitForAgentsOnline(coordinator, 2);
    await coordinator.putJob({
      id: "failover-job",
      handler: "sleep",
      params: { ms: 2_000 },
      trigger: { type: "manual" },
      routing: { strategy: "FAILOVER" },
      retry: { maxAttempts: 3, baseMs: 50, capMs: 100 },
    });
    const id = await coordinator.triggerJob("failover-job");
    const running = await waitFor("running on the first agent", async () => {
      const e = await coordinator.store.getExecution(id);
      return e?.state === "RUNNING" ? e : undefined;
    });
    // FAILOVER takes the first healthy agent in a stable (id) order.
    expect(running.agentId).toBe(first);
    expect(running.round).toBe(1);

    await agents.get(first)?.kill();
    const done = await ended(id, 30_000);
    expect(done.state).toBe("SUCCEEDED");
    expect(done.agentId).toBe(second);
    expect(done.round).toBeGreaterThan(running.round);
    const timeline = await coordinator.store.getTimeline(id);
    expect(timeline.some((t) => t.event === "finished" && t.toState === "RETRY_WAITING")).toBe(
      true,
    );

    // The first agent comes back with its journal: it reports the run it lost as interrupted,
    // under round 1. A fact, recorded on the timeline; the retry it confirms stands.
    start(first);
    const fact = await waitFor("the late report recorded", async () =>
      (await coordinator.store.getTimeline(id)).find((t) => t.event === "fact"),
    );
    expect(fact.detail).toMatchObject({ fact: "finished", round: 1, decision: "noted" });
    const after = await coordinator.store.getExecution(id);
    expect(after?.state).toBe("SUCCEEDED");
    expect(after?.agentId).toBe(second);
    expect(after?.round).toBe(done.round);
  });

  it("CONSISTENT_HASH sends one key to one agent, and different keys across the fleet", async () => {
    const ids = ["ch-a", "ch-b", "ch-c"].map((s) => `${broker.prefix}-${s}`);
    for (const a of ids) start(a);
    await waitForAgentsOnline(coordinator, 3);
    const runOn = async (device: string) => {
      await coordinator.putJob({
        id: `ch-${device}`,
        handler: "echo",
        params: { device },
        trigger: { type: "manual" },
        routing: { strategy: "CONSISTENT_HASH", hashKey: "device" },
        overlap: { policy: "PARALLEL" },
      });
      const agentsUsed = new Set<string>();
      for (let i = 0; i < 3; i++) {
        const e = await ended(await coordinator.triggerJob(`ch-${device}`));
        expect(e.state).toBe("SUCCEEDED");
        agentsUsed.add(e.agentId as string);
      }
      return agentsUsed;
    };
    const placements = new Set<string>();
    for (const device of ["d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8"]) {
      const used = await runOn(device);
      expect(used.size).toBe(1);
      placements.add([...used][0] as string);
    }
    // Eight keys over three agents: more than one agent gets some.
    expect(placements.size).toBeGreaterThan(1);
  });

  it("SHARD_BROADCAST spreads a firing's shards over the live agents, one each", async () => {
    const ids = ["sb-a", "sb-b", "sb-c"].map((s) => `${broker.prefix}-${s}`);
    for (const a of ids) start(a);
    await waitForAgentsOnline(coordinator, 3);
    await coordinator.putJob({
      id: "broadcast",
      handler: "echo",
      trigger: { type: "manual" },
      shards: 3,
      routing: { strategy: "SHARD_BROADCAST" },
    });
    await coordinator.triggerJob("broadcast");
    const execs = await waitFor("all shards ended", async () => {
      const list = await coordinator.store.listExecutions({ jobId: "broadcast" });
      return list.length === 3 && list.every((e) => TERMINAL_STATES.has(e.state))
        ? list
        : undefined;
    });
    expect(execs.every((e) => e.state === "SUCCEEDED")).toBe(true);
    expect(new Set(execs.map((e) => e.agentId)).size).toBe(3);
  });

  it("STICKY and SHARD_BROADCAST keep their agents over a coordinator restart, where choosing afresh would move them", async () => {
    const [a, b, c] = ["rm-a", "rm-b", "rm-c"].map((s) => `${broker.prefix}-${s}`) as [
      string,
      string,
      string,
    ];
    // Jobs whose agents, chosen while only a and b are there, differ from a fresh choice over
    // a, b and c: after the restart, hashing or placing afresh would move them.
    const pick = (prefix: string, moves: (id: string) => boolean) => {
      for (let i = 0; ; i++) if (moves(`${prefix}-${i}`)) return `${prefix}-${i}`;
    };
    const sticky = pick(
      "sticky",
      (id) => HashRing.build([a, b]).ownerOf(id) !== HashRing.build([a, b, c]).ownerOf(id),
    );
    const sharded = pick(
      "sharded",
      (id) => placeShards(id, 2, [a, b]).join() !== placeShards(id, 2, [a, b, c]).join(),
    );
    const shardAgents = async (jobId: string, not: ReadonlySet<string>) => {
      const execs = await waitFor("both shards ended", async () => {
        const list = (await coordinator.store.listExecutions({ jobId })).filter(
          (e) => !not.has(e.id),
        );
        return list.length === 2 && list.every((e) => TERMINAL_STATES.has(e.state))
          ? list
          : undefined;
      });
      expect(execs.every((e) => e.state === "SUCCEEDED")).toBe(true);
      return {
        ids: new Set([...not, ...execs.map((e) => e.id)]),
        placement: [...execs]
          .sort((x, y) => (x.shardIndex ?? 0) - (y.shardIndex ?? 0))
          .map((e) => e.agentId),
      };
    };

    start(a);
    start(b);
    await waitForAgentsOnline(coordinator, 2);
    await coordinator.putJob({
      id: sticky,
      handler: "echo",
      trigger: { type: "manual" },
      routing: { strategy: "STICKY" },
    });
    await coordinator.putJob({
      id: sharded,
      handler: "echo",
      trigger: { type: "manual" },
      shards: 2,
      routing: { strategy: "SHARD_BROADCAST" },
    });
    const first = await ended(await coordinator.triggerJob(sticky));
    expect(first.state).toBe("SUCCEEDED");
    expect(first.agentId).toBe(HashRing.build([a, b]).ownerOf(sticky));
    await coordinator.triggerJob(sharded);
    const before = await shardAgents(sharded, new Set());
    expect(before.placement).toEqual(placeShards(sharded, 2, [a, b]));

    start(c);
    await waitForAgentsOnline(coordinator, 3);
    await coordinator.close();
    coordinator = await startTestCoordinator(broker, tmp.dir, 300);
    await waitForAgentsOnline(coordinator, 3);

    const again = await ended(await coordinator.triggerJob(sticky));
    expect(again.state).toBe("SUCCEEDED");
    expect(again.agentId).toBe(first.agentId);
    await coordinator.triggerJob(sharded);
    expect((await shardAgents(sharded, before.ids)).placement).toEqual(before.placement);
  });

  it("TARGET by tag selector runs only on matching agents; with none live the execution waits and expires", async () => {
    const [north, south] = [`${broker.prefix}-t-north`, `${broker.prefix}-t-south`];
    start(north, { site: "north" });
    start(south, { site: "south" });
    await waitForAgentsOnline(coordinator, 2);
    await coordinator.putJob({
      id: "north-only",
      handler: "echo",
      trigger: { type: "manual" },
      routing: { strategy: "TARGET", selector: { site: "north" } },
      overlap: { policy: "PARALLEL" },
      deadline: "2s",
    });
    for (let i = 0; i < 3; i++) {
      const e = await ended(await coordinator.triggerJob("north-only"));
      expect(e.state).toBe("SUCCEEDED");
      expect(e.agentId).toBe(north);
    }
    await agents.get(north)?.kill();
    await waitFor("north offline", () =>
      coordinator.fleet.get(north)?.status === "offline" ? true : undefined,
    );
    const waiting = await coordinator.triggerJob("north-only");
    await new Promise((r) => setTimeout(r, 500));
    expect((await coordinator.store.getExecution(waiting))?.state).toBe("PENDING");
    const e = await ended(waiting);
    expect(e.state).toBe("EXPIRED");
    expect(e.agentId).toBeNull();
  });
});
