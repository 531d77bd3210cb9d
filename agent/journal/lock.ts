import { linkSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { AxError } from "../../shared/errors.js";
import { isSameProcessAlive, processStartTime } from "../process-info.js";

/** Who holds a journal: the lock file's content. */
export interface JournalHolder {
  pid: number;
  /** The holder's start time (see processStartTime); absent where /proc is missing. */
  startTime?: string | undefined;
  agentId: string;
}

/** An exclusive hold on one journal file, for the life of one agent process. */
export interface JournalLock {
  readonly path: string;
  /** Removes the lock file, if it is still this process's. Safe to call more than once. */
  release(): void;
}

function readHolder(path: string): JournalHolder | undefined {
  try {
    const v = JSON.parse(readFileSync(path, "utf8")) as Partial<JournalHolder>;
    if (typeof v.pid !== "number" || typeof v.agentId !== "string") return undefined;
    return { pid: v.pid, startTime: v.startTime, agentId: v.agentId };
  } catch {
    return undefined;
  }
}

/**
 * Takes the lock of the journal at `journalPath`: a file `<journalPath>.lock` naming this
 * process (pid and start time) and `agentId`. Two agents sharing one journal each recover the
 * other's running commands as interrupted (issue 15), so a second one must not start.
 *
 * A lock whose holder is alive throws AX_AGENT_JOURNAL_LOCKED naming the file, the holder's pid
 * and its agentId. A lock left by a process that is gone (kill -9, power loss) or whose pid now
 * belongs to another process is stale and taken over. The file is created whole under its final
 * name (written beside it, then hard-linked), so a second agent starting at the same moment never
 * reads a half-written one as stale.
 */
export function acquireJournalLock(journalPath: string, agentId: string): JournalLock {
  const path = `${journalPath}.lock`;
  const me: JournalHolder = { pid: process.pid, startTime: processStartTime(process.pid), agentId };
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(me)}\n`);
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        linkSync(temp, path);
        return lockOf(path, me);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") {
          throw new AxError(
            "AX_STORE_FAILED",
            `journal ${journalPath}: cannot create its lock ${path}: ${(err as Error).message}`,
            { cause: err },
          );
        }
      }
      const holder = readHolder(path);
      if (holder && isSameProcessAlive(holder.pid, holder.startTime)) {
        throw new AxError(
          "AX_AGENT_JOURNAL_LOCKED",
          `journal ${journalPath} is in use by another live process: pid ${holder.pid} (agent "${holder.agentId}"), which holds ${path}. One journal serves one agent process: stop that one, or give this agent its own journal.path`,
          { context: { path: journalPath, lock: path, holder } },
        );
      }
      // Stale: its holder is gone. Take it over (if another starter removes it first, fine).
      try {
        unlinkSync(path);
      } catch {
        // Already gone.
      }
    }
    throw new AxError(
      "AX_AGENT_JOURNAL_LOCKED",
      `journal ${journalPath}: another process keeps taking its lock ${path}; try again`,
      { context: { path: journalPath, lock: path } },
    );
  } finally {
    try {
      unlinkSync(temp);
    } catch {
      // Nothing to tidy.
    }
  }
}

function lockOf(path: string, me: JournalHolder): JournalLock {
  let held = true;
  return {
    path,
    release() {
      if (!held) return;
      held = false;
      const holder = readHolder(path);
      if (holder?.pid !== me.pid || holder.startTime !== me.startTime) return; // taken over
      try {
        unlinkSync(path);
      } catch {
        // Already gone.
      }
    },
  };
}
