import { readdirSync, readFileSync } from "node:fs";
import { isSameProcessAlive } from "../process-info.js";

/** What recovery needs of the operating system's processes; injectable for tests. */
export interface ProcessControl {
  /** The process recorded as (pid, startTime) is alive (see isSameProcessAlive). */
  alive(pid: number, startTime: string | undefined): boolean;
  /** Some process of group `pgid` is alive (zombies, dead but not yet reaped, do not count). */
  groupAlive(pgid: number): boolean;
  /** Signals every process of group `pgid`; a group already gone is not an error. */
  signalGroup(pgid: number, signal: NodeJS.Signals): void;
  /** Blocks for `ms` (only at start, before the agent connects; see stopGroup). */
  sleep(ms: number): void;
}

/** Live members of a process group, from /proc; undefined where there is no /proc. */
function groupMembers(pgid: number): number[] | undefined {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return undefined;
  }
  const out: number[] = [];
  for (const name of entries) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    // After the name: state (field 3), ppid (4), pgrp (5).
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(pgrp) === pgid && state !== "Z" && state !== "X") out.push(Number(name));
  }
  return out;
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** The real processes of this machine. */
export const systemProcesses: ProcessControl = {
  alive: isSameProcessAlive,
  groupAlive(pgid) {
    const members = groupMembers(pgid);
    if (members !== undefined) return members.length > 0;
    try {
      process.kill(-pgid, 0);
      return true;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === "EPERM";
    }
  },
  signalGroup(pgid, signal) {
    try {
      process.kill(-pgid, signal);
    } catch {
      // Gone already.
    }
  },
  sleep(ms) {
    Atomics.wait(sleeper, 0, 0, ms);
  },
};

/** After SIGTERM, how long a surviving group has to end before SIGKILL. */
export const RECOVER_TERM_WAIT_MS = 2_000;
/** After SIGKILL, how long to wait for the group to be gone. */
export const RECOVER_KILL_WAIT_MS = 1_000;

function waitGone(pgid: number, control: ProcessControl, ms: number): boolean {
  for (let waited = 0; ; waited += 20) {
    if (!control.groupAlive(pgid)) return true;
    if (waited >= ms) return false;
    control.sleep(20);
  }
}

/**
 * Stops process group `pgid`: SIGTERM, then SIGKILL if it is still there after
 * {@link RECOVER_TERM_WAIT_MS}. Synchronous on purpose: it runs while the agent recovers its
 * journal at start, before it connects or fires anything, and the interrupted report must not go
 * out while the side effect it is about may still be happening.
 */
export function stopGroup(
  pgid: number,
  control: ProcessControl = systemProcesses,
): "terminated" | "killed" | "survived" {
  control.signalGroup(pgid, "SIGTERM");
  if (waitGone(pgid, control, RECOVER_TERM_WAIT_MS)) return "terminated";
  control.signalGroup(pgid, "SIGKILL");
  return waitGone(pgid, control, RECOVER_KILL_WAIT_MS) ? "killed" : "survived";
}
