import { readFileSync } from "node:fs";

/**
 * When process `pid` started, as the kernel counts it (`/proc/<pid>/stat` field 22, clock ticks
 * since boot), or undefined where there is no /proc or no such process. A pid is reused once its
 * process is gone; the pair (pid, start time) is not, so it tells "still that process" apart from
 * "another one that got its number".
 */
export function processStartTime(pid: number): string | undefined {
  return statFields(pid)?.[19]; // field 22: fields from 3 on follow the name
}

/** `/proc/<pid>/stat` from field 3 (the state) on; undefined without /proc or such a process. */
function statFields(pid: number): string[] | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // Field 2, the command name, is in parentheses and may hold spaces and parentheses itself.
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** True while a process with this pid exists (one we may not signal counts). */
export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * True while the process recorded as (`pid`, `startTime`) is alive: a process with that pid
 * exists and, where start times can be read, started when it was recorded to.
 */
export function isSameProcessAlive(pid: number, startTime: string | undefined): boolean {
  if (!pidExists(pid)) return false;
  const f = statFields(pid);
  if (f === undefined) return true;
  // A zombie has ended: what is left is its exit status, for a parent that may no longer be
  // this agent (where nothing reaps orphans, a container without an init, it stays).
  if (f[0] === "Z" || f[0] === "X") return false;
  return startTime === undefined || f[19] === startTime;
}
