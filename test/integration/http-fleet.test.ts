import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { agentListSchema, agentSchema } from "../../coordinator/http/schemas.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForAgentsOnline,
  waitForEnd,
} from "../helpers/env.js";
import { call, series } from "../helpers/http.js";

const TOKEN = "operate-token-0123456789";

/** Commands, the fleet and metrics with real agents (child processes) doing the work. */
describe("HTTP API with a fleet", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  const agents: AgentProcess[] = [];
  const api = (method: string, path: string, body?: unknown) =>
    call(http.url, method, path, body === undefined ? { token: TOKEN } : { token: TOKEN, body });
  const metrics = async () => {
    const r = await api("GET", "/metrics");
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toMatch(/^text\/plain/);
    return r.text;
  };
  const ended = (id: string) => waitForEnd(coordinator, id);

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 500);
    http = await startHttpServer(coordinator, {
      port: 0,
      auth: { tokens: [{ token: TOKEN, role: "operator" }] },
    });
    const tags: Record<string, Record<string, string>> = {
      [`${broker.prefix}-n1`]: { site: "north", rack: "1" },
      [`${broker.prefix}-n2`]: { site: "north", rack: "2" },
      [`${broker.prefix}-s1`]: { site: "south" },
    };
    for (const [agentId, t] of Object.entries(tags)) {
      agents.push(
        spawnAgentProcess(tmp.dir, {
          agentId,
          mqtt: { url: broker.url, prefix: broker.prefix, reconnect: { baseMs: 100, capMs: 1000 } },
          heartbeatMs: 500,
          tags: t,
        }),
      );
    }
    await waitForAgentsOnline(coordinator, 3);
  }, 60_000);

  afterAll(async () => {
    for (const a of agents.splice(0)) await a.kill();
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("lists the agents and shows one", async () => {
    const list = agentListSchema.parse((await api("GET", "/api/agents")).body);
    expect(list.items.map((a) => a.agentId)).toEqual(agents.map((a) => a.agentId).sort());
    expect(list.items.every((a) => a.status === "online" && a.live)).toBe(true);
    const id = `${broker.prefix}-n2`;
    const one = agentSchema.parse((await api("GET", `/api/agents/${id}`)).body);
    expect(one).toMatchObject({ agentId: id, tags: { site: "north", rack: "2" }, inFlight: 0 });
    expect(one.handlers).toContain("echo");
  });

  it("sends a command by tag selector to every matching agent; each one succeeds", async () => {
    const at = Date.now() + 1_000;
    const r = await api("POST", "/api/commands", {
      selector: { tags: { site: "north" } },
      handler: "echo",
      params: { relay: "on" },
      at,
      deadline: at + 10_000,
    });
    expect(r.status, r.text).toBe(202);
    const body = r.body as {
      executionIds: string[];
      targets: { agentId: string; executionId: string }[];
    };
    expect(body.targets.map((t) => t.agentId)).toEqual([
      `${broker.prefix}-n1`,
      `${broker.prefix}-n2`,
    ]);
    expect(new Set(body.executionIds).size).toBe(2);
    for (const t of body.targets) {
      const e = await ended(t.executionId);
      expect(e.state).toBe("SUCCEEDED");
      expect(e.agentId).toBe(t.agentId);
      expect(e.result).toEqual({ echo: { relay: "on" } });
      expect(e.startedAt).toBeGreaterThanOrEqual(at);
    }
  });

  it("refuses a command its agent cannot run, naming the agent, the handler and its handlers", async () => {
    const south = `${broker.prefix}-s1`;
    const handlers = [...(coordinator.fleet.get(south)?.handlers ?? [])].sort();
    expect(handlers).toContain("echo");
    const before = (await coordinator.store.listExecutions({ limit: 1_000_000 })).length;
    // By agent id: the fleet knows the agent and what it offers. `queue` does not waive it.
    for (const queue of [false, true]) {
      const r = await api("POST", "/api/commands", { agentId: south, handler: "no.such", queue });
      expect(r.status, r.text).toBe(409);
      expect(r.body).toEqual({
        error: {
          code: "AX_AGENT_NO_HANDLER",
          message: `agent "${south}" does not offer handler "no.such" (its handlers: ${handlers.join(", ")})`,
        },
      });
    }
    // By selector: every agent with the tags lacks it.
    const r2 = await api("POST", "/api/commands", {
      selector: { tags: { site: "south" } },
      handler: "no.such.handler",
    });
    expect(r2.status).toBe(409);
    expect(r2.body).toEqual({
      error: {
        code: "AX_AGENT_NO_HANDLER",
        message: `no agent with the tags {"site":"south"} offers handler "no.such.handler" (${south}: ${handlers.join(", ")})`,
      },
    });
    // Nothing was written.
    expect((await coordinator.store.listExecutions({ limit: 1_000_000 })).length).toBe(before);
  });

  it("exposes metrics whose values move after a job fires", async () => {
    const before = await metrics();
    expect(series(before, "ax_agents_online")).toBe(3);
    expect(series(before, "ax_agents_known")).toBe(3);
    for (const a of agents) {
      expect(series(before, "ax_agent_journal_depth", { agent: a.agentId })).toBeGreaterThanOrEqual(
        0,
      );
      expect(series(before, "ax_agent_outbox_depth", { agent: a.agentId })).toBeGreaterThanOrEqual(
        0,
      );
    }
    for (const name of [
      "ax_fires_missed_total",
      "ax_fires_skipped_total",
      "ax_invalid_messages_total",
    ]) {
      expect(series(before, name), name).toBeGreaterThanOrEqual(0);
    }
    expect(
      series(before, "ax_reports_dropped_total", { reason: "stale_round" }),
    ).toBeGreaterThanOrEqual(0);
    expect(series(before, "ax_executions", { state: "PENDING" })).toBeGreaterThanOrEqual(0);
    expect(series(before, "ax_retries_total", { by: "policy" })).toBeGreaterThanOrEqual(0);
    const onTime = series(before, "ax_fires_total", { outcome: "on_time" }) ?? -1;
    const lateCount = series(before, "ax_trigger_lateness_seconds_count", { kind: "job" }) ?? 0;
    const e2e =
      series(before, "ax_end_to_end_seconds_count", { state: "SUCCEEDED", kind: "job" }) ?? 0;
    const done =
      series(before, "ax_executions_finished_total", { state: "SUCCEEDED", kind: "job" }) ?? 0;
    expect(onTime).toBe(0);

    // A job due 2 s from now, once.
    const fireAt = Date.now() + 2_000;
    const created = await api("POST", "/api/jobs", {
      id: "metrics-job",
      handler: "echo",
      trigger: { type: "at", at: fireAt },
    });
    expect(created.status, created.text).toBe(201);
    const exec = await waitFor("the job's execution", async () => {
      const page = await coordinator.store.pageExecutions({ jobId: "metrics-job", limit: 1 });
      return page.items[0];
    });
    expect((await ended(exec.id)).state).toBe("SUCCEEDED");

    const after = await metrics();
    expect(series(after, "ax_fires_total", { outcome: "on_time" })).toBe(onTime + 1);
    expect(series(after, "ax_trigger_lateness_seconds_count", { kind: "job" })).toBe(lateCount + 1);
    expect(series(after, "ax_end_to_end_seconds_count", { state: "SUCCEEDED", kind: "job" })).toBe(
      e2e + 1,
    );
    expect(series(after, "ax_executions_finished_total", { state: "SUCCEEDED", kind: "job" })).toBe(
      done + 1,
    );
    // Seconds, measured from the nominal time: dispatched about dispatchLead (0.5 s) ahead of it,
    // finished after it. (Milliseconds, or times from another origin, would be far outside.)
    const lateness = series(after, "ax_trigger_lateness_seconds_sum", { kind: "job" }) ?? 99;
    expect(lateness).toBeGreaterThan(-5);
    expect(lateness).toBeLessThan(5);
    const endToEnd =
      series(after, "ax_end_to_end_seconds_sum", { state: "SUCCEEDED", kind: "job" }) ?? -1;
    expect(endToEnd).toBeGreaterThan(0);
    expect(endToEnd).toBeLessThan(30);
  });

  it("pages the fleet by id and filters it, with counts of all that match", async () => {
    const [n1, n2, s1] = ["n1", "n2", "s1"].map((x) => `${broker.prefix}-${x}`) as [
      string,
      string,
      string,
    ];
    const ids = (r: { body: unknown }) =>
      (r.body as { items: { agentId: string }[] }).items.map((a) => a.agentId);
    // Other test files share the broker, not this coordinator: its fleet is these three.
    const all = await api("GET", "/api/agents");
    expect(all.status, all.text).toBe(200);
    expect(ids(all)).toEqual([n1, n2, s1]);
    expect(all.body).toMatchObject({
      nextCursor: null,
      total: 3,
      counts: { online: 3, offline: 0 },
    });

    const first = await api("GET", "/api/agents?limit=2");
    expect(ids(first)).toEqual([n1, n2]);
    expect(first.body).toMatchObject({ nextCursor: n2, total: 3 });
    const second = await api("GET", `/api/agents?limit=2&cursor=${encodeURIComponent(n2)}`);
    expect(ids(second)).toEqual([s1]);
    expect(second.body).toMatchObject({ nextCursor: null, total: 3 });

    const north = await api("GET", "/api/agents?tag=site%3Dnorth");
    expect(ids(north)).toEqual([n1, n2]);
    expect(north.body).toMatchObject({ total: 2, counts: { online: 2, offline: 0 } });
    expect(ids(await api("GET", "/api/agents?tag=site%3Dnorth,rack%3D2"))).toEqual([n2]);
    // With the dash: the run's random prefix may itself hold "s1".
    expect(ids(await api("GET", "/api/agents?q=-S1"))).toEqual([s1]);
    expect(ids(await api("GET", "/api/agents?status=offline"))).toEqual([]);
    const profile = (all.body as { items: { profile: string }[] }).items[0]?.profile as string;
    expect(
      ids(await api("GET", `/api/agents?handler=echo&profile=${encodeURIComponent(profile)}`)),
    ).toEqual([n1, n2, s1]);
    expect(ids(await api("GET", "/api/agents?profile=no-such-profile"))).toEqual([]);
    expect(ids(await api("GET", "/api/agents?handler=no.such"))).toEqual([]);
    expect(ids(await api("GET", "/api/agents?version=dev"))).toEqual([n1, n2, s1]);

    const bad = await api("GET", "/api/agents?tag=site&status=gone&limit=0");
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: { code: "AX_API_INVALID_REQUEST" } });
    const message = (bad.body as { error: { message: string } }).error.message;
    expect(message).toContain('query.tag: must be KEY=VALUE pairs separated by commas, got "site"');
    expect(message).toContain("query.status:");
    expect(message).toContain("query.limit:");
    // One value per tag: two for one key is a mistake, not a filter on the last of them.
    const twice = await api("GET", "/api/agents?tag=site%3Deast,site%3Dnorth");
    expect(twice.status).toBe(400);
    expect((twice.body as { error: { message: string } }).error.message).toContain(
      'query.tag: names tag "site" twice',
    );
  });

  // Last: it revokes an agent of the fleet.
  it("refuses a command for a revoked agent, and a selector skips it", async () => {
    const before = (await coordinator.store.listExecutions({ limit: 1_000_000 })).length;
    const south = `${broker.prefix}-s1`;
    await coordinator.enrollAgent(south, { actor: "test" });
    await coordinator.access.revokeAgent(south, "test");
    for (const queue of [false, true]) {
      const r = await api("POST", "/api/commands", { agentId: south, handler: "echo", queue });
      expect(r.status, r.text).toBe(409);
      expect(r.body).toEqual({
        error: {
          code: "AX_AUTH_NOT_ENROLLED",
          message: `agent "${south}"'s enrolment is revoked: the coordinator sends it nothing (enrol it again first: ax fleet enroll ${south} --rotate)`,
        },
      });
    }
    const r2 = await api("POST", "/api/commands", {
      selector: { tags: { site: "south" } },
      handler: "echo",
    });
    expect(r2.status, r2.text).toBe(404);
    expect(r2.body).toEqual({
      error: { code: "AX_AGENT_NOT_FOUND", message: 'no agent has the tags {"site":"south"}' },
    });
    expect((await coordinator.store.listExecutions({ limit: 1_000_000 })).length).toBe(before);
  });
});
