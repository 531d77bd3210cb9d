/**
 * The coordinator child process of bench/fleet.ts: the real Coordinator (messages authenticated,
 * its default) and its HTTP API on a fresh store, on the bench's broker. bench/fleet.ts bundles
 * it to dist/bench/fleet-coordinator.mjs (packages external) and runs it with plain node, so its
 * RSS and CPU in /proc are the coordinator's alone.
 *
 * Before it starts it enrols the bench's N agents in bulk, as `ax fleet enroll` would one by one
 * (an identity record each, generation 1, the run's tags), in one commit rather than N: at
 * 10,000 agents one commit each would take longer than the run. Their keys and broker passwords,
 * derived from the fleet key as the coordinator derives them, go into one file for the simulator.
 *
 * argv[2]: FleetWorkerArgs as JSON. stdout: one JSON line per FleetWorkerLine. The `online` and
 * `offline` lines come from the coordinator's own agent events, so the times are when it decided.
 */
import { writeFileSync, writeSync } from "node:fs";
import { parseCoordinatorConfig } from "../coordinator/config.js";
import { Coordinator } from "../coordinator/coordinator.js";
import { startHttpServer } from "../coordinator/http/server.js";
import { messageKey, mqttPassword } from "../coordinator/security/secrets.js";
import type { SimKey } from "./fleet-sim.js";

export interface FleetWorkerArgs {
  storePath: string;
  mqttUrl: string;
  prefix: string;
  agentIds: string[];
  tags: Record<string, string>;
  /** Where to write the agents' keys (SimKey[] as JSON). */
  keysFile: string;
  /** The config's idleHeartbeatMs; absent: its default. */
  idleHeartbeatMs?: number;
  /** The config's mqtt.readWindowMs; absent: its default. */
  readWindowMs?: number;
}

export type FleetWorkerLine =
  | { t: "started"; pid: number; httpUrl: string; enrollMs: number }
  /** Every time the count of online agents reaches a tenth more of the fleet, and all of it. */
  | { t: "online"; online: number; at: number }
  /** The last agent went offline; `reasons` counts why each went, since all were online. */
  | { t: "offline"; online: number; at: number; reasons: Record<string, number> }
  | { t: "logs"; warn: number; error: number; samples: string[] };

function emit(line: FleetWorkerLine): void {
  writeSync(1, `${JSON.stringify(line)}\n`);
}

async function main(args: FleetWorkerArgs): Promise<void> {
  const logs = { warn: 0, error: 0, samples: [] as string[] };
  const config = parseCoordinatorConfig(
    {
      store: { path: args.storePath },
      // No broker session left behind on a shared broker once the run is over.
      // A client id of the run's own, so the broker's log can be searched for what it dropped.
      mqtt: {
        url: args.mqttUrl,
        prefix: args.prefix,
        clientId: `ax-bench-${args.prefix}`,
        persistentSession: false,
        ...(args.readWindowMs === undefined ? {} : { readWindowMs: args.readWindowMs }),
      },
      security: { messages: "required" },
      ...(args.idleHeartbeatMs === undefined ? {} : { idleHeartbeatMs: args.idleHeartbeatMs }),
    },
    "bench",
  );
  const coordinator = new Coordinator(config, {
    log: (level, msg) => {
      if (level !== "warn" && level !== "error") return;
      logs[level]++;
      if (logs.samples.length < 10) logs.samples.push(`${level}: ${msg.slice(0, 300)}`);
    },
  });

  const enrollStart = Date.now();
  const keys: SimKey[] = [];
  const fleet = coordinator.secrets.fleet;
  for (const agentId of args.agentIds) {
    await coordinator.store.putIdentity({
      agentId,
      generation: 1,
      tags: args.tags,
      status: "enrolled",
      enrolledAt: enrollStart,
      updatedAt: enrollStart,
      actor: "bench",
    });
    keys.push({
      agentId,
      key: messageKey(fleet, agentId, 1).toString("base64url"),
      generation: 1,
      username: agentId,
      password: mqttPassword(fleet, agentId, 1),
    });
  }
  await coordinator.store.flush();
  writeFileSync(args.keysFile, JSON.stringify(keys), { mode: 0o600 });
  const enrollMs = Date.now() - enrollStart;

  const n = args.agentIds.length;
  const step = Math.max(1, Math.ceil(n / 10));
  const online = new Set<string>();
  let next = step;
  let wasFull = false;
  let reasons: Record<string, number> = {};
  coordinator.events.on("agent", (e) => {
    if (e.status === "online") online.add(e.agentId);
    // Counted once per agent: a late will after the heartbeat rule took it is no second death.
    else if (online.delete(e.agentId) && wasFull) {
      reasons[e.reason] = (reasons[e.reason] ?? 0) + 1;
    }
    if (online.size >= Math.min(next, n)) {
      emit({ t: "online", online: online.size, at: e.at });
      next = online.size + step;
      if (online.size === n) {
        wasFull = true;
        reasons = {};
      }
    }
    if (wasFull && online.size === 0) {
      emit({ t: "offline", online: 0, at: e.at, reasons });
      wasFull = false;
    }
  });

  await coordinator.start();
  const http = await startHttpServer(coordinator, { port: 0 });
  emit({ t: "started", pid: process.pid, httpUrl: http.url, enrollMs });

  const stop = () => {
    emit({ t: "logs", ...logs });
    http
      .close()
      .then(() => coordinator.close())
      .catch(() => {})
      .finally(() => process.exit(0));
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

main(JSON.parse(process.argv[2] ?? "{}") as FleetWorkerArgs).catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
