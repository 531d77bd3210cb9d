import { existsSync } from "node:fs";
import { join } from "node:path";
import {
  CURRENT_LINK,
  currentSlot,
  MAX_TRIAL_STARTS,
  readState,
  rollBack,
  type UpdateTrial,
  writeState,
} from "./state.js";

/** The agent file of a bundle folder. */
export const AGENT_FILE = "agent.mjs";

/** What the launcher starts, and the trial it must watch (if one is starting). */
export interface Launch {
  /** The agent file to import; undefined when the install has none to start. */
  agentFile: string | undefined;
  /** A new version on trial: it must register within its health window. */
  watch?: UpdateTrial;
  /** What was decided, for the log. */
  note?: string;
}

/**
 * Decides what to start, at every start of the agent's process (docs/rollouts.md, "What happens
 * on failure"). With an update on trial:
 *
 * - `current` does not point at the new slot: the power went (or the agent died) between
 *   recording the trial and switching; the old version stays, and the update is recorded failed;
 * - the new version has started MAX_TRIAL_STARTS times without registering (a crash loop, or a
 *   config it refuses): `current` goes back to the previous slot;
 * - otherwise the new version starts once more, counted, and is watched.
 *
 * Nothing here needs the network or the coordinator.
 */
export function decideLaunch(root: string, now: number): Launch {
  const state = readState(root);
  let note: string | undefined;
  let watch: UpdateTrial | undefined;
  const trial = state.trial;
  if (trial) {
    if (currentSlot(root) !== trial.slot) {
      const s = rollBack(root, trial, "the update was interrupted before its switch", now);
      note = s.outcome?.message;
    } else if (trial.starts >= MAX_TRIAL_STARTS) {
      const s = rollBack(
        root,
        trial,
        `it started ${trial.starts} times without registering with the coordinator`,
        now,
      );
      note = s.outcome?.message;
    } else {
      watch = { ...trial, starts: trial.starts + 1 };
      writeState(root, { ...state, trial: watch });
      note = `starting ${trial.version} on trial (start ${watch.starts} of ${MAX_TRIAL_STARTS}, ${trial.healthWindowMs} ms to register)`;
    }
  }
  const slot = currentSlot(root);
  if (slot !== undefined) {
    return {
      agentFile: join(root, CURRENT_LINK, AGENT_FILE),
      ...(watch ? { watch } : {}),
      ...(note ? { note } : {}),
    };
  }
  // A flat install (the bundle's files in ROOT itself): it runs, but cannot update itself.
  const flat = join(root, AGENT_FILE);
  return { agentFile: existsSync(flat) ? flat : undefined, ...(note ? { note } : {}) };
}

/**
 * At the end of a trial's health window: if the trial is still open (the new agent never
 * confirmed it by registering), go back. True when it went back: the process must then exit so
 * that systemd starts the previous version.
 */
export function healthWindowEnded(root: string, watched: UpdateTrial, now: number): boolean {
  const trial = readState(root).trial;
  if (trial?.executionId !== watched.executionId || trial.round !== watched.round) return false;
  rollBack(root, trial, `it did not register within ${trial.healthWindowMs} ms of starting`, now);
  return true;
}
