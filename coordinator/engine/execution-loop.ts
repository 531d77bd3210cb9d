import { envelope } from "../../shared/message.js";
import { AGENT_UPDATE_HANDLER, updateHoldMs } from "../../shared/update.js";
import { MAX_HEALTH_WINDOW_MS, MAX_TRIAL_STARTS } from "../../shared/update-limits.js";
import type { JobDefinition, Routing } from "../domain/job.js";
import { decideOverlap } from "../domain/overlap.js";
import { eligibleAgents, hashKeyValue, Router, routingMemoryOf } from "../domain/routing.js";
import type { ExecutionRecord, PeerRecord } from "../store/port.js";
import type { EngineContext, Share } from "./context.js";
import { lookUpFollowed } from "./facts.js";
import type { Fleet } from "./fleet.js";
import type { Leases } from "./leases.js";
import { applyEvent } from "./transitions.js";
import { refuseOffer, updateRefusal } from "./update-offer.js";

const BATCH = 500;

/**
 * With dispatch shared, how often the leases of executions whose agents moved away are looked
 * for, and how old (unrenewed) they must be: past the longest an agent may stay silent about
 * its work (an `agent.update`'s hold, 4 health windows of at most an hour), and an hour more.
 */
const LEASE_PRUNE_EVERY_MS = 60_000;
const LEASE_PRUNE_AGE_MS = (MAX_TRIAL_STARTS + 1) * MAX_HEALTH_WINDOW_MS + 3_600_000;

/** Pending executions a pass reads even with no room to dispatch: those it may expire. */
const EXPIRY_SCAN = 20;

/**
 * Dispatches sent in the last dispatch timeout and not yet answered (accepted, rejected, busy),
 * beyond which new ones wait for answers. Each answer is a message the broker queues for this
 * coordinator: a command to 10,000 agents sent at once came back as 10,000 `accepted` in a
 * second, and a broker that queues 1,000 messages per client (Mosquitto's default) dropped most
 * of them, which their agents re-sent only 15 s later.
 */
export const MAX_UNANSWERED_DISPATCHES = 1_000;

/**
 * How long a dispatch counts as awaiting its answer: the default dispatch timeout. Shorter let a
 * broker that drops answers (its queue full) be sent more to drop: at 10,000 agents on
 * Mosquitto's defaults, 1 s redispatched 1.3 % after fireAt where 5 s redispatched none. The
 * price: agents online but silent hold the fan-out to 1,000 dispatches per 5 s.
 */
const ANSWER_WAIT_MS = 5_000;

/**
 * While the pending read finds nothing (all that is pending is for agents out of reach, or not
 * yet within the horizon), a pass that no change asked for reads pending work at most this
 * often. Each read walks every pending execution for an agent out of reach to pass it over:
 * with 120,000 commands queued for offline agents that was 35 ms, ten times a second. What
 * makes such work dispatchable (a new execution, an agent back in reach, an execution made
 * PENDING again) kicks a pass that reads it at once; an agent's other reports only nudge one
 * ({@link ExecutionLoop.nudge}); the clock's part (a deadline passed, a fire time come within
 * the horizon) waits up to this long.
 */
export const QUIET_PENDING_READ_MS = 1_000;

/**
 * The loop that moves executions along on the coordinator's own clock: dispatches what is due,
 * redispatches what was not accepted in time, starts retries, expires what missed its deadline,
 * and times out runs the agent never finished.
 */
export class ExecutionLoop {
  private timer: ReturnType<EngineContext["clock"]["setTimer"]> | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private closed = false;
  /** Routing strategies and the little state they keep (cursors, last use, sticky agents…). */
  readonly router = new Router();
  /** Executions each agent holds, read once per pass when a LEAST_LOADED job needs it. */
  private inFlight: Record<string, number> | undefined;
  /** Executions already sent a cancel because a newer firing replaces them (overlap REPLACE). */
  private readonly replacing = new Set<string>();
  private lastSlowScan = 0;
  private leasesPrunedAt = 0;
  private armedNow = false;
  /** Something may have made pending work dispatchable since the last read of it (a kick). */
  private pendingChanged = true;
  /** When pending work was last read, and whether that read found none. */
  private pendingReadAt = Number.NEGATIVE_INFINITY;
  private pendingNone = false;
  /**
   * When retries and dispatch timeouts were last read, and whether they must be read at the next
   * pass (a retry was just scheduled, or the last read filled its batch). They come due by the
   * clock, so under load, when a pass runs after every fire and burst of reports, they are read
   * once a poll ({@link EngineContext.config}.pollMs), not at every pass.
   */
  private timeoutsReadAt = Number.NEGATIVE_INFINITY;
  private timeoutsChanged = true;

  /** Executions dispatched and not yet answered, with when (wall ms), oldest first. */
  private readonly unanswered = new Map<string, number>();

  /**
   * How many pending executions one pass dispatches at once. 1 on SQLite, whose writes cost
   * microseconds and join one group commit: the pass is the loop it always was. On PostgreSQL
   * each write is milliseconds of round trips and a commit, and one after the other capped the
   * dispatcher near 100 a second: there, up to the pool's size at once, each lane (a group, a
   * job, an agent's commands) still in order on its own, so overlap, group and concurrency rules
   * see their peers' dispatches.
   */
  private readonly lanes: number;

  constructor(
    private readonly ctx: EngineContext,
    private readonly fleet: Fleet,
    private readonly leases: Leases,
  ) {
    this.lanes = storeLanes(ctx.config);
    ctx.events.on("transition", (e) => {
      if (e.to === "DISPATCHED") {
        this.unanswered.delete(e.executionId);
        // An agent of another coordinator's share answers that coordinator: its answer is
        // never seen here, so it does not hold this one's fan-out.
        if (e.agentId !== null && !this.fleet.owns(e.agentId)) return;
        this.unanswered.set(e.executionId, e.at);
      } else if (e.from === "DISPATCHED") {
        this.unanswered.delete(e.executionId);
      }
      // Work made PENDING again (a `busy` answer, a retry come due, an operator's retry) may be
      // dispatchable now, whatever the last read of pending work found.
      if (e.to === "PENDING") this.kick();
      if (e.to === "RETRY_WAITING") this.timeoutsChanged = true;
    });
  }

  /**
   * Dispatches awaiting an answer: those older than {@link ANSWER_WAIT_MS} (an agent gone, an
   * answer lost) no longer count; the dispatch timeout deals with them.
   */
  private awaitingAnswers(now: number): number {
    const since = now - ANSWER_WAIT_MS;
    for (const [id, at] of this.unanswered) {
      if (at >= since) break;
      this.unanswered.delete(id);
    }
    return this.unanswered.size;
  }

  /**
   * How many pending executions a pass reads: what it may dispatch before the cap on unanswered
   * dispatches or the link's backlog stops it, and a few more, so that those past their deadline
   * are still expired. Every fire and report runs a pass: under load, passes that each read a
   * full batch and could dispatch none of it were most of the store's reads (on PostgreSQL, each
   * of 500 rows read about ten times over before it went).
   */
  private pendingRoom(now: number): number {
    const room = this.ctx.link.congested
      ? 0
      : MAX_UNANSWERED_DISPATCHES - this.awaitingAnswers(now);
    return Math.max(EXPIRY_SCAN, Math.min(BATCH, room));
  }

  start(): void {
    this.started = true;
    this.arm(0);
  }

  /** Set by {@link start}: a loop not started (a standby's) runs no pass, whatever kicks it. */
  private started = false;

  /** Runs a pass as soon as possible that reads pending work (new work, or an agent came online). */
  kick(): void {
    this.pendingChanged = true;
    this.nudge();
  }

  /**
   * Runs a pass as soon as possible for what changed in work already under way (an agent's
   * reports: a run ended, an answer came) without asking it to read pending work again. The pass
   * still reads it while the last read found some (it may be waiting for just this), and at least
   * once a second ({@link QUIET_PENDING_READ_MS}); what does add pending work kicks. With 100,000
   * commands waiting for agents out of reach, each read passed over all of them (about 40 ms
   * here), and twenty bursts of reports a second, each with its pass, kept a core busy reading.
   */
  nudge(): void {
    if (!this.started) return;
    if (this.running) {
      this.again = true;
      return;
    }
    // A pass already armed to run at once needs no new timer (every fire and report kicks).
    if (this.armedNow) return;
    this.arm(0);
  }

  /** Resolves when the pass in progress, if any, has finished. */
  async idle(): Promise<void> {
    await this.running;
  }

  private arm(delayMs: number): void {
    if (this.closed) return;
    if (this.timer !== undefined) this.ctx.clock.clearTimer(this.timer);
    this.armedNow = delayMs === 0;
    this.timer = this.ctx.clock.setTimer(() => {
      this.timer = undefined;
      this.armedNow = false;
      this.running = this.pass()
        .catch((err: unknown) =>
          this.ctx.log("error", `dispatch pass failed: ${(err as Error).message}`),
        )
        .finally(() => {
          this.running = undefined;
          const again = this.again;
          this.again = false;
          this.arm(again ? 0 : this.ctx.config.pollMs);
        });
    }, delayMs);
  }

  private async pass(): Promise<void> {
    const now = this.ctx.clock.wallNow();
    this.inFlight = undefined;
    // While the coordinator's own link is down it can neither hear agents nor reach them: no
    // timeout that measures an agent counts then, and none restarts before the link is back.
    const linkUp = upSince(this.ctx);
    const share = this.ctx.share;
    // The agents of the others' shares, as the store has them (read at most once a second):
    // a job's execution may be routed to any agent.
    if (share !== undefined) await this.fleet.current();
    await this.fleet.sweep(now, linkUp);
    const { store } = this.ctx;
    // Only what is due is read: a pass runs after every fire and burst of reports, and reading
    // every open execution each time cost more than acting on the few that changed. Device
    // commands are due as soon as they are known (up to the horizon), so that the agent's
    // journal and wheel hold them through outages; those for agents out of reach wait.
    // A job's execution is created its dispatch lead ahead (the job's own, or dispatchLead), so
    // it is due as soon as it exists, like a command.
    const horizon = now + this.ctx.config.commandHorizonMs;
    const readPending =
      this.pendingChanged || !this.pendingNone || now - this.pendingReadAt >= QUIET_PENDING_READ_MS;
    // A kick from here on is seen by the next pass.
    this.pendingChanged = false;
    // With a share, the pending rows read are every coordinator's, in due order, and the others'
    // are passed over: as many more are read as there are coordinators, so that a backlog of a
    // lost one's (until its share moves) or of another's busy jobs does not fill the read.
    const pendingLimit = readPending ? this.pendingRoom(now) * (share?.members() ?? 1) : 0;
    // The commands of agents out of reach wait: the store is told the shorter of the two lists,
    // so that a backlog for 10,000 offline agents is not walked to find the few that can move.
    const away = this.fleet.unreachable();
    // With a share, only its own agents' commands are read (and the others' past their deadline).
    const near = share === undefined ? this.fleet.reachable() : this.fleet.reachableMine();
    const timeouts = this.timeoutsChanged || now - this.timeoutsReadAt >= this.ctx.config.pollMs;
    if (timeouts) {
      this.timeoutsReadAt = now;
      this.timeoutsChanged = false;
    }
    const due = await store.listDue(now, horizon, BATCH, {
      commandsBy: horizon,
      ...(share !== undefined || near.length < away.length
        ? { onlyTargets: near }
        : { skipTargets: away }),
      pendingLimit,
      timeouts,
    });
    if (due.retry.length >= BATCH || due.dispatchTimedOut.length >= BATCH) {
      this.timeoutsChanged = true;
    }
    const pendingFull = readPending && due.pending.length >= pendingLimit;
    if (share !== undefined) {
      // The others' work is theirs; the compare-and-set of each transition would refuse it
      // here anyway, at the cost of a write.
      due.pending = due.pending.filter((e) => dispatches(share, e));
      due.retry = due.retry.filter((e) => dispatches(share, e));
      due.dispatchTimedOut = due.dispatchTimedOut.filter((e) => holds(share, e));
    }
    if (readPending) {
      this.pendingReadAt = now;
      this.pendingNone = due.pending.length === 0;
    }
    // A full batch means more may be due: when this pass moved some of it, the next runs at
    // once, not a poll later. (A command to 10,000 agents is 20 batches; at one per poll they
    // took 2 s to leave.) A full batch that nothing could move — work waiting for an agent —
    // waits for the poll, or the loop would spin on it.
    const full = pendingFull || due.retry.length >= BATCH || due.dispatchTimedOut.length >= BATCH;
    let moved = 0;

    // A retry made PENDING here is dispatchable at once: the next pass reads pending work now,
    // not after the quiet second (a backoff of 1 ms waited 1 s, and a fleet's jittered retries
    // left together).
    if (due.retry.length > 0) {
      this.pendingChanged = true;
      this.again = true;
    }
    for (const exec of due.retry) {
      moved++;
      // A command's deadline is absolute: past it, it never starts. A job's retry is a new
      // attempt at a new time with a start window of its own, so the first attempt's deadline
      // does not end it: a run that timed out or failed after that deadline is still retried.
      if (exec.kind === "command" && exec.deadline < now) {
        await applyEvent(this.ctx, exec.id, { type: "expire" });
      } else {
        // The retry keeps the original start window's length.
        await applyEvent(
          this.ctx,
          exec.id,
          { type: "retry_due" },
          (e) => ({
            fireAt: now,
            deadline: now + (e.deadline - e.fireAt),
          }),
          undefined,
          exec,
        );
      }
    }

    const jobs = new Map<string, JobDefinition | undefined>();
    const dispatchOne = async (exec: ExecutionRecord): Promise<void> => {
      if (exec.deadline < now) {
        moved++;
        await applyEvent(
          this.ctx,
          exec.id,
          { type: "expire" },
          () => ({}),
          {
            reason: "no agent before deadline",
          },
          exec,
        );
        return;
      }
      // The broker has not yet acknowledged thousands of publishes: sending more would only grow
      // this process's buffers. The rest waits PENDING for a later pass (expiry above still runs).
      if (this.ctx.link.congested) return;
      // Answers pace the fan-out: the rest waits for a later pass (one runs after every burst
      // of reports).
      if (this.awaitingAnswers(now) >= MAX_UNANSWERED_DISPATCHES) return;
      if (!(await this.admit(exec, jobs, now))) return;
      const agentId = await this.route(exec, jobs, now);
      if (agentId === undefined) return; // waits in PENDING until an agent is live or it expires
      const agent = this.fleet.get(agentId);
      const refusal = updateRefusal(exec, agent);
      if (refusal !== undefined) {
        if (await refuseOffer(this.ctx, exec, agentId, refusal, now)) moved++;
        return;
      }
      if (
        (await applyEvent(
          this.ctx,
          exec.id,
          { type: "dispatch" },
          // When it is written, as its timeline entry says, not when the pass began: the pass's
          // reads and the lanes ahead of it come in between (tens of ms under load).
          () => ({ agentId, dispatchedAt: this.ctx.clock.wallNow() }),
          // An update records what the agent ran when it was offered: its update history's "from".
          exec.handler === AGENT_UPDATE_HANDLER && agent !== undefined
            ? { agentId, from: { version: agent.bundleVersion, sha256: agent.bundleSha256 } }
            : { agentId },
          exec,
        )) === "applied"
      ) {
        moved++;
      }
    };
    if (this.lanes <= 1) {
      for (const exec of due.pending) await dispatchOne(exec);
    } else {
      await inLanes(due.pending, dispatchLane, this.lanes, dispatchOne);
    }

    for (const exec of linkUp === undefined ? [] : due.dispatchTimedOut) {
      const previous = exec.agentId;
      // The dispatch timeout counts only while the link is up and the agent online: a dispatch
      // sent into an outage is sent again once both are back, not failed for it. An agent gone
      // offline gets its work when it returns, if the deadline allows (the deadline ends it).
      const agent = previous === null ? undefined : this.fleet.get(previous);
      if (agent !== undefined && agent.status !== "online") continue;
      const since = Math.max(
        exec.dispatchedAt ?? 0,
        linkUp ?? now,
        agent?.connectedAt ?? 0,
        previous === null ? 0 : this.fleet.takenUpAt(previous),
      );
      if (since + exec.dispatchTimeoutMs > now) continue;
      // Timed out only once this coordinator has read what the agent sent after the timeout
      // (its heartbeats at least). When the coordinator itself is behind, the `accepted` may be
      // waiting in its own inbound backlog: a new round then would be work for nothing, and
      // under load such rounds pile up and bury both sides (an overloaded coordinator that
      // redispatched everything it had not yet read lost 80 % of a benchmark's fires).
      if (
        previous !== null &&
        this.fleet.get(previous)?.status === "online" &&
        !this.fleet.heardSince(previous, since + exec.dispatchTimeoutMs)
      ) {
        continue;
      }
      // The agent that was sent the dispatch may well hold it (only its answer is missing): send
      // the next round to that same agent while it is live, so it can never run on two. Only an
      // agent gone offline is routed around — and it is sent a cancel for the old round first.
      const stay = previous !== null && this.fleet.isLive(previous, now);
      const agentId = stay
        ? previous
        : ((await this.route(exec, jobs, now)) ?? previous ?? undefined);
      if (previous !== null && agentId !== previous) {
        await this.ctx.link
          .send(
            previous,
            envelope({ type: "cancel", executionId: exec.id, round: exec.round }, now),
          )
          .catch(() => {});
      }
      moved++;
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "dispatch_timeout", round: exec.round },
        () => ({
          dispatchedAt: this.ctx.clock.wallNow(),
          ...(agentId === undefined ? {} : { agentId }),
        }),
        { reason: "no accepted within dispatchTimeoutMs" },
        exec,
      );
    }

    if (full && moved > 0) this.again = true;

    // Timeouts and leases are measured in seconds: checking them every pass would re-read every
    // execution in flight ten times a second for nothing.
    if (now - this.lastSlowScan < 1000) return;
    this.lastSlowScan = now;
    // The leases of executions whose agents moved to another coordinator are not checked here
    // any more, nor ended by a transition heard here: they go once older than any lease's hold.
    if (share !== undefined && now - this.leasesPrunedAt >= LEASE_PRUNE_EVERY_MS) {
      this.leasesPrunedAt = now;
      this.leases.prune(now - LEASE_PRUNE_AGE_MS);
    }
    if (linkUp === undefined) return;
    const grace = this.ctx.config.timeoutGraceMs;
    // Running work first, on its own: commands held far ahead (SCHEDULED) must not crowd the
    // leases of running ones out of one batch.
    const held = [
      ...(await store.listExecutionsInStates(["RUNNING"], BATCH)),
      ...(await store.listExecutionsInStates(["SCHEDULED", "DISPATCHED"], BATCH)),
    ].filter((e) => share === undefined || holds(share, e));
    for (const exec of held) {
      // Heard from its agent since the link came up, or since the agent was taken up here.
      const heardFrom = Math.max(
        linkUp,
        exec.agentId === null ? linkUp : this.fleet.takenUpAt(exec.agentId),
      );
      if (await this.checkLease(exec, now, heardFrom)) continue;
      // A run is timed out here only while its agent can be reached: an agent cut off keeps
      // running and timing out its own work, and reports it when it is back.
      const agentOnline =
        exec.agentId !== null && this.fleet.get(exec.agentId)?.status === "online";
      if (exec.state === "RUNNING" && !agentOnline) continue;
      // Timeouts restart from the link's return: the agent may have reported meanwhile.
      const startedBy = exec.state === "RUNNING" ? (exec.startedAt ?? exec.fireAt) : exec.deadline;
      const limit = Math.max(
        exec.state === "RUNNING" ? startedBy + exec.timeoutMs + grace : startedBy + grace,
        heardFrom + grace,
      );
      if (limit > now) continue;
      if (exec.state === "RUNNING") {
        await applyEvent(
          this.ctx,
          exec.id,
          { type: "timed_out", round: exec.round, retryable: true },
          () => ({ finishedAt: now, message: "no finished report within timeout + grace" }),
          { reason: "no finished report within timeout + grace", guess: true },
        );
      } else {
        // A guess (no start was heard of): a `started` or `finished` that comes later corrects it.
        await applyEvent(
          this.ctx,
          exec.id,
          { type: "expire" },
          () => ({
            message: "not started by deadline",
          }),
          { reason: "no start reported by deadline", guess: true },
        );
      }
    }
  }

  /**
   * Overlap, group and concurrency rules for a pending job execution (DESIGN §3): true when it
   * may be dispatched now. A SKIP ends it SKIPPED with its reason; a REPLACE cancels the running
   * ones (once) and waits for them to end; a wait leaves it PENDING for a later pass.
   */
  private async admit(
    exec: ExecutionRecord,
    jobs: Map<string, JobDefinition | undefined>,
    now: number,
  ): Promise<boolean> {
    if (exec.jobId === null) return true;
    const def = await this.definition(exec, jobs);
    if (!def) return true;
    const overlapFree =
      def.overlap.policy === "PARALLEL" && def.concurrency === undefined && exec.groupKey === null;
    if (overlapFree) return true;
    const peer = (e: PeerRecord) => ({
      id: e.id,
      state: e.state,
      createdAt: e.createdAt,
      shardOf: e.shardTotal !== null ? `${e.jobId}@${e.scheduledFor}` : null,
    });
    const sameJob = (await this.ctx.store.listOpenPeers({ jobId: exec.jobId }))
      .filter((e) => e.id !== exec.id)
      .map(peer);
    const sameGroup =
      exec.groupKey === null
        ? []
        : (await this.ctx.store.listOpenPeers({ groupKey: exec.groupKey }))
            .filter((e) => e.id !== exec.id)
            .map(peer);
    // Overlap is about a run still going when the next one is due. Dispatched ahead of its
    // time, a firing cannot know yet whether the one before will have finished by then: while
    // anything of its job or group is in flight, it is decided at its fire time instead. Its
    // sibling shards are the same firing, not one before it: they do not hold it back (the
    // group and concurrency rules below still count them).
    const shardOf = peer(exec).shardOf;
    const inFlight = (p: { state: string; shardOf: string | null }) =>
      (p.state === "DISPATCHED" || p.state === "SCHEDULED" || p.state === "RUNNING") &&
      (shardOf === null || p.shardOf !== shardOf);
    if (now < exec.fireAt && (sameJob.some(inFlight) || sameGroup.some(inFlight))) return false;
    const decision = decideOverlap({
      execution: { ...peer(exec), attempt: exec.attempt },
      policy: def.overlap.policy,
      queueMax: def.overlap.queueMax,
      concurrency: def.concurrency,
      sameJob,
      sameGroup,
    });
    switch (decision.action) {
      case "dispatch":
        return true;
      case "wait":
        return false;
      case "skip":
        await applyEvent(
          this.ctx,
          exec.id,
          { type: "skip", reason: decision.reason },
          () => ({
            finishedAt: now,
            message: decision.reason,
          }),
          { reason: decision.reason },
        );
        return false;
      case "replace":
        for (const id of decision.cancel) {
          if (this.replacing.has(id)) continue;
          // Bounded: forgetting one at worst sends a second cancel, which the agent answers.
          if (this.replacing.size >= 10_000) this.replacing.clear();
          this.replacing.add(id);
          await applyEvent(this.ctx, id, { type: "cancel" }, () => ({}), {
            reason: `replaced by ${exec.id}`,
          });
        }
        return false;
    }
  }

  /**
   * Leases: a running execution whose agent stopped vouching for it is queried, then failed over
   * by its retry policy. A scheduled one is never failed over this way: an agent keeps firing
   * what it holds while offline, so moving it elsewhere could run it twice; its deadline bounds
   * it instead. Returns true when the execution was handled here.
   */
  private async checkLease(exec: ExecutionRecord, now: number, linkUp: number): Promise<boolean> {
    if (exec.agentId === null || exec.state !== "RUNNING") return false;
    await lookUpFollowed(this.ctx, this.leases, exec, now);
    const agentLive = this.fleet.get(exec.agentId)?.status === "online";
    const decision = this.leases.check(exec, agentLive, now, linkUp, updateHoldMs(exec));
    if (decision.action === "query") {
      await this.ctx.link
        .send(
          exec.agentId,
          envelope(
            {
              type: "query",
              executionId: exec.id,
              round: this.leases.ranRound(exec.id, exec.round),
            },
            now,
          ),
        )
        .catch(() => {});
      return true;
    }
    if (decision.action === "fail_over") {
      await applyEvent(
        this.ctx,
        exec.id,
        { type: "finished", round: exec.round, outcome: "interrupted", retryable: true },
        () => ({ finishedAt: now, message: decision.reason }),
        // A guess: the agent's own report, when it comes, is the truth and corrects it.
        { reason: decision.reason, guess: true },
      );
      return true;
    }
    return false;
  }

  /** The definition of the job version that fired `exec`, read once per pass. */
  private async definition(
    exec: ExecutionRecord,
    jobs: Map<string, JobDefinition | undefined>,
  ): Promise<JobDefinition | undefined> {
    if (exec.jobId === null) return undefined;
    // The rules of the version that fired it: a job changed since applies to its next firings.
    const versionKey = `${exec.jobId}@${exec.jobVersion}`;
    if (!jobs.has(versionKey)) {
      jobs.set(
        versionKey,
        exec.jobVersion === null
          ? (await this.ctx.store.getJob(exec.jobId))?.definition
          : await this.ctx.store.getJobVersion(exec.jobId, exec.jobVersion),
      );
    }
    return jobs.get(versionKey);
  }

  /**
   * The agent for `exec` by its job's routing strategy, among live agents (not backing off after
   * `busy`) with the handler and the job's tags; undefined when there is none, and the execution
   * waits in PENDING. A command goes to its target agent only.
   */
  private async route(
    exec: ExecutionRecord,
    jobs: Map<string, JobDefinition | undefined>,
    now: number,
  ): Promise<string | undefined> {
    if (exec.targetAgentId !== null) {
      if (!this.fleet.isLive(exec.targetAgentId, now)) return undefined;
      this.router.noteDispatched(exec.targetAgentId, now);
      return exec.targetAgentId;
    }
    // With dispatch shared, a job's execution dispatched here to another coordinator's agent
    // that answered `busy` (or refused for now) came back PENDING through that coordinator,
    // which alone heard it: the agent is passed over here too, for the busy back-off from then,
    // rather than sent the same execution again at once.
    const last = exec.agentId;
    if (
      this.ctx.share !== undefined &&
      last !== null &&
      exec.round > 0 &&
      exec.state === "PENDING" &&
      !this.fleet.owns(last)
    ) {
      this.fleet.passOver(last, exec.updatedAt + this.ctx.config.busyBackoffMs);
    }
    const routing: Routing = (await this.definition(exec, jobs))?.routing ?? {
      strategy: "ROUND_ROBIN",
    };
    // A shard's placement follows the agents online, not those that are momentarily busy: a
    // busy agent's shard waits for it rather than moving away for good.
    const broadcast = routing.strategy === "SHARD_BROADCAST";
    const candidates = eligibleAgents(
      this.fleet.list(),
      exec.handler,
      (a) => (broadcast ? a.status === "online" : this.fleet.isLive(a.agentId, now)),
      exec.tags,
    );
    if (routing.strategy === "LEAST_LOADED") {
      this.inFlight ??= await this.ctx.store.countInFlightByAgent();
    }
    // With dispatch shared, a STICKY job's successes are applied by the coordinators of the
    // agents it ran on, which need not be this one: each choice reads the last one back.
    const sticky = routing.strategy === "STICKY";
    const sharedSticky = sticky && this.ctx.share !== undefined;
    if (
      (sticky || broadcast) &&
      exec.jobId !== null &&
      (this.router.needsMemory(exec.jobId) || sharedSticky)
    ) {
      // The job's first such choice in this process: what its executions say of where it ran
      // (after a restart, or on a coordinator that took over), so STICKY goes back to the agent
      // of its last success and the shards stay where they were.
      const recent = await this.ctx.store.listRecentlyRouted(
        exec.jobId,
        recentlyRoutedLimit(exec.shardTotal),
      );
      const memory = routingMemoryOf(recent, exec.shardTotal);
      this.router.remember(exec.jobId, memory);
      if (sharedSticky && memory.succeeded !== undefined) {
        this.router.noteSucceeded(exec.jobId, memory.succeeded);
      }
    }
    const counts = routing.strategy === "LEAST_LOADED" ? this.inFlight : undefined;
    const chosen = this.router.choose(
      {
        routing,
        key: exec.jobId ?? `handler:${exec.handler}`,
        hashValue:
          routing.hashKey === undefined ? undefined : hashKeyValue(exec.params, routing.hashKey),
        shard:
          exec.shardTotal !== null && exec.shardIndex !== null
            ? { index: exec.shardIndex, total: exec.shardTotal }
            : undefined,
        inFlight: counts ? (agentId) => counts[agentId] ?? 0 : undefined,
      },
      candidates,
      now,
    );
    if (chosen && counts) counts[chosen.agentId] = (counts[chosen.agentId] ?? 0) + 1;
    if (chosen && broadcast && !this.fleet.isLive(chosen.agentId, now)) return undefined;
    return chosen?.agentId;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.ctx.clock.clearTimer(this.timer);
  }
}

/**
 * How many independent writes the engine runs side by side: 1 on SQLite (its writes cost
 * microseconds and join one group commit), {@link PG_LANES} on PostgreSQL (each write waits for
 * its group's round trips; concurrent ones share the group's transaction, and those of one kind
 * its statements).
 */
export function storeLanes(config: EngineContext["config"]): number {
  return config.store.url === undefined ? 1 : PG_LANES;
}

/**
 * Lanes on PostgreSQL, so that a dispatch pass or a burst of reports fills a group commit and one
 * statement per kind of write. With one lane per pool connection (10) each dispatch waited a
 * group's commit in turn: 10 lanes of about 10 ms carried about 1,000 dispatches a second, and at
 * 1,000 fires/s on the bench every start came seconds late; with 64, start p99 was 10 ms. (256
 * lanes held more work in flight than the coordinator's one thread turned over, and it fell
 * behind at 2,000/s; with groups of 256 writes, 256 lanes did no better than 64.)
 */
const PG_LANES = 64;

/**
 * How many of a job's latest routed executions its routing memory is read from: enough for a
 * few firings of every shard (retries and redispatches included), at most 4,096.
 */
function recentlyRoutedLimit(shardTotal: number | null): number {
  return Math.min(4096, Math.max(64, 4 * (shardTotal ?? 1)));
}

/** The lane of a pending execution: its group, else its job, else the agent a command is for. */
function dispatchLane(e: ExecutionRecord): string {
  if (e.groupKey !== null) return `g\u0000${e.groupKey}`;
  if (e.jobId !== null) return `j\u0000${e.jobId}`;
  return `a\u0000${e.targetAgentId ?? e.id}`;
}

/**
 * Runs `fn` over `items` with up to `width` lanes at once: items of one lane (by `laneOf`) one
 * after the other in their order, lanes in the order their first item came.
 */
export async function inLanes<T>(
  items: readonly T[],
  laneOf: (item: T) => string,
  width: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  const lanes = new Map<string, T[]>();
  for (const item of items) {
    const key = laneOf(item);
    const lane = lanes.get(key);
    if (lane) lane.push(item);
    else lanes.set(key, [item]);
  }
  const queue = [...lanes.values()];
  let next = 0;
  const worker = async () => {
    for (let lane = queue[next++]; lane !== undefined; lane = queue[next++]) {
      for (const item of lane) await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, queue.length) }, worker));
}

/**
 * When the coordinator's link came up: an agent's silence and a dispatch's wait count from then,
 * since before it this coordinator could not hear the agent (nor, for an agent taken up from
 * another coordinator's share, before it was taken: Fleet.takenUpAt). Undefined while the link
 * is down.
 */
export function upSince(ctx: EngineContext): number | undefined {
  return ctx.link.upSince;
}

/**
 * Whether a coordinator with this share routes and dispatches the execution: a job's by the job's
 * owner (its overlap and concurrency rules need one dispatcher), a group's by the group's (a
 * group spans jobs), a command by its agent's.
 */
export function dispatches(share: Share, e: ExecutionRecord): boolean {
  if (e.groupKey !== null) return share.job(`group\u0000${e.groupKey}`);
  if (e.jobId !== null) return share.job(e.jobId);
  return share.agent(e.targetAgentId ?? e.agentId ?? "");
}

/**
 * Whether a coordinator with this share watches the execution an agent holds (its dispatch
 * timeout, lease and run timeout): the agent's, which hears it. One with no agent yet is the
 * dispatcher's.
 */
export function holds(share: Share, e: ExecutionRecord): boolean {
  const agentId = e.agentId ?? e.targetAgentId;
  return agentId === null ? dispatches(share, e) : share.agent(agentId);
}
