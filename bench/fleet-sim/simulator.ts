import { systemClock } from "../../shared/clock.js";
import { TimingWheel } from "../../shared/wheel.js";
import {
  SimAgent,
  type SimAgentSpec,
  type SimContext,
  type SimCounters,
  type SimTask,
} from "./agent.js";

export interface SimulatorOptions {
  host: string;
  port: number;
  prefix: string;
  agents: readonly SimAgentSpec[];
  /** Tags said in hello (an enrolled agent's tags are the ones it was enrolled with). */
  tags?: Record<string, string>;
  /** Connections waiting for their CONNACK at once, so the broker's accept queue never overflows. */
  connectConcurrency?: number;
  /** @default 60 */
  keepaliveS?: number;
  /** The batchBytes said in hello. @default 65536 */
  batchBytes?: number;
  /** Called once, when the last agent is welcomed for the first time, with the wall time. */
  onAllWelcomed?: (at: number) => void;
}

/** Agents whose start reports are sent in one turn of the loop. */
const REPORT_CHUNK = 20;

/**
 * Runs many {@link SimAgent}s in this process with one timing wheel for all their timed work
 * (heartbeats, fires, hello retries, reconnects): one OS timer armed at a time, never one per
 * agent, so 10,000 agents cost the event loop what their messages cost and no more.
 */
export class Simulator {
  readonly agents: SimAgent[];
  readonly counters: SimCounters = {
    connects: 0,
    disconnects: 0,
    refused: 0,
    invalid: 0,
    dispatches: 0,
    duplicates: 0,
    starts: 0,
    replays: 0,
    helloRetries: 0,
  };
  /** Agents welcomed at least once, and when the last of them was (local ms). */
  welcomedOnce = 0;
  allWelcomedAt: number | undefined;
  private readonly wheel: TimingWheel<SimTask>;
  private readonly waiting: SimAgent[] = [];
  private connecting = 0;
  private readonly concurrency: number;
  private readonly welcomedSet = new Set<SimAgent>();
  /** Agents with starts stamped and not yet reported, in the order they started. */
  private toReport: SimAgent[] = [];
  private reportScheduled = false;
  private msgCounter = 0;
  private readonly msgPrefix =
    `s${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
  private readonly base = Date.now() - performance.now();
  private closed = false;

  constructor(options: SimulatorOptions) {
    this.concurrency = options.connectConcurrency ?? 200;
    // A reconnect goes through the ramp like the first connect; everything else is the agent's.
    const onFire = (task: SimTask) => {
      if (task.kind !== "connect") task.agent.run(task);
      else {
        this.waiting.push(task.agent);
        this.pump();
      }
    };
    this.wheel = new TimingWheel<SimTask>(onFire, {
      clock: systemClock,
      tickMs: 10,
      slots: 1024,
      initialCapacity: Math.max(1024, options.agents.length * 4),
      // Every fire due in one turn runs in that turn: 10,000 devices that fire together are
      // stamped together, not in slices of the default 1,024 spread over later turns.
      maxBatch: 1_000_000,
      onError: (err) => process.stderr.write(`fleet-sim: ${(err as Error).stack ?? err}\n`),
    });
    const ctx: SimContext = {
      host: options.host,
      port: options.port,
      prefix: options.prefix,
      keepaliveS: options.keepaliveS ?? 60,
      batchBytes: options.batchBytes ?? 65_536,
      handlers: ["echo"],
      tags: options.tags ?? {},
      localNow: () => performance.now() + this.base,
      monoNow: () => performance.now(),
      schedule: (due, task) => this.wheel.schedule(due, task),
      cancel: (handle) => {
        if (handle > 0) this.wheel.cancel(handle);
      },
      msgId: () => `${this.msgPrefix}${(this.msgCounter++).toString(36)}`,
      connectSettled: () => {
        this.connecting--;
        this.pump();
      },
      welcomed: (agent) => {
        if (this.welcomedSet.has(agent)) return;
        this.welcomedSet.add(agent);
        this.welcomedOnce++;
        if (this.welcomedOnce === this.agents.length) {
          this.allWelcomedAt = ctx.localNow();
          options.onAllWelcomed?.(this.allWelcomedAt);
        }
      },
      started: (agent) => {
        this.toReport.push(agent);
        if (this.reportScheduled) return;
        this.reportScheduled = true;
        setImmediate(() => this.reportSome());
      },
      counters: this.counters,
    };
    this.agents = options.agents.map((spec) => new SimAgent(spec, ctx));
  }

  /** Opens every agent's connection, at most `connectConcurrency` awaiting CONNACK at once. */
  start(): void {
    this.waiting.push(...this.agents);
    this.waiting.reverse();
    this.pump();
  }

  /**
   * Sends the reports of up to {@link REPORT_CHUNK} agents' starts, then yields to the loop
   * before the next chunk. Starts are stamped when they are due, in the wheel's turn; their
   * reports' encoding, sealing and writing is the simulator's work (real devices each do it on
   * their own CPU), and in one piece it would hold back the next turn's fires by as long as it
   * took 10,000 of them.
   */
  private reportSome(): void {
    const chunk = this.toReport.splice(0, REPORT_CHUNK);
    for (const a of new Set(chunk)) a.reportStarted();
    if (this.toReport.length > 0) setImmediate(() => this.reportSome());
    else this.reportScheduled = false;
  }

  private pump(): void {
    while (!this.closed && this.connecting < this.concurrency && this.waiting.length > 0) {
      const agent = this.waiting.pop() as SimAgent;
      this.connecting++;
      agent.connect();
    }
  }

  /** Agents connected and welcomed now. */
  get online(): number {
    let n = 0;
    for (const a of this.agents) if (a.isWelcomed) n++;
    return n;
  }

  /** Drops every connection without DISCONNECT (so the broker publishes each will). */
  close(): void {
    this.closed = true;
    for (const a of this.agents) a.stop();
    this.wheel.close();
  }
}

/** What {@link enrolSimAgents} needs of a coordinator: its enrolment of identities. */
interface Enrolling {
  identities: {
    enroll(
      agentId: string,
      options: { tags?: Record<string, string>; actor: string },
    ): Promise<{
      file: {
        key: string;
        generation: number;
        mqtt?: { username: string; password: string } | undefined;
      };
    }>;
  };
}

/**
 * Enrols agents `ids` with `tags` on `coordinator`, as `ax fleet enroll` does, and returns the
 * simulator's spec of each (its message key, its broker login); `extra` adds to a spec (a device
 * that fails, one whose handler takes time).
 */
export async function enrolSimAgents(
  coordinator: Enrolling,
  ids: readonly string[],
  tags: Record<string, string>,
  actor: string,
  extra: (agentId: string) => Partial<SimAgentSpec> = () => ({}),
): Promise<SimAgentSpec[]> {
  const specs: SimAgentSpec[] = [];
  for (const agentId of ids) {
    const { file } = await coordinator.identities.enroll(agentId, { tags, actor });
    specs.push({
      agentId,
      key: Buffer.from(file.key, "base64url"),
      generation: file.generation,
      username: file.mqtt?.username,
      password: file.mqtt?.password,
      ...extra(agentId),
    });
  }
  return specs;
}
