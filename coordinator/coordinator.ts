import { type Clock, systemClock } from "../shared/clock.js";
import { AxError } from "../shared/errors.js";
import type { CoordinatorConfig } from "./config.js";
import { formatIssues, type JobDefinitionInput, jobDefinitionSchema } from "./domain/job.js";
import { nextFireAfter } from "./domain/schedule.js";
import type { EngineContext, Logger } from "./engine/context.js";
import { Dispatcher } from "./engine/dispatcher.js";
import { FiringLoop } from "./engine/firing.js";
import { Inbound } from "./engine/inbound.js";
import { Registry } from "./engine/registry.js";
import { newExecutionId } from "./engine/transitions.js";
import { CoordinatorLink } from "./link/mqtt-link.js";
import type { Store, StoredJob } from "./store/port.js";
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

export interface CoordinatorDeps {
  clock?: Clock;
  log?: Logger;
  store?: Store;
}

/**
 * The coordinator service: the store, the MQTT link, the registry and the engine loops, wired.
 * Owns every timer, socket and handle it opens; `close()` releases them.
 */
export class Coordinator {
  readonly store: Store;
  readonly registry: Registry;
  private readonly ctx: EngineContext;
  private readonly inbound: Inbound;
  private readonly firing: FiringLoop;
  private readonly dispatcher: Dispatcher;

  constructor(config: CoordinatorConfig, deps: CoordinatorDeps = {}) {
    const clock = deps.clock ?? systemClock;
    const log: Logger = deps.log ?? (() => {});
    this.store =
      deps.store ?? new SqliteStore({ path: config.store.path, now: () => clock.wallNow() });
    const link = new CoordinatorLink(
      {
        url: config.mqtt.url,
        prefix: config.mqtt.prefix,
        maxPayloadBytes: config.maxPayloadBytes,
        ...(config.mqtt.username === undefined ? {} : { username: config.mqtt.username }),
        ...(config.mqtt.password === undefined ? {} : { password: config.mqtt.password }),
        ...(config.mqtt.sharedGroup === undefined ? {} : { sharedGroup: config.mqtt.sharedGroup }),
      },
      () => clock.wallNow(),
    );
    this.ctx = { config, store: this.store, link, clock, log };
    this.registry = new Registry(this.ctx);
    this.inbound = new Inbound(this.ctx, this.registry);
    this.firing = new FiringLoop(this.ctx);
    this.dispatcher = new Dispatcher(this.ctx, this.registry);
    this.inbound.onChange = () => this.dispatcher.kick();
    this.firing.onFired = () => this.dispatcher.kick();
  }

  async start(): Promise<void> {
    await this.registry.load();
    await this.ctx.link.start({
      message: (decoded, receivedAt) => this.inbound.handle(decoded, receivedAt),
      invalid: (error, topic) => this.inbound.invalid(error, topic),
    });
    this.firing.start();
    this.dispatcher.start();
    this.ctx.log("info", "coordinator started", { mqtt: this.ctx.config.mqtt.url });
  }

  /** Validates a job definition and stores it (a new version when it changed). */
  async putJob(input: JobDefinitionInput | unknown): Promise<StoredJob> {
    const parsed = jobDefinitionSchema.safeParse(input);
    if (!parsed.success) {
      const id = (input as { id?: unknown } | null)?.id;
      throw new AxError(
        "AX_JOB_INVALID",
        `job${typeof id === "string" ? ` "${id}"` : ""} is invalid\n${formatIssues(parsed.error)}`,
      );
    }
    const def = parsed.data;
    const now = this.ctx.clock.wallNow();
    const existing = await this.store.getJob(def.id);
    const sameTrigger =
      existing && JSON.stringify(existing.definition.trigger) === JSON.stringify(def.trigger);
    // An unchanged trigger keeps its next fire time, so re-loading a jobs file fires nothing twice.
    const nextFireAt = sameTrigger ? existing.nextFireAt : nextFireAfter(def.trigger, now);
    const job = await this.store.putJob(def, nextFireAt, now);
    await this.firing.rescan();
    return job;
  }

  /** Creates a device command aimed at one agent; returns its execution id. */
  async sendCommand(req: CommandRequest): Promise<string> {
    const now = this.ctx.clock.wallNow();
    const at = req.at ?? now;
    const id = newExecutionId(now);
    await this.store.createExecution(
      {
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
      },
      now,
    );
    this.dispatcher.kick();
    return id;
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
    this.firing.close();
    this.dispatcher.close();
    await this.dispatcher.idle();
    await this.ctx.link.close();
    await this.inbound.drain();
    await this.store.close();
  }
}
