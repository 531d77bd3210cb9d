import { readFileSync } from "node:fs";

/**
 * When process `pid` started, as the kernel counts it (`/proc/<pid>/stat` field 22, clock ticks
 * since boot), or undefined where there is no /proc or no such process. A pid is reused once its
 * process is gone; the pair (pid, start time) is not, so it tells "still that process" apart from
 * "another one that got its number".
 */
export function processStartTime(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // Field 2, the command name, is in parentheses and may hold spaces and parentheses itself.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return rest[19]; // field 22: fields from 3 on follow the name
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
  if (startTime === undefined) return true;
  const now = processStartTime(pid);
  return now === undefined || now === startTime;
}
