import {
  closeSync,
  fsyncSync,
  openSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";

/*
 * The A/B install of an agent that updates itself (docs/rollouts.md, "Agent updates"):
 *
 *   ROOT/launch.mjs    the launcher systemd starts; it picks the slot and rolls back
 *   ROOT/a/, ROOT/b/   two bundle folders (agent.mjs, its native addon, manifest.json, …)
 *   ROOT/current       a symlink to the slot that runs: `a` or `b`
 *   ROOT/update.json   the update in progress (trial) or the last one's outcome
 *   ROOT/downloads/    archives being downloaded, resumed after a restart
 *
 * Every change is made so that a power cut at any moment leaves either the old or the new
 * state on disk: files are written beside their final name, fsynced, renamed over it, and the
 * folder fsynced.
 */

export type Slot = "a" | "b";

export const CURRENT_LINK = "current";
export const STATE_FILE = "update.json";
export const DOWNLOADS_DIR = "downloads";
/** The environment variable the launcher sets to the install root for the agent it starts. */
export const ROOT_ENV = "AX_AGENT_ROOT";

export { MAX_TRIAL_STARTS } from "../../shared/update-limits.js";

/** An update switched to but not yet confirmed: the new agent has not registered yet. */
export interface UpdateTrial {
  executionId: string;
  round: number;
  /** The slot it runs from, and the one to go back to. */
  slot: Slot;
  previous: Slot;
  /** The version installed, and the one it replaced. */
  version: string;
  fromVersion: string;
  /** sha256 of the bundle archive. */
  sha256: string;
  healthWindowMs: number;
  /** Starts of the new version so far (the launcher counts them). */
  starts: number;
}

/** How the last update ended, for the agent to report once it is up (then kept as history). */
export interface UpdateOutcome {
  executionId: string;
  round: number;
  ok: boolean;
  /** The version that runs now, and the one the update installed. */
  running: string;
  installed: string;
  message: string;
  /** When it was decided, local ms. */
  at: number;
}

export interface UpdateState {
  trial?: UpdateTrial;
  outcome?: UpdateOutcome;
}

export function otherSlot(slot: Slot): Slot {
  return slot === "a" ? "b" : "a";
}

/** The slot `current` points at, or undefined when the install has no valid link. */
export function currentSlot(root: string): Slot | undefined {
  try {
    const target = readlinkSync(join(root, CURRENT_LINK));
    return target === "a" || target === "b" ? target : undefined;
  } catch {
    return undefined;
  }
}

/** The state file, or an empty state when there is none (or it cannot be read). */
export function readState(root: string): UpdateState {
  try {
    const raw = JSON.parse(readFileSync(join(root, STATE_FILE), "utf8")) as UpdateState;
    return typeof raw === "object" && raw !== null ? raw : {};
  } catch {
    return {};
  }
}

/** fsyncs a folder, so a rename in it survives a power cut. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Writes `data` to `path` durably: beside it, fsynced, renamed over it, folder fsynced. */
export function writeDurably(dir: string, name: string, data: string | Buffer, mode = 0o644): void {
  const tmp = join(dir, `.${name}.tmp`);
  const fd = openSync(tmp, "w", mode);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data) : data;
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(dir, name));
  syncDir(dir);
}

export function writeState(root: string, state: UpdateState): void {
  writeDurably(root, STATE_FILE, `${JSON.stringify(state, null, 2)}\n`);
}

/** Points `current` at `slot` in one rename: the link is either the old one or the new one. */
export function switchTo(root: string, slot: Slot): void {
  const tmp = join(root, `.${CURRENT_LINK}.tmp`);
  rmSync(tmp, { force: true });
  symlinkSync(slot, tmp);
  renameSync(tmp, join(root, CURRENT_LINK));
  syncDir(root);
}

/**
 * Goes back to the trial's previous slot and records why, for the old agent to report. Used by
 * the launcher (crash loop, no registration in time) and after an interrupted switch.
 */
export function rollBack(root: string, trial: UpdateTrial, why: string, now: number): UpdateState {
  if (currentSlot(root) !== trial.previous) switchTo(root, trial.previous);
  const state: UpdateState = {
    outcome: {
      executionId: trial.executionId,
      round: trial.round,
      ok: false,
      running: trial.fromVersion,
      installed: trial.version,
      message: `update to ${trial.version} rolled back to ${trial.fromVersion}: ${why}`,
      at: now,
    },
  };
  writeState(root, state);
  return state;
}
