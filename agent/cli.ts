/**
 * The entry point of a bundled agent on a device: `node agent.mjs --config FILE`. The command
 * line itself is agent/command-line.ts, which `ax agent start` runs too.
 */
import { onCheckpointThread } from "../shared/wal-checkpoint.js";
import { agentCommandLine } from "./command-line.js";
import { PARTS } from "./parts/included.js";

// The journal's checkpoint thread imports this file for better-sqlite3 (agent/bundle-runtime.ts);
// there it must not start a second agent.
if (!onCheckpointThread()) {
  process.exitCode = await agentCommandLine(process.argv.slice(2), {
    program: "agent",
    command: "agent",
    invocation: "node agent.mjs",
    version: PARTS.bundle?.version ?? "dev",
    entryUrl: import.meta.url,
  });
}

export { default as Database } from "better-sqlite3";
