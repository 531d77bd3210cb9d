import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import mqtt, { type MqttClient } from "mqtt";
import type { CoordinatorConfigInput } from "../../../coordinator/config.js";
import type { ExecutionRecord } from "../../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../../shared/fsm.js";
import { parseIdentityText } from "../../../shared/identity.js";
import { newId } from "../../../shared/ids.js";
import { topics } from "../../../shared/protocol/index.js";
import { seal } from "../../../shared/protocol/mac.js";
import { tempDir, waitFor } from "../env.js";
import { enrollBeforeStart } from "../identities.js";
import { ChaosAgent, type ChaosAgentSettings, chaosAgentConfig } from "./agents.js";
import { type BrokerKind, type BrokerProcess, brokerProcess } from "./broker-process.js";
import { type CoordinatorProcess, coordinatorProcess } from "./coordinator-process.js";
import { countEffects, type Effects, execParams, fileParams, setUpEffects } from "./effects.js";
import { type JournalRow, readJournal } from "./journals.js";
import { listAgents, listExecutions, readRecord } from "./record.js";
import { caughtUp, checkTruth, type TruthResult } from "./truth.js";

/** Coordinator settings of every chaos run: short, so liveness and leases move in seconds. */
export const CHAOS_COORDINATOR: Omit<CoordinatorConfigInput, "store" | "mqtt" | "http"> = {
  // Lease = 3 heartbeats (1.5 s), a lapsed lease's query waits 2 s, offline after 1.5 s.
  heartbeatMs: 500,
  misfireThresholdMs: 2_000,
};

/** Agent settings of every chaos run unless a scenario says otherwise. */
export const CHAOS_AGENT: ChaosAgentSettings = {
  heartbeatMs: 500,
  reconnect: { baseMs: 100, capMs: 1_000 },
  keepaliveS: 2,
  concurrency: 4,
  queue: 64,
  shutdownGraceMs: 4_000,
};

export interface HarnessOptions {
  scenario: string;
  /** @default 2 */
  agents?: number;
  coordinator?: Omit<CoordinatorConfigInput, "store" | "mqtt" | "http">;
  agent?: Partial<ChaosAgentSettings>;
  /** @default {@link chaosBrokerKind} */
  broker?: BrokerKind;
  /**
   * Several coordinators on one PostgreSQL store (a schema of its own): the first starts active,
   * the others as standbys. Without it, one coordinator on a SQLite file.
   */
  cluster?: {
    coordinators: number;
    url: string;
    schema: string;
    leaseMs?: number;
    /** `cluster.firing` of every coordinator. */
    firing?: "active" | "shared";
    /** `cluster.dispatch` of every coordinator. */
    dispatch?: "active" | "shared";
    /** The store URL of coordinator `i` (0-based) when it differs (a proxy in front of one). */
    urlOf?: (i: number) => string;
  };
}

/** What a device command of a scenario does. */
export type Effect = { kind: "exec"; seconds?: number } | { kind: "file" };

/** A device command as a scenario creates it. */
export interface CommandSpec {
  agentId: string;
  /** UTC ms. */
  at: number;
  deadline?: number;
  effect: Effect;
  /** @default "30s" */
  timeout?: string;
}

/** Runs started and not closed yet, so a test's afterEach can end them after a timeout. */
const OPEN = new Set<ChaosHarness>();

/** Closes every run still open (afterEach of every chaos test: children die even on failure). */
export async function closeOpenHarnesses(): Promise<void> {
  await Promise.allSettled([...OPEN].map((h) => h.close()));
}

/**
 * A chaos run: a broker, a coordinator and agents, each a real child process in a temp folder
 * of its own, plus the effect script and marker file its executions write. `close()` ends every
 * process (continuing stopped ones first) and removes the folder, whatever happened.
 */
export class ChaosHarness {
  readonly agents: ChaosAgent[] = [];
  private tags = 0;
  /** Each agent's identity file (its message key and broker login), by agent id. */
  private identities: Record<string, string> = {};
  /** The application that publishes events ({@link ChaosHarness.event}), once it has. */
  private publisher: MqttClient | undefined;
  private constructor(
    readonly scenario: string,
    readonly dir: string,
    private readonly cleanup: () => void,
    readonly fx: Effects,
    readonly broker: BrokerProcess,
    /** The coordinator the run talks to: the active one (see {@link ChaosHarness.findActive}). */
    public coordinator: CoordinatorProcess,
    readonly prefix: string,
    /** Every coordinator of the run (one, unless `cluster`). */
    readonly coordinators: CoordinatorProcess[] = [coordinator],
  ) {}

  /** Starts the broker, the coordinator and the agents, and waits until the agents are online. */
  static async start(options: HarnessOptions): Promise<ChaosHarness> {
    const tmp = tempDir(`ax-chaos-${options.scenario}-`);
    const fx = setUpEffects(tmp.dir);
    mkdirSync(fx.dir);
    const broker = await brokerProcess(tmp.dir, options.broker);
    const prefix = `chaos${newId().slice(-8)}`;
    const settings = { ...CHAOS_COORDINATOR, ...options.coordinator };
    const cluster = options.cluster;
    const coordinators =
      cluster === undefined
        ? [await coordinatorProcess(tmp.dir, broker.url, prefix, settings)]
        : await Promise.all(
            Array.from({ length: cluster.coordinators }, (_, i) =>
              coordinatorProcess(tmp.dir, broker.url, prefix, settings, {
                name: `c${i + 1}`,
                url: cluster.urlOf?.(i) ?? cluster.url,
                schema: cluster.schema,
                securityDir: join(tmp.dir, "ax-secrets"),
                ...(cluster.leaseMs === undefined ? {} : { leaseMs: cluster.leaseMs }),
                ...(cluster.firing === undefined ? {} : { firing: cluster.firing }),
                ...(cluster.dispatch === undefined ? {} : { dispatch: cluster.dispatch }),
              }),
            ),
          );
    const coordinator = coordinators[0] as CoordinatorProcess;
    const h = new ChaosHarness(
      options.scenario,
      tmp.dir,
      tmp.cleanup,
      fx,
      broker,
      coordinator,
      prefix,
      coordinators,
    );
    OPEN.add(h);
    try {
      await broker.start();
      // Authenticated, as a fleet runs by default: each agent is enrolled before the coordinator
      // starts and holds its identity, so every fault is also one of sealed traffic.
      const ids = Array.from({ length: options.agents ?? 2 }, (_, i) => `${prefix}-a${i + 1}`);
      const identities = await enrollBeforeStart(coordinator.config, ids, tmp.dir);
      h.identities = identities;
      await coordinator.start();
      for (const standby of coordinators.slice(1)) await standby.start({ standby: true });
      const agentSettings = { ...CHAOS_AGENT, ...options.agent };
      for (const id of ids) {
        const agent = new ChaosAgent(id, tmp.dir, {
          ...chaosAgentConfig(id, broker.url, prefix, fx.script, fx.dir, agentSettings),
          identityFile: identities[id] as string,
        });
        h.agents.push(agent);
        agent.start();
      }
      await h.waitOnline();
    } catch (err) {
      await h.close();
      throw err;
    }
    return h;
  }

  /**
   * Waits until one of the running coordinators answers ready (the active one), makes it the
   * one the run talks to, and returns it.
   */
  async findActive(timeoutMs = 15_000): Promise<CoordinatorProcess> {
    const active = await poll(
      "an active coordinator",
      async () => {
        for (const c of this.coordinators) {
          if (!c.running()) continue;
          const r = await c.raw<{ ready: boolean }>("GET", "/api/ready").catch(() => undefined);
          if (r?.status === 200 && r.body.ready) return c;
        }
        return undefined;
      },
      timeoutMs,
    );
    this.coordinator = active;
    return active;
  }

  /** The agent `n` (1-based). */
  agent(n: number): ChaosAgent {
    const a = this.agents[n - 1];
    if (!a) throw new Error(`no agent ${n}`);
    return a;
  }

  /** A fresh tag for one execution's effect. */
  tag(label = "c"): string {
    this.tags += 1;
    return `${label}${this.tags}`;
  }

  /** Params of `effect` under `tag`. */
  params(effect: Effect, tag: string): { handler: string; params: Record<string, unknown> } {
    return effect.kind === "exec"
      ? { handler: "exec", params: execParams(this.fx, tag, effect.seconds ?? 0) }
      : { handler: "file.write", params: fileParams(this.fx, tag) };
  }

  /** Creates a device command over the HTTP API; returns its execution id and tag. */
  async command(spec: CommandSpec): Promise<{ executionId: string; tag: string }> {
    const tag = this.tag();
    const { handler, params } = this.params(spec.effect, tag);
    const answer = await this.coordinator.api<{ executionIds: string[] }>("POST", "/api/commands", {
      agentId: spec.agentId,
      handler,
      params,
      at: spec.at,
      ...(spec.deadline === undefined ? {} : { deadline: spec.deadline }),
      timeout: spec.timeout ?? "30s",
    });
    return { executionId: answer.executionIds[0] as string, tag };
  }

  /** Creates a job over the HTTP API. */
  async job(definition: Record<string, unknown>): Promise<void> {
    await this.coordinator.api("POST", "/api/jobs", definition);
  }

  /** Fires a job now; returns its execution ids. */
  async trigger(jobId: string): Promise<string[]> {
    const a = await this.coordinator.api<{ executionIds: string[] }>(
      "POST",
      `/api/jobs/${jobId}/trigger`,
    );
    return a.executionIds;
  }

  /**
   * Publishes an event on the broker as an application would, sealed with agent `n`'s identity
   * (an enrolled one is what the coordinators accept), QoS 1; returns its `msgId`.
   */
  async event(name: string, payload: Record<string, unknown> = {}, n = 2): Promise<string> {
    const read = parseIdentityText(
      readFileSync(this.identities[this.agent(n).agentId] as string, "utf8"),
    );
    if (!read.ok) throw new Error(`agent ${n}'s identity: ${read.problems.join("; ")}`);
    const identity = read.identity;
    this.publisher ??= await mqtt.connectAsync(this.broker.url, {
      clientId: `${this.prefix}-events`,
      clean: true,
      reconnectPeriod: 200,
    });
    const msgId = newId();
    const topic = topics(this.prefix).event(name);
    const body = JSON.stringify({
      v: 1,
      type: "event",
      msgId,
      sentAt: Date.now(),
      from: identity.agentId,
      payload,
    });
    const key = Buffer.from(identity.key, "base64url");
    await this.publisher.publishAsync(
      topic,
      seal(body, topic, key, identity.generation, Date.now()),
      {
        qos: 1,
      },
    );
    return msgId;
  }

  /** Pauses every job, so the run can come to rest. */
  async pauseJobs(): Promise<void> {
    const jobs = await this.coordinator.api<{ items: { id: string }[] }>("GET", "/api/jobs");
    for (const j of jobs.items) await this.coordinator.api("POST", `/api/jobs/${j.id}/pause`);
  }

  /** Waits until every agent that runs is online in the coordinator's view. */
  async waitOnline(timeoutMs = 20_000): Promise<void> {
    await poll(
      "agents online",
      async () => {
        const want = this.agents.filter((a) => a.running()).map((a) => a.agentId);
        const got = await listAgents(this.coordinator).catch(() => []);
        const online = new Set(got.filter((a) => a.status === "online").map((a) => a.agentId));
        return want.every((id) => online.has(id)) ? true : undefined;
      },
      timeoutMs,
    );
  }

  /** Every row of every agent's journal. */
  journals(): JournalRow[] {
    return this.agents.flatMap((a) => readJournal(a.agentId, a.journalPath));
  }

  /** Side effects counted so far. */
  effects(): ReturnType<typeof countEffects> {
    return countEffects(this.fx);
  }

  /**
   * Milliseconds from `faultEndAt` until every agent is online again and the record agrees with
   * every outcome the journals hold; null if that does not happen within `timeoutMs`. Start it
   * right when the fault ends and await it later: it polls in the background.
   */
  async convergence(faultEndAt: number, timeoutMs = 30_000): Promise<number | null> {
    const until = faultEndAt + timeoutMs;
    while (Date.now() < until) {
      const probeAt = Date.now();
      try {
        const agents = await listAgents(this.coordinator);
        const online = new Set(agents.filter((a) => a.status === "online").map((a) => a.agentId));
        const allOnline = this.agents
          .filter((a) => a.running())
          .every((a) => online.has(a.agentId));
        if (allOnline && caughtUp(await listExecutions(this.coordinator), this.journals())) {
          return Math.max(0, probeAt - faultEndAt);
        }
      } catch {
        // The coordinator may be restarting; probe again.
      }
      await sleep(100);
    }
    return null;
  }

  /**
   * Waits until no execution is open (bounded by `timeoutMs`), with jobs paused first so no new
   * ones appear. Returns what stayed open, if anything did.
   */
  async settle(timeoutMs = 30_000): Promise<ExecutionRecord[]> {
    await this.pauseJobs();
    const until = Date.now() + timeoutMs;
    for (;;) {
      const open = (await listExecutions(this.coordinator)).filter(
        (e) => !TERMINAL_STATES.has(e.state),
      );
      if (open.length === 0 || Date.now() > until) return open;
      await sleep(200);
    }
  }

  /**
   * Settles the run and checks the truth: the record over HTTP against the journals and the
   * effects. `mustBeOnTime` picks the executions that may not start late.
   */
  async truth(
    options: { convergeMs?: number | null; mustBeOnTime?: (e: ExecutionRecord) => boolean } = {},
  ): Promise<TruthResult> {
    await this.settle();
    // A report still on its way (a late finish) has a moment to land.
    await sleep(500);
    const record = await readRecord(this.coordinator);
    const result = checkTruth({
      scenario: this.scenario,
      journals: this.journals(),
      record,
      effects: this.effects(),
      ...(options.mustBeOnTime === undefined ? {} : { mustBeOnTime: options.mustBeOnTime }),
      convergeMs: options.convergeMs ?? null,
    });
    // An agent waits out its clock estimate's uncertainty before a start (never early): on a
    // loaded machine that, not the fault, is most of a start's lateness.
    const agents = await listAgents(this.coordinator).catch(() => []);
    if (agents.length > 0) {
      result.notes.push(
        `agents' clock uncertainty at the end (a start waits it out): ${agents
          .map((a) => `${a.agentId} ±${a.clockUncertaintyMs.toFixed(1)} ms`)
          .join(", ")}`,
      );
    }
    writeFileSync(join(this.dir, "truth.json"), JSON.stringify(result, null, 2));
    return result;
  }

  /** Ends every process and removes the folder. */
  async close(): Promise<void> {
    OPEN.delete(this);
    await this.publisher?.endAsync(true).catch(() => {});
    await Promise.allSettled(this.agents.map((a) => a.close()));
    await Promise.allSettled(this.coordinators.map((c) => c.stop()));
    await this.broker.stop().catch(() => {});
    // AX_CHAOS_KEEP=1 keeps the run's folder (logs, journals, store, truth.json) to look into.
    if (process.env.AX_CHAOS_KEEP) console.log(`chaos run kept in ${this.dir}`);
    else this.cleanup();
  }
}

/** Polls `check` every 100 ms until it returns a value, or throws after `timeoutMs`. */
export const poll = <T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 15_000,
): Promise<T> => waitFor(what, check, timeoutMs, 100);

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
