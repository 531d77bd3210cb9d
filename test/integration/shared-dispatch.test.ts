import { afterAll, beforeAll, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { Router } from "../../coordinator/domain/routing.js";
import { ownerAmong } from "../../coordinator/engine/membership.js";
import type { DownMessage } from "../../shared/protocol/index.js";
import { type ClusterRig, clusterRig } from "../helpers/cluster.js";
import { waitFor } from "../helpers/env.js";
import { type FakeAgent, fakeAgent } from "../helpers/fake-agent.js";
import { call } from "../helpers/http.js";
import { describeOnPg } from "../helpers/postgres.js";

type Dispatch = Extract<DownMessage, { type: "dispatch" }>;

const IDS = ["coord-a", "coord-b"];

/**
 * Two coordinators on one PostgreSQL store with `cluster.dispatch: "shared"` (docs/operations.md,
 * "Several coordinators"): both are active, each for the agents that hash to it. A command by
 * tags made through either reaches every agent from the coordinator that handles it, which also
 * applies that agent's reports; both list the whole fleet.
 */
await describeOnPg("dispatch shared: each coordinator handles its own agents", (url) => {
  let rig: ClusterRig;
  const agents: FakeAgent[] = [];
  let admin: string;
  const api: Record<string, { c: Coordinator; url: string }> = {};

  beforeAll(async () => {
    rig = await clusterRig(url);
    for (const id of IDS) {
      api[id] = await rig.serve(id, {
        messages: "off",
        shares: { firing: "shared", dispatch: "shared" },
      });
    }
    admin = rig.adminToken();
  }, 30_000);

  afterAll(async () => {
    for (const a of agents) await a.close();
    await rig?.close();
  });

  /** An agent id of the test's that hashes to `coordinator` among the two. */
  const agentOf = (coordinator: string, label = "dev") => {
    for (let i = 0; ; i++) {
      const id = `${rig.broker.prefix}-${label}${i}`;
      if (
        ownerAmong(
          id,
          IDS.map((x) => ({ id: x })),
        )?.id === coordinator
      )
        return id;
    }
  };

  /** coord-a, which the routing tests make their jobs through. */
  const coordA = () => api["coord-a"] as { c: Coordinator; url: string };

  /**
   * A job id coord-a owns whose `strategy` choice between `one` and `other` (agents with the
   * `handler`, nothing routed yet) is `one`.
   */
  const jobRoutedTo = (
    strategy: "STICKY" | "CONSISTENT_HASH",
    handler: string,
    one: string,
    other: string,
  ) => {
    const members = IDS.map((x) => ({ id: x }));
    const routable = (agentId: string) => ({
      agentId,
      handlers: [handler],
      tags: {},
      load: 0,
      concurrency: 4,
    });
    for (let i = 0; ; i++) {
      const id = `${handler}-${i}`;
      const chosen = new Router().choose(
        { routing: { strategy }, key: id },
        [routable(one), routable(other)],
        0,
      );
      if (ownerAmong(id, members)?.id === "coord-a" && chosen?.agentId === one) return id;
    }
  };

  /** Creates a manual job through coord-a's API; fires it, returning its execution's id. */
  const manualJob = async (
    id: string,
    handler: string,
    strategy: "STICKY" | "CONSISTENT_HASH",
  ): Promise<() => Promise<string>> => {
    const a = coordA();
    const put = await call(a.url, "POST", "/api/jobs", {
      token: admin,
      body: { id, handler, trigger: { type: "manual" }, routing: { strategy } },
    });
    expect(put.status).toBe(201);
    return async () => {
      const fired = await call<{ executionIds: string[] }>(
        a.url,
        "POST",
        `/api/jobs/${id}/trigger`,
        {
          token: admin,
        },
      );
      return fired.body.executionIds[0] as string;
    };
  };

  /** The dispatch of execution `id` that `agent` received. */
  const dispatchOf = (agent: FakeAgent, id: string) =>
    agent.waitFor(
      `dispatch of ${id} to ${agent.agentId}`,
      (m): m is Dispatch => m.type === "dispatch" && m.executionId === id,
    );

  /** A fake agent with `handler` only, connected once coord-a lists it online. */
  const connected = async (agentId: string, handler: string) => {
    const agent = await fakeAgent(rig.broker, agentId, { handlers: [handler] });
    agents.push(agent);
    await onlineAtA(agentId);
    return agent;
  };

  /** Waits until coord-a's store has execution `id` SUCCEEDED. */
  const succeededAtA = (id: string) => {
    const a = coordA();
    return waitFor(`${id} SUCCEEDED`, async () =>
      (await a.c.store.getExecution(id))?.state === "SUCCEEDED" ? true : undefined,
    );
  };

  /** Waits until coord-a lists `agentId` online. */
  const onlineAtA = (agentId: string) => {
    const a = coordA();
    return waitFor(`${agentId} online for coord-a`, async () =>
      a.c.fleet.get(agentId)?.status === "online" ? true : undefined,
    );
  };

  it("both are ready; a command by tags runs on the agents of both, each handled by its own", async () => {
    const a = coordA();
    const b = api["coord-b"] as { c: Coordinator; url: string };
    for (const x of [a, b]) {
      const ready = await call<{ ready: boolean; role: string }>(x.url, "GET", "/api/ready");
      expect(ready.status).toBe(200);
      expect(ready.body).toMatchObject({ ready: true, role: "active" });
    }
    const owner: Record<string, string> = {};
    for (const c of IDS) {
      const agent = await fakeAgent(rig.broker, agentOf(c), { tags: { site: "north" } });
      agents.push(agent);
      owner[agent.agentId] = c;
    }
    // Both list the whole fleet online, the other's agent from the store within a second.
    for (const x of [a, b]) {
      await waitFor("both agents online in either listing", async () => {
        const page = await call<{ items: { agentId: string; status: string }[] }>(
          x.url,
          "GET",
          "/api/agents?status=online",
          { token: admin },
        );
        return page.body.items.length === 2 ? true : undefined;
      });
    }

    // Made through b: a's agent is dispatched by a, b's by b.
    const sent = await call<{
      executionIds: string[];
      targets: { agentId: string; executionId: string }[];
    }>(b.url, "POST", "/api/commands", {
      token: admin,
      body: { selector: { tags: { site: "north" } }, handler: "echo" },
    });
    expect(sent.status).toBe(202);
    expect(sent.body.targets).toHaveLength(2);
    for (const agent of agents) {
      const target = sent.body.targets.find((t) => t.agentId === agent.agentId);
      const id = target?.executionId as string;
      const d = await agent.waitFor(
        `dispatch of ${id}`,
        (m): m is Dispatch => m.type === "dispatch" && m.executionId === id,
      );
      await agent.succeed({ executionId: id, round: d.round }, 1);
    }
    for (const t of sent.body.targets) {
      await waitFor(`${t.executionId} SUCCEEDED`, async () =>
        (await a.c.store.getExecution(t.executionId))?.state === "SUCCEEDED" ? true : undefined,
      );
      // Every step after its creation is the agent's coordinator's: it dispatched it and
      // applied each report.
      const steps = (await a.c.store.getTimeline(t.executionId)).map((e) => [
        e.event,
        (e.detail as { coordinator?: string } | null)?.coordinator,
      ]);
      const mine = owner[t.agentId];
      expect(steps.slice(1)).toEqual([
        ["dispatch", mine],
        ["accepted", mine],
        ["started", mine],
        ["finished", mine],
      ]);
    }
    // Each agent had its dispatch once, from its own coordinator only.
    for (const agent of agents) {
      expect(agent.received.filter((m) => m.type === "dispatch")).toHaveLength(1);
    }

    // /api/health shows the mode and what each coordinator handles.
    const health = await waitFor("each coordinator reports its agents", async () => {
      const h = await call<{
        cluster: {
          dispatch: string;
          coordinators: { id: string; info: { agentsHandled?: number; agentsOnline?: number } }[];
        };
      }>(a.url, "GET", "/api/health", { token: admin });
      const handled = h.body.cluster.coordinators.map((m) => m.info.agentsHandled);
      return handled.length === 2 && handled.every((n) => n === 1) ? h.body : undefined;
    });
    expect(health.cluster.dispatch).toBe("shared");
    expect(health.cluster.coordinators.map((m) => m.info.agentsOnline)).toEqual([1, 1]);
  }, 60_000);

  it("a STICKY job goes back to the agent of its last success, applied by the other coordinator", async () => {
    const a = coordA();
    // F is coord-b's agent. The job is coord-a's, and with no success to follow it would hash
    // to H: only the success that coord-b applied sends it back to F.
    const f = agentOf("coord-b", "sticky-f");
    const h = agentOf("coord-a", "sticky-h");
    const jobId = jobRoutedTo("STICKY", "sticky", h, f);
    const agentF = await connected(f, "sticky");
    const trigger = await manualJob(jobId, "sticky", "STICKY");
    const run = async (seq: number) => {
      const id = await trigger();
      const d = await dispatchOf(agentF, id);
      await agentF.succeed({ executionId: id, round: d.round }, seq);
      await succeededAtA(id);
      return id;
    };
    const first = await run(1);
    const finished = (await a.c.store.getTimeline(first)).find((e) => e.event === "finished");
    expect((finished?.detail as { coordinator?: string } | null)?.coordinator).toBe("coord-b");

    const agentH = await connected(h, "sticky");
    await run(4);
    expect(agentH.received.filter((m) => m.type === "dispatch")).toEqual([]);
  }, 60_000);

  it("an agent of the other coordinator that answers busy is passed over by the job's", async () => {
    // F is coord-b's agent and the job's hash picks it; only coord-b hears F's `busy`.
    const f = agentOf("coord-b", "busy-f");
    const g = agentOf("coord-a", "busy-g");
    const jobId = jobRoutedTo("CONSISTENT_HASH", "busy", f, g);
    const agentF = await connected(f, "busy");
    const agentG = await connected(g, "busy");
    const id = await (await manualJob(jobId, "busy", "CONSISTENT_HASH"))();
    const first = await dispatchOf(agentF, id);
    await agentF.report({ type: "busy", executionId: id, round: first.round, seq: 1 });
    // The next round goes to G, not back to F at once.
    const second = await dispatchOf(agentG, id);
    expect(second.round).toBeGreaterThan(first.round);
    await agentG.succeed({ executionId: id, round: second.round }, 1);
    await succeededAtA(id);
    expect(agentF.received.filter((m) => m.type === "dispatch")).toHaveLength(1);
  }, 60_000);
});
