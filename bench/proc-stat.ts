/**
 * Processes' CPU time from /proc/PID/stat, for the benches: one process, or a set of processes
 * found by their parent (PostgreSQL's server processes, children of the postmaster).
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** The fields of /proc/PID/stat the benches read. */
export interface ProcStat {
  pid: number;
  /** The command name (at most 15 bytes), without its parentheses. */
  comm: string;
  ppid: number;
  /** utime + stime, in clock ticks. */
  ticks: number;
}

/**
 * Parses one /proc/PID/stat line. The command name is in parentheses and may itself hold spaces
 * and parentheses, so the fields after it are found from the last ")" (proc(5)); utime and stime
 * are fields 14 and 15 of the line, 12 and 13 after the name.
 */
export function parseProcStat(line: string): ProcStat | undefined {
  const open = line.indexOf("(");
  const close = line.lastIndexOf(")");
  if (open < 0 || close < open) return undefined;
  const rest = line
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const pid = Number(line.slice(0, open).trim());
  const ppid = Number(rest[1]);
  const ticks = Number(rest[11]) + Number(rest[12]);
  if (!Number.isInteger(pid) || !Number.isInteger(ppid) || !Number.isFinite(ticks)) {
    return undefined;
  }
  return { pid, comm: line.slice(open + 1, close), ppid, ticks };
}

let clockTicks: number | undefined;

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 when that fails). */
export function clockTicksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      const n = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
      clockTicks = Number.isInteger(n) && n > 0 ? n : 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** /proc/PID/stat of one process, or undefined when it is gone. */
export function readProcStat(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

/** Every process now running, as /proc/PID/stat says (those that end while read are left out). */
export function allProcStats(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const s = readProcStat(Number(name));
    if (s) out.push(s);
  }
  return out;
}

/**
 * PostgreSQL's server processes among `stats`: each process named `postgres` whose parent is not
 * (the postmaster), and its children (backends, the checkpointer, the WAL writer, autovacuum…),
 * which name themselves `postgres` too.
 */
export function postgresProcesses(stats: ProcStat[]): ProcStat[] {
  const named = stats.filter((s) => s.comm === "postgres");
  const pids = new Set(named.map((s) => s.pid));
  const postmasters = new Set(named.filter((s) => !pids.has(s.ppid)).map((s) => s.pid));
  return stats.filter((s) => postmasters.has(s.pid) || postmasters.has(s.ppid));
}

/**
 * CPU time of a set of processes that come and go (a pool's backends, autovacuum workers), ms:
 * each process counts from when it was first seen (or from 0 when it started after the first
 * reading), to its last reading, so one that ended in between keeps what it had used.
 */
export class GroupCpu {
  private readonly first = new Map<number, number>();
  private readonly last = new Map<number, number>();
  private started = false;

  /** Takes a reading of `procs` (the group's members now). */
  add(procs: ProcStat[]): void {
    for (const p of procs) {
      if (!this.first.has(p.pid)) this.first.set(p.pid, this.started ? 0 : p.ticks);
      this.last.set(p.pid, p.ticks);
    }
    this.started = true;
  }

  /** CPU time since the first reading, ms. */
  ms(): number {
    let ticks = 0;
    for (const [pid, t] of this.last) ticks += t - (this.first.get(pid) ?? t);
    return (ticks * 1000) / clockTicksPerSecond();
  }

  /** Processes seen in all. */
  get processes(): number {
    return this.last.size;
  }
}
