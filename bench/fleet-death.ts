/**
 * Part of the fleet benchmark: how long from an agent's death to `offline` in the coordinator's
 * registry, and how evenly CONSISTENT_HASH spreads keys.
 *
 *   npm run bench:fleet -- --agents 0 --death-trials 10    # about a minute
 *   options: --keepalive 2
 *
 * Death comes two ways. `kill -9`: the process dies and the kernel closes its socket, so the
 * broker sees the connection drop at once. `SIGSTOP`: the process freezes with its socket open —
 * as a device that loses power or network leaves it — so only the broker's keepalive timer
 * (1.5 × keepalive, MQTT 3.1.1 §3.1.2.10) notices, and publishes the agent's will.
 * Each trial is a fresh agent process on the embedded broker, against one coordinator whose
 * heartbeat rule (3 missed heartbeats of 10 s) is far too slow to be what took it offline.
 */
import { join } from "node:path";
import { startEmbeddedBroker } from "../coordinator/broker/embedded.js";
import { type AgentProcess, spawnAgentProcess } from "../coordinator/cli/agent-process.js";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator } from "../coordinator/coordinator.js";
import { DEFAULT_VIRTUAL_NODES, HashRing } from "../coordinator/domain/routing.js";
import { tempDir } from "../test/helpers/env.js";
import { fmt, mdTable, percentile, printTable, writeResults } from "./lib.js";

async function until<T>(what: string, check: () => T | undefined, timeoutMs: number): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Runs the trials, prints them, and writes bench/results/fleet-death.json and its section. */
export async function runDeathTrials(TRIALS: number, KEEPALIVE_S: number): Promise<void> {
  const tmp = tempDir("ax-bench-fleet-");
  const broker = await startEmbeddedBroker(0);
  const coordinator = new Coordinator(
    parseCoordinatorConfig({
      store: { path: join(tmp.dir, "ax.sqlite") },
      mqtt: { url: broker.url, prefix: "axbench" },
      heartbeatMs: 10_000,
      // Its agents hold no identity: what is measured is how a death is noticed, not sealing.
      security: { messages: "off" },
    }),
  );
  await coordinator.start();
  const offlineAt = new Map<string, { at: number; reason: string }>();
  coordinator.events.on("agent", (e) => {
    if (e.status === "offline") offlineAt.set(e.agentId, { at: e.at, reason: e.reason });
  });

  const results: Record<string, { ms: number[]; reasons: Record<string, number> }> = {
    "kill -9": { ms: [], reasons: {} },
    SIGSTOP: { ms: [], reasons: {} },
  };
  const agents: AgentProcess[] = [];
  try {
    for (let i = 0; i < TRIALS; i++) {
      for (const mode of ["kill -9", "SIGSTOP"] as const) {
        const agentId = `bench-${mode === "kill -9" ? "k" : "s"}${i}`;
        const agent = spawnAgentProcess(tmp.dir, {
          agentId,
          mqtt: { url: broker.url, prefix: "axbench", keepaliveS: KEEPALIVE_S },
          heartbeatMs: 10_000,
        });
        agents.push(agent);
        await until(
          `${agentId} online`,
          () => (coordinator.fleet.get(agentId)?.status === "online" ? true : undefined),
          20_000,
        );
        // Let its first heartbeat pass, so the agent is idle as a real one would be.
        await new Promise((r) => setTimeout(r, 200));
        const t0 = Date.now();
        agent.child.kill(mode === "kill -9" ? "SIGKILL" : "SIGSTOP");
        const off = await until(`${agentId} offline`, () => offlineAt.get(agentId), 60_000);
        const r = results[mode] as { ms: number[]; reasons: Record<string, number> };
        r.ms.push(off.at - t0);
        r.reasons[off.reason] = (r.reasons[off.reason] ?? 0) + 1;
        if (mode === "SIGSTOP") agent.child.kill("SIGKILL");
        await agent.kill();
        process.stdout.write(`${mode} trial ${i + 1}: ${off.at - t0} ms (${off.reason})\n`);
      }
    }
  } finally {
    for (const a of agents) await a.kill();
    await coordinator.close();
    await broker.close();
    tmp.cleanup();
  }

  // CONSISTENT_HASH: 10 agents × 100,000 keys, and what moves when one agent goes.
  const agentIds = Array.from({ length: 10 }, (_, i) => `agent-${i}`);
  const ring = HashRing.build(agentIds);
  const less = HashRing.build(agentIds.slice(1));
  const load = new Map<string, number>();
  let moved = 0;
  let movedOthers = 0;
  const keys = 100_000;
  const t0 = performance.now();
  for (let k = 0; k < keys; k++) {
    const key = `device-${k}`;
    const owner = ring.ownerOf(key) as string;
    load.set(owner, (load.get(owner) ?? 0) + 1);
    const after = less.ownerOf(key);
    if (after !== owner) {
      moved++;
      if (owner !== agentIds[0]) movedOthers++;
    }
  }
  const lookupUs = ((performance.now() - t0) * 1000) / (2 * keys);
  const mean = keys / agentIds.length;
  const deviations = [...load.values()].map((n) => (100 * (n - mean)) / mean);
  const hash = {
    agents: agentIds.length,
    keys,
    virtualNodes: DEFAULT_VIRTUAL_NODES,
    maxDeviationPct: Math.max(...deviations.map(Math.abs)),
    minLoad: Math.min(...load.values()),
    maxLoad: Math.max(...load.values()),
    movedPct: (100 * moved) / keys,
    movedFromOtherAgents: movedOthers,
    lookupUs,
  };
  console.log(
    `CONSISTENT_HASH ${hash.agents} agents × ${keys} keys: max deviation ${fmt(hash.maxDeviationPct)} %, removing one moved ${fmt(hash.movedPct)} % (${movedOthers} from other agents), ${fmt(lookupUs)} µs per lookup`,
  );

  const rows = Object.entries(results).map(([mode, r]) => {
    const sorted = Float64Array.from(r.ms).sort();
    return [
      mode,
      String(r.ms.length),
      fmt(percentile(sorted, 50)),
      fmt(percentile(sorted, 100)),
      Object.entries(r.reasons)
        .map(([k, v]) => `${k} ×${v}`)
        .join(", "),
    ];
  });
  const header = ["death", "trials", "p50 ms", "max ms", "how it went offline"];
  printTable(header, rows);
  const windowMs = KEEPALIVE_S * 1500;
  const markdown = `## Fleet: time from an agent's death to offline

Reproduce with \`npm run bench:fleet -- --agents 0 --death-trials ${TRIALS}\` (\`bench/fleet-death.ts\`). ${TRIALS} trials per kind of death, each a fresh agent process (keepalive ${KEEPALIVE_S} s, heartbeats every 10 s) on the embedded broker; the time is from the signal to the coordinator's \`offline\` event. The heartbeat rule (3 missed heartbeats, 30 s here) is not what took any of them offline: the reason column says which rule did.

- **kill -9**: the kernel closes the dead process's socket, the broker publishes its will at once.
- **SIGSTOP**: the process freezes with its socket open, as a device that loses power or its network would leave it; the broker notices only when the keepalive runs out (1.5 × ${KEEPALIVE_S} s = ${fmt(windowMs)} ms) and publishes the will.

${mdTable(header, rows)}

Target: within the broker's keepalive window (${fmt(windowMs)} ms here) — not the 90–120 s other schedulers take to notice.

**CONSISTENT_HASH spread**: ${hash.agents} agents (\`agent-0\`…\`agent-9\`) × ${keys.toLocaleString("en-US")} keys (\`device-N\`), ${hash.virtualNodes} virtual nodes per agent: loads from ${hash.minLoad.toLocaleString("en-US")} to ${hash.maxLoad.toLocaleString("en-US")} keys, at most ${fmt(hash.maxDeviationPct)} % from the mean (target ±10 %); removing \`agent-0\` moved ${fmt(hash.movedPct)} % of the keys (target about a tenth), ${hash.movedFromOtherAgents} of them from other agents; ${fmt(hash.lookupUs)} µs per lookup.`;
  writeResults(
    "fleet-death",
    {
      keepaliveS: KEEPALIVE_S,
      trials: TRIALS,
      offline: results,
      keepaliveWindowMs: windowMs,
      consistentHash: hash,
    },
    markdown,
  );
}
