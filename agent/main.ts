import { Agent, type AgentDeps, type AgentLogger } from "./agent.js";
import type { AgentConfig } from "./config.js";

/**
 * A JSON-lines logger on stderr, tagged with the agent's id. Its lines have the coordinator's
 * fields (docs/operations.md, "Logs"): `time` (ISO 8601, UTC, ms), `level`, `component`, `msg`.
 */
export function jsonLogger(
  agentId: string,
  minLevel: "debug" | "info" | "warn" | "error" = "info",
  write: (line: string) => void = (line) => process.stderr.write(line),
): AgentLogger {
  const order = { debug: 0, info: 1, warn: 2, error: 3 };
  return (level, msg, fields) => {
    if (order[level] < order[minLevel]) return;
    const time = new Date().toISOString();
    write(`${JSON.stringify({ time, level, component: "agent", agentId, msg, ...fields })}\n`);
  };
}

/**
 * Composition root: starts an agent from a parsed config and stops it on SIGTERM/SIGINT (rule 9).
 * Resolves when the agent has stopped cleanly; rejects when stopping failed, so the command line
 * does not exit 0 after an unclean shutdown.
 */
export async function runAgent(
  config: AgentConfig,
  log: AgentLogger = jsonLogger(config.agentId),
  deps: Omit<AgentDeps, "log"> = {},
): Promise<void> {
  const agent = new Agent(config, { ...deps, log });
  agent.start();
  log("info", "agent started", {
    mqtt: displayBroker(config.mqtt.url),
    profile: config.profile,
    version: deps.bundle?.version ?? "dev",
  });
  await new Promise<void>((resolve, reject) => {
    const stop = (signal: string) => {
      process.off("SIGTERM", onTerm);
      process.off("SIGINT", onInt);
      log("info", `stopping on ${signal}`);
      agent.stop().then(resolve, (err: unknown) => {
        log("error", `stop failed: ${(err as Error).message}`);
        reject(err);
      });
    };
    const onTerm = () => stop("SIGTERM");
    const onInt = () => stop("SIGINT");
    process.on("SIGTERM", onTerm);
    process.on("SIGINT", onInt);
  });
}

/** The broker URL without credentials, for the log. */
function displayBroker(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}`;
  } catch {
    return "(invalid URL)";
  }
}
