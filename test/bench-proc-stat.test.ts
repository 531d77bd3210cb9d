import { describe, expect, it } from "vitest";
import {
  clockTicksPerSecond,
  GroupCpu,
  type ProcStat,
  parseProcStat,
  postgresProcesses,
} from "../bench/proc-stat.js";

/** bench/proc-stat.ts: what the coordinator bench reads of /proc/PID/stat. */
describe("bench /proc/PID/stat reading", () => {
  it("finds utime + stime and the parent after a command name holding spaces and parentheses", () => {
    const line =
      "4242 (we (ird) name) S 4000 4242 4242 0 -1 4194560 151 0 0 0 1234 56 0 0 20 0 1 0 987 10240 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
    expect(parseProcStat(line)).toEqual({
      pid: 4242,
      comm: "we (ird) name",
      ppid: 4000,
      ticks: 1290,
    });
    expect(parseProcStat("garbage")).toBeUndefined();
  });

  it("takes the postmaster and its children, not another process named postgres", () => {
    const p = (pid: number, ppid: number, comm = "postgres"): ProcStat => ({
      pid,
      ppid,
      comm,
      ticks: 0,
    });
    const found = postgresProcesses([
      p(1, 0, "systemd"),
      p(100, 1),
      p(101, 100),
      p(102, 100),
      p(200, 1, "node"),
      p(201, 200, "postgres"),
      p(202, 200, "psql"),
    ]);
    // 201 is named postgres with a parent that is not: a second server, counted too.
    expect(found.map((s) => s.pid)).toEqual([100, 101, 102, 201]);
  });

  it("keeps the CPU of a process that ended and counts one that started from zero", () => {
    const g = new GroupCpu();
    g.add([{ pid: 1, ppid: 0, comm: "postgres", ticks: 500 }]);
    g.add([
      { pid: 1, ppid: 0, comm: "postgres", ticks: 510 },
      { pid: 2, ppid: 1, comm: "postgres", ticks: 30 },
    ]);
    g.add([{ pid: 1, ppid: 0, comm: "postgres", ticks: 520 }]);
    // 20 ticks of the first, all 30 of the second.
    expect(g.ms()).toBe((50 * 1000) / clockTicksPerSecond());
    expect(g.processes).toBe(2);
  });
});
