import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AgentConfigInput } from "../../agent/config.js";
import { packageFile } from "../package-files.js";

const AX_BIN = packageFile("bin", "ax.js");

/** An agent running as a child process of this one. */
export interface AgentProcess {
  agentId: string;
  child: ChildProcess;
  logFile: string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves with the exit code (null if killed). */
  stop(graceMs?: number): Promise<number | null>;
  /** SIGKILL at once (a crash, for tests). */
  kill(): Promise<void>;
}

function waitExit(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once("exit", (code) => resolve(code)));
}

/** Starts `ax agent start` with `config` written to `dir`; its log lines go to a file in `dir`. */
export function spawnAgentProcess(dir: string, config: AgentConfigInput): AgentProcess {
  const configFile = join(dir, `${config.agentId}.json`);
  const logFile = join(dir, `${config.agentId}.log`);
  const withJournal: AgentConfigInput = {
    ...config,
    journal: { path: join(dir, `${config.agentId}.journal.sqlite`), ...config.journal },
  };
  writeFileSync(configFile, JSON.stringify(withJournal, null, 2));
  const fd = openSync(logFile, "a");
  const child = spawn(process.execPath, [AX_BIN, "agent", "start", "--config", configFile], {
    stdio: ["ignore", fd, fd],
  });
  closeSync(fd);
  const exited = waitExit(child);
  return {
    agentId: config.agentId,
    child,
    logFile,
    async stop(graceMs = 5_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}
