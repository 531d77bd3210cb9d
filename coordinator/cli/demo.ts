import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AxError } from "../../shared/errors.js";
import { type EmbeddedBroker, startEmbeddedBroker } from "../broker/embedded.js";
import { type BrokerLogins, identityLogins } from "../broker/logins.js";
import { requireLogin } from "../broker/mosquitto.js";
import { parseCoordinatorConfig } from "../config.js";
import { Coordinator, coordinatorMqttLogin } from "../coordinator.js";
import { type HttpServer, startHttpServer } from "../http/server.js";
import { type AgentProcess, spawnAgentProcess } from "./agent-process.js";
import { flags, portFlag, secondsFlag } from "./args.js";
import { LiveTable, liveRow, plainLine } from "./live-table.js";
import { jsonLogger } from "./log.js";

const AGENTS = ["demo-agent-1", "demo-agent-2", "demo-agent-3"];

/**
 * `ax demo`: an embedded broker, a coordinator on a SQLite file in a temp folder and three agents
 * as child processes; a job every 2 s and a device command 3 s out; until Ctrl-C or `--duration`
 * ends, a table of the recent executions redrawn in place on a terminal, or a plain line per
 * change of state otherwise (piped, CI); then everything is stopped and a summary line printed.
 */
export async function runDemo(argv: string[]): Promise<number> {
  const f = flags("demo", argv, {
    duration: { type: "string" },
    "http-port": { type: "string" },
  });
  const durationS = secondsFlag("demo", "duration", f.duration, Number.POSITIVE_INFINITY);
  const httpPort = portFlag("demo", "http-port", f["http-port"]);
  const dir = mkdtempSync(join(tmpdir(), "ax-demo-"));
  const out = process.stdout;
  const tty = out.isTTY === true;
  let live: LiveTable | undefined;
  let broker: EmbeddedBroker | undefined;
  let coordinator: Coordinator | undefined;
  let http: HttpServer | undefined;
  const agents: AgentProcess[] = [];
  let interrupted = false;
  const onSigint = () => {
    interrupted = true;
  };
  process.on("SIGINT", onSigint);
  process.on("SIGTERM", onSigint);
  try {
    // The broker enforces who may publish where, as Mosquitto with `ax broker config` does: the
    // coordinator and the enrolled agents log in with their derived passwords, no one else can.
    let logins: BrokerLogins | undefined;
    // The broker's refusals go to the coordinator's log, as a production broker's to its own.
    const log = jsonLogger({ file: join(dir, "coordinator.log") });
    broker = await startEmbeddedBroker(0, { auth: { prefix: "ax", logins: () => logins }, log });
    // The port is known before the config is made: the URL agents download update bundles from
    // (http.publicUrl's default) is made of it.
    const port = httpPort === 0 ? await freePort() : httpPort;
    const config = parseCoordinatorConfig({
      store: { path: join(dir, "ax.sqlite") },
      mqtt: { url: broker.url },
      http: { host: "127.0.0.1", port },
      heartbeatMs: 1000,
    });
    coordinator = new Coordinator(config, { log });
    logins = identityLogins(
      coordinator.identities,
      requireLogin(coordinatorMqttLogin(config, coordinator.secrets)),
    );
    broker.follow(coordinator.identities);
    await coordinator.start();
    // The API, metrics and console, on this machine only, with token auth as in production.
    http = await startHttpServer(coordinator, { host: "127.0.0.1", port });
    const tokenFile = coordinator.apiTokens.adminTokenFile;
    out.write(`ax demo: broker ${broker.url}, store ${config.store.path}, logs in ${dir}\n`);
    out.write(
      `ax demo: console ${http.url}/  ·  API ${http.url}/api/openapi.json  ·  metrics ${http.url}/metrics\n`,
    );
    out.write(
      `ax demo: admin token in ${tokenFile} (paste it into the console; ` +
        `for the CLI: AX_URL=${http.url} AX_TOKEN_FILE=${tokenFile} ax job list)\n`,
    );
    for (const agentId of AGENTS) {
      // Each agent is enrolled and holds its identity, as in production: every message between
      // it and the coordinator is authenticated (docs/security.md).
      const { file } = await coordinator.identities.enroll(agentId, {
        tags: { site: "demo" },
        actor: "demo",
      });
      const identityFile = join(dir, `${agentId}.identity.json`);
      writeFileSync(identityFile, JSON.stringify(file, null, 2), { mode: 0o600 });
      agents.push(
        spawnAgentProcess(dir, {
          agentId,
          identityFile,
          mqtt: { url: broker.url, keepaliveS: 5 },
          profile: "demo",
          tags: { site: "demo" },
          heartbeatMs: 1000,
        }),
      );
    }
    const registeredBy = Date.now() + 30_000;
    const coord = coordinator;
    while (coord.fleet.list().filter((a) => a.status === "online").length < AGENTS.length) {
      if (interrupted) break;
      if (Date.now() > registeredBy) {
        throw new AxError(
          "AX_LINK_FAILED",
          `agents did not register within 30 s; see ${dir}/*.log`,
        );
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    out.write(
      `ax demo: ${AGENTS.length} agents registered; a job fires every 2 s; a command is due in 3 s\n`,
    );
    await coordinator.putJob({
      id: "demo-echo",
      handler: "echo",
      params: { hello: "fleet" },
      trigger: { type: "every", every: "2s" },
    });
    const commandAt = Date.now() + 3000;
    await coordinator.sendCommand({
      agentId: "demo-agent-2",
      handler: "echo",
      params: { relay: "on" },
      at: commandAt,
      deadline: commandAt + 2000,
    });

    const endAt = Date.now() + durationS * 1000;
    const printed = new Map<string, string>();
    if (tty) live = new LiveTable(out);
    while (!interrupted && Date.now() < endAt) {
      const limit = Math.min(12, live?.capacity ?? 12);
      const recent = (await coordinator.store.listExecutions({ limit })).reverse().map(liveRow);
      if (live) live.draw(recent);
      else {
        // Not a terminal: a line for each execution when it reaches a new state.
        for (const row of recent) {
          if (printed.get(row.id) !== row.state) {
            printed.set(row.id, row.state);
            out.write(`${plainLine(row)}\n`);
          }
        }
      }
      await new Promise((r) => setTimeout(r, Math.min(500, Math.max(0, endAt - Date.now()))));
    }
  } finally {
    live?.close();
    process.off("SIGINT", onSigint);
    process.off("SIGTERM", onSigint);
    // Let executions already fired finish before the agents go, so the summary is final.
    await coordinator?.quiesce(3000).catch(() => 0);
    await Promise.all(agents.map((a) => a.stop(5000)));
    let summary = "demo: 0 executions, 0 succeeded, 0 failed";
    let succeeded = 0;
    if (coordinator) {
      await coordinator.settle();
      const all = await coordinator.store.listExecutions({ limit: 1_000_000 });
      succeeded = all.filter((e) => e.state === "SUCCEEDED").length;
      const failed = all.filter((e) => ["FAILED", "TIMED_OUT", "EXPIRED"].includes(e.state)).length;
      summary = `demo: ${all.length} executions, ${succeeded} succeeded, ${failed} failed`;
      await http?.close();
      await coordinator.close();
    }
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
    // On a terminal, Ctrl-C echoes "^C" where the cursor is, under the table: clear it first.
    if (live) out.write("\r\x1b[K");
    out.write(`${summary}\n`);
    process.exitCode = succeeded > 0 || interrupted ? 0 : 1;
  }
  return process.exitCode ?? 0;
}

/** A TCP port free on 127.0.0.1 now (the system's choice for port 0). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
