import type { Clock } from "../../shared/clock.js";
import type { CoordinatorConfig } from "../config.js";
import type { CoordinatorLink } from "../link/mqtt-link.js";
import type { AlertRecord, EventFiring, ExecutionRecord, Store } from "../store/port.js";
import type { EngineEventBus, EngineEvents } from "./events.js";

/** A structured log line sink; the CLI decides how lines are shown. */
export type Logger = (
  level: "debug" | "info" | "warn" | "error",
  msg: string,
  fields?: Record<string, unknown>,
) => void;

/** What every engine loop is handed: the config, the store, the link, the clock and a logger. */
export interface EngineContext {
  config: CoordinatorConfig;
  store: Store;
  link: CoordinatorLink;
  clock: Clock;
  log: Logger;
  events: EngineEventBus;
  /**
   * Several coordinators on one store: this one's `cluster.id`, written into the detail of every
   * timeline entry it writes (`coordinator`), so an execution shows who handled each step.
   */
  coordinatorId?: string;
  /**
   * Where this coordinator's HTTP API listens, once it does (set by the HTTP server): with
   * `http.port` 0 the port is known only then, and agents are sent there for bundles.
   */
  listening?: { host: string; port: number };
  /**
   * Several coordinators on one store with `cluster.dispatch` `shared`: what this one handles
   * of the fleet's work. Undefined otherwise (this one handles all of it while it is active).
   */
  share?: Share;
  /**
   * The `after` triggers: what an execution that ends fires, written with the transition that
   * ends it (TransitionWrite.followUps). Unset: nothing follows.
   */
  followUps?: FollowUps;
  /**
   * The webhook alerts an execution's transitions raise, written with the transition
   * (TransitionWrite.alerts). Unset: none.
   */
  transitionAlerts?: TransitionAlerts;
}

/** One applied transition, as the engine announces it and {@link TransitionAlerts} sees it. */
export type AppliedTransition = EngineEvents["transition"];

/** The alerts of an execution's transitions ({@link EngineContext.transitionAlerts}). */
export interface TransitionAlerts {
  /** The alerts one transition raises, one per webhook that wants its kind (often none). */
  of(t: AppliedTransition): AlertRecord[];
  /**
   * The alerts of nominal times a job missed, one per webhook that wants `fire.missed`, for the
   * write that records them missed (FireBatch.alerts).
   */
  missed(m: EngineEvents["missed"]): AlertRecord[];
  /**
   * The alerts of an agent gone offline, one per webhook that wants `agent.offline`, for the
   * write that records it offline (Store.putAgent).
   */
  offline(o: { agentId: string; reason: string; at: number }): AlertRecord[];
  /** Told once the write that carried them (a transition, missed fires) is committed: they are delivered. */
  recorded(alerts: readonly AlertRecord[]): void;
}

/** What follows an execution that ends ({@link EngineContext.followUps}). */
export interface FollowUps {
  /**
   * The follow-ups of `exec`, as its transition into a final state leaves it, or undefined when
   * none listens (synchronous while the listening jobs are known).
   */
  plan(exec: ExecutionRecord): EventFiring | undefined | Promise<EventFiring | undefined>;
  /** Told once the transition that carried them is committed. */
  fired(firing: EventFiring): void;
}

/** This coordinator's share of the work, with `cluster.dispatch` `shared` (Membership.owns). */
export interface Share {
  /** Whether it handles the agent: its messages, its commands, the leases and timeouts of its work. */
  agent(agentId: string): boolean;
  /** Whether it routes and dispatches the job's executions (it fires the job too). */
  job(jobId: string): boolean;
  /** How many coordinators share the work now (this one included). */
  members(): number;
}
