/**
 * The launcher of an A/B agent install (docs/rollouts.md, "Agent updates"): systemd starts
 * `node ROOT/launch.mjs --config FILE`; it decides which slot runs (going back to the previous
 * one after a failed update), watches a new version's health window (from a worker thread), then
 * runs the agent in this same process. It stays the one installed first: an update never
 * replaces what rolls it back.
 */
import { realpathSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { isMainThread, Worker, workerData } from "node:worker_threads";
import { decideLaunch, healthWindowEnded } from "./update/launcher.js";
import { ROOT_ENV, type UpdateTrial } from "./update/state.js";

/** A log line on stderr, written at once (from the watchdog too, whose stream would wait). */
function log(level: "info" | "warn" | "error", msg: string): void {
  writeSync(
    2,
    `${JSON.stringify({ time: new Date().toISOString(), level, component: "launcher", msg })}\n`,
  );
}

if (isMainThread) {
  const root = dirname(fileURLToPath(import.meta.url));
  const launch = decideLaunch(root, Date.now());
  if (launch.note) log(launch.watch ? "info" : "warn", launch.note);
  if (launch.agentFile === undefined) {
    log("error", `no agent to start in ${root}: neither current/agent.mjs nor agent.mjs`);
    process.exit(78);
  }
  if (launch.watch) {
    // The health window is watched from a thread of its own: the agent runs on this thread's
    // event loop, and a version that blocks it (a busy loop) would stop a timer here from firing.
    new Worker(new URL(import.meta.url), { workerData: { root, watched: launch.watch } }).unref();
  }
  process.env[ROOT_ENV] = root;
  // The slot's real path: the agent finds its native addon and manifest beside itself.
  await import(pathToFileURL(realpathSync(launch.agentFile)).href);
} else {
  // The watchdog: at the end of the window, a trial still open goes back, and the whole process
  // is stopped (the agent's thread may not answer anything) for systemd to start the old version.
  const { root, watched } = workerData as { root: string; watched: UpdateTrial };
  setTimeout(() => {
    if (healthWindowEnded(root, watched, Date.now())) {
      log(
        "warn",
        `update to ${watched.version} did not register in time; going back to ${watched.fromVersion}`,
      );
      process.kill(process.pid, "SIGKILL");
    }
  }, watched.healthWindowMs);
}
