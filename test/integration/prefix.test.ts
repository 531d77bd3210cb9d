import { afterAll, describe, expect, it } from "vitest";
import { mayPublish, maySubscribe } from "../../coordinator/broker/rules.js";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { topics } from "../../shared/protocol/topics.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitForAgentsOnline,
  waitForEnd,
} from "../helpers/env.js";

/**
 * `mqtt.prefix` may be several topic levels (docs/config.md): both configs accept one such as
 * `site-1/ax`, and a coordinator and an agent on it work as on `ax`.
 */
describe("a topic prefix of several levels", () => {
  let broker: TestBroker | undefined;
  let tmp: ReturnType<typeof tempDir> | undefined;
  let coordinator: Coordinator | undefined;
  let agent: AgentProcess | undefined;

  afterAll(async () => {
    await agent?.stop(5000);
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("carries a device command from the coordinator to an agent and back", async () => {
    const base = await testBroker();
    broker = base;
    const prefix = `${base.prefix}/site-1/ax`;
    tmp = tempDir();
    coordinator = await startTestCoordinator({ ...base, prefix }, tmp.dir, 1000);
    const agentId = `${base.prefix}-deep`;
    agent = spawnAgentProcess(tmp.dir, {
      agentId,
      mqtt: { url: base.url, prefix, keepaliveS: 5 },
      heartbeatMs: 1000,
    });
    await waitForAgentsOnline(coordinator, 1);
    const id = await coordinator.sendCommand({ agentId, handler: "echo", at: Date.now() + 200 });
    const done = await waitForEnd(coordinator, id);
    expect([done.state, done.agentId]).toEqual(["SUCCEEDED", agentId]);
  }, 60_000);

  it("is what the broker's rules allow, as for one level", () => {
    const prefix = "site-1/ax";
    const t = topics(prefix);
    const agent = { kind: "agent", agentId: "a1" } as const;
    expect(mayPublish(agent, t.up("a1"), prefix)).toBe(true);
    expect(mayPublish(agent, t.up("a2"), prefix)).toBe(false);
    expect(mayPublish(agent, "ax/v1/agents/a1/up", prefix)).toBe(false);
    expect(maySubscribe(agent, t.down("a1"), prefix)).toBe(true);
    expect(maySubscribe({ kind: "coordinator" }, `$share/g/${t.allUp}`, prefix)).toBe(true);
  });
});
