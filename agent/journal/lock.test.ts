import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { AxError } from "../../shared/errors.js";
import { journalPath, parseAgentConfig } from "../config.js";
import { processStartTime } from "../process-info.js";
import { Journal } from "./journal.js";

/** One journal, one agent: the lock beside the file and the agentId inside it (issue 15, item 6). */

const dirs: string[] = [];
const journals: Journal[] = [];
afterEach(() => {
  for (const j of journals.splice(0)) j.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "ax-lock-"));
  dirs.push(dir);
  return join(dir, "journal.sqlite");
}

function open(path: string, agentId: string): Journal {
  const j = new Journal({ path, agentId, maxOpen: 10, now: () => 1_700_000_000_000 });
  journals.push(j);
  return j;
}

function thrown(fn: () => unknown): AxError {
  try {
    fn();
  } catch (err) {
    if (err instanceof AxError) return err;
    throw err;
  }
  throw new Error("did not throw");
}

/** The pid of a process that has exited (so its number names nobody, or somebody else). */
function deadPid(): number {
  const r = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]);
  return Number(r.stdout.toString());
}

describe("journal lock", () => {
  it("refuses a second opener while the first holds it, naming the file, the holder's pid and agentId", () => {
    const path = tempFile();
    const first = open(path, "dev-1");
    const holder = JSON.parse(readFileSync(`${path}.lock`, "utf8"));
    expect(holder).toMatchObject({ pid: process.pid, agentId: "dev-1" });
    const err = thrown(() => open(path, "dev-2"));
    expect(err.code).toBe("AX_AGENT_JOURNAL_LOCKED");
    expect(err.message).toContain(`journal ${path} is in use by another live process`);
    expect(err.message).toContain(`pid ${process.pid} (agent "dev-1")`);
    // The refused opener left the holder's lock alone; once the holder closes, the lock is gone.
    expect(existsSync(`${path}.lock`)).toBe(true);
    first.close();
    journals.splice(journals.indexOf(first), 1);
    expect(existsSync(`${path}.lock`)).toBe(false);
    expect(open(path, "dev-1").journalId).toBe(first.journalId);
  });

  it("takes over a stale lock: its holder is gone, or its pid now belongs to another process", () => {
    const path = tempFile();
    writeFileSync(`${path}.lock`, JSON.stringify({ pid: deadPid(), agentId: "dev-1" }));
    const j = open(path, "dev-1");
    expect(JSON.parse(readFileSync(`${path}.lock`, "utf8")).pid).toBe(process.pid);
    j.close();
    journals.splice(journals.indexOf(j), 1);
    // A live pid (this very process) with another start time: the recorded holder is gone.
    if (processStartTime(process.pid) !== undefined) {
      writeFileSync(
        `${path}.lock`,
        JSON.stringify({ pid: process.pid, startTime: "1", agentId: "dev-1" }),
      );
      open(path, "dev-1");
      expect(JSON.parse(readFileSync(`${path}.lock`, "utf8")).startTime).toBe(
        processStartTime(process.pid),
      );
    }
  });

  it("takes over a lock file that holds no holder (cut short by a power loss)", () => {
    const path = tempFile();
    writeFileSync(`${path}.lock`, "");
    open(path, "dev-1");
    expect(JSON.parse(readFileSync(`${path}.lock`, "utf8")).agentId).toBe("dev-1");
  });
});

describe("journal owner", () => {
  it("refuses a journal another agentId created, naming both ids and the file", () => {
    const path = tempFile();
    const j = open(path, "dev-1");
    j.close();
    journals.splice(journals.indexOf(j), 1);
    const err = thrown(() => open(path, "dev-2"));
    expect(err.code).toBe("AX_AGENT_JOURNAL_FOREIGN");
    expect(err.message).toBe(
      `journal ${path} belongs to agent "dev-1", not to this agent "dev-2": each agent needs its own journal (set journal.path, or leave it out for the per-agent default)`,
    );
    // Refused without keeping its lock: the owner still opens it.
    expect(existsSync(`${path}.lock`)).toBe(false);
    expect(open(path, "dev-1").journalId).toBe(j.journalId);
  });

  it("adopts a journal created before journals had owners", () => {
    const path = tempFile();
    const legacy = new Journal({ path, maxOpen: 10, now: () => 0 });
    const id = legacy.journalId;
    legacy.close();
    expect(open(path, "dev-1").journalId).toBe(id);
    for (const x of journals.splice(0)) x.close();
    expect(thrown(() => open(path, "dev-2")).code).toBe("AX_AGENT_JOURNAL_FOREIGN");
  });
});

describe("journal location", () => {
  it("defaults to a file named after the agent, so two agents in one folder never share one", () => {
    const a = parseAgentConfig({ agentId: "pump-7", mqtt: { url: "mqtt://x" } });
    const b = parseAgentConfig({ agentId: "pump-8", mqtt: { url: "mqtt://x" } });
    expect(journalPath(a)).toBe("ax-journal-pump-7.sqlite");
    expect(journalPath(b)).toBe("ax-journal-pump-8.sqlite");
    const set = parseAgentConfig({
      agentId: "pump-7",
      mqtt: { url: "mqtt://x" },
      journal: { path: "/var/lib/ax/j.sqlite" },
    });
    expect(journalPath(set)).toBe("/var/lib/ax/j.sqlite");
  });
});
