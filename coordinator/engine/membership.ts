import type { Clock, TimerHandle } from "../../shared/clock.js";
import { AxError } from "../../shared/errors.js";
import { hash32 } from "../domain/hash-ring.js";
import type { CoordinatorRecord, Store } from "../store/port.js";
import type { Logger } from "./context.js";

/** What a coordinator sharing a store is doing. */
export type Role = "standby" | "active" | "fenced";

/**
 * Who fires the jobs (`cluster.firing`): the active coordinator alone, or every live member its
 * share (the jobs that hash to it among the live members).
 */
export type Firing = "active" | "shared";

/**
 * Who dispatches and takes the agents' reports (`cluster.dispatch`): the active coordinator
 * alone, or every live member its share (the agents and the jobs that hash to it).
 */
export type Dispatch = "active" | "shared";

/** This coordinator's membership, as /api/health shows it. */
export interface MembershipView {
  id: string;
  epoch: number;
  role: Role;
  firing: Firing;
  dispatch: Dispatch;
  /** The store's clock minus this process's wall clock, ms (measured at each renewal). */
  clockOffsetMs: number;
  /** Every live coordinator on the store, oldest joined first (the active one is the first). */
  coordinators: CoordinatorRecord[];
}

export interface MembershipOptions {
  id: string;
  /** How long a membership holds without renewal, by the store's clock. */
  leaseMs: number;
  /** What this coordinator reports of itself at each renewal. */
  info: () => Record<string, unknown>;
  /** Who fires the jobs. @default "active" */
  firing?: Firing;
  /** Who dispatches and takes the reports. @default "active" */
  dispatch?: Dispatch;
}

/**
 * A coordinator's membership of a store that several coordinators share (PostgreSQL).
 *
 * One coordinator is active, the others stand by: the active one is the oldest live member (by
 * the time it joined, on the store's clock), so every member derives the same answer from the
 * same rows, with no election of its own. The active one holds the MQTT link: it dispatches and
 * takes the agents' reports; a standby renews its lease and waits. The jobs are fired by the
 * active one alone, or, with firing `shared`, by every member its share ({@link firesJob}).
 *
 * Losing the active one: its lease lapses (no renewal for `leaseMs`, by the store's clock), the
 * oldest standby finds itself first at its next renewal and becomes active. Two never act at
 * once, by two fences: the store refuses every write of a lapsed membership (AX_STORE_FENCED),
 * and, because a cut-off coordinator cannot learn that, each one also fences itself when its own
 * last renewal is `leaseMs` minus a margin old on its monotonic clock, which is before the store
 * can consider it lapsed (the store started the lease after this process sent the renewal).
 * A fenced coordinator stays fenced: it must stop (`onFenced`) and start again as a new epoch.
 *
 * With dispatch `shared` there is no standby: every live member is active for its share
 * ({@link owns}), and the oldest one also runs what the cluster needs once (rollouts,
 * retention): it {@link leads}. Each one fences itself as the active one does.
 */
export class Membership {
  private role_: Role = "standby";
  private epoch_ = 0;
  private offsetMs = 0;
  private roundTripMs = 0;
  private members: CoordinatorRecord[] = [];
  private tickTimer: TimerHandle | undefined;
  private deadlineTimer: TimerHandle | undefined;
  private ticking = false;
  private closed = false;
  /** Called once when this coordinator becomes the active one. */
  onActive: (() => void) | undefined;
  /** Called once when the membership is fenced; the coordinator must stop. */
  onFenced: ((reason: string) => void) | undefined;
  /** Called after a renewal found the live members changed (who fires which job moved). */
  onMembersChanged: (() => void) | undefined;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly options: MembershipOptions,
    private readonly log: Logger,
  ) {}

  get role(): Role {
    return this.role_;
  }

  get epoch(): number {
    return this.epoch_;
  }

  /** How long the last reading of the members took: this coordinator's lag to the store, ms. */
  get storeRoundTripMs(): number {
    return this.roundTripMs;
  }

  /** The store's clock minus this process's wall clock, ms. */
  get clockOffsetMs(): number {
    return this.offsetMs;
  }

  /** Who fires the jobs. */
  get firing(): Firing {
    return this.options.firing ?? "active";
  }

  /**
   * Whether this coordinator fires `jobId` now. With firing `active`: while it is the active
   * one. With `shared`: while it is the live member the job hashes to highest (rendezvous
   * hashing over the members' ids), so every member derives the same owner from the same rows, a
   * member that joins or lapses moves only its own share, and one restarted under its id gets
   * the same share back. Two members that
   * disagree for a renewal's time (one has read the new rows, the other not yet) may both fire a
   * nominal time: the store's fire row, UNIQUE per job and nominal time, records it once.
   */
  firesJob(jobId: string): boolean {
    return this.holds(this.firing, jobId);
  }

  /** Who dispatches and takes the reports. */
  get dispatch(): Dispatch {
    return this.options.dispatch ?? "active";
  }

  /**
   * Whether this coordinator handles `key` now: an agent (its messages, its commands, the
   * leases and timeouts of what it holds), a job (routing and dispatching its executions; the
   * same share as {@link firesJob}), an event's name. With dispatch `active`: while it is the
   * active one. With `shared`: while it is the member `key` hashes to highest, as for firing.
   * Two members that disagree for a renewal's time may both act on one key: each of their
   * writes is a compare-and-set of the store (a dispatch, a report's transition), so one of them
   * takes effect and the other is refused.
   */
  owns(key: string): boolean {
    return this.holds(this.dispatch, key);
  }

  /** {@link firesJob} and {@link owns}: all of it while active, or the share `key` falls in. */
  private holds(mode: Firing | Dispatch, key: string): boolean {
    if (this.role_ === "fenced" || this.closed) return false;
    if (mode === "active") return this.role_ === "active";
    return this.isMe(this.ownerOf(key));
  }

  /**
   * Whether this coordinator runs what the cluster needs once (rollouts, retention, alerts left
   * pending): the active one; with dispatch `shared`, the oldest live member.
   */
  leads(): boolean {
    if (this.role_ !== "active" || this.closed) return false;
    return this.dispatch === "active" || this.isMe(this.members[0]);
  }

  private isMe(m: CoordinatorRecord | undefined): boolean {
    return m !== undefined && m.id === this.options.id && m.epoch === this.epoch_;
  }

  private ownerOf(key: string): CoordinatorRecord | undefined {
    return ownerAmong(key, this.members);
  }

  view(): MembershipView {
    return {
      id: this.options.id,
      epoch: this.epoch_,
      role: this.role_,
      firing: this.firing,
      dispatch: this.dispatch,
      clockOffsetMs: this.offsetMs,
      // As read at the last renewal, less those whose lease has lapsed since by the store's
      // clock: a lost coordinator leaves the list when it stops being live, not up to a
      // renewal later.
      coordinators: this.members.filter((m) => m.leaseUntil > this.clock.wallNow() + this.offsetMs),
    };
  }

  /** Joins the store's coordinators and decides the role; renews every third of the lease. */
  async join(): Promise<void> {
    const sent = this.clock.monoNow();
    const record = await this.store.joinCoordinators(
      this.options.id,
      this.options.leaseMs,
      this.options.info(),
    );
    this.epoch_ = record.epoch;
    this.armDeadline(sent);
    await this.refresh();
    this.log(
      "info",
      `joined the store's coordinators as ${this.options.id}, epoch ${record.epoch}`,
      {
        epoch: record.epoch,
        role: this.role_,
      },
    );
    this.schedule();
  }

  /** Ends the membership (a clean stop): a standby takes over at its next renewal. */
  async leave(): Promise<void> {
    this.close();
    if (this.role_ === "fenced" || this.epoch_ === 0) return;
    await this.store.leaveCoordinators().catch((err: unknown) => {
      this.log("warn", `leaving the store's coordinators failed: ${(err as Error).message}`);
    });
  }

  close(): void {
    this.closed = true;
    if (this.tickTimer !== undefined) this.clock.clearTimer(this.tickTimer);
    if (this.deadlineTimer !== undefined) this.clock.clearTimer(this.deadlineTimer);
    this.tickTimer = undefined;
    this.deadlineTimer = undefined;
  }

  /** Fences this coordinator for good (also called when a write came back AX_STORE_FENCED). */
  fence(reason: string): void {
    if (this.role_ === "fenced") return;
    this.role_ = "fenced";
    this.close();
    this.log("error", `coordinator ${this.options.id} (epoch ${this.epoch_}) fenced: ${reason}`, {
      epoch: this.epoch_,
    });
    this.onFenced?.(reason);
  }

  private schedule(): void {
    if (this.closed) return;
    this.tickTimer = this.clock.setTimer(() => {
      this.tickTimer = undefined;
      this.tick().finally(() => this.schedule());
    }, this.options.leaseMs / 3);
  }

  private async tick(): Promise<void> {
    if (this.ticking || this.closed) return;
    this.ticking = true;
    const sent = this.clock.monoNow();
    try {
      // A store cut off by a partition may never answer: a renewal gets a third of the lease,
      // then counts as failed, so the next one is sent (and the deadline still acts).
      const renewed = await this.bounded(
        this.store.renewMembership(this.options.info()),
        "renewing the membership",
      );
      if (this.closed) return;
      if (!renewed) {
        // A standby holds nothing: whose lease lapsed (the database was away longer than its
        // lease) joins again, as a new epoch. But one that a newer start under its id replaced
        // stops, as the active one would: joining again would replace that start in turn, and
        // the two would take the id from each other for as long as both ran.
        // The active one holds work another may be taking over: it stops either way.
        if (this.role_ === "standby") {
          const newer = (await this.store.listCoordinators()).find(
            (m) => m.id === this.options.id && m.epoch > this.epoch_,
          );
          if (newer !== undefined) {
            this.fence(`another start of the same id joined (epoch ${newer.epoch})`);
          } else await this.rejoin(sent);
        } else this.fence("its lease lapsed, or another start of the same id joined");
        return;
      }
      this.armDeadline(sent);
      await this.refresh();
    } catch (err) {
      if (err instanceof AxError && err.code === "AX_STORE_FENCED" && this.role_ !== "standby") {
        this.fence(err.message);
      }
      // Otherwise the store could not be reached: the deadline acts if it lasts.
      else this.log("warn", `renewing the membership failed: ${(err as Error).message}`);
    } finally {
      this.ticking = false;
    }
  }

  /** `p`, or a rejection once a third of the lease passed without an answer. */
  private bounded<T>(p: Promise<T>, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = this.clock.setTimer(
        () =>
          reject(
            new Error(
              `${what}: no answer from the store within ${Math.round(this.options.leaseMs / 3)} ms`,
            ),
          ),
        this.options.leaseMs / 3,
      );
      p.then(
        (v) => {
          this.clock.clearTimer(timer);
          resolve(v);
        },
        (err: unknown) => {
          this.clock.clearTimer(timer);
          reject(err);
        },
      );
    });
  }

  /** A standby whose lease lapsed joins again, as a new epoch. */
  private async rejoin(sentMono: number): Promise<void> {
    const record = await this.store.joinCoordinators(
      this.options.id,
      this.options.leaseMs,
      this.options.info(),
    );
    this.log("info", `standby ${this.options.id} joined again as epoch ${record.epoch}`, {
      epoch: record.epoch,
    });
    this.epoch_ = record.epoch;
    this.armDeadline(sentMono);
    await this.refresh();
  }

  /**
   * The self-fence: fires when the renewal sent at `sentMono` is about to lapse unrenewed. The
   * active coordinator stops there; a standby, which holds nothing, only notes it and joins
   * again at its next renewal that reaches the store.
   */
  private armDeadline(sentMono: number): void {
    if (this.deadlineTimer !== undefined) this.clock.clearTimer(this.deadlineTimer);
    const margin = Math.min(500, this.options.leaseMs / 10);
    const at = sentMono + this.options.leaseMs - margin;
    this.deadlineTimer = this.clock.setTimer(
      () => {
        this.deadlineTimer = undefined;
        if (this.role_ === "standby") {
          this.log(
            "warn",
            `standby ${this.options.id}: no renewal reached the store for ${this.options.leaseMs} ms`,
          );
        } else this.fence(`no renewal reached the store for ${this.options.leaseMs} ms`);
      },
      Math.max(0, at - this.clock.monoNow()),
    );
  }

  /** Members already warned about, by setting, id and epoch. */
  private readonly mismatched = new Set<string>();

  /**
   * Warns, once per member's life, of a member that says it fires otherwise (`cluster.firing`
   * differs): with `active` and `shared` mixed, the active one fires every job and the others
   * their shares besides, which the fire rows record once but costs each time twice. The same
   * for `cluster.dispatch`: mixed, the active one and the shared ones both act on some agents.
   */
  private warnFiringMismatch(members: CoordinatorRecord[]): void {
    for (const m of members) {
      if (m.id === this.options.id) continue;
      for (const [setting, ours] of [
        ["firing", this.firing],
        ["dispatch", this.dispatch],
      ] as const) {
        const theirs = m.info[setting];
        if (theirs === undefined || theirs === ours) continue;
        const key = `${setting}\u0000${m.id}\u0000${m.epoch}`;
        if (this.mismatched.has(key)) continue;
        this.mismatched.add(key);
        this.log(
          "warn",
          `coordinator ${m.id} has cluster.${setting} "${String(theirs)}", this one (${this.options.id}) "${ours}": give every coordinator the same value`,
          { coordinator: m.id },
        );
      }
    }
  }

  /** Members already warned about for sharing this one's MQTT client id, by id and epoch. */
  private readonly sameClient = new Set<string>();

  /**
   * Warns, once per member's life, of a member that connects to the broker under this one's MQTT
   * client id (its `info.mqttClientId`): the broker keeps one connection per client id, so each
   * would end the other's, the active one's reads included.
   */
  private warnSharedClientId(members: CoordinatorRecord[]): void {
    const ours = this.options.info().mqttClientId;
    if (typeof ours !== "string") return;
    for (const m of members) {
      if (m.id === this.options.id || m.info.mqttClientId !== ours) continue;
      const key = `${m.id}\u0000${m.epoch}`;
      if (this.sameClient.has(key)) continue;
      this.sameClient.add(key);
      this.log(
        "error",
        `coordinator ${m.id} connects to the broker under this one's (${this.options.id}) MQTT client id "${ours}": give each coordinator its own mqtt.clientId, or each will end the other's connection`,
        { coordinator: m.id },
      );
    }
  }

  /** Reads the live members and the store's clock; becomes active when first among them. */
  private async refresh(): Promise<void> {
    const before = this.clock.wallNow();
    const [members, storeNow] = await this.bounded(
      Promise.all([this.store.listCoordinators(), this.store.clockNow()]),
      "reading the coordinators",
    );
    const after = this.clock.wallNow();
    this.roundTripMs = after - before;
    // Each reading carries the round trip's noise: a small change is smoothed, so the wall
    // clock the engine reads moves by fractions of a millisecond; a large one (a clock was set) is
    // taken at once.
    const measured = storeNow - (before + after) / 2;
    const first = this.members.length === 0;
    this.offsetMs =
      first || Math.abs(measured - this.offsetMs) > 1_000
        ? measured
        : this.offsetMs + (measured - this.offsetMs) / 8;
    const changed =
      members.length !== this.members.length ||
      members.some((m, i) => m.id !== this.members[i]?.id || m.epoch !== this.members[i]?.epoch);
    this.members = members;
    this.warnFiringMismatch(members);
    this.warnSharedClientId(members);
    if (changed && !first && !this.closed) this.onMembersChanged?.();
    if (this.role_ !== "standby" || this.closed) return;
    const shared = this.dispatch === "shared";
    if (shared ? members.some((m) => this.isMe(m)) : this.isMe(members[0])) {
      this.role_ = "active";
      this.log(
        "info",
        shared
          ? `coordinator ${this.options.id} is active, for its share of the agents and jobs`
          : `coordinator ${this.options.id} is now the active one`,
        { epoch: this.epoch_ },
      );
      this.onActive?.();
    }
  }
}

/** A clock whose wall time is the store's (`offset()` added): leases and timeouts agree across coordinators. */
export function offsetClock(base: Clock, offset: () => number): Clock {
  return {
    monoNow: () => base.monoNow(),
    wallNow: () => base.wallNow() + offset(),
    setTimer: (callback, delayMs) => base.setTimer(callback, delayMs),
    clearTimer: (timer) => base.clearTimer(timer),
  };
}

/**
 * The member `key` hashes to highest (rendezvous hashing over the members' ids): every member
 * derives the same one from the same rows, a member that joins or lapses moves only its own
 * share, and one restarted under its id gets the same share back.
 */
export function ownerAmong<M extends { id: string }>(
  key: string,
  members: readonly M[],
): M | undefined {
  let best: M | undefined;
  let bestScore = -1;
  for (const m of members) {
    const score = hash32(`${key}\u0000${m.id}`);
    if (score > bestScore || (score === bestScore && best !== undefined && m.id < best.id)) {
      best = m;
      bestScore = score;
    }
  }
  return best;
}
