import { join } from "node:path";
import type { AgentConfigInput } from "../../../agent/config.js";
import { type AgentProcess, spawnAgentProcess } from "../../../coordinator/cli/agent-process.js";
import { alive, exited } from "./children.js";

/** Settings of a chaos agent beside its id and broker. */
export interface ChaosAgentSettings {
  heartbeatMs: number;
  /** Reconnect back-off, short so a broker restart costs the agent little. */
  reconnect: { baseMs: number; capMs: number };
  keepaliveS: number;
  concurrency: number;
  queue: number;
  shutdownGraceMs: number;
}

/**
 * One agent of a chaos run: `ax agent start` as a child process with its own journal file in
 * `dir`, the `exec` handler (allowed to run the run's effect script only) and `file.write`
 * (allowed to write under the run's effects folder). Starting it again after a kill or a stop
 * reuses the same config and journal, as a restarted device would.
 */
export class ChaosAgent {
  readonly journalPath: string;
  private proc: AgentProcess | undefined;
  private stopped = false;

  constructor(
    readonly agentId: string,
    private readonly dir: string,
    private readonly config: AgentConfigInput,
  ) {
    this.journalPath = join(dir, `${agentId}.journal.sqlite`);
  }

  /** Starts the process (a no-op while it runs). */
  start(): void {
    if (this.proc && alive(this.proc.child)) return;
    this.proc = spawnAgentProcess(this.dir, {
      ...this.config,
      journal: { path: this.journalPath },
    });
    this.stopped = false;
  }

  /** kill -9: the device loses power. */
  async kill(): Promise<void> {
    await this.proc?.kill();
  }

  /** SIGTERM (systemctl stop) without waiting for the exit. */
  term(): void {
    if (this.proc && alive(this.proc.child)) this.proc.child.kill("SIGTERM");
  }

  /** Resolves when the process has exited. */
  async exited(): Promise<void> {
    if (this.proc) await exited(this.proc.child);
  }

  /** SIGSTOP: the process stays, silent, as if cut off by a partition. */
  pause(): void {
    if (this.proc && alive(this.proc.child)) {
      this.proc.child.kill("SIGSTOP");
      this.stopped = true;
    }
  }

  /** SIGCONT: the partition heals. */
  resume(): void {
    if (this.proc && alive(this.proc.child)) this.proc.child.kill("SIGCONT");
    this.stopped = false;
  }

  running(): boolean {
    return this.proc !== undefined && alive(this.proc.child);
  }

  /** Ends the process whatever its state: continued if stopped, SIGTERM, SIGKILL after `graceMs`. */
  async close(graceMs = 3_000): Promise<void> {
    if (!this.proc || !alive(this.proc.child)) return;
    if (this.stopped) this.proc.child.kill("SIGCONT");
    await this.proc.stop(graceMs);
  }
}

/** The agent config of a chaos run. */
export function chaosAgentConfig(
  agentId: string,
  brokerUrl: string,
  prefix: string,
  effectScript: string,
  effectsDir: string,
  s: ChaosAgentSettings,
): AgentConfigInput {
  return {
    agentId,
    mqtt: { url: brokerUrl, prefix, keepaliveS: s.keepaliveS, reconnect: s.reconnect },
    heartbeatMs: s.heartbeatMs,
    capacity: { concurrency: s.concurrency, queue: s.queue },
    shutdownGraceMs: s.shutdownGraceMs,
    handlers: {
      exec: { enabled: true, allow: [effectScript] },
      "file.write": { allow: [effectsDir] },
    },
  };
}
