/**
 * The agent-RSS scenario of bench/agent.ts: the bundled agent as a child process, against an
 * embedded broker and a stand-in coordinator (CoordinatorPeer) in the bench process. Each run
 * has its own broker, peer, agent process and journal.
 *
 * Authentication (issue 16, "Cost, measured"): every run is made with the agent holding an
 * identity (a random key the peer also holds: the peer seals every down message and checks every
 * up one, as a coordinator does by default) and without one (both sides unsigned), alternately,
 * `repeats` times each, so the agent's CPU per dispatch can be compared.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { buildAgentBundle } from "../coordinator/bundle/build.js";
import { CoordinatorPeer } from "../test/helpers/coordinator-peer.js";
import { stopProcess } from "../test/helpers/device.js";
import { benchIdentity, keyOf, overheadPct, writeIdentityFile } from "./auth.js";
import { percentile } from "./lib.js";

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
  /** Runs of each mode with authentication on, and as many with it off. */
  repeats: number;
}

export interface AgentRun {
  /** "burst": all dispatches published back to back; "paced": at most `window` outstanding. */
  mode: "burst" | "paced";
  /** The agent held an identity: every message sealed and checked, both ways. */
  auth: boolean;
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
  /** agentCpuMs per dispatch, µs. */
  agentCpuUsPerDispatch: number;
  /** The agent's up payloads that did not verify under its key at the peer (auth on). */
  unverified: number;
  /** How the agent process ended after SIGTERM. */
  exit: string;
}

/** Agent CPU per dispatch with authentication on and off, over the runs of one mode. */
export interface AuthCost {
  mode: "burst" | "paced";
  /** Median over the runs, µs per dispatch. */
  onUs: number;
  offUs: number;
  /** Every run's figure, in the order run. */
  onRunsUs: number[];
  offRunsUs: number[];
  /** (on − off) / off, %. */
  overheadPct: number;
}

export interface RssResult {
  bundleBytes: number;
  /** RSS of a bare `node -e` process that only waits, for scale. */
  bareNodeRssKb: number;
  /** The first run of each mode with authentication on (the agent as deployed). */
  burst: AgentRun;
  paced: AgentRun;
  /** Every run, in the order run. */
  runs: AgentRun[];
  auth: { burst: AuthCost; paced: AuthCost; idleRssKbOn: number; idleRssKbOff: number };
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

async function runAgent(o: RssOptions, mode: "burst" | "paced", auth: boolean): Promise<AgentRun> {
  const dir = mkdtempSync(join(tmpdir(), "ax-bench-agent-"));
  const broker = await startEmbeddedBroker(0);
  const prefix = "axbench";
  const agentId = `bench-${mode}`;
  const peer = new CoordinatorPeer(broker.url, prefix);
  let child: ChildProcess | undefined;
  let stderr = "";
  try {
    await peer.start();
    const identityPath = join(dir, "ax-identity.json");
    if (auth) {
      const identity = benchIdentity(agentId);
      writeIdentityFile(identityPath, identity);
      peer.keys.set(agentId, keyOf(identity));
    }
    const configPath = join(dir, "agent.json");
    writeFileSync(
      configPath,
      JSON.stringify({
        agentId,
        mqtt: { url: broker.url, prefix },
        journal: { path: join(dir, "journal.sqlite") },
        capacity: { concurrency: 4, queue: 64, maxPending: 20_000 },
        heartbeatMs: 1_000,
        ...(auth ? { identityFile: identityPath } : {}),
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
      auth,
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
      agentCpuUsPerDispatch: (agentCpuMs * 1000) / o.commands,
      unverified: peer.unverified.length,
      exit,
    };
  } finally {
    if (child) await stopProcess(child, 5_000);
    await peer.close();
    await broker.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => percentile(Float64Array.from(xs).sort(), 50);

function authCost(runs: AgentRun[], mode: "burst" | "paced"): AuthCost {
  const of = (auth: boolean) =>
    runs.filter((r) => r.mode === mode && r.auth === auth).map((r) => r.agentCpuUsPerDispatch);
  const onRunsUs = of(true);
  const offRunsUs = of(false);
  const onUs = median(onRunsUs);
  const offUs = median(offRunsUs);
  return { mode, onUs, offUs, onRunsUs, offRunsUs, overheadPct: overheadPct(onUs, offUs) };
}

/**
 * Builds the agent, then runs it with dispatches in one burst, then paced: each `repeats` times
 * with authentication on and off, alternating (which goes first, too), so a change in what else
 * the machine runs falls on both alike.
 */
export async function measureAgentRss(o: RssOptions): Promise<RssResult> {
  await buildAgentBundle({ outfile: o.outfile });
  const bundleBytes = statSync(o.outfile).size;
  const bareNodeRss = await bareNodeRssKb();
  const runs: AgentRun[] = [];
  for (const mode of ["burst", "paced"] as const) {
    for (let i = 0; i < o.repeats; i++) {
      for (const auth of i % 2 === 0 ? [true, false] : [false, true]) {
        const r = await runAgent(o, mode, auth);
        console.log(
          `  ${mode} auth ${auth ? "on " : "off"}: ${r.agentCpuUsPerDispatch.toFixed(1)} µs agent CPU/dispatch, idle RSS ${r.idleRssKb} kB${auth ? `, ${r.unverified} unverified` : ""}`,
        );
        runs.push(r);
      }
    }
  }
  const first = (mode: "burst" | "paced") => {
    const r = runs.find((x) => x.mode === mode && x.auth);
    if (!r) throw new Error(`no ${mode} run with auth on`);
    return r;
  };
  const idle = (auth: boolean) =>
    Math.max(...runs.filter((r) => r.auth === auth).map((r) => r.idleRssKb));
  return {
    bundleBytes,
    bareNodeRssKb: bareNodeRss,
    burst: first("burst"),
    paced: first("paced"),
    runs,
    auth: {
      burst: authCost(runs, "burst"),
      paced: authCost(runs, "paced"),
      idleRssKbOn: idle(true),
      idleRssKbOff: idle(false),
    },
  };
}
