import type { ClockSample } from "./protocol/session.js";

/** One NTP-style measurement: the offset to add to local time, its round trip, and when it came. */
export interface OffsetSample {
  offsetMs: number;
  rttMs: number;
  /** Local time the answer arrived (t3). */
  atMs: number;
}

/** Options of {@link ClockSync}. */
export interface ClockSyncOptions {
  /** Recent samples kept as candidates, besides the one in use. @default 8 */
  windowSize?: number;
  /**
   * How fast a sample's error bound grows with its age, in ms per ms: the most the agent's and
   * the coordinator's clocks may differ in rate. @default 50e-6 (50 ppm, a free-running crystal)
   */
  driftRate?: number;
  /**
   * Age of the estimate's sample, in local ms, from which {@link ClockSync.wantsSample} asks for a
   * new one. @default 20_000 (its bound has aged by 1 ms at 50 ppm)
   */
  resampleAfterMs?: number;
}

/**
 * The coordinator stamps t1 and t2 in whole milliseconds, so a round trip computed from them may
 * come out this much below zero, and two samples that agree may differ by this much more than
 * their bounds allow.
 */
const RESOLUTION_MS = 1;

/** Consecutive samples that must disagree with the one in use before they replace it. */
const STEP_SAMPLES = 3;

/** Samples held before the estimate is trusted to need no more for a while (wantsSample). */
const WARM_SAMPLES = 4;

/**
 * A bound this small needs no better sample (wantsSample): on a LAN a start then waits out about
 * a millisecond. A larger one asks for more until the window is full.
 */
const GOOD_ENOUGH_MS = 1;

/**
 * Estimates the offset from the agent's local timeline to the coordinator's clock from the four
 * NTP timestamps, in the manner of NTP's clock filter. Each sample bounds the true offset within
 * ± half its round trip; that bound grows with the sample's age at the drift rate. The estimate
 * is the sample with the smallest bound among the last few and the one already in use, so:
 *
 * - a sample with a long or lopsided round trip never replaces a better one (issue 17: a broker
 *   that held every answer 40 ms made the old minimum-of-the-last-eight flip to −20 ± 20 ms each
 *   time its one good sample slid out of the window);
 * - a sample whose bound does not overlap the estimate's is set aside, so a single bad sample
 *   moves nothing; only {@link STEP_SAMPLES} in a row (the coordinator's clock was stepped) do;
 * - one with a round trip below zero (impossible timestamps) is refused.
 *
 * Until the first sample the offset is 0 (rule 4).
 */
export class ClockSync {
  private window: OffsetSample[] = [];
  /** Samples in a row that disagree with the estimate (see the class comment). */
  private disagreeing: OffsetSample[] = [];
  /** The offset each outgoing message was stamped with, keyed by its `sentAt` (rule 12). */
  private readonly stamped = new Map<number, number>();
  /** The sample in use (kept across a restart by agent.ts); undefined before the first. */
  best: OffsetSample | undefined;
  /** Local time of the newest sample: the bounds below are as of then. */
  private latestAt = 0;
  private readonly windowSize: number;
  private readonly driftRate: number;
  private readonly resampleAfterMs: number;

  constructor(options: ClockSyncOptions = {}) {
    this.windowSize = options.windowSize ?? 8;
    this.driftRate = options.driftRate ?? 50e-6;
    this.resampleAfterMs = options.resampleAfterMs ?? 20_000;
  }

  /** The current offset estimate (coordinator time = local time + offset). */
  get offsetMs(): number {
    return this.best?.offsetMs ?? 0;
  }

  /**
   * The bound of the sample in use as of the newest sample: half its round trip plus its drift
   * since it came. What a start waits out, or a heartbeat reports, is {@link uncertaintyAt} the
   * time of the start or of the heartbeat.
   */
  get uncertaintyMs(): number {
    return this.uncertaintyAt(this.latestAt);
  }

  /**
   * The bound of the sample in use at local time `at`, which should not be before the newest
   * sample: the true offset lies within offsetMs ± this at that time.
   */
  uncertaintyAt(at: number): number {
    return this.best ? this.bound(this.best, at) : 0;
  }

  /**
   * Takes a sample kept by this agent's previous process as the estimate until this process has
   * samples of its own: its bound has aged since (50 ppm of its age), and the first sample of
   * this process that disagrees with it replaces it at once.
   */
  restore(s: OffsetSample): void {
    this.best = s;
    this.latestAt = s.atMs;
  }

  /** Samples accepted and kept (0 until the first one). */
  get sampleCount(): number {
    return this.window.length;
  }

  /**
   * Whether a message sent at local time `localNow` should ask for a clock sample (heartbeat
   * `time`, docs/protocol.md "How often a sample"): while fewer than 4 are held, while a sample
   * set aside waits for the next ones to confirm it (a step) or refute it, while the bound is
   * over 1 ms and the window is not yet full (or, with `holding`, whatever the window holds:
   * a start is coming, and it waits out the bound), and once the estimate's sample is
   * `resampleAfterMs` old. Otherwise an answer would cost the coordinator a
   * message and improve nothing the starts wait for.
   */
  wantsSample(localNow: number, holding = false): boolean {
    const best = this.best;
    return (
      best === undefined ||
      this.window.length < WARM_SAMPLES ||
      this.disagreeing.length > 0 ||
      localNow - best.atMs >= this.resampleAfterMs ||
      // Still learning: the first samples of a connection are often its worst (taken while the
      // coordinator answered a whole fleet's hellos), and a later one may do far better.
      (this.uncertaintyMs > GOOD_ENOUGH_MS && (holding || this.window.length < this.windowSize))
    );
  }

  /** Notes that a message stamped `sentAt` (coordinator time) was sent with the current offset. */
  stamp(sentAt: number): void {
    this.stamped.set(sentAt, this.offsetMs);
    if (this.stamped.size > 64) {
      const oldest = this.stamped.keys().next().value;
      if (oldest !== undefined) this.stamped.delete(oldest);
    }
  }

  /**
   * Adds a sample from a welcome or time answer received at local time `localT3`. Returns false
   * when it is not used: t0 matches no message this process stamped (a stale or foreign answer),
   * or its timestamps give a round trip below zero.
   */
  addSample(clock: ClockSample, localT3: number): boolean {
    const offsetAtT0 = this.stamped.get(clock.t0);
    if (offsetAtT0 === undefined) return false;
    this.stamped.delete(clock.t0);
    const localT0 = clock.t0 - offsetAtT0;
    const rttMs = localT3 - localT0 - (clock.t2 - clock.t1);
    if (rttMs < -RESOLUTION_MS) return false;
    const sample: OffsetSample = {
      offsetMs: (clock.t1 - localT0 + (clock.t2 - localT3)) / 2,
      rttMs: Math.max(0, rttMs),
      atMs: localT3,
    };
    this.latestAt = Math.max(this.latestAt, localT3);
    // A restored estimate (no sample of this process yet) that this one refutes goes at once.
    if (!this.window.length && this.best && !this.agree(sample, this.best)) this.best = undefined;
    const best = this.best;
    if (best !== undefined && !this.agree(sample, best)) {
      this.disagreeing.push(sample);
      if (this.disagreeing.length < STEP_SAMPLES) return true;
      // Several in a row: the coordinator's clock has moved; what came before no longer holds.
      this.window = this.disagreeing;
      this.best = undefined;
    } else {
      this.window.push(sample);
      if (this.window.length > this.windowSize) this.window.shift();
    }
    this.disagreeing = [];
    let chosen = this.best;
    for (const s of this.window) {
      if (
        chosen === undefined ||
        this.bound(s, this.latestAt) < this.bound(chosen, this.latestAt)
      ) {
        chosen = s;
      }
    }
    this.best = chosen;
    return true;
  }

  /** A sample's error bound at local time `at`. */
  private bound(s: OffsetSample, at: number): number {
    return s.rttMs / 2 + Math.max(0, at - s.atMs) * this.driftRate;
  }

  /** True when the two samples' bounds overlap: both can be right. */
  private agree(a: OffsetSample, b: OffsetSample): boolean {
    const at = this.latestAt;
    return (
      Math.abs(a.offsetMs - b.offsetMs) <= this.bound(a, at) + this.bound(b, at) + RESOLUTION_MS
    );
  }
}
