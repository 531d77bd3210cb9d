/**
 * The agent of bench/coordinator.ts: agent/cli.ts's Agent, config and shutdown, built like
 * buildAgentBundle (one ESM file, better-sqlite3 external), except that its `echo` handler also
 * notes when it was entered, on the host clock, so start lateness is measured on the same clock
 * as the coordinator's nominal times (all processes share this machine's clock), and a second run
 * of one execution anywhere in the fleet would show up.
 *
 *   node dist/bench/coordinator-agent.mjs CONFIG_FILE LOG_FILE
 *
 * On SIGTERM it stops the agent and writes an AgentLog (JSON) to LOG_FILE.
 */
import { writeFileSync } from "node:fs";
import { Agent } from "../agent/agent.js";
import { loadAgentConfig } from "../agent/config.js";
import { echoHandler, failHandler, sleepHandler } from "../agent/handlers/builtins.js";
import { defineHandler } from "../agent/handlers/registry.js";
import { Executor } from "../agent/runner/executor.js";
import { type AgentLog, hostNow, LOOP_GAP_MS } from "./coordinator-params.js";

const [configPath, logPath] = process.argv.slice(2);
if (!configPath || !logPath) {
  process.stderr.write("usage: coordinator-agent CONFIG_FILE LOG_FILE\n");
  process.exit(2);
}
const config = loadAgentConfig(configPath);
const runs: AgentLog["runs"] = [];
const received: AgentLog["received"] = [];
const loopGaps: AgentLog["loopGaps"] = [];

// When each dispatch reached the executor (after decoding, before journaling): tells a start
// that was late because its dispatch came late from one that waited on this agent.
const seenIds = new Set<string>();
const dispatchOriginal = Executor.prototype.dispatch;
Executor.prototype.dispatch = function (this: Executor, d) {
  if (!seenIds.has(d.executionId)) {
    seenIds.add(d.executionId);
    received.push([d.executionId, hostNow()]);
  }
  dispatchOriginal.call(this, d);
};

// Event-loop gaps: an interval that runs much later than its period after its last turn. Its
// period is the gap threshold, so it wakes the agent no more than it must to see such a gap.
let lastTurn = hostNow();
setInterval(() => {
  const now = hostNow();
  const gap = now - lastTurn - LOOP_GAP_MS;
  if (gap > LOOP_GAP_MS) loopGaps.push([now, gap]);
  lastTurn = now;
}, LOOP_GAP_MS).unref();

/**
 * Date.now() − hostNow() just after Date.now() ticks: the largest difference over 20 ms of
 * readings (Date.now() truncates to whole ms), i.e. how far apart the two clocks are. Readings
 * that miss the moment after a tick (the thread preempted on a busy machine) only make it more
 * negative, so the spin is long enough to catch several ticks.
 */
function clockAlignment(): number {
  let best = Number.NEGATIVE_INFINITY;
  const end = performance.now() + 20;
  while (performance.now() < end) best = Math.max(best, Date.now() - hostNow());
  return best;
}
const alignmentAtStart = clockAlignment();

/** The built-in echo (same params, same result), plus one entry in `runs`. */
const timedEcho = defineHandler("echo", echoHandler.params, async (ctx, params) => {
  runs.push([ctx.executionId, ctx.round, hostNow()]);
  return { echo: params };
});

const agent = new Agent(config, {
  handlers: [timedEcho, sleepHandler, failHandler],
  log: (level, msg) => {
    if (level === "warn" || level === "error") process.stderr.write(`${level}: ${msg}\n`);
  },
});
agent.start();

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  agent
    .stop()
    .catch((err: unknown) => process.stderr.write(`stop failed: ${(err as Error).message}\n`))
    .finally(() => {
      const log: AgentLog = {
        agentId: config.agentId,
        clockAlignment: [alignmentAtStart, clockAlignment()],
        runs,
        received,
        loopGaps,
        // biome-ignore lint/suspicious/noExplicitAny: a private field, read for the bench's figures
        checkpoints: (agent as any).journal?.checkpointer?.stats,
      };
      writeFileSync(logPath, JSON.stringify(log));
      process.exit(0);
    });
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
