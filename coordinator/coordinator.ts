import { createHash } from "node:crypto";
import { hostname } from "node:os";
import { resolve } from "node:path";
import { type Clock, systemClock } from "../shared/clock.js";
import { AxError } from "../shared/errors.js";
import type { IdentityFile } from "../shared/identity.js";
import { requireLogin } from "./broker/mosquitto.js";
import { syncMosquitto } from "./broker/mosquitto-files.js";
import { type CoordinatorConfig, secretsDir } from "./config.js";
import type { JobDefinitionInput } from "./domain/job.js";
import { Alerts } from "./engine/alerts.js";
import type { EngineContext, Logger, Share } from "./engine/context.js";
import { EngineEventBus } from "./engine/events.js";
import { ExecutionLoop } from "./engine/execution-loop.js";
import { FiringLoop } from "./engine/firing.js";
import { Fleet } from "./engine/fleet.js";
import { Inbound } from "./engine/inbound.js";
import { Leases } from "./engine/leases.js";
import { Membership, type MembershipView, offsetClock, type Role } from "./engine/membership.js";
import { RetentionLoop } from "./engine/retention.js";
import { RolloutEngine } from "./engine/rollouts.js";
import { EventTriggers } from "./engine/triggers.js";
import { LinkAuth } from "./link/auth.js";
import { CoordinatorLink } from "./link/mqtt-link.js";
import { CoordinatorMetrics } from "./metrics.js";
import { AccessOperations } from "./operations/access.js";
import { AgentOperations } from "./operations/agents.js";
import { BundleOperations } from "./operations/bundles.js";
import {
  CommandOperations,
  type CommandRequest,
  type CommandsRequest,
  type CommandTarget,
} from "./operations/commands.js";
import { ExecutionOperations } from "./operations/executions.js";
import { type FiringOutcome, JobOperations } from "./operations/jobs.js";
import { RolloutOperations } from "./operations/rollouts.js";
import { packageJson } from "./package-files.js";
import { ApiTokens } from "./security/api-tokens.js";
import { Identities } from "./security/identities.js";
import { loadOrCreateSecrets, mqttPassword, type Secrets } from "./security/secrets.js";
import { setCursorKey } from "./store/cursor.js";
import type { ExecutionRecord, IdentityRecord, Store, StoredJob } from "./store/port.js";
import { PgStore } from "./store/postgres/pg-store.js";
import { SqliteStore } from "./store/sqlite/sqlite-store.js";

/** What the coordinator can serve right now (readiness). */
export interface Readiness {
  ready: boolean;
  /** The store answers a read. */
  store: boolean;
  /** The MQTT link is connected. */
  mqtt: boolean;
  /** `active`, or (several coordinators on one store) `standby` or `fenced`, which are not ready. */
  role: Role;
}

export interface CoordinatorDeps {
  clock?: Clock;
  log?: Logger;
  store?: Store;
}

/**
 * The store a coordinator opens from its config: PostgreSQL (`store.url`; connected and migrated
 * before this resolves), or the SQLite file with group commit.
 */
export async function openStore(
  config: CoordinatorConfig,
  clock: Clock = systemClock,
): Promise<Store> {
  if (config.store.url === undefined) return openSqliteStore(config, clock);
  return PgStore.open({
    url: config.store.url,
    schema: config.store.schema,
    poolMax: config.store.poolMax,
    now: () => clock.wallNow(),
    maxErrorTextBytes: config.maxErrorTextBytes,
    membershipTimeoutMs: Math.ceil(config.cluster.leaseMs / 3),
  });
}

/** The SQLite store of a config (`store.path`), opened at once. */
export function openSqliteStore(
  config: CoordinatorConfig,
  clock: Clock = systemClock,
): SqliteStore {
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
 * coordinators (other stores, or other prefixes) never take each other's. On a PostgreSQL store,
 * which several coordinators share, the host and the HTTP port are part of it too.
 */
export function defaultClientId(config: CoordinatorConfig): string {
  const store =
    config.store.url === undefined
      ? resolve(config.store.path)
      : `${withoutPassword(config.store.url)}\u0000${hostname()}\u0000${config.http.port}`;
  const key = `${config.mqtt.prefix}\u0000${store}`;
  return `ax-c-${createHash("sha256").update(key).digest("hex").slice(0, 16)}`;
}

/** A database URL with its password left out, for ids and logs. */
export function withoutPassword(url: string): string {
  try {
    const u = new URL(url);
    u.password = "";
    return u.toString();
  } catch {
    return url.replace(/:[^:@/]*@/, "@");
  }
}

/**
 * How long a standby that fires its share holds its announcement of what it fired, ms: one
 * NOTIFY per interval at most. The fires were made `dispatchLead` (500 ms) ahead of their nominal
 * times, so the active one still dispatches them well ahead.
 */
const ANNOUNCE_MS = 10;

/** This coordinator's name among those sharing a store: `cluster.id`, else its MQTT client id. */
export function coordinatorId(config: CoordinatorConfig): string {
  return config.cluster.id ?? config.mqtt.clientId ?? defaultClientId(config);
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
  /** Rollouts: staged device commands with abort criteria (docs/rollouts.md). */
  readonly rollouts: RolloutOperations;
  private readonly rolloutEngine: RolloutEngine;
  /** API tokens and agent enrolments. */
  readonly access: AccessOperations;
  /** Published agent bundles, served to agents for over-the-air updates (docs/bundles.md). */
  readonly bundles: BundleOperations;
  private readonly startedAtMono: number;
  /** With a store that several coordinators share: this one's membership; else undefined. */
  private readonly membership: Membership | undefined;
  private activated = false;
  private activating: Promise<void> | undefined;
  /**
   * Told when this coordinator was fenced (its membership lapsed or was taken over): it has
   * stopped dispatching and taking reports, and must be closed and started again.
   */
  onFenced: ((reason: string) => void) | undefined;

  constructor(config: CoordinatorConfig, deps: CoordinatorDeps = {}) {
    const baseClock = deps.clock ?? systemClock;
    const log: Logger = deps.log ?? (() => {});
    if (deps.store === undefined && config.store.url !== undefined) {
      // Connecting and migrating take round trips: the caller opens it (openStore) and passes it.
      throw new AxError(
        "AX_STORE_FAILED",
        "a PostgreSQL store (store.url) is opened with openStore() and passed in deps.store",
      );
    }
    this.store = deps.store ?? openSqliteStore(config, baseClock);
    let clock = baseClock;
    let share: Share | undefined;
    if (config.store.url !== undefined) {
      const membership = new Membership(
        this.store,
        baseClock,
        {
          id: coordinatorId(config),
          leaseMs: config.cluster.leaseMs,
          firing: config.cluster.firing,
          dispatch: config.cluster.dispatch,
          info: () => this.membershipInfo(),
        },
        log,
      );
      this.membership = membership;
      if (config.cluster.dispatch === "shared") {
        share = {
          agent: (agentId) => membership.owns(agentId),
          job: (jobId) => membership.owns(jobId),
          members: () => Math.max(1, membership.view().coordinators.length),
        };
      }
      // The engine reads the store's clock: dispatch timeouts and leases mean the same on every
      // coordinator, whatever their own clocks say.
      clock = offsetClock(baseClock, () => membership.clockOffsetMs);
    }
    // The writes of a failed commit were undone: what the fleet caches of them (acked seqs)
    // is re-read, and the agents, never acked, re-send those reports.
    this.store.onCommitError = (err) => {
      log("error", err.message);
      this.fleet.load().catch(() => {});
    };
    this.secrets = loadOrCreateSecrets(secretsDir(config));
    // Paging cursors are tagged with a key every coordinator sharing this fleet key derives alike.
    setCursorKey(this.secrets.fleet);
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
            peers: config.broker.coordinators,
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
        readWindowMs: config.mqtt.readWindowMs,
        freshSession: config.store.url !== undefined,
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
    this.ctx = {
      config,
      store: this.store,
      link,
      clock,
      log,
      events: this.events,
      ...(this.membership === undefined ? {} : { coordinatorId: coordinatorId(config) }),
      ...(share === undefined ? {} : { share }),
    };
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
            { agentId: identity.agentId },
          );
        });
      }
    };
    this.metrics = new CoordinatorMetrics({
      events: this.events,
      fleet: this.fleet,
      store: this.store,
      membership: () => this.membership?.view(),
    });
    // A lease lapses after three silent heartbeats; a query gets two heartbeats (2 s at least).
    const leases = new Leases(config.heartbeatMs * 3, Math.max(2_000, config.heartbeatMs * 2));
    this.leases = leases;
    this.inbound = new Inbound(this.ctx, this.fleet, leases);
    this.firing = new FiringLoop(this.ctx);
    this.executionLoop = new ExecutionLoop(this.ctx, this.fleet, leases);
    this.retention = new RetentionLoop(this.ctx);
    // Reports move work under way; what they make PENDING again kicks through its transition.
    this.inbound.onChange = () => this.executionLoop.nudge();
    // An agent back in reach (a heartbeat after silence, say) has its pending work read at once.
    this.fleet.onReachability = () => this.executionLoop.kick();
    this.triggers = new EventTriggers(this.ctx, () => this.executionLoop.kick());
    this.ctx.followUps = this.triggers;
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
    });
    this.firing.onFired = (def) => {
      this.firesRecorded++;
      // Fired by a coordinator that does not dispatch (a standby's share): the active one's
      // watch learns of it, coalesced, since one NOTIFY per fire serializes commits. With
      // dispatch shared the one that fires a job dispatches it, but a job in a group is
      // dispatched by the group's coordinator, which learns of it so. (Announcing every fire
      // had every coordinator read the pending work after each one's fires, for nothing.)
      if (this.activated) this.executionLoop.kick();
      if (!this.activated || (share !== undefined && def.group !== undefined)) this.announceFires();
    };
    const membershipOf = this.membership;
    if (membershipOf !== undefined) this.firing.owns = (jobId) => membershipOf.firesJob(jobId);
    this.alerts = new Alerts(this.ctx);
    this.ctx.transitionAlerts = this.alerts;
    const kick = () => this.executionLoop.kick();
    this.jobs = new JobOperations(this.ctx, this.firing, this.triggers, kick, (jobId) =>
      this.executionLoop.router.forgetKey(jobId),
    );
    this.executions = new ExecutionOperations(this.ctx, kick, () => this.metrics.operatorRetry());
    this.commands = new CommandOperations(this.ctx, this.fleet, this.identities, kick);
    this.agents = new AgentOperations(this.ctx, this.fleet);
    const revoked = (agentId: string) => this.identities.get(agentId)?.status === "revoked";
    this.rolloutEngine = new RolloutEngine(this.ctx, this.fleet, revoked, kick);
    this.rolloutEngine.onReached = (n) => this.metrics.rolloutReached(n);
    this.rolloutEngine.onAborted = () => this.metrics.rolloutAborted();
    this.rollouts = new RolloutOperations(this.ctx, this.fleet, this.rolloutEngine, revoked);
    this.bundles = new BundleOperations(this.store, this.secrets, this.identities, () =>
      clock.wallNow(),
    );
    this.access = new AccessOperations(this.apiTokens, this.identities, () => [
      coordinatorMqttLogin(config, this.secrets).username,
      config.mqtt.clientId ?? defaultClientId(config),
    ]);
    this.startedAtMono = clock.monoNow();
  }

  /**
   * Starts the coordinator. With a store several coordinators share, it joins them first, and
   * only the active one (the oldest live member) runs the loops and the MQTT link; a standby
   * answers the API and takes over when the active one's lease lapses. With `cluster.dispatch`
   * `shared` every member is active for its share (Membership.owns) from its join.
   */
  async start(): Promise<void> {
    const membership = this.membership;
    if (membership === undefined) {
      await this.activate();
      return;
    }
    membership.onFenced = (reason) => this.fenced(reason);
    // Until it is the active one, its fleet is the store's (it reads no agent's messages).
    this.fleet.followStore(true);
    let starting = true;
    let failedAtStart: unknown;
    membership.onActive = () => {
      this.activating = this.activate().catch((err: unknown) => {
        // Active from its start and cannot begin (the broker out of reach, a login refused):
        // the start fails as a coordinator's of its own does (exit 1, AX_LINK_FAILED).
        if (starting) {
          failedAtStart = err;
          return;
        }
        this.ctx.log(
          "error",
          `taking over as the active coordinator failed: ${(err as Error).message}`,
        );
        membership.fence(`taking over failed: ${(err as Error).message}`);
      });
    };
    // Who fires which job moved: each member plans what is its own now (and leaves the rest).
    // With dispatch shared, who handles which agent moved too.
    membership.onMembersChanged = () => {
      this.rescanFiring();
      if (this.ctx.share !== undefined) this.shareMoved();
    };
    // Every coordinator serves the API, standbys too: each knows the tokens and the enrolled
    // agents from the start, and again whenever another one changes them (watchWork below).
    await this.identities.load();
    await this.apiTokens.load();
    await membership.join();
    await this.activating;
    starting = false;
    if (failedAtStart !== undefined) throw failedAtStart;
    if (membership.role === "standby") {
      const shared = membership.firing === "shared";
      this.ctx.log(
        "info",
        shared
          ? "coordinator started as a standby, firing its share of the jobs"
          : "coordinator started as a standby",
        { mqtt: this.ctx.config.mqtt.url },
      );
      if (shared) this.firing.start();
      // Its API may have something for an agent (a cancel): it is sent at once, from here. Not
      // under another member's client id: the broker would end that one's connection (the
      // membership logs the clash as an error).
      const clientId = this.ctx.config.mqtt.clientId ?? defaultClientId(this.ctx.config);
      const clash = membership
        .view()
        .coordinators.some(
          (m) => m.id !== membership.view().id && m.info.mqttClientId === clientId,
        );
      let warnedAt = Number.NEGATIVE_INFINITY;
      const failed = (err: Error) => {
        const now = this.ctx.clock.monoNow();
        if (now - warnedAt < 60_000) return;
        warnedAt = now;
        this.ctx.log(
          "warn",
          `standby cannot reach the MQTT broker to send what its API asks (trying again): ${err.message}`,
          { mqtt: this.ctx.config.mqtt.url },
        );
      };
      if (!clash) this.ctx.link.startSending(failed);
    }
    this.watchStop = this.store.watchWork((what) => {
      if (what === "access") this.reloadAccess();
      else if (what === "jobs") {
        // Another coordinator's API changed a job: the event and after triggers read the jobs
        // that listen again (until now they kept what they had read, and a job created through
        // another coordinator never fired on an event here).
        this.triggers.invalidate();
        if (this.activated || membership.firing === "shared") this.rescanFiring();
      } else if (this.activated) this.executionLoop.kick();
    });
  }

  private watchStop: (() => void) | undefined;
  private reloadingAccess: Promise<void> | undefined;
  private closing = false;
  private accessAgain = false;

  /**
   * Loads the API tokens and the enrolments again: another coordinator on the store created or
   * revoked one, which must hold here at once (a token revoked there is refused here too). Calls
   * that come while one runs make one more run after it.
   */
  private reloadAccess(): void {
    if (this.reloadingAccess !== undefined) {
      this.accessAgain = true;
      return;
    }
    this.reloadingAccess = (async () => {
      do {
        this.accessAgain = false;
        try {
          await this.identities.reload();
          await this.apiTokens.load();
        } catch (err) {
          this.ctx.log(
            "warn",
            `loading tokens and enrolments again failed, trying again in 1 s: ${(err as Error).message}`,
          );
          // A revocation missed here would hold until the next change: try until it is read.
          if (!this.closing) this.ctx.clock.setTimer(() => this.reloadAccess(), 1_000);
        }
      } while (this.accessAgain);
      this.reloadingAccess = undefined;
    })();
  }
  /** Firings this process recorded (shown to the other coordinators). */
  private firesRecorded = 0;
  private announcing = false;

  private rescanFiring(): void {
    this.firing.rescan().catch((err: unknown) => {
      this.ctx.log("error", `firing scan failed: ${(err as Error).message}`);
    });
  }

  /**
   * Tells the active coordinator that this one recorded fires: at most one NOTIFY per
   * {@link ANNOUNCE_MS}, well inside the dispatch lead, so the fires of a busy standby cost the
   * database a notification per interval, not per fire.
   */
  private announceFires(): void {
    if (this.announcing) return;
    this.announcing = true;
    this.ctx.clock.setTimer(() => {
      this.announcing = false;
      this.store.announceWork("executions").catch((err: unknown) => {
        this.ctx.log("warn", `announcing fires failed: ${(err as Error).message}`);
      });
    }, ANNOUNCE_MS);
  }

  /** This coordinator's membership and the others', for /api/health; undefined on a store of its own. */
  membershipView(): MembershipView | undefined {
    return this.membership?.view();
  }

  /** What this coordinator reports of itself to the others at each renewal. */
  private membershipInfo(): Record<string, unknown> {
    return {
      version: packageJson().version,
      host: hostname(),
      role: this.membership?.role ?? "active",
      firing: this.ctx.config.cluster.firing,
      dispatch: this.ctx.config.cluster.dispatch,
      // Each needs its own: a standby's connection under the active one's would end it.
      mqttClientId: this.ctx.config.mqtt.clientId ?? defaultClientId(this.ctx.config),
      // Firings this process recorded since it started (its share, with firing shared).
      fired: this.firesRecorded,
      agentsOnline: this.activated
        ? this.fleet.list().filter((a) => a.status === "online" && this.fleet.owns(a.agentId))
            .length
        : 0,
      ...(this.ctx.share === undefined
        ? {}
        : {
            agentsHandled: this.activated
              ? this.fleet.list().filter((a) => this.fleet.owns(a.agentId)).length
              : 0,
          }),
      // What it holds: the leases of executions its agents run; and its lag to the database.
      leasesHeld: this.activated ? this.leases.size : 0,
      storeRoundTripMs: this.membership?.storeRoundTripMs ?? 0,
    };
  }

  /** Fenced: stops at once what acts on the world (no drain: another coordinator owns it now). */
  private fenced(reason: string): void {
    this.firing.close();
    this.executionLoop.close();
    this.retention.close();
    this.rolloutEngine.close();
    this.alerts.close();
    this.ctx.link.close().catch(() => {});
    this.onFenced?.(reason);
  }

  /** Runs the loops and the MQTT link: at start, or when a standby takes over. */
  private async activate(): Promise<void> {
    if (this.activated) return;
    this.activated = true;
    this.fleet.followStore(false);
    await this.fleet.load();
    await this.identities.load();
    // Enrolments changed while the coordinator was down (another process on the store) reach
    // the broker now.
    this.syncBroker();
    await this.apiTokens.load();
    this.inbound.onCaughtUp = () => this.ctx.link.resume();
    await this.ctx.link.start({
      message: (decoded, receivedAt) => this.inbound.handle(decoded, receivedAt),
      invalid: (error, topic, sender) => this.inbound.invalid(error, topic, sender),
      refused: (error, topic, stale) => this.inbound.refused(error, topic, stale),
      backlog: () => this.inbound.backlog,
      ...(this.ctx.share === undefined ? {} : { wants: (agentId) => this.fleet.owns(agentId) }),
      up: (at) => {
        this.inbound.linkUp(at);
        this.executionLoop.kick();
      },
    });
    this.firing.start();
    this.executionLoop.start();
    await this.lead();
    if (this.ctx.config.security.messages === "off") {
      this.ctx.log(
        "warn",
        'security.messages is "off": messages to and from agents are not authenticated, and anyone on the broker can command them (docs/security.md)',
      );
    }
    this.ctx.log("info", "coordinator started", { mqtt: this.ctx.config.mqtt.url });
  }

  private leading = false;

  /**
   * Starts what the cluster runs once (rollouts, retention, alerts left pending by an earlier
   * run) when this coordinator leads: the active one; with dispatch shared, the oldest member,
   * and so again when the oldest is lost.
   */
  private async lead(): Promise<void> {
    if (this.leading || !this.activated) return;
    if (this.membership !== undefined && !this.membership.leads()) return;
    this.leading = true;
    this.retention.start();
    this.rolloutEngine.start();
    await this.alerts.start();
    await this.jobs
      .repairPauses()
      .catch((err: unknown) =>
        this.ctx.log("error", `canceling what pauses left failed: ${(err as Error).message}`),
      );
  }

  /**
   * Who handles which agent moved (dispatch shared): the fleet takes the agents now its own from
   * the store (their silences count from now: Fleet.takenUpAt) and leaves the others', the
   * dispatcher reads again, and the oldest member takes up what runs once.
   */
  private shareMoved(): void {
    if (!this.activated) return;
    // An agent taken up (again) is asked for its outbox at its first heartbeat here, as after
    // the link's return: what it sent while no coordinator handled it was passed over.
    this.inbound.shareMoved();
    this.fleet
      .reown()
      .catch((err: unknown) =>
        this.ctx.log(
          "error",
          `taking up the agents of this share failed: ${(err as Error).message}`,
        ),
      )
      .finally(() => this.executionLoop.kick());
    this.lead().catch((err: unknown) =>
      this.ctx.log("error", `taking up rollouts and retention failed: ${(err as Error).message}`),
    );
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

  /** Where its HTTP API listens (the HTTP server tells it): agents are sent there for bundles. */
  servedAt(host: string, port: number): void {
    this.ctx.listening = { host, port };
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
    const role = this.membership?.role ?? "active";
    return { ready: mqtt && store && role === "active", store, mqtt, role };
  }

  /**
   * Stops firing new executions and waits up to `timeoutMs` for those in flight to end.
   * Returns how many are still not terminal.
   */
  async quiesce(timeoutMs: number): Promise<number> {
    this.firing.close();
    const until = this.ctx.clock.monoNow() + timeoutMs;
    for (;;) {
      // Counted, not listed: a store with a million open executions answers with one number.
      const counts = await this.store.countOpenExecutions();
      const open = Object.values(counts).reduce((a, b) => a + b, 0);
      if (open === 0 || this.ctx.clock.monoNow() >= until) return open;
      await new Promise<void>((resolve) => this.ctx.clock.setTimer(resolve, 50));
    }
  }

  /** Every message received so far handled, and the execution loop idle (for tests and shutdown). */
  async settle(): Promise<void> {
    await this.inbound.drain();
    await this.executionLoop.idle();
  }

  async close(): Promise<void> {
    this.closing = true;
    this.watchStop?.();
    this.membership?.close();
    this.alerts.close();
    this.metrics.close();
    this.firing.close();
    this.executionLoop.close();
    this.retention.close();
    this.rolloutEngine.close();
    await this.rolloutEngine.idle();
    await this.executionLoop.idle();
    await this.retention.idle();
    await this.ctx.link.close();
    await this.inbound.drain();
    // What heartbeats said since the last batch: kept for the next start's fleet page (by the
    // active coordinator only: a standby's view of the fleet is not current).
    if (this.activated && this.membership?.role !== "fenced") {
      await this.fleet
        .persistSeen(this.ctx.clock.wallNow(), Number.POSITIVE_INFINITY)
        .catch((err: unknown) =>
          this.ctx.log("warn", `agents' last heartbeats not stored: ${(err as Error).message}`),
        );
    }
    // A clean stop hands over at once: the standby need not wait for the lease to lapse.
    await this.membership?.leave();
    await this.store.close();
  }
}

export type { CommandRequest, CommandsRequest, CommandTarget } from "./operations/commands.js";
