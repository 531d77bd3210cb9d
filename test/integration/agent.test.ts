import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import type { AgentConfigInput } from "../../agent/config.js";
import { startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import { CoordinatorPeer } from "../helpers/coordinator-peer.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";

/**
 * The agent as a child process, driven over a real broker by a stand-in coordinator that can
 * send duplicates, malformed messages and bursts.
 */
interface Rig {
  broker: TestBroker;
  peer: CoordinatorPeer;
  tmp: ReturnType<typeof tempDir>;
  agent: AgentProcess;
  agentId: string;
  restart(): Promise<void>;
}

const rigs: Rig[] = [];

afterEach(async () => {
  for (const r of rigs.splice(0)) {
    await r.agent.stop(3000);
    await r.peer.close();
    await r.broker.close();
    if (process.env.AX_KEEP_TEST_DIRS) console.log(`kept ${r.tmp.dir}`);
    else r.tmp.cleanup();
  }
});

async function rig(
  overrides: Partial<Omit<AgentConfigInput, "mqtt">> & {
    mqtt?: Partial<AgentConfigInput["mqtt"]>;
  } = {},
  broker?: TestBroker,
  peerOptions: { batchBytes?: number | undefined } = {},
): Promise<Rig> {
  const b = broker ?? (await testBroker());
  const tmp = tempDir();
  const peer = new CoordinatorPeer(b.url, b.prefix);
  if ("batchBytes" in peerOptions) peer.batchBytes = peerOptions.batchBytes;
  await peer.start();
  const agentId = `${b.prefix}-a`;
  const config: AgentConfigInput = {
    agentId,
    heartbeatMs: 500,
    ...overrides,
    mqtt: {
      url: b.url,
      prefix: b.prefix,
      keepaliveS: 5,
      reconnect: { baseMs: 100, capMs: 1000 },
      ...overrides.mqtt,
    },
  };
  const r: Rig = {
    broker: b,
    peer,
    tmp,
    agentId,
    agent: spawnAgentProcess(tmp.dir, config),
    async restart() {
      r.agent = spawnAgentProcess(tmp.dir, config);
      await waitFor("the restarted agent's hello", () =>
        peer.hellos.length >= 2 ? true : undefined,
      );
    },
  };
  rigs.push(r);
  try {
    await waitFor("the agent's hello", () => (peer.welcomed(agentId) ? true : undefined), 20_000);
  } catch (err) {
    // Say what the agent did meanwhile: its log is gone with the test's folder.
    const { exitCode, signalCode } = r.agent.child;
    let log: string;
    try {
      log = readFileSync(r.agent.logFile, "utf8").split("\n").slice(-30).join("\n");
    } catch (e) {
      log = `(no log: ${(e as Error).message})`;
    }
    throw new Error(
      `${(err as Error).message}; the agent process: exit ${exitCode}, signal ${signalCode}, ${peer.presences.length} presence and ${peer.received.length} other messages seen; its log ends:\n${log}`,
    );
  }
  return r;
}

describe("agent: duplicates and bad input", () => {
  it("runs a dispatch delivered three times once, and answers every delivery", async () => {
    const { peer, agentId } = await rig();
    const fireAt = Date.now() + 800;
    for (let i = 0; i < 3; i++)
      peer.dispatch(agentId, { executionId: "dup-1", fireAt, params: { i: 1 } });
    await waitFor("finished", () =>
      peer.of(agentId, "finished", "dup-1").length === 1 ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 300));
    expect(peer.of(agentId, "accepted", "dup-1")).toHaveLength(1);
    expect(peer.of(agentId, "state", "dup-1").map((s) => s.localState)).toHaveLength(2);
    expect(peer.of(agentId, "started", "dup-1")).toHaveLength(1);
    expect(peer.of(agentId, "finished", "dup-1")[0]).toMatchObject({
      outcome: "succeeded",
      result: { echo: { i: 1 } },
    });
  });

  it("rejects malformed, unknown-handler and bad-params dispatches with a reason, and keeps running", async () => {
    const { peer, agentId } = await rig();
    await peer.sendRaw(
      agentId,
      JSON.stringify({
        v: 1,
        type: "dispatch",
        msgId: "m1",
        sentAt: Date.now(),
        executionId: "bad-1",
        round: 1,
        handler: 5,
      }),
    );
    await peer.sendRaw(agentId, "{ not json");
    peer.dispatch(agentId, { executionId: "bad-2", handler: "no.such.handler" });
    peer.dispatch(agentId, { executionId: "bad-3", handler: "sleep", params: { ms: "x" } });
    peer.dispatch(agentId, { executionId: "good-1", handler: "echo", params: { ok: true } });
    await waitFor("good-1 finished", () =>
      peer.of(agentId, "finished", "good-1").length ? true : undefined,
    );
    const rejected = peer.of(agentId, "rejected");
    expect(rejected.map((r) => [r.executionId, r.reason])).toEqual([
      ["bad-1", "invalid_dispatch"],
      ["bad-2", "unknown_handler"],
      ["bad-3", "invalid_params"],
    ]);
    expect(rejected[0]?.message).toContain("field attempt");
    expect(rejected[2]?.message).toBe("params.ms: expected number, got string");
    expect(peer.of(agentId, "finished", "good-1")[0]?.outcome).toBe("succeeded");
    expect(peer.of(agentId, "started").map((s) => s.executionId)).toEqual(["good-1"]);
  });

  it("answers busy when the slot and queue are full, and journal_full when it holds maxPending", async () => {
    const { peer, agentId } = await rig({ capacity: { concurrency: 1, queue: 0, maxPending: 3 } });
    peer.dispatch(agentId, { executionId: "run-1", handler: "sleep", params: { ms: 3000 } });
    await waitFor("run-1 started", () =>
      peer.of(agentId, "started", "run-1").length ? true : undefined,
    );
    // Due a second ago: due now whatever the agent's clock-offset estimate is.
    peer.dispatch(agentId, { executionId: "now-2", handler: "echo", fireAt: Date.now() - 1000 });
    const later = Date.now() + 60_000;
    peer.dispatch(agentId, { executionId: "later-3", fireAt: later, deadline: later + 1000 });
    peer.dispatch(agentId, { executionId: "later-4", fireAt: later, deadline: later + 1000 });
    peer.dispatch(agentId, { executionId: "later-5", fireAt: later, deadline: later + 1000 });
    await waitFor("five answers", () => (peer.of(agentId).length >= 7 ? true : undefined));
    expect(peer.of(agentId, "busy").map((r) => r.executionId)).toEqual(["now-2"]);
    expect(peer.of(agentId, "accepted").map((r) => r.executionId)).toEqual([
      "run-1",
      "later-3",
      "later-4",
    ]);
    const full = peer.of(agentId, "rejected");
    expect(full.map((r) => [r.executionId, r.reason])).toEqual([["later-5", "journal_full"]]);
    expect(full[0]?.message).toBe("holding 3 open commands (maxPending 3)");
  });
});

describe("agent: timing", () => {
  it("fires 1,000 commands 1-3 s ahead: all of them, none early, each with its lateness", async () => {
    const { peer, agentId } = await rig({
      capacity: { concurrency: 64, queue: 2000, maxPending: 5000 },
    });
    const base = Date.now() + 1000;
    const fireAts = new Map<string, number>();
    for (let i = 0; i < 1000; i++) {
      const fireAt = base + ((i * 7919) % 2000);
      fireAts.set(`t-${i}`, fireAt);
      peer.dispatch(agentId, { executionId: `t-${i}`, fireAt, deadline: fireAt + 20_000 });
    }
    await waitFor(
      "1,000 finished",
      () => (peer.of(agentId, "finished").length === 1000 ? true : undefined),
      30_000,
    );
    const started = peer.of(agentId, "started");
    expect(started).toHaveLength(1000);
    const early = started.filter((s) => s.startedAt < (fireAts.get(s.executionId) ?? 0));
    expect(early).toEqual([]);
    for (const s of started) {
      expect(s.lateMs).toBeGreaterThanOrEqual(0);
      expect(s.lateMs).toBeCloseTo(s.startedAt - (fireAts.get(s.executionId) ?? 0), 6);
    }
    expect(peer.of(agentId, "finished").every((f) => f.outcome === "succeeded")).toBe(true);
    // Each commit's reports went out together. The burst of dispatches is journaled 16 to a
    // commit, so its 1,000 accepted reports alone fit in about 63 messages; starts spread over
    // 2 s share commits only with each other and with finishes folded into them.
    expect(peer.upPayloads.batch).toBeGreaterThan(0);
    expect(peer.upPayloads.single + peer.upPayloads.batch).toBeLessThan(0.8 * peer.received.length);
    expect(peer.invalid).toEqual([]);
  }, 60_000);

  /** 50 commands due together, run to the end by an agent whose peer offers `batchBytes`. */
  async function fiftyTogether(batchBytes: number | undefined): Promise<CoordinatorPeer> {
    const { peer, agentId } = await rig(
      { capacity: { concurrency: 64, queue: 200, maxPending: 500 } },
      undefined,
      { batchBytes },
    );
    const fireAt = Date.now() + 500;
    for (let i = 0; i < 50; i++) {
      peer.dispatch(agentId, { executionId: `f-${i}`, fireAt, deadline: fireAt + 20_000 });
    }
    await waitFor(
      "50 finished",
      () => (peer.of(agentId, "finished").length === 50 ? true : undefined),
      20_000,
    );
    expect(peer.of(agentId, "started")).toHaveLength(50);
    expect(peer.invalid).toEqual([]);
    return peer;
  }

  it("sends each report alone to a coordinator whose welcome offers no batches", async () => {
    const peer = await fiftyTogether(undefined);
    expect(peer.upPayloads.batch).toBe(0);
  }, 30_000);

  it("keeps every batch within the coordinator's payload limit", async () => {
    const peer = await fiftyTogether(1024);
    expect(peer.upPayloads.batch).toBeGreaterThan(0);
    expect(peer.largestUpPayload).toBeLessThanOrEqual(1024);
  }, 30_000);
});

describe("agent: outages", () => {
  it("delivers every report after a 10 s broker outage, each stored once", async () => {
    const first = await startEmbeddedBroker(0);
    const port = first.port;
    const prefix = `axt${Date.now().toString(36)}`;
    let embedded = first;
    const broker: TestBroker = {
      url: first.url,
      prefix,
      embedded: first,
      close: async () => embedded.close(),
    };
    const { peer, agentId } = await rig({ heartbeatMs: 500 }, broker);
    for (let i = 0; i < 5; i++) {
      peer.dispatch(agentId, {
        executionId: `o-${i}`,
        handler: "sleep",
        params: { ms: 1500 + i * 200 },
      });
    }
    await waitFor("all started", () =>
      peer.of(agentId, "started").length === 5 ? true : undefined,
    );
    await first.close();
    // The runs finish while the broker is down; their reports wait in the journal's outbox.
    await new Promise((r) => setTimeout(r, 10_000));
    embedded = await startEmbeddedBroker(port);
    await waitFor(
      "all finished after the outage",
      () => (peer.of(agentId, "finished").length === 5 ? true : undefined),
      30_000,
    );
    const stored = peer.reports.get(agentId) ?? [];
    expect(stored.map((r) => r.seq)).toEqual(stored.map((_, i) => i + 1));
    for (let i = 0; i < 5; i++) {
      expect(peer.of(agentId, "finished", `o-${i}`)).toHaveLength(1);
      expect(peer.of(agentId, "finished", `o-${i}`)[0]?.outcome).toBe("succeeded");
    }
    // The replay re-sent reports unchanged: any duplicate the peer saw has the same msgId as the stored one.
    for (const r of peer.received) {
      const original = stored.find((s) => s.seq === r.seq);
      expect(original?.msgId).toBe(r.msgId);
    }
  }, 60_000);
});

describe("agent: crashes and restarts", () => {
  it("reports a run killed by kill -9 as interrupted exactly once after restart, and never runs it again", async () => {
    const r = await rig({ handlers: { exec: { enabled: true, allow: ["/bin/sh"] } } });
    const counter = `${r.tmp.dir}/runs.txt`;
    const marker = `ax-kill-test-${r.agentId}`;
    r.peer.dispatch(r.agentId, {
      executionId: "k-1",
      handler: "exec",
      params: {
        command: "/bin/sh",
        args: ["-c", `echo run >> ${counter}; exec sleep 30 # ${marker}`],
      },
      timeoutMs: 60_000,
    });
    await waitFor("the handler's side effect", () => {
      try {
        return readFileSync(counter, "utf8").length > 0 ? true : undefined;
      } catch {
        return undefined;
      }
    });
    await r.agent.kill();
    await r.restart();
    await waitFor("interrupted", () =>
      r.peer.of(r.agentId, "finished", "k-1").length ? true : undefined,
    );
    await new Promise((res) => setTimeout(res, 1500));
    const finished = r.peer.of(r.agentId, "finished", "k-1");
    expect(finished).toHaveLength(1);
    expect(finished[0]).toMatchObject({ outcome: "interrupted", retryable: true });
    expect(finished[0]?.startedAt).toBe(r.peer.of(r.agentId, "started", "k-1")[0]?.startedAt);
    expect(readFileSync(counter, "utf8")).toBe("run\n");
    // The same dispatch delivered again after the restart is not run again either.
    r.peer.dispatch(r.agentId, {
      executionId: "k-1",
      handler: "exec",
      params: { command: "/bin/sh", args: ["-c", "true"] },
    });
    await waitFor("state answer", () =>
      r.peer.of(r.agentId, "state", "k-1").length ? true : undefined,
    );
    expect(r.peer.of(r.agentId, "state", "k-1")[0]?.localState).toBe("interrupted");
    expect(readFileSync(counter, "utf8")).toBe("run\n");
    spawnSync("pkill", ["-f", marker]);
  }, 60_000);

  it("on SIGTERM finishes running work, publishes offline, and fires journaled commands after restart", async () => {
    const r = await rig({ shutdownGraceMs: 5000 });
    r.peer.dispatch(r.agentId, { executionId: "g-run", handler: "sleep", params: { ms: 1200 } });
    const later = Date.now() + 4000;
    r.peer.dispatch(r.agentId, { executionId: "g-later", fireAt: later, deadline: later + 20_000 });
    await waitFor("both accepted", () =>
      r.peer.of(r.agentId, "accepted").length === 2 ? true : undefined,
    );
    await waitFor("g-run started", () =>
      r.peer.of(r.agentId, "started", "g-run").length ? true : undefined,
    );
    const code = await r.agent.stop(10_000);
    expect(code).toBe(0);
    expect(r.peer.of(r.agentId, "finished", "g-run")[0]?.outcome).toBe("succeeded");
    await waitFor("offline presence", () =>
      r.peer.presences.some((p) => p.status === "offline") ? true : undefined,
    );
    expect(r.peer.of(r.agentId, "started", "g-later")).toHaveLength(0);
    await r.restart();
    await waitFor("g-later finished after restart", () =>
      r.peer.of(r.agentId, "finished", "g-later").length ? true : undefined,
    );
    const started = r.peer.of(r.agentId, "started", "g-later")[0];
    expect(started?.startedAt).toBeGreaterThanOrEqual(later);
  }, 60_000);
});
