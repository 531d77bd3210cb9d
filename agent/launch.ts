/**
 * The launcher of an A/B agent install (docs/rollouts.md, "Agent updates"): systemd starts
 * `node ROOT/launch.mjs --config FILE`; it decides which slot runs (going back to the previous
 * one after a failed update), watches a new version's health window, then runs the agent in this
 * same process. It stays the one installed first: an update never replaces what rolls it back.
 */
import { realpathSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { decideLaunch, healthWindowEnded } from "./update/launcher.js";
import { ROOT_ENV } from "./update/state.js";

/** Exit status asking systemd for a restart (EX_TEMPFAIL). */
const RESTART = 75;

function log(level: "info" | "warn" | "error", msg: string): void {
  process.stderr.write(
    `${JSON.stringify({ time: new Date().toISOString(), level, component: "launcher", msg })}\n`,
  );
}

const root = dirname(fileURLToPath(import.meta.url));
const launch = decideLaunch(root, Date.now());
if (launch.note) log(launch.watch ? "info" : "warn", launch.note);
if (launch.agentFile === undefined) {
  log("error", `no agent to start in ${root}: neither current/agent.mjs nor agent.mjs`);
  process.exit(78);
}
const watched = launch.watch;
if (watched) {
  setTimeout(() => {
    if (healthWindowEnded(root, watched, Date.now())) {
      log(
        "warn",
        `update to ${watched.version} did not register in time; going back to ${watched.fromVersion}`,
      );
      process.exit(RESTART);
    }
  }, watched.healthWindowMs).unref();
}
process.env[ROOT_ENV] = root;
// The slot's real path: the agent finds its native addon and manifest beside itself.
await import(pathToFileURL(realpathSync(launch.agentFile)).href);
