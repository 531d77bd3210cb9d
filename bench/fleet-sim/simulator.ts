import { systemClock } from "../../shared/clock.js";
import { TimingWheel } from "../../shared/wheel.js";
import {
  SimAgent,
  type SimAgentSpec,
  type SimCommand,
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

/** How long before the first start of a window the wheel hands it over, ms (its timer's slack). */
const WINDOW_LEAD_MS = 30;

/**
 * A window stamps a burst: the starts due one after the other with no gap longer than this
 * between two, ms; a start due after a longer gap waits for the next window.
 */
const WINDOW_GAP_MS = 20;

/** The longest a window runs from its first start, ms, however dense the starts. */
const WINDOW_SPAN_MS = 100;

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
  /**
   * The start table: every filed start, unordered (due, agent, command, token at the same index).
   * Dense, so that a window reads due times from one array, not from 10,000 agents' objects.
   */
  private startDue: number[] = [];
  private startAgent: SimAgent[] = [];
  private startCommand: SimCommand[] = [];
  private startToken: number[] = [];
  private nextToken = 1;
  /** The wheel's task for the next window, and the monotonic time it is due. */
  private windowHandle = 0;
  private windowAt = Number.POSITIVE_INFINITY;

  constructor(options: SimulatorOptions) {
    this.concurrency = options.connectConcurrency ?? 200;
    // A reconnect goes through the ramp like the first connect; everything else is the agent's.
    const onFire = (task: SimTask) => {
      if (task.kind === "starts") this.runWindow();
      else if (task.kind !== "connect") task.agent.run(task);
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
      localBase: this.base,
      monoNow: () => performance.now(),
      schedule: (due, task) => this.wheel.schedule(due, task),
      cancel: (handle) => {
        if (handle > 0) this.wheel.cancel(handle);
      },
      scheduleStart: (due, agent, command) => this.fileStart(due, agent, command),
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

  private fileStart(due: number, agent: SimAgent, command: SimCommand): number {
    const token = this.nextToken++;
    this.startDue.push(due);
    this.startAgent.push(agent);
    this.startCommand.push(command);
    this.startToken.push(token);
    this.armWindow(due);
    return token;
  }

  private armWindow(due: number): void {
    const at = due - WINDOW_LEAD_MS;
    if (at >= this.windowAt) return;
    if (this.windowHandle > 0) this.wheel.cancel(this.windowHandle);
    this.windowAt = at;
    this.windowHandle = this.wheel.schedule(at, { kind: "starts" });
  }

  /**
   * Stamps the next burst of starts (see {@link WINDOW_GAP_MS}), each once the
   * monotonic clock has reached its due time, in a tight loop over their due times alone (a busy
   * wait between them: nothing else of this process runs meanwhile, as nothing else of a device
   * runs on another's CPU); then hands each stamp to its agent, which starts the command as of
   * that moment ({@link SimAgent.startAt}). Real devices each start on their own CPU; one thread
   * stamping 10,000 starts through their agents' scattered objects took about 2 µs each, which
   * made the simulator's loop, not the coordinator, what a fleet's start skew measured.
   */
  private runWindow(): void {
    this.windowHandle = 0;
    this.windowAt = Number.POSITIVE_INFINITY;
    const due = this.startDue;
    const live: number[] = [];
    for (let i = 0; i < due.length; i++) {
      // A start cancelled or replaced since it was filed no longer holds its token.
      if ((this.startCommand[i] as SimCommand).handle === this.startToken[i]) live.push(i);
    }
    live.sort((a, b) => (due[a] as number) - (due[b] as number));
    // The burst: from the first start due, each next one within WINDOW_GAP_MS of the one before;
    // none while the first is not due yet (the one this window was armed for was cancelled).
    let n = 0;
    const first = live.length > 0 ? (due[live[0] as number] as number) : 0;
    const waitFor = first > performance.now() + WINDOW_LEAD_MS;
    while (!waitFor && n < live.length) {
      const d = due[live[n] as number] as number;
      const gap = n > 0 ? d - (due[live[n - 1] as number] as number) : 0;
      if (gap > WINDOW_GAP_MS || d > first + WINDOW_SPAN_MS) break;
      n++;
    }
    const taken = live.slice(0, n);
    const keepDue: number[] = [];
    const keepAgent: SimAgent[] = [];
    const keepCommand: SimCommand[] = [];
    const keepToken: number[] = [];
    for (let k = n; k < live.length; k++) {
      const i = live[k] as number;
      keepDue.push(due[i] as number);
      keepAgent.push(this.startAgent[i] as SimAgent);
      keepCommand.push(this.startCommand[i] as SimCommand);
      keepToken.push(this.startToken[i] as number);
    }
    const dues = new Float64Array(taken.length);
    for (let k = 0; k < taken.length; k++) dues[k] = due[taken[k] as number] as number;
    const stamps = new Float64Array(taken.length);
    let now = performance.now();
    for (let k = 0; k < dues.length; k++) {
      const d = dues[k] as number;
      while (now < d) now = performance.now();
      stamps[k] = now;
      now = performance.now();
    }
    const agents = this.startAgent;
    const commands = this.startCommand;
    this.startDue = keepDue;
    this.startAgent = keepAgent;
    this.startCommand = keepCommand;
    this.startToken = keepToken;
    // Filed again by startAt (an estimate that moved) or still waiting: the next window.
    for (let k = 0; k < taken.length; k++) {
      const i = taken[k] as number;
      (agents[i] as SimAgent).startAt(commands[i] as SimCommand, stamps[k] as number);
    }
    let next = Number.POSITIVE_INFINITY;
    for (const d of this.startDue) next = Math.min(next, d);
    if (next < Number.POSITIVE_INFINITY) this.armWindow(next);
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
    this.startDue = [];
    this.startAgent = [];
    this.startCommand = [];
    this.startToken = [];
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
