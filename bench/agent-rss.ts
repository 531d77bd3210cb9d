/**
 * The agent-RSS scenario of bench/agent.ts: the bundled agent as a child process, against an
 * embedded broker and a stand-in coordinator (CoordinatorPeer) in the bench process. Each run
 * has its own broker, peer, agent process and journal.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { buildAgentBundle } from "../coordinator/bundle/build.js";
import { CoordinatorPeer } from "../test/helpers/coordinator-peer.js";
import { stopProcess } from "../test/helpers/device.js";

export interface RssOptions {
  /** Where the bundle goes; under the repository, so better-sqlite3 resolves from node_modules. */
  outfile: string;
  commands: number;
  /** Wait after the welcome before the idle reading. */
  idleWaitMs: number;
  /** Wait after the last `accepted` before the loaded reading. */
  settleMs: number;
  /** Dispatches outstanding (sent, not yet accepted) at most in the paced run. */
  window: number;
}

export interface AgentRun {
  /** "burst": all dispatches published back to back; "paced": at most `window` outstanding. */
  mode: "burst" | "paced";
  window: number | null;
  idleRssKb: number;
  loadedRssKb: number;
  /** VmHWM (peak RSS) when the loaded reading was taken. */
  peakRssKb: number;
  commands: number;
  accepted: number;
  /** Reports other than `accepted` (and `finished`) answering the dispatches: rejected, busy, state. */
  otherReports: number;
  /** Reports the peer received more than once (the agent's outbox re-sends). */
  duplicateReports: number;
  /** From the first dispatch sent to the last `accepted` stored by the peer. */
  elapsedMs: number;
  dispatchesPerSec: number;
  /** Agent process CPU time (user + system) over that interval. */
  agentCpuMs: number;
  /** How the agent process ended after SIGTERM. */
  exit: string;
}

export interface RssResult {
  bundleBytes: number;
  /** RSS of a bare `node -e` process that only waits, for scale. */
  bareNodeRssKb: number;
  burst: AgentRun;
  paced: AgentRun;
}

/** A /proc/PID/status field in kB (Linux). */
function statusKb(pid: number, field: "VmRSS" | "VmHWM"): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(m[1]);
}

/** CPU time (user + system) of a process in ms, from /proc/PID/stat (USER_HZ 100). */
function cpuMs(pid: number): number {
  const fields = (readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1] ?? "").split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function until(what: string, timeoutMs: number, cond: () => boolean, everyMs = 5) {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

async function bareNodeRssKb(): Promise<number> {
  const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 10000)"], { stdio: "ignore" });
  try {
    await sleep(1_000);
    return statusKb(child.pid as number, "VmRSS");
  } finally {
    await stopProcess(child, 2_000);
  }
}

/** Counts the `accepted` reports the peer stored, scanning only what is new since the last call. */
function acceptedCounter(peer: CoordinatorPeer, agentId: string): () => number {
  let seen = 0;
  let count = 0;
  return () => {
    const list = peer.reports.get(agentId) ?? [];
    for (; seen < list.length; seen++) if (list[seen]?.type === "accepted") count++;
    return count;
  };
}

async function runAgent(o: RssOptions, mode: "burst" | "paced"): Promise<AgentRun> {
  const dir = mkdtempSync(join(tmpdir(), "ax-bench-agent-"));
  const broker = await startEmbeddedBroker(0);
  const prefix = "axbench";
  const agentId = `bench-${mode}`;
  const peer = new CoordinatorPeer(broker.url, prefix);
  let child: ChildProcess | undefined;
  let stderr = "";
  try {
    await peer.start();
    const configPath = join(dir, "agent.json");
    writeFileSync(
      configPath,
      JSON.stringify({
        agentId,
        mqtt: { url: broker.url, prefix },
        journal: { path: join(dir, "journal.sqlite") },
        capacity: { concurrency: 4, queue: 64, maxPending: 20_000 },
        heartbeatMs: 1_000,
      }),
    );
    const agent = spawn(process.execPath, [o.outfile, "--config", configPath], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    child = agent;
    agent.stderr?.setEncoding("utf8");
    agent.stderr?.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-8_000);
    });
    const pid = agent.pid as number;
    const alive = () => {
      if (agent.exitCode !== null) throw new Error(`agent exited ${agent.exitCode}: ${stderr}`);
      return true;
    };

    await until("the agent's hello", 20_000, () => alive() && peer.welcomed(agentId));
    await sleep(o.idleWaitMs);
    const idleRssKb = statusKb(pid, "VmRSS");

    const accepted = acceptedCounter(peer, agentId);
    const fireAt = Date.now() + 600_000;
    const send = (i: number) =>
      peer.dispatch(agentId, {
        executionId: `bench-${i}`,
        fireAt,
        deadline: fireAt + 60_000,
        params: { i },
      });
    const cpu0 = cpuMs(pid);
    const t0 = performance.now();
    if (mode === "burst") {
      for (let i = 0; i < o.commands; i++) send(i);
    } else {
      let sent = 0;
      const deadline = t0 + 120_000;
      while (sent < o.commands) {
        alive();
        if (performance.now() > deadline) throw new Error("paced dispatch timed out");
        const room = o.window - (sent - accepted());
        for (let k = 0; k < room && sent < o.commands; k++) send(sent++);
        await sleep(1);
      }
    }
    await until(`${o.commands} accepted`, 120_000, () => alive() && accepted() >= o.commands);
    const elapsedMs = performance.now() - t0;
    const agentCpuMs = cpuMs(pid) - cpu0;
    await sleep(o.settleMs);
    const loadedRssKb = statusKb(pid, "VmRSS");
    const peakRssKb = statusKb(pid, "VmHWM");
    const stored = peer.reports.get(agentId) ?? [];
    const otherReports = stored.filter(
      (r) => r.type !== "accepted" && r.type !== "finished",
    ).length;
    const exit = await stopProcess(agent, 15_000);
    return {
      mode,
      window: mode === "paced" ? o.window : null,
      idleRssKb,
      loadedRssKb,
      peakRssKb,
      commands: o.commands,
      accepted: accepted(),
      otherReports,
      duplicateReports: peer.received.length - stored.length,
      elapsedMs,
      dispatchesPerSec: (o.commands / elapsedMs) * 1_000,
      agentCpuMs,
      exit,
    };
  } finally {
    if (child) await stopProcess(child, 5_000);
    await peer.close();
    await broker.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Builds the agent, then runs it twice: dispatches in one burst, then paced. */
export async function measureAgentRss(o: RssOptions): Promise<RssResult> {
  await buildAgentBundle({ outfile: o.outfile });
  const bundleBytes = statSync(o.outfile).size;
  const bareNodeRss = await bareNodeRssKb();
  const burst = await runAgent(o, "burst");
  const paced = await runAgent(o, "paced");
  return { bundleBytes, bareNodeRssKb: bareNodeRss, burst, paced };
}
