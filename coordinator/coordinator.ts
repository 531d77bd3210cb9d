import { createHash } from "node:crypto";
import { resolve } from "node:path";
import { type Clock, systemClock } from "../shared/clock.js";
import { TERMINAL_STATES } from "../shared/fsm.js";
import type { IdentityFile } from "../shared/identity.js";
import { requireLogin } from "./broker/mosquitto.js";
import { syncMosquitto } from "./broker/mosquitto-files.js";
import { type CoordinatorConfig, secretsDir } from "./config.js";
import type { JobDefinitionInput } from "./domain/job.js";
import { Alerts } from "./engine/alerts.js";
import type { EngineContext, Logger } from "./engine/context.js";
import { EngineEventBus } from "./engine/events.js";
import { ExecutionLoop } from "./engine/execution-loop.js";
import { FiringLoop } from "./engine/firing.js";
import { Fleet } from "./engine/fleet.js";
import { Inbound } from "./engine/inbound.js";
import { Leases } from "./engine/leases.js";
import { RetentionLoop } from "./engine/retention.js";
import { EventTriggers } from "./engine/triggers.js";
import { LinkAuth } from "./link/auth.js";
import { CoordinatorLink } from "./link/mqtt-link.js";
import { CoordinatorMetrics } from "./metrics.js";
import { AccessOperations } from "./operations/access.js";
import { AgentOperations } from "./operations/agents.js";
import {
  CommandOperations,
  type CommandRequest,
  type CommandsRequest,
  type CommandTarget,
} from "./operations/commands.js";
import { ExecutionOperations } from "./operations/executions.js";
import { type FiringOutcome, JobOperations } from "./operations/jobs.js";
import { ApiTokens } from "./security/api-tokens.js";
import { Identities } from "./security/identities.js";
import { loadOrCreateSecrets, mqttPassword, type Secrets } from "./security/secrets.js";
import type { ExecutionRecord, IdentityRecord, Store, StoredJob } from "./store/port.js";
import { SqliteStore } from "./store/sqlite/sqlite-store.js";

/** What the coordinator can serve right now (readiness). */
export interface Readiness {
  ready: boolean;
  /** The store answers a read. */
  store: boolean;
  /** The MQTT link is connected. */
  mqtt: boolean;
}

export interface CoordinatorDeps {
  clock?: Clock;
  log?: Logger;
  store?: Store;
}

/** The store a coordinator opens from its config: SQLite, with group commit. */
export function openStore(config: CoordinatorConfig, clock: Clock = systemClock): SqliteStore {
  return new SqliteStore({
    path: config.store.path,
    now: () => clock.wallNow(),
    maxErrorTextBytes: config.maxErrorTextBytes,
    groupCommit: true,
    // At most 100 commits a second. Measured at 2,000 fires/s: 99 commits a second with one per
    // loop turn, 72 with this, and 12 % fewer WAL frames written. What waits on a commit (a
    // dispatch's publish, an agent's ack, an API answer) waits at most 10 ms more.
    commitIntervalMs: 10,
    // A checkpoint's fsyncs would otherwise hold the loop that dispatches (tens of ms, at times
    // hundreds on a busy disk).
    checkpoint: "thread",
  });
}

/**
 * The client id a coordinator keeps across restarts when its config names none: one per topic
 * prefix and store file, so a restarted coordinator finds its broker session again while two
 * coordinators (other stores, or other prefixes) never take each other's.
 */
export function defaultClientId(config: CoordinatorConfig): string {
  const key = `${config.mqtt.prefix}\u0000${resolve(config.store.path)}`;
  return `ax-c-${createHash("sha256").update(key).digest("hex").slice(0, 16)}`;
}

// Lives in config.ts, so `ax bundle` and the CLI find the secrets without loading the store and the link.
export { secretsDir } from "./config.js";

/**
 * The coordinator's own broker login: the configured one, or (messages authenticated) its client
 * id and the password derived for it, which `ax broker config` writes into the broker's files.
 */
export function coordinatorMqttLogin(
  config: CoordinatorConfig,
  secrets: Secrets,
): { username?: string; password?: string } {
  if (config.mqtt.username !== undefined) {
    return {
      username: config.mqtt.username,
      ...(config.mqtt.password === undefined ? {} : { password: config.mqtt.password }),
    };
  }
  if (config.security.messages === "off") return {};
  const username = config.mqtt.clientId ?? defaultClientId(config);
  return { username, password: mqttPassword(secrets.fleet, username, 0) };
}

/**
 * The coordinator service: the store, the MQTT link, the fleet and the engine loops, wired.
 * Owns every timer, socket and handle it opens; `close()` releases them.
 */
export class Coordinator {
  readonly store: Store;
  /** Every agent the coordinator knows, online or not, and whether it can take work now. */
  readonly fleet: Fleet;
  /** The leases of executions agents hold (memory only; rebuilt after a restart). */
  readonly leases: Leases;
  /** Typed engine events: transitions, fires, misses, agents, dropped and invalid messages. */
  readonly events: EngineEventBus;
  /** Prometheus metrics, in a registry of this coordinator's own. */
  readonly metrics: CoordinatorMetrics;
  private readonly ctx: EngineContext;
  private readonly inbound: Inbound;
  private readonly firing: FiringLoop;
  private readonly executionLoop: ExecutionLoop;
  private readonly retention: RetentionLoop;
  private readonly triggers: EventTriggers;
  /** Webhook alerts: failures, misfires, agents offline. */
  readonly alerts: Alerts;
  /** The fleet key, the bundle signing key (docs/security.md). */
  readonly secrets: Secrets;
  /** Enrolled agents and their keys. */
  readonly identities: Identities;
  /** Brings the broker's logins in step with the enrolments (`broker.mosquitto`); else nothing. */
  private readonly syncBroker: () => void = () => {};
  /** The HTTP API's admin token and the tokens made through the API. */
  readonly apiTokens: ApiTokens;
  /** Jobs: define, change, pause, resume, fire by hand, preview, read. */
  readonly jobs: JobOperations;
  /** Executions: read, cancel, retry. */
  readonly executions: ExecutionOperations;
  /** Device commands: the one operation that creates them. */
  readonly commands: CommandOperations;
  /** The fleet, read: agents and what they hold. */
  readonly agents: AgentOperations;
  /** API tokens and agent enrolments. */
  readonly access: AccessOperations;
  private readonly startedAtMono: number;

  constructor(config: CoordinatorConfig, deps: CoordinatorDeps = {}) {
    const clock = deps.clock ?? systemClock;
    const log: Logger = deps.log ?? (() => {});
    this.store = deps.store ?? openStore(config, clock);
    // The writes of a failed commit were undone: what the fleet caches of them (acked seqs)
    // is re-read, and the agents, never acked, re-send those reports.
    this.store.onCommitError = (err) => {
      log("error", err.message);
      this.fleet.load().catch(() => {});
    };
    this.secrets = loadOrCreateSecrets(secretsDir(config));
    this.identities = new Identities(this.store, this.secrets, () => clock.wallNow());
    const mosquitto = config.broker.mosquitto;
    if (mosquitto !== undefined) {
      // A revocation reaches Mosquitto at once: its files are rewritten and it reloads them.
      const coordinatorLogin = requireLogin(coordinatorMqttLogin(config, this.secrets));
      this.syncBroker = () =>
        syncMosquitto(
          mosquitto,
          {
            prefix: config.mqtt.prefix,
            fleet: this.secrets.fleet,
            coordinator: coordinatorLogin,
            identities: this.identities.list(),
          },
          log,
        );
      const previous = this.identities.onChange;
      this.identities.onChange = (identity) => {
        previous?.(identity);
        this.syncBroker();
      };
    }
    this.apiTokens = new ApiTokens(this.store, this.secrets.dir, () => clock.wallNow());
    const link = new CoordinatorLink(
      {
        url: config.mqtt.url,
        prefix: config.mqtt.prefix,
        maxPayloadBytes: config.maxPayloadBytes,
        ...coordinatorMqttLogin(config, this.secrets),
        ...(config.mqtt.sharedGroup === undefined ? {} : { sharedGroup: config.mqtt.sharedGroup }),
        clientId: config.mqtt.clientId ?? defaultClientId(config),
        persistentSession: config.mqtt.persistentSession,
        auth:
          config.security.messages === "required"
            ? new LinkAuth(this.identities, config.security.freshnessMs, config.mqtt.prefix)
            : undefined,
      },
      () => clock.wallNow(),
    );
    this.events = new EngineEventBus((err) =>
      log("error", `event listener failed: ${(err as Error).message}`),
    );
    this.ctx = { config, store: this.store, link, clock, log, events: this.events };
    this.fleet = new Fleet(this.ctx);
    link.batchBytesOf = (agentId) => this.fleet.batchBytesOf(agentId);
    if (config.security.messages === "required") {
      // An enrolled agent is routed by the tags it was enrolled with: a device cannot claim a
      // tag (a site, a role) to be sent another's commands.
      this.fleet.tagsOf = (agentId) => this.identities.get(agentId)?.tags;
    }
    const beforeFleet = this.identities.onChange;
    this.identities.onChange = (identity) => {
      beforeFleet?.(identity);
      if (identity.status === "revoked") {
        this.fleet.revoked(identity.agentId).catch((err: unknown) => {
          log(
            "error",
            `taking revoked agent ${identity.agentId} offline failed: ${(err as Error).message}`,
          );
        });
      }
    };
    this.metrics = new CoordinatorMetrics({
      events: this.events,
      fleet: this.fleet,
      store: this.store,
    });
    // A lease lapses after three silent heartbeats; a query gets two heartbeats (2 s at least).
    const leases = new Leases(config.heartbeatMs * 3, Math.max(2_000, config.heartbeatMs * 2));
    this.leases = leases;
    this.inbound = new Inbound(this.ctx, this.fleet, leases);
    this.firing = new FiringLoop(this.ctx);
    this.executionLoop = new ExecutionLoop(this.ctx, this.fleet, leases);
    this.retention = new RetentionLoop(this.ctx);
    this.inbound.onChange = () => this.executionLoop.kick();
    this.triggers = new EventTriggers(this.ctx, () => this.executionLoop.kick());
    this.inbound.onEvent = (name, msgId, payload) => this.triggers.onEvent(name, msgId, payload);
    this.events.on("transition", (e) => {
      // A lease is for work an agent holds: once the execution has left it (ended, or back to
      // waiting for a dispatch) the entry goes, or the table would grow by one per execution.
      if (e.to !== "DISPATCHED" && e.to !== "SCHEDULED" && e.to !== "RUNNING") {
        leases.forget(e.executionId);
      }
      // STICKY follows the agent that last ran the job successfully.
      if (e.to === "SUCCEEDED" && e.jobId !== null && e.agentId !== null) {
        this.executionLoop.router.noteSucceeded(e.jobId, e.agentId);
      }
      if (!TERMINAL_STATES.has(e.to)) return;
      this.triggers
        .onTransition(e)
        .catch((err: unknown) => log("error", `after-trigger failed: ${(err as Error).message}`));
    });
    this.firing.onFired = () => this.executionLoop.kick();
    this.alerts = new Alerts(this.ctx);
    const kick = () => this.executionLoop.kick();
    this.jobs = new JobOperations(this.ctx, this.firing, this.triggers, kick, (jobId) =>
      this.executionLoop.router.forgetKey(jobId),
    );
    this.executions = new ExecutionOperations(this.ctx, kick, () => this.metrics.operatorRetry());
    this.commands = new CommandOperations(this.ctx, this.fleet, this.identities, kick);
    this.agents = new AgentOperations(this.ctx, this.fleet);
    this.access = new AccessOperations(this.apiTokens, this.identities, () => [
      coordinatorMqttLogin(config, this.secrets).username,
      config.mqtt.clientId ?? defaultClientId(config),
    ]);
    this.startedAtMono = clock.monoNow();
  }

  async start(): Promise<void> {
    await this.fleet.load();
    await this.identities.load();
    // Enrolments changed while the coordinator was down (another process on the store) reach
    // the broker now.
    this.syncBroker();
    await this.apiTokens.load();
    this.inbound.onCaughtUp = () => this.ctx.link.resume();
    await this.ctx.link.start({
      message: (decoded, receivedAt) => this.inbound.handle(decoded, receivedAt),
      invalid: (error, topic) => this.inbound.invalid(error, topic),
      refused: (error, topic, stale) => this.inbound.refused(error, topic, stale),
      backlog: () => this.inbound.backlog,
      up: (at) => {
        this.inbound.linkUp(at);
        this.executionLoop.kick();
      },
    });
    this.firing.start();
    this.executionLoop.start();
    this.retention.start();
    await this.alerts.start();
    if (this.ctx.config.security.messages === "off") {
      this.ctx.log(
        "warn",
        'security.messages is "off": messages to and from agents are not authenticated, and anyone on the broker can command them (docs/security.md)',
      );
    }
    this.ctx.log("info", "coordinator started", { mqtt: this.ctx.config.mqtt.url });
  }

  // --- operations -------------------------------------------------------------------------
  // Every action of the API, the CLI and the console is one of these: it validates, applies its
  // defaults with this coordinator's clock, and writes. They live in operations/, by area; the
  // methods below are shorthands kept for programmatic callers (the demo, tests, benchmarks).

  /** {@link JobOperations.put}: stores a definition (a new version when it changed). */
  putJob(input: JobDefinitionInput | unknown, actor = "system"): Promise<StoredJob> {
    return this.jobs.put(input, actor);
  }

  /** {@link ExecutionOperations.cancel}. */
  cancelExecution(id: string, actor = "system"): Promise<ExecutionRecord> {
    return this.executions.cancel(id, actor);
  }

  /** {@link ExecutionOperations.retry}: returns the new execution's id. */
  retryExecution(id: string, actor = "system"): Promise<string> {
    return this.executions.retry(id, actor);
  }

  /** {@link JobOperations.trigger}, returning the first execution's id (the only one unless sharded). */
  async triggerJob(jobId: string, actor = "system"): Promise<string> {
    return (await this.jobs.trigger(jobId, actor))[0] ?? "";
  }

  /** {@link JobOperations.trigger}: the ids of every execution created (one per shard). */
  triggerJobAll(jobId: string, actor = "system"): Promise<string[]> {
    return this.jobs.trigger(jobId, actor);
  }

  /** {@link JobOperations.fireEvent}: returns how many jobs fired. */
  fireEvent(name: string, payload: Record<string, unknown> = {}): Promise<number> {
    return this.jobs.fireEvent(name, payload);
  }

  /** {@link JobOperations.firingOutcome}. */
  firingOutcome(jobId: string, scheduledFor: number): Promise<FiringOutcome> {
    return this.jobs.firingOutcome(jobId, scheduledFor);
  }

  /** {@link JobOperations.pause}: state, not a new version. */
  pauseJob(jobId: string, actor = "system"): Promise<StoredJob> {
    return this.jobs.pause(jobId, actor);
  }

  /** {@link JobOperations.resume}: missed times follow the job's misfire policy. */
  resumeJob(jobId: string, actor = "system"): Promise<StoredJob> {
    return this.jobs.resume(jobId, actor);
  }

  /** {@link CommandOperations.send} for one agent; returns its execution id. */
  async sendCommand(req: CommandRequest, actor = "system"): Promise<string> {
    const [target] = await this.commands.send(req, actor);
    return target?.executionId ?? "";
  }

  /** {@link CommandOperations.send}: each target with its execution id, by agent id. */
  sendCommands(req: CommandsRequest, actor = "system"): Promise<CommandTarget[]> {
    return this.commands.send(req, actor);
  }

  /** {@link JobOperations.delete}. */
  deleteJob(jobId: string, actor = "system"): Promise<void> {
    return this.jobs.delete(jobId, actor);
  }

  /** {@link AccessOperations.enrol}. */
  enrollAgent(
    agentId: string,
    options: { tags?: Record<string, string>; rotate?: boolean; actor: string },
  ): Promise<{ identity: IdentityRecord; file: IdentityFile }> {
    return this.access.enrol(agentId, options);
  }

  /** How long this coordinator has run (its clock's monotonic time). */
  uptimeMs(): number {
    return this.ctx.clock.monoNow() - this.startedAtMono;
  }

  /** Whether the store answers and the MQTT link is up. */
  async readiness(): Promise<Readiness> {
    const mqtt = this.ctx.link.connected;
    const store = await this.store.counters().then(
      () => true,
      () => false,
    );
    return { ready: mqtt && store, store, mqtt };
  }

  /**
   * Stops firing new executions and waits up to `timeoutMs` for those in flight to end.
   * Returns how many are still not terminal.
   */
  async quiesce(timeoutMs: number): Promise<number> {
    this.firing.close();
    const until = this.ctx.clock.monoNow() + timeoutMs;
    for (;;) {
      const open = await this.store.listExecutionsInStates(
        ["PENDING", "DISPATCHED", "SCHEDULED", "RUNNING", "RETRY_WAITING"],
        1_000_000,
      );
      if (open.length === 0 || this.ctx.clock.monoNow() >= until) return open.length;
      await new Promise<void>((resolve) => this.ctx.clock.setTimer(resolve, 50));
    }
  }

  /** Every message received so far handled, and the execution loop idle (for tests and shutdown). */
  async settle(): Promise<void> {
    await this.inbound.drain();
    await this.executionLoop.idle();
  }

  async close(): Promise<void> {
    this.alerts.close();
    this.metrics.close();
    this.firing.close();
    this.executionLoop.close();
    this.retention.close();
    await this.executionLoop.idle();
    await this.retention.idle();
    await this.ctx.link.close();
    await this.inbound.drain();
    // What heartbeats said since the last batch: kept for the next start's fleet page.
    await this.fleet
      .persistSeen(this.ctx.clock.wallNow(), Number.POSITIVE_INFINITY)
      .catch((err: unknown) =>
        this.ctx.log("warn", `agents' last heartbeats not stored: ${(err as Error).message}`),
      );
    await this.store.close();
  }
}

export type { CommandRequest, CommandsRequest, CommandTarget } from "./operations/commands.js";
