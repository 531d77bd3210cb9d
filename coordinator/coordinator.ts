import { createHash } from "node:crypto";
import { resolve } from "node:path";
import { type Clock, systemClock } from "../shared/clock.js";
import { AxError } from "../shared/errors.js";
import { TERMINAL_STATES } from "../shared/fsm.js";
import type { IdentityFile } from "../shared/identity.js";
import { requireLogin } from "./broker/mosquitto.js";
import { syncMosquitto } from "./broker/mosquitto-files.js";
import { type CoordinatorConfig, secretsDir } from "./config.js";
import { formatIssues, type JobDefinitionInput, jobDefinitionSchema } from "./domain/job.js";
import { firstFireAt } from "./domain/schedule.js";
import { Alerts } from "./engine/alerts.js";
import type { EngineContext, Logger } from "./engine/context.js";
import { Dispatcher } from "./engine/dispatcher.js";
import { EngineEventBus } from "./engine/events.js";
import { FiringLoop } from "./engine/firing.js";
import { Inbound } from "./engine/inbound.js";
import { jobExecutions } from "./engine/job-executions.js";
import { Leases } from "./engine/leases.js";
import { Registry } from "./engine/registry.js";
import { RetentionLoop } from "./engine/retention.js";
import { applyEvent, newExecutionId } from "./engine/transitions.js";
import { EventTriggers } from "./engine/triggers.js";
import { LinkAuth } from "./link/auth.js";
import { CoordinatorLink } from "./link/mqtt-link.js";
import { CoordinatorMetrics } from "./metrics.js";
import { ApiTokens } from "./security/api-tokens.js";
import { Identities } from "./security/identities.js";
import { loadOrCreateSecrets, mqttPassword, type Secrets } from "./security/secrets.js";
import type {
  ExecutionRecord,
  IdentityRecord,
  NewExecution,
  Store,
  StoredJob,
} from "./store/port.js";
import { SqliteStore } from "./store/sqlite/sqlite-store.js";

/** A device command: run `handler` on one agent at `at`, and never after `deadline`. */
export interface CommandRequest {
  agentId: string;
  handler: string;
  params?: Record<string, unknown>;
  /** UTC ms. @default now */
  at?: number;
  /** UTC ms. @default at + 30 s */
  deadline?: number;
  /** @default 30000 */
  timeoutMs?: number;
  priority?: number;
}

/**
 * A device command aimed at one agent, or at every agent known to the registry whose tags include
 * all of `selector`'s and that offers the handler.
 */
export type CommandsRequest = Omit<CommandRequest, "agentId"> &
  (
    | { agentId: string; selector?: undefined }
    | { selector: Record<string, string>; agentId?: undefined }
  );

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
 * The coordinator service: the store, the MQTT link, the registry and the engine loops, wired.
 * Owns every timer, socket and handle it opens; `close()` releases them.
 */
export class Coordinator {
  readonly store: Store;
  readonly registry: Registry;
  /** The leases of executions agents hold (memory only; rebuilt after a restart). */
  readonly leases: Leases;
  /** Typed engine events: transitions, fires, misses, agents, dropped and invalid messages. */
  readonly events: EngineEventBus;
  /** Prometheus metrics, in a registry of this coordinator's own. */
  readonly metrics: CoordinatorMetrics;
  private readonly ctx: EngineContext;
  private readonly inbound: Inbound;
  private readonly firing: FiringLoop;
  private readonly dispatcher: Dispatcher;
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

  constructor(config: CoordinatorConfig, deps: CoordinatorDeps = {}) {
    const clock = deps.clock ?? systemClock;
    const log: Logger = deps.log ?? (() => {});
    this.store = deps.store ?? openStore(config, clock);
    // The writes of a failed commit were undone: what the registry caches of them (acked seqs)
    // is re-read, and the agents, never acked, re-send those reports.
    this.store.onCommitError = (err) => {
      log("error", err.message);
      this.registry.load().catch(() => {});
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
    this.registry = new Registry(this.ctx);
    if (config.security.messages === "required") {
      // An enrolled agent is routed by the tags it was enrolled with: a device cannot claim a
      // tag (a site, a role) to be sent another's commands.
      this.registry.tagsOf = (agentId) => this.identities.get(agentId)?.tags;
    }
    const beforeRegistry = this.identities.onChange;
    this.identities.onChange = (identity) => {
      beforeRegistry?.(identity);
      if (identity.status === "revoked") {
        this.registry.revoked(identity.agentId).catch((err: unknown) => {
          log(
            "error",
            `taking revoked agent ${identity.agentId} offline failed: ${(err as Error).message}`,
          );
        });
      }
    };
    this.metrics = new CoordinatorMetrics({
      events: this.events,
      fleet: this.registry,
      store: this.store,
    });
    // A lease lapses after three silent heartbeats; a query gets two heartbeats (2 s at least).
    const leases = new Leases(config.heartbeatMs * 3, Math.max(2_000, config.heartbeatMs * 2));
    this.leases = leases;
    this.inbound = new Inbound(this.ctx, this.registry, leases);
    this.firing = new FiringLoop(this.ctx);
    this.dispatcher = new Dispatcher(this.ctx, this.registry, leases);
    this.retention = new RetentionLoop(this.ctx);
    this.inbound.onChange = () => this.dispatcher.kick();
    this.triggers = new EventTriggers(this.ctx, () => this.dispatcher.kick());
    this.inbound.onEvent = (name, msgId, payload) => this.triggers.onEvent(name, msgId, payload);
    this.events.on("transition", (e) => {
      // A lease is for work an agent holds: once the execution has left it (ended, or back to
      // waiting for a dispatch) the entry goes, or the table would grow by one per execution.
      if (e.to !== "DISPATCHED" && e.to !== "SCHEDULED" && e.to !== "RUNNING") {
        leases.forget(e.executionId);
      }
      // STICKY follows the agent that last ran the job successfully.
      if (e.to === "SUCCEEDED" && e.jobId !== null && e.agentId !== null) {
        this.dispatcher.router.noteSucceeded(e.jobId, e.agentId);
      }
      if (!TERMINAL_STATES.has(e.to)) return;
      this.triggers
        .onTransition(e)
        .catch((err: unknown) => log("error", `after-trigger failed: ${(err as Error).message}`));
    });
    this.firing.onFired = () => this.dispatcher.kick();
    this.alerts = new Alerts(this.ctx);
  }

  async start(): Promise<void> {
    await this.registry.load();
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
        this.dispatcher.kick();
      },
    });
    this.firing.start();
    this.dispatcher.start();
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

  /**
   * Validates a job definition and stores it (a new version when it changed), recording `actor`
   * (an API token's name) in the job's history.
   */
  async putJob(
    input: JobDefinitionInput | unknown,
    actor = "system",
    action?: "paused" | "resumed",
  ): Promise<StoredJob> {
    const parsed = jobDefinitionSchema.safeParse(input);
    if (!parsed.success) {
      const id = (input as { id?: unknown } | null)?.id;
      throw new AxError(
        "AX_JOB_INVALID",
        `job${typeof id === "string" ? ` "${id}"` : ""} is invalid\n${formatIssues(parsed.error)}`,
        {
          context: {
            issues: parsed.error.issues.map((i) => ({
              path: i.path.map(String),
              message: i.message,
            })),
          },
        },
      );
    }
    const def = parsed.data;
    if (def.trigger.type === "after" && def.trigger.job === def.id) {
      throw new AxError(
        "AX_JOB_INVALID",
        `job "${def.id}" is invalid\ntrigger.job: a job cannot fire after itself`,
        {
          context: {
            issues: [{ path: ["trigger", "job"], message: "a job cannot fire after itself" }],
          },
        },
      );
    }
    const now = this.ctx.clock.wallNow();
    const existing = await this.store.getJob(def.id);
    const sameTrigger =
      existing && JSON.stringify(existing.definition.trigger) === JSON.stringify(def.trigger);
    // An unchanged trigger keeps its next fire time, so re-loading a jobs file fires nothing twice.
    const nextFireAt = sameTrigger ? existing.nextFireAt : firstFireAt(def.trigger, now);
    const job = await this.store.putJob(
      def,
      nextFireAt,
      now,
      action === undefined ? { actor } : { actor, action },
    );
    this.triggers.invalidate();
    await this.firing.rescan();
    await this.store.flush();
    return job;
  }

  /**
   * Cancels an execution (DESIGN §3). One not yet dispatched ends CANCELED at once; one held by
   * an agent is sent a cancel, and the agent's answer ends it (or says it was too late).
   */
  async cancelExecution(id: string, actor = "system"): Promise<ExecutionRecord> {
    const exec = await this.store.getExecution(id);
    if (!exec)
      throw new AxError("AX_EXEC_NOT_FOUND", `execution "${id}" not found`, { context: { id } });
    if (TERMINAL_STATES.has(exec.state)) {
      throw new AxError("AX_EXEC_CONFLICT", `execution "${id}" already ended ${exec.state}`, {
        context: { id },
      });
    }
    await applyEvent(this.ctx, id, { type: "cancel" }, () => ({}), { by: "operator", actor });
    await this.store.flush();
    return (await this.store.getExecution(id)) as ExecutionRecord;
  }

  /**
   * Retries an execution that ended FAILED, TIMED_OUT, EXPIRED or CANCELED, as a new attempt: a
   * new execution (terminal states stay final) that records which one it retries.
   */
  async retryExecution(id: string, actor = "system"): Promise<string> {
    const old = await this.store.getExecution(id);
    if (!old)
      throw new AxError("AX_EXEC_NOT_FOUND", `execution "${id}" not found`, { context: { id } });
    if (!["FAILED", "TIMED_OUT", "EXPIRED", "CANCELED"].includes(old.state)) {
      throw new AxError(
        "AX_EXEC_CONFLICT",
        `execution "${id}" is ${old.state}; only a failed, timed-out, expired or canceled one can be retried`,
        {
          context: { id },
        },
      );
    }
    const now = this.ctx.clock.wallNow();
    const newId = newExecutionId(now);
    await this.store.createExecution(
      {
        ...old,
        id: newId,
        fireAt: now,
        deadline: now + Math.max(0, old.deadline - old.fireAt),
        maxAttempts: Math.max(old.maxAttempts, old.attempt + 1),
        createdAt: now,
      },
      now,
      { actor, retryOf: id },
    );
    this.metrics.operatorRetry();
    this.ctx.log("info", `execution ${id} retried as ${newId}`, {
      executionId: newId,
      retryOf: id,
    });
    await this.store.flush();
    this.dispatcher.kick();
    return newId;
  }

  /**
   * Fires a job now, outside its trigger (an operator's "run now"), with all its rules: shards,
   * group, routing tags. Returns the id of the first execution (the only one unless sharded).
   */
  async triggerJob(jobId: string, actor = "system"): Promise<string> {
    return (await this.triggerJobAll(jobId, actor))[0] ?? "";
  }

  /** {@link triggerJob}, returning the ids of every execution created (one per shard). */
  async triggerJobAll(jobId: string, actor = "system"): Promise<string[]> {
    const job = await this.store.getJob(jobId);
    if (!job)
      throw new AxError("AX_JOB_NOT_FOUND", `job "${jobId}" not found`, { context: { jobId } });
    const now = this.ctx.clock.wallNow();
    const executions = jobExecutions(job, now, now);
    for (const e of executions) await this.store.createExecution(e, now, { actor });
    await this.store.appendJobHistory({
      jobId,
      at: now,
      action: "triggered",
      version: job.version,
      actor,
      detail: { executionIds: executions.map((e) => e.id) },
    });
    await this.store.flush();
    this.dispatcher.kick();
    return executions.map((e) => e.id);
  }

  /**
   * Fires every job listening for event `name` (as a message on `ax/v1/events/{name}` would),
   * with `payload` merged into their params. Returns how many jobs fired.
   */
  async fireEvent(name: string, payload: Record<string, unknown> = {}): Promise<number> {
    const fired = await this.triggers.onEvent(
      name,
      newExecutionId(this.ctx.clock.wallNow()),
      payload,
    );
    await this.store.flush();
    return fired;
  }

  /**
   * The outcome of one firing of a job (all its shards): SUCCEEDED when every shard succeeded,
   * RUNNING while any has not ended, FAILED otherwise; with the count of shards in each state.
   */
  async firingOutcome(
    jobId: string,
    scheduledFor: number,
  ): Promise<{
    state: "SUCCEEDED" | "RUNNING" | "FAILED";
    shards: number;
    byState: Record<string, number>;
  }> {
    const execs = await this.store.listExecutions({ jobId, scheduledFor, limit: 10_000 });
    const byState: Record<string, number> = {};
    for (const e of execs) byState[e.state] = (byState[e.state] ?? 0) + 1;
    const open = execs.some((e) => !TERMINAL_STATES.has(e.state));
    const state = open
      ? "RUNNING"
      : execs.length > 0 && execs.every((e) => e.state === "SUCCEEDED")
        ? "SUCCEEDED"
        : "FAILED";
    return { state, shards: execs.length, byState };
  }

  /** Pauses a job: it fires nothing until resumed (a new version with `paused: true`). */
  async pauseJob(jobId: string, actor = "system"): Promise<StoredJob> {
    return this.setPaused(jobId, true, actor);
  }

  /** Resumes a job; nominal times missed while paused follow its misfire policy. */
  async resumeJob(jobId: string, actor = "system"): Promise<StoredJob> {
    return this.setPaused(jobId, false, actor);
  }

  private async setPaused(jobId: string, paused: boolean, actor: string): Promise<StoredJob> {
    const job = await this.store.getJob(jobId);
    if (!job)
      throw new AxError("AX_JOB_NOT_FOUND", `job "${jobId}" not found`, { context: { jobId } });
    if (job.definition.paused === paused) return job;
    return this.putJob({ ...job.definition, paused }, actor, paused ? "paused" : "resumed");
  }

  /** Creates a device command aimed at one agent; returns its execution id. */
  async sendCommand(req: CommandRequest, actor = "system"): Promise<string> {
    const now = this.ctx.clock.wallNow();
    const id = newExecutionId(now);
    await this.store.createExecution(commandExecution(id, req, now), now, { actor });
    await this.store.flush();
    this.dispatcher.kick();
    return id;
  }

  /**
   * Creates a device command for one agent (`agentId`: created even when no such agent is known
   * yet — it waits PENDING for the agent and expires at its deadline), or one for each agent known
   * to the registry, online or not, whose tags include all of `selector`'s and that offers the
   * handler (none: AX_AGENT_NOT_FOUND). Returns each target with its execution id, by agent id.
   */
  async sendCommands(
    req: CommandsRequest,
    actor = "system",
  ): Promise<{ agentId: string; executionId: string }[]> {
    const { selector } = req;
    let agentIds: string[];
    if (selector === undefined) {
      agentIds = [req.agentId];
    } else {
      const tags = Object.entries(selector);
      const tagged = this.registry.list().filter((a) => tags.every(([k, v]) => a.tags[k] === v));
      agentIds = tagged
        .filter((a) => a.handlers.includes(req.handler))
        .map((a) => a.agentId)
        .sort();
      if (agentIds.length === 0) {
        throw new AxError(
          "AX_AGENT_NOT_FOUND",
          tagged.length === 0
            ? `no agent has the tags ${JSON.stringify(selector)}`
            : `no agent with the tags ${JSON.stringify(selector)} offers handler "${req.handler}"`,
          { context: { selector, handler: req.handler } },
        );
      }
    }
    const now = this.ctx.clock.wallNow();
    const out: { agentId: string; executionId: string }[] = [];
    for (const agentId of agentIds) {
      const executionId = newExecutionId(now);
      await this.store.createExecution(
        commandExecution(executionId, { ...req, agentId }, now),
        now,
        { actor },
      );
      out.push({ agentId, executionId });
    }
    await this.store.flush();
    this.dispatcher.kick();
    return out;
  }

  /**
   * Deletes a job: it fires no more; its executions, open ones included, are left as they are.
   * AX_JOB_NOT_FOUND when there is no such job.
   */
  async deleteJob(jobId: string, actor = "system"): Promise<void> {
    if (!(await this.store.deleteJob(jobId, { actor, at: this.ctx.clock.wallNow() })))
      throw new AxError("AX_JOB_NOT_FOUND", `job "${jobId}" not found`, { context: { jobId } });
    this.triggers.invalidate();
    // Its round-robin cursor, sticky agent and shard placement go with it.
    this.dispatcher.router.forgetKey(jobId);
    await this.store.flush();
  }

  /**
   * Enrols an agent (docs/security.md), refusing the coordinator's own broker user name: an
   * agent of that name would log in to the broker as the coordinator.
   */
  async enrollAgent(
    agentId: string,
    options: { tags?: Record<string, string>; rotate?: boolean; actor: string },
  ): Promise<{ identity: IdentityRecord; file: IdentityFile }> {
    // Its broker login (derived or configured) and its client id, whether or not messages are
    // authenticated now: an agent by that name would share the coordinator's login or session.
    const config = this.ctx.config;
    const own = [
      coordinatorMqttLogin(config, this.secrets).username,
      config.mqtt.clientId ?? defaultClientId(config),
    ];
    if (own.includes(agentId)) {
      throw new AxError(
        "AX_API_INVALID_REQUEST",
        `agent id "${agentId}" is the coordinator's own MQTT user name or client id`,
        {
          context: {
            issues: [
              {
                path: ["body", "agentId"],
                message: "is the coordinator's MQTT user name or client id",
              },
            ],
          },
        },
      );
    }
    return this.identities.enroll(agentId, options);
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

  /** Every message received so far handled, and the dispatcher idle (for tests and shutdown). */
  async settle(): Promise<void> {
    await this.inbound.drain();
    await this.dispatcher.idle();
  }

  async close(): Promise<void> {
    this.alerts.close();
    this.metrics.close();
    this.firing.close();
    this.dispatcher.close();
    this.retention.close();
    await this.dispatcher.idle();
    await this.retention.idle();
    await this.ctx.link.close();
    await this.inbound.drain();
    await this.store.close();
  }
}

/** The execution of a device command (one attempt; defaults as {@link CommandRequest} says). */
function commandExecution(id: string, req: CommandRequest, now: number): NewExecution {
  const at = req.at ?? now;
  return {
    id,
    kind: "command",
    jobId: null,
    jobVersion: null,
    handler: req.handler,
    params: req.params ?? {},
    targetAgentId: req.agentId,
    fireAt: at,
    deadline: req.deadline ?? at + 30_000,
    timeoutMs: req.timeoutMs ?? 30_000,
    dispatchTimeoutMs: 5_000,
    maxAttempts: 1,
    maxDispatches: 3,
    priority: req.priority ?? 0,
    retryBaseMs: 1000,
    retryCapMs: 60_000,
    createdAt: now,
  };
}
