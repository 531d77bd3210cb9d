import { readFileSync } from "node:fs";
import type { ChildRecord, CommandRow, ReportBody } from "../journal/journal.js";
import { type ProcessControl, stopGroup, systemProcesses } from "./process-group.js";

type Finished = Extract<ReportBody, { type: "finished" }>;

/** What recovery learned of a command found `running` in the journal after a restart. */
export interface Settled {
  body: Finished;
  /** Process groups that had survived the agent and were stopped now. */
  stopped: { pid: number; how: string }[];
}

/**
 * Decides, and where needed makes true, the end of a command that was running when the agent
 * died (issue 15, item 4):
 *
 * - its handler never began (the launch mark is missing, on the same boot) → `interrupted`,
 *   `before_handler`: nothing was done;
 * - a child it started is still alive (same pid and start time) → its process group is stopped
 *   (SIGTERM, then SIGKILL) before anything is reported → `interrupted`, `in_handler`;
 * - a child died while nobody watched (no exit journaled): how it ended as its exit file says
 *   (exec's wrapper writes it as the child ends), else → `interrupted`, `in_handler`;
 * - every child's exit was journaled → what it did: exit 0 `succeeded`, otherwise `failed`
 *   (retryable), its output lost; a child the agent itself stopped (shutdown) → `interrupted`;
 * - otherwise (it began, no children) → `interrupted`, `in_handler`.
 *
 * After a reboot nothing unfsynced is trusted and no pid is signalled: the reboot ended every
 * child, and a recorded pid may now be anyone's.
 */
export function settleRunning(
  row: CommandRow,
  journaled: readonly ChildRecord[],
  sameBoot: boolean,
  finishedAt: number,
  control: ProcessControl = systemProcesses,
  exitFile?: string,
): Settled {
  const base = {
    type: "finished" as const,
    executionId: row.executionId,
    round: row.round,
    finishedAt,
    ...(row.startedAt === null ? {} : { startedAt: row.startedAt }),
  };
  const interrupted = (phase: "before_handler" | "in_handler", message: string): Finished => ({
    ...base,
    outcome: "interrupted",
    interruptedPhase: phase,
    retryable: true,
    message,
  });
  const children = journaled.map((c) => ({ ...c }));
  if (children.length === 0) {
    if (sameBoot && !row.began) {
      return {
        body: interrupted(
          "before_handler",
          "the agent stopped after journaling this start, before its handler began: nothing ran; not run again",
        ),
        stopped: [],
      };
    }
    return {
      body: interrupted(
        "in_handler",
        "the agent stopped while this was running; its effects may have happened; not run again",
      ),
      stopped: [],
    };
  }
  const stopped: { pid: number; how: string }[] = [];
  const unobserved: number[] = [];
  for (const c of children) {
    if (c.exit !== undefined) continue;
    // The leader alive as recorded, or gone with members of its group left (a pid that is
    // still some group's id is never given to a new process).
    const survived =
      sameBoot &&
      (control.alive(c.pid, c.startTime) ||
        (!control.alive(c.pid, undefined) && control.groupAlive(c.pid)));
    if (survived) {
      stopped.push({ pid: c.pid, how: stopGroup(c.pid, control) });
      continue;
    }
    // Read once it is known not to be alive, so that an end in between is not missed.
    const code = sameBoot ? exitIn(exitFile, c.pid) : undefined;
    if (code === undefined) unobserved.push(c.pid);
    else c.exit = { code, signal: null, stoppedByAgent: false, at: finishedAt };
  }
  if (stopped.length > 0) {
    const what = stopped.map((s) => `pid ${s.pid} ${s.how}`).join(", ");
    return {
      body: interrupted(
        "in_handler",
        `the agent stopped while this was running; its child process group outlived it and was stopped now (${what}); not run again`,
      ),
      stopped,
    };
  }
  if (unobserved.length > 0) {
    return {
      body: interrupted(
        "in_handler",
        `the agent stopped while this was running; its child (pid ${unobserved.join(", ")}) ended while nobody watched, how is unknown; not run again`,
      ),
      stopped,
    };
  }
  const exits = children.map((c) => ({
    pid: c.pid,
    ...(c.exit as NonNullable<ChildRecord["exit"]>),
  }));
  const describe = (e: (typeof exits)[number]) =>
    e.code === null
      ? `pid ${e.pid} was killed by ${e.signal}`
      : `pid ${e.pid} exited with code ${e.code}`;
  const byAgent = exits.filter((e) => e.stoppedByAgent);
  if (byAgent.length > 0) {
    return {
      body: interrupted(
        "in_handler",
        `the agent stopped its child as it shut down (${byAgent.map(describe).join(", ")}); not run again`,
      ),
      stopped,
    };
  }
  const last = exits[exits.length - 1] as (typeof exits)[number];
  if (exits.every((e) => e.code === 0)) {
    return {
      body: {
        ...base,
        outcome: "succeeded",
        retryable: false,
        message: `ok: its child ${describe(last)} before the agent stopped (its output is lost)`,
        result: { exitCode: 0, recovered: true },
      },
      stopped,
    };
  }
  const failed = exits.find((e) => e.code !== 0) ?? last;
  return {
    body: {
      ...base,
      outcome: "failed",
      retryable: true,
      message: `its child ${describe(failed)} before the agent stopped (its output is lost)`,
      result: { exitCode: failed.code, signal: failed.signal, recovered: true },
    },
    stopped,
  };
}

/** The status an exit file (lines of `pid status`) holds for `pid`, if any. */
function exitIn(file: string | undefined, pid: number): number | undefined {
  try {
    const m = readFileSync(file as string, "utf8").match(new RegExp(`^${pid} (\\d+)$`, "m"));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined; // no file (no exit file given, or none written)
  }
}
