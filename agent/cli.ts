/**
 * The agent's own entry point, for a bundled agent on a device: `node agent.mjs --config FILE`.
 * (`ax agent start --config FILE` does the same from the full package.)
 */
import { parseArgs } from "node:util";
import { isAxError } from "../shared/errors.js";
import { onCheckpointThread } from "../shared/wal-checkpoint.js";
import { bundleRuntime } from "./bundle-runtime.js";
import { loadAgentConfig } from "./config.js";
import { jsonLogger, runAgent } from "./main.js";
import { PARTS } from "./parts/included.js";

async function cli(argv: string[]): Promise<number> {
  try {
    const { values } = parseArgs({
      args: argv,
      options: { config: { type: "string" } },
      strict: true,
    });
    if (!values.config) {
      process.stderr.write("usage: agent --config FILE\n");
      return 2;
    }
    const config = loadAgentConfig(values.config);
    await runAgent(config, jsonLogger(config.agentId), bundleRuntime(PARTS, import.meta.url));
    return 0;
  } catch (err) {
    process.stderr.write(
      `agent: ${isAxError(err) ? `${err.code}: ${err.message}` : String((err as Error).stack ?? err)}\n`,
    );
    return isAxError(err) ? 1 : 2;
  }
}

// The journal's checkpoint thread imports this file for better-sqlite3 (agent/bundle-runtime.ts);
// there it must not start a second agent.
if (!onCheckpointThread()) process.exitCode = await cli(process.argv.slice(2));

export { default as Database } from "better-sqlite3";
