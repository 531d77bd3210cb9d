import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { type ExecState, TERMINAL_STATES } from "../shared/fsm.js";
import type { EngineEventBus } from "./engine/events.js";
import type { Fleet } from "./engine/fleet.js";
import type { MembershipView } from "./engine/membership.js";
import type { Store } from "./store/port.js";

/** The open states, each always exported (0 when none), so a series never vanishes. */
const OPEN_STATES: readonly ExecState[] = [
  "PENDING",
  "DISPATCHED",
  "SCHEDULED",
  "RUNNING",
  "RETRY_WAITING",
];

/** Store counters (totals that survive a restart) behind `ax_reports_dropped_total{reason}`. */
const DROPPED_REASONS = {
  stale_round: "stale_reports",
  illegal_transition: "illegal_transitions",
  superseded: "superseded_messages",
  duplicate: "duplicate_reports",
  out_of_order: "out_of_order_reports",
  unknown_agent: "reports_from_unknown_agents",
  unreadable: "unreadable_reports",
  missing: "missing_reports",
} as const;

/**
 * Seconds from an execution's nominal time to its first dispatch. Negative is the normal case:
 * the coordinator dispatches `dispatchLead` (500 ms) ahead so the agent fires from its own wheel.
 */
const LATENESS_BUCKETS = [
  -2, -1, -0.5, -0.25, -0.1, -0.05, 0, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];
const END_TO_END_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];

export interface MetricsSources {
  events: EngineEventBus;
  fleet: Fleet;
  store: Store;
  /** Several coordinators on one store: this one's membership, when it has one. */
  membership?: () => MembershipView | undefined;
}

/**
 * The coordinator's Prometheus metrics, in a registry of its own (never prom-client's global one,
 * so two coordinators in one process, as in tests, do not clash). Counts what the engine
 * announces on its event bus; reads the fleet and the store's persistent counters when rendered.
 * Every metric is documented in docs/api.md.
 */
export class CoordinatorMetrics {
  readonly registry = new Registry();
  private readonly unsubscribe: (() => void)[] = [];

  private readonly fires: Counter<"outcome">;
  private readonly missed: Counter;
  private readonly skipped: Counter;
  private readonly finished: Counter<"state" | "kind">;
  private readonly retries: Counter<"by">;
  private readonly lateness: Histogram<"kind">;
  private readonly endToEnd: Histogram<"state" | "kind">;
  private readonly executions: Gauge<"state">;
  private readonly dropped: Counter<"reason">;
  private readonly invalid: Counter;
  private readonly refused: Counter<"reason">;
  private readonly facts: Counter<"decision">;
  private readonly agentsOnline: Gauge;
  private readonly agentsKnown: Gauge;
  private readonly journalDepth: Gauge<"agent">;
  private readonly outboxDepth: Gauge<"agent">;
  private readonly clusterEpoch: Gauge;
  private readonly clusterRole: Gauge<"role">;
  private readonly clusterMembers: Gauge;
  private readonly clusterClockOffset: Gauge;
  private readonly clusterLeaseLeft: Gauge<"coordinator">;
  private readonly rolloutsOpen: Gauge<"state">;
  private readonly reachedByRollouts: Counter;
  private readonly rolloutAborts: Counter;

  constructor(private readonly sources: MetricsSources) {
    const registers = [this.registry];
    this.rolloutsOpen = new Gauge({
      name: "ax_rollouts",
      help: "Rollouts not ended, by state (CREATED, IN_PROGRESS, PAUSED).",
      labelNames: ["state"],
      registers,
    });
    this.reachedByRollouts = new Counter({
      name: "ax_rollout_reached_total",
      help: "Agents reached by rollouts (one execution each) since this coordinator started.",
      registers,
    });
    this.rolloutAborts = new Counter({
      name: "ax_rollout_aborts_total",
      help: "Rollouts aborted (by their criteria or by an operator) since this coordinator started.",
      registers,
    });
    this.fires = new Counter({
      name: "ax_fires_total",
      help: "Nominal fire times fired, by outcome: on_time, or late (fired under the misfire policy).",
      labelNames: ["outcome"],
      registers,
    });
    this.missed = new Counter({
      name: "ax_fires_missed_total",
      help: "Nominal fire times missed and not fired under the job's misfire policy (persistent).",
      registers,
    });
    this.skipped = new Counter({
      name: "ax_fires_skipped_total",
      help: "Executions ended SKIPPED by the overlap rules (the job was still running).",
      registers,
    });
    this.finished = new Counter({
      name: "ax_executions_finished_total",
      help: "Executions that reached a terminal state, by that state and kind (job or command).",
      labelNames: ["state", "kind"],
      registers,
    });
    this.retries = new Counter({
      name: "ax_retries_total",
      help: "Retries: by the retry policy (a new attempt scheduled) or by an operator.",
      labelNames: ["by"],
      registers,
    });
    this.lateness = new Histogram({
      name: "ax_trigger_lateness_seconds",
      help: "First dispatch time minus nominal time; negative means sent ahead of the fire time.",
      labelNames: ["kind"],
      buckets: LATENESS_BUCKETS,
      registers,
    });
    this.endToEnd = new Histogram({
      name: "ax_end_to_end_seconds",
      help: "Terminal state time minus nominal time, by terminal state and kind.",
      labelNames: ["state", "kind"],
      buckets: END_TO_END_BUCKETS,
      registers,
    });
    this.executions = new Gauge({
      name: "ax_executions",
      help: "Executions in each open state now.",
      labelNames: ["state"],
      registers,
    });
    this.dropped = new Counter({
      name: "ax_reports_dropped_total",
      help: "Agent reports dropped, by reason (persistent).",
      labelNames: ["reason"],
      registers,
    });
    this.invalid = new Counter({
      name: "ax_invalid_messages_total",
      help: "MQTT messages rejected as invalid before reaching the engine (persistent).",
      registers,
    });
    this.refused = new Counter({
      name: "ax_auth_refused_total",
      help: "MQTT messages refused by authentication (no MAC, a wrong one, stale or replayed, not enrolled), by reason, since start.",
      labelNames: ["reason"],
      registers,
    });
    this.facts = new Counter({
      name: "ax_late_facts_total",
      help: "Reports of an older round, or after the record had moved on, that were recorded (persistent).",
      labelNames: ["decision"],
      registers,
    });
    this.agentsOnline = new Gauge({
      name: "ax_agents_online",
      help: "Agents online now.",
      registers,
    });
    this.agentsKnown = new Gauge({
      name: "ax_agents_known",
      help: "Agents the coordinator knows, online or not.",
      registers,
    });
    this.journalDepth = new Gauge({
      name: "ax_agent_journal_depth",
      help: "Commands held in an online agent's journal, from its last heartbeat.",
      labelNames: ["agent"],
      registers,
    });
    this.outboxDepth = new Gauge({
      name: "ax_agent_outbox_depth",
      help: "Reports in an online agent's outbox not yet acknowledged, from its last heartbeat.",
      labelNames: ["agent"],
      registers,
    });
    this.clusterEpoch = new Gauge({
      name: "ax_cluster_epoch",
      help: "This coordinator's epoch on a store several coordinators share (0: a store of its own).",
      registers,
    });
    this.clusterRole = new Gauge({
      name: "ax_cluster_role",
      help: "1 for this coordinator's role (active, standby, fenced), 0 for the others.",
      labelNames: ["role"],
      registers,
    });
    this.clusterMembers = new Gauge({
      name: "ax_cluster_members",
      help: "Live coordinators on the store, this one included (1 on a store of its own).",
      registers,
    });
    this.clusterClockOffset = new Gauge({
      name: "ax_cluster_clock_offset_seconds",
      help: "The database's clock minus this coordinator's, as last measured.",
      registers,
    });
    this.clusterLeaseLeft = new Gauge({
      name: "ax_cluster_lease_remaining_seconds",
      help: "Per live coordinator: how long its lease still holds, by the database's clock, at the last renewal (a falling value is a coordinator that stopped renewing).",
      labelNames: ["coordinator"],
      registers,
    });
    for (const outcome of ["on_time", "late"]) this.fires.inc({ outcome }, 0);
    for (const by of ["policy", "operator"]) this.retries.inc({ by }, 0);

    const { events } = sources;
    this.unsubscribe.push(
      events.on("fired", (e) => this.fires.inc({ outcome: e.late ? "late" : "on_time" })),
      events.on("refusedMessage", (e) =>
        this.refused.inc({ reason: e.code.replace(/^AX_AUTH_/, "").toLowerCase() }),
      ),
      events.on("transition", (e) => {
        const kind = e.jobId === null ? "command" : "job";
        const nominal = e.scheduledFor ?? e.fireAt;
        // Round 1 is an execution's first dispatch ever; later rounds are redispatches and retries.
        if (e.to === "DISPATCHED" && e.from === "PENDING" && e.round === 1) {
          this.lateness.observe({ kind }, (e.at - nominal) / 1000);
        }
        if (e.to === "RETRY_WAITING" && e.from !== "RETRY_WAITING")
          this.retries.inc({ by: "policy" });
        if (TERMINAL_STATES.has(e.to) && !TERMINAL_STATES.has(e.from)) {
          this.finished.inc({ state: e.to, kind });
          this.endToEnd.observe({ state: e.to, kind }, (e.at - nominal) / 1000);
          if (e.to === "SKIPPED") this.skipped.inc();
        }
      }),
    );
  }

  /** An operator retried an execution (a new execution, outside the retry policy). */
  operatorRetry(): void {
    this.retries.inc({ by: "operator" });
  }

  /** A rollout reached `n` agents. */
  rolloutReached(n: number): void {
    this.reachedByRollouts.inc(n);
  }

  /** A rollout was aborted. */
  rolloutAborted(): void {
    this.rolloutAborts.inc();
  }

  /** The Content-Type of {@link render}'s text. */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** Reads the fleet and the store, then renders every metric in Prometheus' text format. */
  async render(): Promise<string> {
    const { store, fleet } = this.sources;
    const [counters, open, rollouts] = await Promise.all([
      store.counters(),
      store.countOpenExecutions(),
      store.listUnsettledRollouts(),
    ]);
    for (const state of ["CREATED", "IN_PROGRESS", "PAUSED"] as const) {
      this.rolloutsOpen.set({ state }, rollouts.filter((r) => r.state === state).length);
    }
    setTotal(this.missed, counters.missed_fires);
    setTotal(this.invalid, counters.invalid_messages);
    for (const decision of ["adopted", "both_ran", "noted"] as const) {
      setTotal(this.facts, counters[`facts_${decision}`], { decision });
    }
    for (const [reason, name] of Object.entries(DROPPED_REASONS)) {
      setTotal(this.dropped, counters[name], { reason });
    }
    for (const state of OPEN_STATES) this.executions.set({ state }, open[state] ?? 0);
    const agents = fleet.list();
    const online = agents.filter((a) => a.status === "online");
    this.agentsKnown.set(agents.length);
    this.agentsOnline.set(online.length);
    // Only online agents: an offline one's last heartbeat is stale, and its series would linger.
    this.journalDepth.reset();
    this.outboxDepth.reset();
    for (const a of online) {
      this.journalDepth.set({ agent: a.agentId }, a.journalDepth);
      this.outboxDepth.set({ agent: a.agentId }, a.outboxDepth);
    }
    const cluster = this.sources.membership?.();
    this.clusterEpoch.set(cluster?.epoch ?? 0);
    for (const role of ["active", "standby", "fenced"]) {
      this.clusterRole.set({ role }, (cluster?.role ?? "active") === role ? 1 : 0);
    }
    this.clusterClockOffset.set((cluster?.clockOffsetMs ?? 0) / 1000);
    this.clusterLeaseLeft.reset();
    if (cluster === undefined) this.clusterMembers.set(1);
    else {
      // The members as of the last renewal, less those whose lease has lapsed since by the
      // database's clock (as this process reads it): a member gone is not counted live until
      // the next renewal, and no lease shows below 0.
      const now = Date.now() + cluster.clockOffsetMs;
      const live = cluster.coordinators.filter((c) => c.leaseUntil > now);
      this.clusterMembers.set(live.length);
      for (const c of live) {
        this.clusterLeaseLeft.set({ coordinator: c.id }, (c.leaseUntil - now) / 1000);
      }
    }
    return this.registry.metrics();
  }

  /** Stops listening to the engine. */
  close(): void {
    for (const off of this.unsubscribe.splice(0)) off();
  }
}

/** Sets a counter to a total kept elsewhere (the store's counters survive restarts). */
function setTotal<L extends string>(
  counter: Counter<L>,
  value: number | undefined,
  labels?: Partial<Record<L, string>>,
): void {
  if (labels) {
    counter.remove(labels);
    counter.inc(labels, value ?? 0);
  } else {
    counter.reset();
    counter.inc(value ?? 0);
  }
}
