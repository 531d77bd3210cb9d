import type { Heartbeat, Hello } from "../../shared/protocol/index.js";
import type { AgentRecord } from "../store/port.js";
import type { EngineContext } from "./context.js";

/** Missed heartbeats after which an agent is taken offline. */
export const MISSED_HEARTBEATS = 3;

/**
 * How long a heartbeat's figures (last seen, load, clock, journal) may live in memory only. They
 * are written in batches, not per heartbeat: at 10,000 agents and a 5 s heartbeat, a write per
 * heartbeat was 2,000 store writes a second for figures the API reads from memory anyway. A
 * status change (online, offline) is written at once.
 */
export const PRESENCE_PERSIST_MS = 30_000;

/** Agents whose figures one sweep writes at most: a few ms of work, so fires stay on time. */
export const PRESENCE_PERSIST_CHUNK = 1_000;

/**
 * How old the fleet may be when a coordinator that stands by answers from it (it reads no
 * agent's messages, so its fleet is the store's, read again when a request finds it older).
 */
export const FOLLOWED_FLEET_MAX_AGE_MS = 1_000;

/**
 * The least time between two sweeps for silent agents: silence is counted in heartbeats, so a
 * fifteenth of the silence that takes an agent offline, and never less than this.
 */
const SWEEP_INTERVAL_MS = 250;
const SWEEPS_PER_LIMIT = 15;

/**
 * The fleet as the coordinator knows it: a write-through cache over the store's agents table,
 * keyed by agentId and holding the current instanceId.
 */
export class Fleet {
  private readonly agents = new Map<string, AgentRecord>();
  /**
   * The agents online, least recently heard first (each heard moves to the end): the sweep for
   * silent ones reads from the front and stops at the first that is not, instead of reading the
   * whole fleet each time (at 10,000 agents, 10,000 records a second for nothing).
   */
  private readonly bySeen = new Map<string, AgentRecord>();
  /**
   * The same for the agents whose last heartbeat said `idle`, which may be `idleHeartbeatMs`
   * apart: each map holds agents of one limit, so each sweep can stop at its first agent heard
   * within it.
   */
  private readonly bySeenIdle = new Map<string, AgentRecord>();
  /** The largest batch of commands each agent's current instance reads (its hello said so). */
  private readonly batchBytes = new Map<string, number>();
  /** Agents whose heartbeat figures are newer in memory than in the store. */
  private readonly unsaved = new Set<string>();
  /**
   * Agents taken offline (in memory) whose record and alert could not be written: written again
   * at each sweep while they stay offline ({@link putOffline}).
   */
  private readonly offlineUnwritten = new Map<
    string,
    { reason: string; at: number; level: "info" | "warn" }
  >();
  /** When unsaved figures were last written (wall ms), and when silent agents were last looked for. */
  private persistedAt: number;
  private sweptAt = Number.NEGATIVE_INFINITY;
  /** Agents that answered `busy`, passed over until the given wall time. */
  private readonly busyUntil = new Map<string, number>();
  /** `busy` answers in a row per agent, which lengthen its back-off. */
  private readonly busyStreak = new Map<string, number>();
  /**
   * Agents shutting down (a heartbeat said so, or a dispatch was answered `shutting_down`), by
   * the instance that is: nothing is routed to them until a new instance says hello.
   */
  private readonly draining = new Map<string, string>();

  /**
   * Set while the coordinator stands by: the fleet is then the store's as the active coordinator
   * writes it (status at once, heartbeat figures in batches), read again by {@link current}.
   */
  private followed:
    | { readAt: number; reading: Promise<void> | undefined; others: boolean }
    | undefined;
  /**
   * With `cluster.dispatch` `shared`: the agents this coordinator handled at the last
   * {@link load} or {@link reown}. The others' are the store's, read again by {@link current}.
   */
  private readonly mine = new Set<string>();
  /**
   * When each agent this coordinator took up from another's share was taken (engine wall ms;
   * `cluster.dispatch` `shared`): it could not hear the agent before.
   */
  private readonly takenAt = new Map<string, number>();

  constructor(private readonly ctx: EngineContext) {
    // The first batch a full period after the start, not at the first sweep.
    this.persistedAt = ctx.clock.wallNow();
  }

  /**
   * Follows the store instead of the agents (`true`: the coordinator stands by and reads no
   * agent's messages), or stops (`false`: it became the active one, which loads the fleet itself).
   */
  followStore(on: boolean): void {
    this.followed = on
      ? { readAt: Number.NEGATIVE_INFINITY, reading: undefined, others: false }
      : this.ctx.share === undefined
        ? undefined
        : // Active for a share: the agents of the others' shares are followed in the store.
          { readAt: Number.NEGATIVE_INFINITY, reading: undefined, others: true };
  }

  /** Whether this coordinator handles the agent (always, unless `cluster.dispatch` is `shared`). */
  owns(agentId: string): boolean {
    return this.ctx.share === undefined || this.ctx.share.agent(agentId);
  }

  /**
   * Resolves once the fleet is current enough to answer from: at once on the active coordinator,
   * which hears the agents; on one that stands by, once the store's fleet has been read within
   * {@link FOLLOWED_FLEET_MAX_AGE_MS} (requests that come meanwhile share one read). With
   * `cluster.dispatch` `shared`, the agents of the other coordinators' shares are read so.
   */
  async current(): Promise<void> {
    const f = this.followed;
    if (f === undefined) return;
    if (f.reading !== undefined) return f.reading;
    if (this.ctx.clock.monoNow() - f.readAt < FOLLOWED_FLEET_MAX_AGE_MS) return;
    const startedAt = this.ctx.clock.monoNow();
    f.reading = this.ctx.store.listAgents().then(
      (agents) => {
        f.readAt = startedAt;
        f.reading = undefined;
        // Became the active one meanwhile: what it loaded and heard since is newer than this.
        if (this.followed !== f) return;
        if (f.others) this.takeOthers(agents);
        else this.take(agents, true);
      },
      (err: unknown) => {
        f.reading = undefined;
        throw err;
      },
    );
    return f.reading;
  }

  /**
   * Reads the fleet from the store over what is known: at start, and after a failed commit, whose
   * undone writes are re-read.
   */
  async load(): Promise<void> {
    this.take(await this.ctx.store.listAgents(), false);
  }

  /** The store's `agents` over what is known; `replace`: forgets the agents it does not have. */
  private take(agents: AgentRecord[], replace: boolean): void {
    if (replace) this.agents.clear();
    for (const a of agents) this.agents.set(a.agentId, a);
    this.bySeen.clear();
    this.bySeenIdle.clear();
    this.mine.clear();
    for (const id of this.agents.keys()) if (this.owns(id)) this.mine.add(id);
    // Whether an agent was idle is not stored: each is given the longer limit until its next
    // heartbeat says which it is, so none is taken offline for a silence it was allowed.
    const loaded = this.idleLimitMs() === undefined ? this.bySeen : this.bySeenIdle;
    // Only the agents it handles are its to find silent.
    const online = agents.filter((a) => a.status === "online" && this.mine.has(a.agentId));
    for (const a of online.sort((x, y) => x.lastSeenAt - y.lastSeenAt)) loaded.set(a.agentId, a);
    this.reachCache = undefined;
  }

  /** The store's records of the agents other coordinators handle (`cluster.dispatch` `shared`). */
  private takeOthers(agents: AgentRecord[]): void {
    let changed = false;
    for (const a of agents) {
      if (this.mine.has(a.agentId)) continue;
      const known = this.agents.get(a.agentId);
      if (known?.status !== a.status || known.instanceId !== a.instanceId) changed = true;
      this.agents.set(a.agentId, a);
    }
    if (changed) this.reachCache = undefined;
  }

  /**
   * The share moved (`cluster.dispatch` `shared`): an agent newly handled here is read from the
   * store (its acked seq and status as its last handler wrote them), and its silence is counted
   * from now (Share.since); one handled elsewhere now is left to that coordinator, and this one
   * writes nothing more of it.
   */
  async reown(): Promise<void> {
    const now = this.ctx.clock.wallNow();
    // Taken from now, before the store is read: meanwhile the share already says these agents
    // are this coordinator's, and the dispatcher may look at the work they hold.
    for (const id of this.agents.keys()) {
      if (!this.mine.has(id) && this.owns(id)) this.takenAt.set(id, now);
    }
    const agents = await this.ctx.store.listAgents();
    const loaded = this.idleLimitMs() === undefined ? this.bySeen : this.bySeenIdle;
    for (const id of [...this.mine]) {
      if (this.owns(id)) continue;
      this.mine.delete(id);
      this.takenAt.delete(id);
      this.bySeen.delete(id);
      this.bySeenIdle.delete(id);
      this.unsaved.delete(id);
      this.heard.delete(id);
    }
    for (const a of agents) {
      // Still its own: what it heard since is newer than this read.
      if (this.mine.has(a.agentId)) continue;
      this.agents.set(a.agentId, a);
      if (!this.owns(a.agentId)) continue;
      this.mine.add(a.agentId);
      if (!this.takenAt.has(a.agentId)) this.takenAt.set(a.agentId, now);
      this.busyUntil.delete(a.agentId);
      this.busyStreak.delete(a.agentId);
      if (a.status === "online") loaded.set(a.agentId, a);
    }
    if (this.followed !== undefined) this.followed.readAt = this.ctx.clock.monoNow();
    this.reachabilityChanged();
  }

  /**
   * {@link unreachable}'s and {@link reachable}'s answers until an agent's status, instance or
   * draining changes: every dispatch pass asks (ten a second), and reading 10,000 records each
   * time for the same answer was most of an idle coordinator's passes.
   */
  private reachCache: { in: string[]; out: string[]; mine: string[] } | undefined;

  private reachabilityChanged(): void {
    this.reachCache = undefined;
    this.onReachability();
  }

  /** Called when an agent comes within reach or goes out of it: its pending work may move. */
  onReachability: () => void = () => {};

  get(agentId: string): AgentRecord | undefined {
    return this.agents.get(agentId);
  }

  /** The largest batch of commands the agent reads, or undefined: send it each alone. */
  batchBytesOf(agentId: string): number | undefined {
    return this.batchBytes.get(agentId);
  }

  list(): AgentRecord[] {
    return [...this.agents.values()];
  }

  /**
   * The newest `sentAt` (coordinator time, as the agent estimates it) of the messages handled from
   * each agent: how far into the agent's stream this coordinator has read. Memory only.
   */
  private readonly heard = new Map<string, number>();
  /** Each agent's last hello's `lastSeq`: its reports up to it were written by earlier processes. */
  private readonly helloSeq = new Map<string, number>();

  /**
   * Whether report `seq` of `agentId` was written by the process of its last hello (above that
   * hello's `lastSeq`), not replayed from an earlier one's outbox: what such a report says of the
   * agent itself (busy, shutting down) is of that process only.
   */
  fromCurrentProcess(agentId: string, seq: number): boolean {
    return seq > (this.helloSeq.get(agentId) ?? 0);
  }

  /** Notes a message from `agentId` sent at `sentAt`, as it is handled. */
  heardFrom(agentId: string, sentAt: number): void {
    if (sentAt > (this.heard.get(agentId) ?? Number.NEGATIVE_INFINITY)) {
      this.heard.set(agentId, sentAt);
    }
  }

  /**
   * When this coordinator took the agent up from another's share (engine wall ms), or −∞ for
   * one it has handled since it started: the agent's silence and the waits of the work it holds
   * (dispatch timeout, lease, run timeout) count from then at the earliest, since before it
   * this coordinator did not hear the agent. Agents that did not move keep their clocks.
   */
  takenUpAt(agentId: string): number {
    return this.takenAt.get(agentId) ?? Number.NEGATIVE_INFINITY;
  }

  /**
   * True once a message the agent sent at `t` or later has been handled: whatever it sent before
   * `t` (an `accepted`, say) has been handled too, since an agent's messages arrive in order.
   */
  heardSince(agentId: string, t: number): boolean {
    return (this.heard.get(agentId) ?? Number.NEGATIVE_INFINITY) >= t;
  }

  isLive(agentId: string, now: number): boolean {
    const a = this.agents.get(agentId);
    return (
      a !== undefined &&
      a.status === "online" &&
      (this.busyUntil.get(agentId) ?? 0) <= now &&
      this.draining.get(agentId) !== a.instanceId
    );
  }

  /** The agent's current instance is shutting down: route nothing more to it. */
  markDraining(agentId: string): void {
    const a = this.agents.get(agentId);
    if (a && this.draining.get(agentId) !== a.instanceId) {
      this.draining.set(agentId, a.instanceId);
      this.reachabilityChanged();
      this.ctx.log("info", `agent ${agentId} is shutting down: nothing more is routed to it`, {
        agentId,
      });
    }
  }

  /** True while the agent's current instance is shutting down. */
  isDraining(agentId: string): boolean {
    const a = this.agents.get(agentId);
    return a !== undefined && this.draining.get(agentId) === a.instanceId;
  }

  /** Agents that commands must not be dispatched to now: offline, or shutting down. */
  unreachable(): readonly string[] {
    return this.reach().out;
  }

  /** Agents known and in reach now: online, and not shutting down. */
  reachable(): readonly string[] {
    return this.reach().in;
  }

  /** Of {@link reachable}, those this coordinator handles (`cluster.dispatch` `shared`). */
  reachableMine(): readonly string[] {
    return this.reach().mine;
  }

  private reach(): { in: string[]; out: string[]; mine: string[] } {
    if (this.reachCache !== undefined) return this.reachCache;
    const reach = { in: [] as string[], out: [] as string[], mine: [] as string[] };
    const shared = this.ctx.share !== undefined;
    for (const a of this.agents.values()) {
      const away = a.status !== "online" || this.draining.get(a.agentId) === a.instanceId;
      (away ? reach.out : reach.in).push(a.agentId);
      if (!away && (!shared || this.mine.has(a.agentId))) reach.mine.push(a.agentId);
    }
    this.reachCache = reach;
    return reach;
  }

  /** A hello: a new instance supersedes the old; a new journal resets the expected seq. */
  async hello(h: Hello, now: number): Promise<AgentRecord> {
    this.helloSeq.set(h.agentId, h.lastSeq);
    if (this.owns(h.agentId)) this.mine.add(h.agentId);
    const prev = this.agents.get(h.agentId);
    const sameJournal = prev !== undefined && prev.journalId === h.journalId;
    const record: AgentRecord = {
      agentId: h.agentId,
      instanceId: h.instanceId,
      journalId: h.journalId,
      ackedSeq: sameJournal ? prev.ackedSeq : 0,
      status: "online",
      profile: h.profile,
      bundleVersion: h.bundle.version,
      bundleSha256: h.bundle.sha256,
      // Taken from each hello as it is: an instance that no longer reports one has none.
      ...(h.target === undefined ? {} : { target: h.target }),
      handlers: h.handlers,
      concurrency: h.capacity.concurrency,
      queue: h.capacity.queue,
      tags: this.tagsOf?.(h.agentId) ?? h.tags,
      connectedAt: now,
      lastSeenAt: now,
      clockOffsetMs: prev?.clockOffsetMs ?? 0,
      clockUncertaintyMs: prev?.clockUncertaintyMs ?? 0,
      load: 0,
      journalDepth: 0,
      outboxDepth: 0,
    };
    this.agents.set(h.agentId, record);
    this.seen(record);
    this.reachabilityChanged();
    this.unsaved.delete(h.agentId);
    if (h.batchBytes === undefined) this.batchBytes.delete(h.agentId);
    else this.batchBytes.set(h.agentId, h.batchBytes);
    this.busyUntil.delete(h.agentId);
    this.busyStreak.delete(h.agentId);
    await this.ctx.store.putAgent(record);
    if (prev?.status !== "online" || prev.instanceId !== h.instanceId) {
      this.ctx.events.emit("agent", {
        agentId: h.agentId,
        status: "online",
        reason: "hello",
        at: now,
      });
    }
    return record;
  }

  /**
   * The common heartbeat — from the current instance of an agent online — taken in memory, at
   * once: true when it was. Anything else (a superseded instance, an agent coming back online)
   * is for {@link heartbeat}, which may write to the store.
   */
  heartbeatInMemory(agentId: string, hb: Heartbeat, now: number): boolean {
    const a = this.agents.get(agentId);
    if (!a || a.instanceId !== hb.instanceId || a.status !== "online") return false;
    this.heardFrom(agentId, hb.sentAt);
    this.takeFigures(a, hb, now);
    this.unsaved.add(agentId);
    return true;
  }

  /** What a heartbeat says of its agent, into its record (memory only). */
  private takeFigures(a: AgentRecord, hb: Heartbeat, now: number): void {
    a.lastSeenAt = now;
    this.seen(a, hb.idle === true && this.idleLimitMs() !== undefined);
    if (a.status !== "online") {
      a.status = "online";
      this.reachabilityChanged();
    }
    a.load = hb.load;
    a.clockOffsetMs = hb.clockOffset.offsetMs;
    a.clockUncertaintyMs = hb.clockOffset.uncertaintyMs;
    a.journalDepth = hb.journal.depth;
    a.outboxDepth = hb.journal.outboxDepth;
    if (hb.shuttingDown === true) this.markDraining(a.agentId);
  }

  /**
   * Moves an agent just heard (online) to the end of {@link bySeen}, or of {@link bySeenIdle}
   * when its heartbeat said it is idle.
   */
  private seen(a: AgentRecord, idle = false): void {
    this.bySeen.delete(a.agentId);
    this.bySeenIdle.delete(a.agentId);
    // Only the agents it handles are its to find silent (dispatch shared): one whose hello was
    // read here just before the share moved is heard by another coordinator from then on.
    if (!this.owns(a.agentId)) return;
    (idle ? this.bySeenIdle : this.bySeen).set(a.agentId, a);
  }

  /** How long an idle agent may be silent before it is offline; undefined when idle agents may not heartbeat less often. */
  private idleLimitMs(): number | undefined {
    const { idleHeartbeatMs, heartbeatMs } = this.ctx.config;
    return idleHeartbeatMs > heartbeatMs ? idleHeartbeatMs * MISSED_HEARTBEATS : undefined;
  }

  /** A heartbeat from the current instance; false (and counted) when it is from a superseded one. */
  async heartbeat(agentId: string, hb: Heartbeat, now: number): Promise<boolean> {
    const a = this.agents.get(agentId);
    if (!a || a.instanceId !== hb.instanceId) {
      await this.ctx.store.bumpCounter("superseded_messages");
      return false;
    }
    const cameBack = a.status !== "online";
    this.takeFigures(a, hb, now);
    if (cameBack) {
      this.unsaved.delete(agentId);
      await this.ctx.store.putAgent(a);
    } else {
      this.unsaved.add(agentId);
    }
    return true;
  }

  /**
   * Writes the heartbeat figures held in memory only, in batches: every {@link
   * PRESENCE_PERSIST_MS}, at most `chunk` agents per call (the rest at the next), all of them
   * when `chunk` is Infinity (at shutdown).
   */
  async persistSeen(now: number, chunk = PRESENCE_PERSIST_CHUNK): Promise<void> {
    if (this.unsaved.size === 0) return;
    if (chunk !== Number.POSITIVE_INFINITY && now - this.persistedAt < PRESENCE_PERSIST_MS) return;
    const batch: AgentRecord[] = [];
    for (const agentId of this.unsaved) {
      if (batch.length >= chunk) break;
      this.unsaved.delete(agentId);
      const a = this.agents.get(agentId);
      if (a) batch.push(a);
    }
    // The round is over once every agent of it is written; until then the next call goes on.
    if (this.unsaved.size === 0) this.persistedAt = now;
    if (batch.length > 0) await this.ctx.store.putAgents(batch);
  }

  /** The tags an agent was enrolled with, which outrank its hello's. */
  tagsOf: ((agentId: string) => Record<string, string> | undefined) | undefined;

  /** A revoked agent: offline at once, so nothing more is routed to it. */
  async revoked(agentId: string): Promise<void> {
    const a = this.agents.get(agentId);
    // Another coordinator's agent is taken offline by that coordinator.
    if (this.ctx.share !== undefined && !this.mine.has(agentId)) return;
    if (a && a.status !== "offline") await this.takeOffline(a, "revoked", "warn");
  }

  /** Marks an online agent offline, stores it, logs it and tells the listeners why. */
  private async takeOffline(a: AgentRecord, reason: string, level: "info" | "warn"): Promise<void> {
    a.status = "offline";
    this.bySeen.delete(a.agentId);
    this.bySeenIdle.delete(a.agentId);
    this.reachabilityChanged();
    this.unsaved.delete(a.agentId);
    await this.putOffline(a, reason, this.ctx.clock.wallNow(), level);
  }

  /**
   * Writes an agent gone offline with its `agent.offline` alerts (TransitionAlerts.offline), in
   * one transaction; once it commits, hands them to delivery, logs it and tells the listeners.
   * A write that fails is retried at each sweep while the agent stays offline
   * ({@link offlineUnwritten}): the record never says offline without its alert, nor the reverse.
   */
  private async putOffline(
    a: AgentRecord,
    reason: string,
    at: number,
    level: "info" | "warn",
  ): Promise<boolean> {
    const alerts = this.ctx.transitionAlerts?.offline({ agentId: a.agentId, reason, at }) ?? [];
    try {
      await this.ctx.store.putAgent(a, alerts);
    } catch (err) {
      this.offlineUnwritten.set(a.agentId, { reason, at, level });
      this.ctx.log("error", `agent ${a.agentId} offline, not recorded: ${(err as Error).message}`, {
        agentId: a.agentId,
      });
      return false;
    }
    this.offlineUnwritten.delete(a.agentId);
    if (alerts.length > 0) {
      this.ctx.store.afterCommit(() => this.ctx.transitionAlerts?.recorded(alerts));
    }
    this.ctx.log(level, `agent ${a.agentId} offline (${reason})`, { agentId: a.agentId });
    this.ctx.events.emit("agent", { agentId: a.agentId, status: "offline", reason, at });
    return true;
  }

  /** Writes again the agents taken offline whose write failed, unless they are back. */
  private async retryOffline(): Promise<void> {
    for (const [agentId, o] of [...this.offlineUnwritten]) {
      const a = this.agents.get(agentId);
      // Back, or handed to another coordinator's share: no longer this one's to record.
      if (a?.status !== "offline" || !this.owns(agentId)) {
        this.offlineUnwritten.delete(agentId);
        continue;
      }
      if (!(await this.putOffline(a, o.reason, o.at, o.level))) return;
    }
  }

  /** An `offline` presence counts only for the current instance: a late Last Will is ignored. */
  async presence(agentId: string, status: "online" | "offline", instanceId: string): Promise<void> {
    const a = this.agents.get(agentId);
    if (!a) return;
    if (a.instanceId !== instanceId) {
      // A superseded process's will (or a retained one from before its restart): not about the
      // agent as it is now.
      await this.ctx.store.bumpCounter("superseded_messages");
      return;
    }
    if (status === "offline" && a.status !== "offline")
      await this.takeOffline(a, "presence", "info");
  }

  /**
   * Reports up to `seq` are applied. Kept in memory here and stored by {@link persistAcked}
   * once per burst, before the ack goes out: a crash in between only makes the agent re-send
   * reports already applied, which the state machine drops.
   */
  ackedTo(agentId: string, seq: number): void {
    const a = this.agents.get(agentId);
    if (!a || seq <= a.ackedSeq) return;
    a.ackedSeq = seq;
  }

  /** Stores the agent's acknowledged seq (a no-op when the store already has it). */
  /**
   * Takes the store's acked seq of the agent when it is further (the same journal): another
   * coordinator applied and acknowledged its reports while both held it (`cluster.dispatch`
   * `shared`, for a renewal's time after the share moved).
   */
  async catchUpAcked(agentId: string): Promise<void> {
    const stored = await this.ctx.store.getAgent(agentId);
    const a = this.agents.get(agentId);
    if (!a || !stored || stored.journalId !== a.journalId) return;
    this.ackedTo(agentId, stored.ackedSeq);
  }

  async persistAcked(agentId: string): Promise<void> {
    const a = this.agents.get(agentId);
    if (!a) return;
    await this.ctx.store.setAckedSeq(agentId, a.journalId, a.ackedSeq);
  }

  /**
   * The agent answered `busy`: it is passed over for the busy back-off, doubled for each `busy`
   * in a row up to 8×, until it accepts work again. Returns until when.
   */
  markBusy(agentId: string, now: number): number {
    const streak = Math.min((this.busyStreak.get(agentId) ?? 0) + 1, 4);
    this.busyStreak.set(agentId, streak);
    const until = now + this.ctx.config.busyBackoffMs * 2 ** (streak - 1);
    this.busyUntil.set(agentId, until);
    return until;
  }

  /**
   * Passes over an agent until `until`, as a busy one: an agent of another coordinator's share
   * (`cluster.dispatch` `shared`) that answered `busy` to this one's dispatch, which only that
   * coordinator heard (the record shows it: the execution came back PENDING from it).
   */
  passOver(agentId: string, until: number): void {
    if ((this.busyUntil.get(agentId) ?? 0) < until) this.busyUntil.set(agentId, until);
  }

  /** The agent accepted work: its busy back-off starts again from the shortest. */
  markAccepting(agentId: string): void {
    this.busyStreak.delete(agentId);
  }

  /** Until when (wall ms) the agent is passed over as busy; 0 when it is not. */
  busyUntilMs(agentId: string): number {
    return this.busyUntil.get(agentId) ?? 0;
  }

  /**
   * Takes offline every agent silent for more than {@link MISSED_HEARTBEATS} heartbeats while the
   * link was up. `linkUpSince` is when the coordinator's own link last came up (undefined while
   * it is down): silence while the coordinator could not hear is not the agent's.
   */
  async sweep(now: number, linkUpSince: number | undefined): Promise<void> {
    await this.persistSeen(now);
    if (this.offlineUnwritten.size > 0) await this.retryOffline();
    if (linkUpSince === undefined) return;
    const limit = this.ctx.config.heartbeatMs * MISSED_HEARTBEATS;
    if (now - this.sweptAt < Math.max(SWEEP_INTERVAL_MS, limit / SWEEPS_PER_LIMIT)) return;
    this.sweptAt = now;
    await this.sweepSilent(this.bySeen, limit, now, linkUpSince);
    const idleLimit = this.idleLimitMs();
    if (idleLimit !== undefined)
      await this.sweepSilent(this.bySeenIdle, idleLimit, now, linkUpSince);
  }

  /** Takes offline the agents of one map silent for more than `limit`, least recently heard first. */
  private async sweepSilent(
    bySeen: Map<string, AgentRecord>,
    limit: number,
    now: number,
    linkUpSince: number,
  ): Promise<void> {
    // Least recently heard first: past the first agent heard within the limit, all were. (What
    // is heard is handled a little out of order across agents, and a wall clock stepped back
    // puts an agent behind one heard before it: such an agent is taken offline late by at most
    // that much, or at the next sweep.)
    for (const a of bySeen.values()) {
      if (a.status !== "online" || !this.owns(a.agentId)) {
        bySeen.delete(a.agentId);
        continue;
      }
      if (now - Math.max(a.lastSeenAt, linkUpSince) <= limit) break;
      // Taken up from another coordinator's share lately: its silence counts from then.
      if (now - this.takenUpAt(a.agentId) <= limit) continue;
      a.status = "offline";
      bySeen.delete(a.agentId);
      this.reachabilityChanged();
      this.unsaved.delete(a.agentId);
      await this.putOffline(a, `${MISSED_HEARTBEATS} heartbeats missed`, now, "info");
    }
  }
}
