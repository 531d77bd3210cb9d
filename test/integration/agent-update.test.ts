import { createHash } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enrolSimAgents, Simulator } from "../../bench/fleet-sim/simulator.js";
import { startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { BundleRecord } from "../../coordinator/domain/bundle.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import type { AgentUpdatePage } from "../../coordinator/operations/agent-update.js";
import type { RolloutView } from "../../coordinator/operations/rollouts.js";
import type { AgentRecord, ExecutionRecord } from "../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import { newId } from "../../shared/ids.js";
import { AGENT_UPDATE_HANDLER, type NativeTarget } from "../../shared/update.js";
import { runAx, tempDir, waitFor } from "../helpers/env.js";
import { call, errorOf } from "../helpers/http.js";

/**
 * Over-the-air updates, the coordinator's side (docs/rollouts.md, "Agent updates"), against a real
 * coordinator on the embedded broker with the fleet simulator's agents, each reporting its own
 * native target in hello: an operator names a published bundle and the coordinator stores the
 * full params; a bundle not built for a device is never sent to it; a rollout passes over the
 * devices already on the bundle; the registry and the API show each agent's target and updates.
 */
describe("agent.update: targeting and params", () => {
  const TOKEN = "operate-token-0123456789";
  const tmp = tempDir("ax-agent-update-");
  const prefix = `axu${newId().slice(-8)}`;
  const X64: NativeTarget = { platform: "linux", arch: "x64", libc: "glibc", nodeAbi: 115 };
  const ARM64: NativeTarget = { ...X64, arch: "arm64" };
  const archive = Buffer.from("a bundle archive, as far as this test is concerned");
  const bundle: BundleRecord = {
    sha256: createHash("sha256").update(archive).digest("hex"),
    profile: "sensor-hub",
    version: "9.9.9",
    target: X64,
    bytes: archive.length,
    agentSha256: "a".repeat(64),
    keyId: "test-key",
    builtAt: Date.UTC(2026, 0, 1),
    publishedAt: Date.UTC(2026, 0, 2),
    publishedBy: "test",
  };
  // match: built for it; arm: another CPU; old: reports no target; done: runs the bundle already.
  const ids = { match: `${prefix}-match`, arm: `${prefix}-arm`, old: `${prefix}-old` };
  const done = `${prefix}-done`;
  const PUBLIC = "https://ax.example.com/base/";
  const expectedParams = {
    sha256: bundle.sha256,
    url: `https://ax.example.com/base/api/bundles/${bundle.sha256}/archive`,
    bytes: bundle.bytes,
    version: "9.9.9",
    profile: "sensor-hub",
    target: X64,
  };

  let broker: Awaited<ReturnType<typeof startEmbeddedBroker>>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let sim: Simulator;
  const api = <T = unknown>(method: string, path: string, body?: unknown) =>
    call<T>(http.url, method, path, body === undefined ? { token: TOKEN } : { token: TOKEN, body });
  const simAgent = (agentId: string) => sim.agents.find((a) => a.spec.agentId === agentId);
  const ended = (id: string) =>
    waitFor(`execution ${id} ended`, async () => {
      const e = await coordinator.store.getExecution(id);
      return e !== undefined && TERMINAL_STATES.has(e.state) ? e : undefined;
    });
  async function send(agentId: string, params: Record<string, unknown>): Promise<ExecutionRecord> {
    const r = await api<{ executionIds: string[] }>("POST", "/api/commands", {
      agentId,
      handler: AGENT_UPDATE_HANDLER,
      params,
    });
    expect(r.status, r.text).toBe(202);
    return ended(r.body.executionIds[0] as string);
  }

  beforeAll(async () => {
    broker = await startEmbeddedBroker(0);
    const config = parseCoordinatorConfig({
      store: { path: join(tmp.dir, "ax.db") },
      mqtt: { url: broker.url, prefix },
      heartbeatMs: 1_000,
      http: { publicUrl: PUBLIC },
    });
    coordinator = new Coordinator(config);
    await coordinator.start();
    http = await startHttpServer(coordinator, {
      port: 0,
      auth: { tokens: [{ token: TOKEN, role: "operator" }] },
    });
    expect(await coordinator.store.putBundle(bundle, archive)).toBe(true);
    const handlers = ["echo", AGENT_UPDATE_HANDLER];
    const specs = await enrolSimAgents(
      coordinator,
      [ids.match, ids.arm, ids.old, done],
      { fleet: prefix },
      "test",
      (agentId) => ({
        handlers,
        ...(agentId === ids.old ? {} : { target: agentId === ids.arm ? ARM64 : X64 }),
        ...(agentId === done ? { bundle: { version: "9.9.9", sha256: bundle.agentSha256 } } : {}),
      }),
    );
    sim = new Simulator({ host: "127.0.0.1", port: broker.port, prefix, agents: specs });
    sim.start();
    await waitFor("4 agents online", () =>
      [...Object.values(ids), done].every((id) => coordinator.fleet.get(id)?.status === "online")
        ? true
        : undefined,
    );
  }, 30_000);

  afterAll(async () => {
    sim?.close();
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp.cleanup();
  });

  it("keeps each agent's hello.target in the registry, the store and the API", async () => {
    expect(coordinator.fleet.get(ids.arm)?.target).toEqual(ARM64);
    const stored = await coordinator.store.getAgent(ids.match);
    expect(stored?.target).toEqual(X64);
    const one = await api<AgentRecord>("GET", `/api/agents/${ids.arm}`);
    expect(one.body.target).toEqual(ARM64);
    const list = await api<{ items: AgentRecord[] }>(
      "GET",
      `/api/agents?tag=fleet=${encodeURIComponent(prefix)}`,
    );
    const byId = new Map(list.body.items.map((a) => [a.agentId, a]));
    expect(byId.get(ids.match)?.target).toEqual(X64);
    // An agent from before hello.target reports none, and the API shows none.
    expect(byId.has(ids.old)).toBe(true);
    expect(byId.get(ids.old)?.target).toBeUndefined();
  });

  it("refuses params that name no published bundle, or are not { bundle, healthWindowMs? }, naming the field", async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [
        { bundle: "f".repeat(64) },
        "body.params.bundle",
        /^params\.bundle: no published bundle has sha256 f{64}; publish it with ax bundle publish$/,
      ],
      [{ bundle: "not-a-sha" }, "body.params.bundle", /must be the sha256 of a published bundle/],
      [{}, "body.params.bundle", /params\.bundle: is required/],
      [
        { bundle: bundle.sha256, url: "http://evil.example/x.tar.gz" },
        "body.params.url",
        /params\.url: unknown field: agent\.update takes \{ "bundle"/,
      ],
      [{ bundle: bundle.sha256, healthWindowMs: 5 }, "body.params.healthWindowMs", /at least 1000/],
    ];
    for (const [params, path, message] of cases) {
      const r = await api("POST", "/api/commands", {
        agentId: ids.match,
        handler: AGENT_UPDATE_HANDLER,
        params,
      });
      expect(r.status, JSON.stringify(params)).toBe(400);
      const e = errorOf(r);
      expect(e.code).toBe("AX_API_INVALID_REQUEST");
      expect(e.paths).toEqual([path]);
      expect(e.message).toMatch(message);
    }
    // Nothing was created for any of them.
    const page = await coordinator.store.pageExecutions({ agentId: ids.match, limit: 10 });
    expect(page.items).toEqual([]);
    // The body is checked before the agents are looked up: a malformed one is a 400 for an agent
    // never heard of and for one without the handler too, not their 404 or 409.
    for (const agentId of ["never-heard-of", ids.old]) {
      const r = await api("POST", "/api/commands", {
        agentId,
        handler: AGENT_UPDATE_HANDLER,
        params: { bundle: bundle.sha256, url: "http://evil.example/x.tar.gz" },
      });
      expect(r.status, agentId).toBe(400);
      expect(errorOf(r).paths).toEqual(["body.params.url"]);
    }
  });

  it("refuses a job of agent.update: its params would reach devices as written", async () => {
    const r = await api("POST", "/api/jobs", {
      id: `${prefix}-job`,
      handler: AGENT_UPDATE_HANDLER,
      trigger: { type: "manual" },
      params: { bundle: bundle.sha256 },
    });
    expect(r.status).toBe(400);
    const e = errorOf(r);
    expect(e.code).toBe("AX_JOB_INVALID");
    expect(e.paths).toEqual(["body.handler"]);
    expect(e.message).toContain("agent.update installs a bundle: send it as a command");
  });

  it("fills in the params of a command from the bundle, and the agent built for it receives them", async () => {
    const exec = await send(ids.match, { bundle: bundle.sha256, healthWindowMs: 5_000 });
    expect(exec.state).toBe("SUCCEEDED");
    const full = { ...expectedParams, healthWindowMs: 5_000 };
    expect(exec.params).toEqual(full);
    expect(simAgent(ids.match)?.journal.get(exec.id)?.params).toEqual(full);
  });

  it("never sends a bundle to an agent it is not built for: FAILED at once, with the mismatch", async () => {
    const before = { arm: simAgent(ids.arm)?.journal.size, old: simAgent(ids.old)?.journal.size };
    const arm = await send(ids.arm, { bundle: bundle.sha256 });
    expect(arm.state).toBe("FAILED");
    expect(arm.message).toBe("not offered: bundle built for CPU x64, the device is arm64");
    expect(arm.dispatchedAt).toBeNull();
    expect(arm.attempt).toBe(1);
    const old = await send(ids.old, { bundle: bundle.sha256 });
    expect(old.state).toBe("FAILED");
    expect(old.message).toBe(
      "not offered: the agent reports no native target (hello.target): update it by hand",
    );
    // The devices never received them.
    expect(simAgent(ids.arm)?.journal.has(arm.id)).toBe(false);
    expect(simAgent(ids.old)?.journal.has(old.id)).toBe(false);
    expect(simAgent(ids.arm)?.journal.size).toBe(before.arm);
    expect(simAgent(ids.old)?.journal.size).toBe(before.old);
    const timeline = await coordinator.store.getTimeline(arm.id);
    expect(timeline.at(-1)).toMatchObject({
      event: "rejected",
      toState: "FAILED",
      detail: { code: "AX_UPDATE_TARGET_MISMATCH", reason: arm.message },
    });
    // Final: nothing retries it.
    await new Promise((r) => setTimeout(r, 300));
    expect((await coordinator.store.getExecution(arm.id))?.state).toBe("FAILED");
  });

  it("rolls a bundle out: params stored once, mismatches fail, agents already on it are not reached", async () => {
    const refused = await api("POST", "/api/rollouts", {
      selector: { tags: { fleet: prefix } },
      command: { handler: AGENT_UPDATE_HANDLER, params: { bundle: "e".repeat(64) } },
    });
    expect(refused.status).toBe(400);
    expect(errorOf(refused).paths).toEqual(["body.command.params.bundle"]);

    const created = await api<RolloutView>("POST", "/api/rollouts", {
      id: `${prefix}-ro`,
      selector: { tags: { fleet: prefix } },
      command: { handler: AGENT_UPDATE_HANDLER, params: { bundle: bundle.sha256 } },
    });
    expect(created.status, created.text).toBe(201);
    expect(created.body.command.params).toEqual(expectedParams);
    const r = await waitFor(`rollout ${prefix}-ro completed`, async () => {
      const v = await coordinator.rollouts.get(`${prefix}-ro`);
      return v.state === "COMPLETED" && v.settled ? v : undefined;
    });
    expect((await coordinator.store.getRollout(r.id))?.command.params).toEqual(expectedParams);
    const targets = await coordinator.store.listRolloutTargets(r.id);
    expect(targets.map((t) => t.agentId).sort()).toEqual(Object.values(ids).sort());
    expect(r.progress).toMatchObject({ matching: 3, reached: 3, succeeded: 1, failed: 2 });
    for (const t of targets) {
      const e = (await coordinator.store.getExecution(t.executionId)) as ExecutionRecord;
      expect(e.params).toEqual(expectedParams);
      expect(e.state).toBe(t.agentId === ids.match ? "SUCCEEDED" : "FAILED");
      expect(simAgent(t.agentId)?.journal.has(e.id)).toBe(t.agentId === ids.match);
    }
    expect([...(simAgent(done)?.journal.values() ?? [])]).toEqual([]);
  });

  it("lists an agent's updates newest first, with the versions from and to, a page at a time", async () => {
    const page = await api<AgentUpdatePage>("GET", `/api/agents/${ids.match}/updates`);
    expect(page.status, page.text).toBe(200);
    expect(page.body.nextCursor).toBeNull();
    expect(page.body.items).toHaveLength(2);
    const [newest, oldest] = page.body.items;
    expect(newest).toMatchObject({
      state: "SUCCEEDED",
      fromVersion: "0.1.0",
      fromSha256: "dev",
      version: "9.9.9",
      sha256: bundle.sha256,
      rolloutId: `${prefix}-ro`,
    });
    expect(oldest).toMatchObject({ state: "SUCCEEDED", version: "9.9.9", rolloutId: null });
    expect((newest?.createdAt ?? 0) >= (oldest?.createdAt ?? 0)).toBe(true);

    const first = await api<AgentUpdatePage>("GET", `/api/agents/${ids.match}/updates?limit=1`);
    expect(first.body.items.map((i) => i.executionId)).toEqual([newest?.executionId]);
    expect(first.body.nextCursor).not.toBeNull();
    const second = await api<AgentUpdatePage>(
      "GET",
      `/api/agents/${ids.match}/updates?limit=1&cursor=${first.body.nextCursor}`,
    );
    expect(second.body.items.map((i) => i.executionId)).toEqual([oldest?.executionId]);

    const arm = await api<AgentUpdatePage>("GET", `/api/agents/${ids.arm}/updates`);
    expect(arm.body.items.map((i) => [i.state, i.fromVersion, i.message])).toEqual([
      ["FAILED", null, "not offered: bundle built for CPU x64, the device is arm64"],
      ["FAILED", null, "not offered: bundle built for CPU x64, the device is arm64"],
    ]);
    const none = await api("GET", `/api/agents/${prefix}-nobody/updates`);
    expect(none.status).toBe(404);
    expect(errorOf(none).code).toBe("AX_AGENT_NOT_FOUND");
  });

  it("ax: fleet list and show the target, fleet updates lists the updates, --bundle sends one", async () => {
    const env = { AX_URL: http.url, AX_TOKEN: TOKEN };
    const list = await runAx(["fleet", "list", "--tag", `fleet=${prefix}`], env);
    expect(list.code, list.stderr).toBe(0);
    const header = list.stdout.split("\n")[0]?.split(/\s{2,}/);
    expect(header).toContain("target");
    const row = (id: string) => list.stdout.split("\n").find((l) => l.startsWith(`${id} `)) ?? "";
    expect(row(ids.arm)).toContain(" linux-arm64-glibc-abi115 ");
    expect(row(ids.old)).toMatch(/ - /);
    const show = await runAx(["fleet", "show", ids.match], env);
    expect(show.stdout).toMatch(/^target\s+linux-x64-glibc-abi115$/m);

    const updates = await runAx(["fleet", "updates", ids.match], env);
    expect(updates.code, updates.stderr).toBe(0);
    const lines = updates.stdout.trimEnd().split("\n");
    expect(lines[0]?.split(/\s{2,}/)).toEqual([
      "created (UTC)",
      "execution",
      "from",
      "to",
      "state",
      "rollout",
      "message",
    ]);
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(/ 0\.1\.0 +9\.9\.9 +SUCCEEDED +\S+-ro$/);

    const sent = await runAx(
      ["command", "send", "--bundle", bundle.sha256, "--agent", ids.match, "--json"],
      env,
    );
    expect(sent.code, sent.stderr).toBe(0);
    const { executionIds } = JSON.parse(sent.stdout) as { executionIds: string[] };
    expect((await ended(executionIds[0] as string)).params).toEqual(expectedParams);
    const json = JSON.parse((await runAx(["fleet", "updates", ids.match, "--json"], env)).stdout);
    expect(json.items[0].executionId).toBe(executionIds[0]);

    const wrong = await runAx(
      ["command", "send", "--bundle", bundle.sha256, "--handler", "echo", "--agent", ids.match],
      env,
    );
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain(
      "command send: --bundle installs a bundle with the handler agent.update, not --handler echo",
    );
    const unknown = await runAx(
      ["rollout", "create", "--bundle", "d".repeat(64), "--tag", `fleet=${prefix}`],
      env,
    );
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain(
      `command.params.bundle: no published bundle has sha256 ${"d".repeat(64)}; publish it with ax bundle publish`,
    );
  }, 60_000);
});

describe("agent.update on a coordinator whose API port is picked at start", () => {
  it("sends agents to the port its API listens on (http.port 0, no publicUrl)", async () => {
    const tmp = tempDir("ax-agent-update-port-");
    const broker = await startEmbeddedBroker(0);
    const coordinator = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.db") },
        mqtt: { url: broker.url, prefix: `axp${newId().slice(-8)}` },
        http: { port: 0 },
      }),
    );
    await coordinator.start();
    const http = await startHttpServer(coordinator, { port: 0, auth: "off" });
    try {
      const archive = Buffer.from("another archive");
      const sha256 = createHash("sha256").update(archive).digest("hex");
      await coordinator.store.putBundle(
        {
          sha256,
          profile: "sensor-hub",
          version: "1.0.0",
          target: { platform: "linux", arch: "x64", libc: "glibc", nodeAbi: 115 },
          bytes: archive.length,
          agentSha256: "b".repeat(64),
          keyId: "test-key",
          builtAt: 1,
          publishedAt: 2,
          publishedBy: "test",
        },
        archive,
      );
      const r = await call<{ executionIds: string[] }>(http.url, "POST", "/api/commands", {
        body: {
          agentId: "not-yet",
          queue: true,
          handler: AGENT_UPDATE_HANDLER,
          params: { bundle: sha256 },
        },
      });
      // It answered 500 AX_CONFIG_INVALID ("http.port is 0"), though the port was known.
      expect(r.status, r.text).toBe(202);
      const stored = await coordinator.store.getExecution(r.body.executionIds[0] as string);
      const port = new URL(http.url).port;
      expect(stored?.params.url).toBe(`http://127.0.0.1:${port}/api/bundles/${sha256}/archive`);
    } finally {
      await http.close();
      await coordinator.close();
      await broker.close();
      tmp.cleanup();
    }
  });
});
