import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import type { AgentConfigInput } from "../../agent/config.js";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import { CoordinatorPeer } from "../helpers/coordinator-peer.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";

/**
 * Issue 15 on the agent's side, with real agent processes killed for real: an exec child that
 * outlives kill -9, SIGTERM with commands coming due in the grace period, and two agents on one
 * journal.
 */

interface Rig {
  broker: TestBroker;
  peer: CoordinatorPeer;
  tmp: ReturnType<typeof tempDir>;
  agents: AgentProcess[];
  config: AgentConfigInput;
  spawn(config?: AgentConfigInput): AgentProcess;
}

const rigs: Rig[] = [];
afterEach(async () => {
  for (const r of rigs.splice(0)) {
    for (const a of r.agents) await a.kill();
    await r.peer.close();
    await r.broker.close();
    r.tmp.cleanup();
  }
});

async function rig(overrides: Partial<AgentConfigInput> = {}): Promise<Rig> {
  const broker = await testBroker();
  const tmp = tempDir();
  const peer = new CoordinatorPeer(broker.url, broker.prefix);
  await peer.start();
  const config: AgentConfigInput = {
    agentId: `${broker.prefix}-a`,
    heartbeatMs: 500,
    mqtt: {
      url: broker.url,
      prefix: broker.prefix,
      keepaliveS: 5,
      reconnect: { baseMs: 100, capMs: 1000 },
    },
    ...overrides,
  };
  const r: Rig = {
    broker,
    peer,
    tmp,
    agents: [],
    config,
    spawn(c = config) {
      const a = spawnAgentProcess(tmp.dir, c);
      r.agents.push(a);
      return a;
    },
  };
  rigs.push(r);
  return r;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const lines = (file: string) =>
  existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];

describe("agent: kill -9 during an exec run", () => {
  it("kills the child that outlived the agent, reports interrupted in_handler, and its effect never happens", async () => {
    const r = await rig({ handlers: { exec: { enabled: true, allow: ["/bin/sh"] } } });
    const id = r.config.agentId;
    r.spawn();
    await waitFor("hello", () => (r.peer.welcomed(id) ? true : undefined), 20_000);
    const began = join(r.tmp.dir, "began.txt");
    const marker = join(r.tmp.dir, "marker.txt");
    // The effect comes 3 s after the start; the agent dies before it.
    r.peer.dispatch(id, {
      executionId: "x-1",
      handler: "exec",
      params: {
        command: "/bin/sh",
        args: ["-c", `echo "$AX_EXECUTION_ID" >> ${began}; sleep 3; echo done >> ${marker}`],
      },
      timeoutMs: 60_000,
    });
    await waitFor("the child runs", () => (lines(began).length > 0 ? true : undefined));
    expect(lines(began)).toEqual(["x-1"]);
    // The agent journals the child's pid as soon as spawn returns, but the child runs from then
    // on too: on a loaded machine it can write its first line before the agent's next
    // instruction. What this test is about starts once the pid is journaled.
    await waitFor("the child journaled", () => {
      const db = new Database(join(r.tmp.dir, `${id}.journal.sqlite`), {
        readonly: true,
        fileMustExist: true,
      });
      try {
        const n = db.prepare("SELECT COUNT(*) AS n FROM children").get() as { n: number };
        return n.n > 0 ? true : undefined;
      } finally {
        db.close();
      }
    });
    await r.agents[0]?.kill();
    r.spawn();
    await waitFor(
      "the interrupted report",
      () => (r.peer.of(id, "finished", "x-1").length ? true : undefined),
      20_000,
    );
    const [finished] = r.peer.of(id, "finished", "x-1");
    expect(finished).toMatchObject({
      outcome: "interrupted",
      interruptedPhase: "in_handler",
      retryable: true,
    });
    expect(finished?.message).toContain("outlived it and was stopped now");
    // Well past when the effect would have happened: it never did, as recorded.
    await sleep(3_500);
    expect(lines(marker)).toEqual([]);
    expect(r.peer.of(id, "finished", "x-1")).toHaveLength(1);
    expect(lines(began)).toEqual(["x-1"]);
  }, 60_000);
});

describe("agent: SIGTERM with commands coming due in the grace period", () => {
  it("starts none of them; after the restart each runs once if its deadline allows, or expires; none is interrupted", async () => {
    const r = await rig({ shutdownGraceMs: 8_000 });
    const id = r.config.agentId;
    const first = r.spawn();
    await waitFor("hello", () => (r.peer.welcomed(id) ? true : undefined), 20_000);
    // A running command keeps the grace period going for about 3 s.
    r.peer.dispatch(id, { executionId: "run", handler: "sleep", params: { ms: 3_000 } });
    await waitFor("run started", () => (r.peer.of(id, "started", "run").length ? true : undefined));
    const t = Date.now();
    r.peer.dispatch(id, { executionId: "ok-1", fireAt: t + 1_000, deadline: t + 60_000 });
    r.peer.dispatch(id, { executionId: "ok-2", fireAt: t + 1_500, deadline: t + 60_000 });
    // Due during the grace period, and its deadline passes before the restart.
    r.peer.dispatch(id, { executionId: "short", fireAt: t + 1_000, deadline: t + 2_500 });
    await waitFor("accepted", () => (r.peer.of(id, "accepted").length === 4 ? true : undefined));
    const code = await first.stop(15_000);
    expect(code).toBe(0);
    const stoppedAt = Date.now();
    // Nothing started after SIGTERM, and the running one finished within the grace period.
    expect(r.peer.of(id, "finished", "run")[0]?.outcome).toBe("succeeded");
    for (const e of ["ok-1", "ok-2", "short"]) expect(r.peer.of(id, "started", e)).toEqual([]);
    expect(r.peer.of(id, "finished").filter((f) => f.outcome === "interrupted")).toEqual([]);
    expect(stoppedAt).toBeGreaterThan(t + 2_500); // the short one's deadline is behind us

    r.spawn();
    await waitFor(
      "all three finished after the restart",
      () => (r.peer.of(id, "finished").length === 4 ? true : undefined),
      20_000,
    );
    for (const e of ["ok-1", "ok-2"]) {
      expect(r.peer.of(id, "started", e)).toHaveLength(1);
      expect(r.peer.of(id, "started", e)[0]?.startedAt).toBeGreaterThanOrEqual(stoppedAt);
      expect(r.peer.of(id, "finished", e)[0]?.outcome).toBe("succeeded");
    }
    expect(r.peer.of(id, "started", "short")).toEqual([]);
    expect(r.peer.of(id, "finished", "short")[0]?.outcome).toBe("expired");
    expect(r.peer.of(id, "finished").filter((f) => f.outcome === "interrupted")).toEqual([]);
  }, 60_000);
});

describe("agent: a held command and a better clock estimate", () => {
  it("starts at its time after a restart on a coordinator clock 2 s ahead, not when offset 0 said", async () => {
    const r = await rig();
    r.peer.clockAheadMs = 2_000;
    const id = r.config.agentId;
    const first = r.spawn();
    await waitFor("hello", () => (r.peer.welcomed(id) ? true : undefined), 20_000);
    await waitFor("the agent's estimate of the 2 s", () =>
      Math.abs((r.peer.heartbeats.at(-1)?.clockOffset.offsetMs ?? 0) - 2_000) < 50
        ? true
        : undefined,
    );
    // Due on the coordinator's clock after the agent's restart.
    const fireAt = Date.now() + r.peer.clockAheadMs + 6_000;
    r.peer.dispatch(id, { executionId: "held", fireAt, deadline: fireAt + 60_000 });
    await waitFor("accepted", () => (r.peer.of(id, "accepted", "held").length ? true : undefined));
    expect(await first.stop(15_000)).toBe(0);
    // The restarted agent recovers its journal before any clock sample (offset 0), so its wheel
    // first holds the command until 2 s after its time; the welcome's sample brings it forward.
    r.spawn();
    const started = await waitFor(
      "held started",
      () => r.peer.of(id, "started", "held")[0],
      20_000,
    );
    expect(started.startedAt - fireAt).toBeGreaterThanOrEqual(0);
    expect(started.startedAt - fireAt).toBeLessThan(200);
    expect(started.lateMs).toBeLessThan(200);
  }, 60_000);
});

describe("agent: the clock estimate kept across a restart", () => {
  it("never starts a recovered command early on a coordinator clock 10 s behind, killed and restarted", async () => {
    const r = await rig();
    r.peer.clockAheadMs = -10_000;
    const id = r.config.agentId;
    const first = r.spawn();
    await waitFor("hello", () => (r.peer.welcomed(id) ? true : undefined), 20_000);
    await waitFor("the agent's estimate of the -10 s", () =>
      Math.abs((r.peer.heartbeats.at(-1)?.clockOffset.offsetMs ?? 0) + 10_000) < 50
        ? true
        : undefined,
    );
    // Due 6 s ahead on the coordinator's clock; with offset 0 (the device's own clock, 10 s
    // ahead of it) it was already due 4 s ago.
    const fireAt = Date.now() + r.peer.clockAheadMs + 6_000;
    r.peer.dispatch(id, { executionId: "held", fireAt, deadline: fireAt + 60_000 });
    await waitFor("accepted", () => (r.peer.of(id, "accepted", "held").length ? true : undefined));
    await first.kill();
    // The welcome comes late: before it, only the kept estimate stands between it and offset 0.
    r.peer.holdWelcomesUntil = Date.now() + 2_500;
    r.spawn();
    const started = await waitFor(
      "held started",
      () => r.peer.of(id, "started", "held")[0],
      20_000,
    );
    const startedAtOnPeer = Date.now() + r.peer.clockAheadMs;
    // Not early on the coordinator's clock, as reported and as the peer saw it arrive.
    expect(started.startedAt).toBeGreaterThanOrEqual(fireAt);
    expect(startedAtOnPeer).toBeGreaterThanOrEqual(fireAt);
    expect(started.startedAt - fireAt).toBeLessThan(500);
  }, 60_000);
});

describe("agent: one journal, one agent", () => {
  it("refuses to start on a journal another live agent holds, naming the file, its pid and agentId", async () => {
    const r = await rig();
    const id = r.config.agentId;
    const journal = join(r.tmp.dir, "shared.sqlite");
    const holder = r.spawn({ ...r.config, journal: { path: journal } });
    await waitFor("hello", () => (r.peer.welcomed(id) ? true : undefined), 20_000);
    const second = r.spawn({ ...r.config, agentId: `${id}-2`, journal: { path: journal } });
    const code = await new Promise((resolve) => second.child.once("exit", resolve));
    expect(code).toBe(1);
    const log = readFileSync(second.logFile, "utf8");
    expect(log).toContain("AX_AGENT_JOURNAL_LOCKED");
    expect(log).toContain(
      `journal ${journal} is in use by another live process: pid ${holder.child.pid} (agent "${id}")`,
    );
    expect(r.peer.hellos.filter((h) => h.agentId === `${id}-2`)).toEqual([]);

    // Once the holder is gone (even by kill -9), its own restart takes the stale lock over; the
    // other agentId is still refused, now because the journal is not its own.
    await holder.kill();
    const third = r.spawn({ ...r.config, agentId: `${id}-2`, journal: { path: journal } });
    expect(await new Promise((resolve) => third.child.once("exit", resolve))).toBe(1);
    expect(readFileSync(third.logFile, "utf8")).toContain(
      `AX_AGENT_JOURNAL_FOREIGN: journal ${journal} belongs to agent "${id}", not to this agent "${id}-2"`,
    );
    r.spawn({ ...r.config, journal: { path: journal } });
    await waitFor("the owner's second hello", () =>
      r.peer.hellos.filter((h) => h.agentId === id).length >= 2 ? true : undefined,
    );
  }, 60_000);
});
