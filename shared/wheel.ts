/**
 * A hashed timing wheel: O(1) schedule and cancel for many pending timers, with one OS timer armed
 * at a time. The coordinator runs one with a 100 ms tick and the agent one with a 20 ms tick and up
 * to 100k pending entries (DESIGN.md §4), so entries live in a typed-array pool rather than in one
 * object each.
 *
 * Layout: pool index `s < slots` is the sentinel of slot `s`'s circular doubly linked list, index
 * `slots` the sentinel of the overflow list (entries one revolution or more ahead), and entries
 * start after them. A handle is `generation * 2^26 + index`; releasing an entry bumps its
 * generation, so a handle kept after its entry fired or was cancelled never touches a reused one.
 *
 * Precision does not depend on the tick: the one timer is armed for the earliest due entry itself,
 * and re-armed for the remainder when it fires early.
 */
import type { Clock, TimerHandle } from "./clock.js";

/** Options for {@link TimingWheel}. */
export interface WheelOptions {
  /** Time source; the wheel uses only `monoNow()`, `setTimer()` and `clearTimer()`. */
  clock: Clock;
  /** Width of one slot in milliseconds (fractions allowed). @default 20 */
  tickMs?: number;
  /** Number of slots; one revolution is `tickMs * slots` ms. @default 512 */
  slots?: number;
  /** Entries the pool holds before it first grows; it grows by doubling. @default 1024 */
  initialCapacity?: number;
  /**
   * Most entries fired in one timer turn. When more are due the rest fire on following turns (a
   * timer re-armed with delay 0), so one synchronous chunk stays short. @default 1024
   */
  maxBatch?: number;
  /**
   * Receives whatever a callback throws; the wheel keeps running either way.
   * @default writes the error to `console.error`
   */
  onError?: (err: unknown) => void;
}

const NIL = -1;

// Entry states (Uint8Array).
const FREE = 0;
const WHEEL = 1;
const OVERFLOW = 2;
/** Taken off its list into the current turn's sorted batch, not fired yet. */
const READY = 3;
const SENTINEL = 4;

/** Pool indices stay below this; handles are `generation * INDEX_SPACE + index`. */
const INDEX_SPACE = 2 ** 26;
/** 2^26 * 2^27 = 2^53, so every handle is an exact (safe) integer. */
const GENERATION_SPACE = 2 ** 27;

function positiveInteger(name: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new RangeError(`TimingWheel: ${name} must be an integer from 1 to ${max}, got ${value}`);
  }
  return value;
}

/**
 * A hashed timing wheel on the monotonic clock of an injected {@link Clock}.
 *
 * - `schedule` and `cancel` are O(1), also for entries beyond one revolution (they wait in an
 *   overflow list and move into the wheel, in a pass that runs at least half a revolution before
 *   the earliest of them is due).
 * - An entry never fires before `clock.monoNow() >= due`, and never synchronously inside
 *   `schedule`; one due now or in the past fires on the next timer turn.
 * - Entries fired in one turn fire in ascending due order (ties in no promised order), at most
 *   `maxBatch` per turn.
 * - Callbacks may schedule and cancel, including cancel entries of the batch being fired.
 * - No timer is armed while the wheel is empty, so an idle process can exit.
 *
 * @typeParam T - the payload handed back to `onFire`.
 */
export class TimingWheel<T> {
  private readonly clock: Clock;
  private readonly onFire: (payload: T, dueMono: number, nowMono: number) => void;
  private readonly onError: (err: unknown) => void;
  private readonly tickMs: number;
  private readonly slots: number;
  /** Half a revolution in ticks: the least margin the overflow pass keeps. */
  private readonly half: number;
  private readonly maxBatch: number;
  /** Sentinel of the overflow list. */
  private readonly overflowList: number;
  /** First pool index that is an entry rather than a sentinel. */
  private readonly first: number;

  // The pool: 8 + 4 + 4 + 4 + 1 = 21 bytes per entry, plus one payload reference.
  private due: Float64Array;
  private next: Int32Array;
  private prev: Int32Array;
  private gen: Uint32Array;
  private state: Uint8Array;
  private payloads: (T | undefined)[];
  /** Free entries, singly linked through `next`. */
  private freeHead = NIL;

  private wheelCount = 0;
  private overflowCount = 0;
  private readyCount = 0;
  /**
   * The tick being processed: every wheel entry's tick is in `[cursor, cursor + slots)`, so each
   * slot holds one tick (an entry already overdue when scheduled is put in the cursor's slot).
   */
  private cursor: number;
  /** A lower bound of the ticks of the overflow entries; Infinity when there are none. */
  private overflowMinTick = Number.POSITIVE_INFINITY;

  /** Handles taken for firing, sorted by due; `ready[readyPos]` is the next to fire. */
  private ready: number[] = [];
  private readyPos = 0;

  private timer: TimerHandle | undefined;
  /** Monotonic time the timer is armed for; Infinity when none is. */
  private armedAt = Number.POSITIVE_INFINITY;
  private inTurn = false;
  private closed = false;

  /**
   * @param onFire - called once per entry, with its payload, its due time and the monotonic time
   *   at the call (always `>= dueMono`).
   * @param options - see {@link WheelOptions}.
   */
  constructor(
    onFire: (payload: T, dueMono: number, nowMono: number) => void,
    options: WheelOptions,
  ) {
    this.onFire = onFire;
    this.clock = options.clock;
    this.onError =
      options.onError ?? ((err: unknown) => console.error("TimingWheel: a callback threw", err));
    const tickMs = options.tickMs ?? 20;
    if (!Number.isFinite(tickMs) || tickMs <= 0) {
      throw new RangeError(`TimingWheel: tickMs must be a finite number > 0, got ${tickMs}`);
    }
    this.tickMs = tickMs;
    this.slots = positiveInteger("slots", options.slots ?? 512, 2 ** 20);
    this.half = Math.max(1, Math.floor(this.slots / 2));
    this.maxBatch = positiveInteger("maxBatch", options.maxBatch ?? 1024, 2 ** 31);
    this.overflowList = this.slots;
    this.first = this.slots + 1;
    const capacity = positiveInteger(
      "initialCapacity",
      options.initialCapacity ?? 1024,
      INDEX_SPACE - this.first,
    );

    const length = this.first + capacity;
    this.due = new Float64Array(length);
    this.next = new Int32Array(length);
    this.prev = new Int32Array(length);
    this.gen = new Uint32Array(length).fill(1);
    this.state = new Uint8Array(length);
    this.payloads = new Array<T | undefined>(length).fill(undefined);
    for (let s = 0; s < this.first; s++) {
      this.next[s] = s;
      this.prev[s] = s;
      this.state[s] = SENTINEL;
    }
    this.addFree(this.first, length);
    this.cursor = this.tickOf(this.clock.monoNow());
  }

  /**
   * Adds an entry that fires once `clock.monoNow() >= dueMono`.
   *
   * @param dueMono - due time on the `clock.monoNow()` timeline (ms, fractions allowed).
   * @returns a positive integer handle for {@link cancel} and {@link has}.
   * @throws RangeError when `dueMono` is not finite or the pool cannot grow further; Error after
   *   {@link close}.
   */
  schedule(dueMono: number, payload: T): number {
    if (this.closed) throw new Error("TimingWheel: schedule() after close()");
    if (!Number.isFinite(dueMono)) {
      throw new RangeError(`TimingWheel: due must be a finite number, got ${dueMono}`);
    }
    const now = this.clock.monoNow();
    if (this.size === 0) {
      // An empty wheel has no timer, so its cursor stood still; restart it at the present.
      const nowTick = this.tickOf(now);
      if (nowTick > this.cursor) this.cursor = nowTick;
    }
    const i = this.allocate();
    this.due[i] = dueMono;
    this.payloads[i] = payload;
    const tick = this.tickOf(dueMono);
    let need: number;
    if (tick < this.cursor + this.slots) {
      this.append(this.slotOf(Math.max(tick, this.cursor)), i);
      this.state[i] = WHEEL;
      this.wheelCount++;
      need = dueMono;
    } else {
      this.append(this.overflowList, i);
      this.state[i] = OVERFLOW;
      this.overflowCount++;
      if (tick < this.overflowMinTick) this.overflowMinTick = tick;
      need = this.migrationTick() * this.tickMs;
    }
    // Inside a turn the timer is armed once when the turn ends.
    if (!this.inTurn && need < this.armedAt) this.arm(need, now);
    return (this.gen[i] ?? 0) * INDEX_SPACE + i;
  }

  /**
   * Removes a pending entry in O(1); it will not fire, even when it was due in the batch being
   * fired right now.
   *
   * @returns false when the entry already fired or was cancelled, or the handle is stale or unknown.
   */
  cancel(handle: number): boolean {
    const i = this.liveIndex(handle);
    if (i === NIL) return false;
    const state = this.state[i];
    if (state === WHEEL) {
      this.unlink(i);
      this.wheelCount--;
    } else if (state === OVERFLOW) {
      this.unlink(i);
      this.overflowCount--;
      if (this.overflowCount === 0) this.overflowMinTick = Number.POSITIVE_INFINITY;
    } else {
      // READY: its handle stays in `ready` and is skipped there as stale.
      this.readyCount--;
    }
    this.release(i);
    // A timer left armed for an empty wheel would keep an idle process alive.
    if (this.size === 0) this.disarm();
    return true;
  }

  /** Whether `handle` names an entry that is still pending. */
  has(handle: number): boolean {
    return this.liveIndex(handle) !== NIL;
  }

  /** Number of pending entries (in the wheel, in overflow, and taken for firing but not fired). */
  get size(): number {
    return this.wheelCount + this.overflowCount + this.readyCount;
  }

  /** The earliest due time of the pending entries, or undefined when none is. O(pool size). */
  nextDue(): number | undefined {
    if (this.size === 0) return undefined;
    let min = Number.POSITIVE_INFINITY;
    for (let i = this.first; i < this.due.length; i++) {
      const d = this.due[i] ?? min;
      if (this.state[i] !== FREE && d < min) min = d;
    }
    return min;
  }

  /**
   * Clears the timer and drops every pending entry (their handles become stale). Further
   * `schedule` calls throw; `cancel` and `has` return false. Safe to call from a callback.
   */
  close(): void {
    this.disarm();
    this.closed = true;
    for (let i = this.first; i < this.due.length; i++) {
      if (this.state[i] !== FREE) this.release(i);
    }
    this.wheelCount = 0;
    this.overflowCount = 0;
    this.readyCount = 0;
    this.overflowMinTick = Number.POSITIVE_INFINITY;
    this.ready = [];
    this.readyPos = 0;
  }

  // --- Timer turns -------------------------------------------------------------------------------

  private readonly onTimer = (): void => {
    this.timer = undefined;
    this.armedAt = Number.POSITIVE_INFINITY;
    if (this.closed) return;
    this.inTurn = true;
    try {
      this.collectDue(this.clock.monoNow());
      this.fireBatch();
    } finally {
      this.inTurn = false;
    }
    this.rearm();
  };

  /**
   * Moves the cursor to the tick of `now`, taking every entry with due <= now into `ready` (sorted)
   * and running overflow passes on the way. Every slot passed is processed, however many.
   */
  private collectDue(now: number): void {
    if (this.readyPos === this.ready.length) {
      this.ready.length = 0;
      this.readyPos = 0;
    }
    const before = this.ready.length;
    const nowTick = this.tickOf(now);
    for (;;) {
      if (this.overflowCount > 0 && this.cursor >= this.migrationTick()) this.migrate();
      if (this.cursor >= nowTick) break;
      if (this.wheelCount === 0) {
        // Nothing in the wheel: skip the empty slots up to the next overflow pass.
        const stop = this.overflowCount > 0 ? Math.min(nowTick, this.migrationTick()) : nowTick;
        if (stop > this.cursor) {
          this.cursor = stop;
          continue;
        }
      }
      // A passed tick: all of its slot is due, since due < (tick + 1) * tickMs <= now.
      this.take(this.slotOf(this.cursor), Number.POSITIVE_INFINITY);
      this.cursor++;
    }
    this.take(this.slotOf(this.cursor), now);
    if (this.ready.length > before) {
      if (this.readyPos > 0) {
        // Joining what a maxBatch-limited turn left: drop the fired and the cancelled first.
        this.ready = this.ready.slice(this.readyPos).filter((h) => this.isReady(h));
        this.readyPos = 0;
      }
      const due = this.due;
      this.ready.sort((a, b) => (due[a % INDEX_SPACE] ?? 0) - (due[b % INDEX_SPACE] ?? 0));
    }
  }

  /** Moves the entries of `slot` with due <= limit to `ready`. */
  private take(slot: number, limit: number): void {
    let i = this.next[slot] ?? slot;
    while (i !== slot) {
      const following = this.next[i] ?? slot;
      if ((this.due[i] ?? 0) <= limit) {
        this.unlink(i);
        this.state[i] = READY;
        this.wheelCount--;
        this.readyCount++;
        this.ready.push((this.gen[i] ?? 0) * INDEX_SPACE + i);
      }
      i = following;
    }
  }

  private fireBatch(): void {
    let fired = 0;
    while (fired < this.maxBatch && this.readyPos < this.ready.length && !this.closed) {
      const handle = this.ready[this.readyPos++] ?? NIL;
      // Cancelled since it was taken (possibly by a callback of this very batch): skip it.
      if (!this.isReady(handle)) continue;
      const i = handle % INDEX_SPACE;
      const payload = this.payloads[i] as T;
      const due = this.due[i] ?? 0;
      // Released before the call, so the callback sees it gone (has() false, size excludes it).
      this.readyCount--;
      this.release(i);
      fired++;
      try {
        this.onFire(payload, due, this.clock.monoNow());
      } catch (err) {
        this.report(err);
      }
    }
  }

  /** Arms the one timer for the earliest thing that needs a turn, or none when empty. */
  private rearm(): void {
    if (this.closed) return;
    if (this.size === 0) {
      this.disarm();
      return;
    }
    const now = this.clock.monoNow();
    let target = Number.POSITIVE_INFINITY;
    if (this.readyCount > 0) {
      // More than maxBatch were due: yield to the event loop, then go on.
      target = now;
    } else {
      if (this.wheelCount > 0) target = this.earliestInWheel();
      if (this.overflowCount > 0) {
        target = Math.min(target, this.migrationTick() * this.tickMs);
      }
    }
    this.arm(target, now);
  }

  private arm(at: number, now: number): void {
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    // Armed for the due time itself, not the tick: lateness is the event loop's, not the wheel's.
    // setTimeout may fire early (by up to ~2 ms), in which case the turn finds nothing due and
    // re-arms for the remainder.
    this.timer = this.clock.setTimer(this.onTimer, Math.max(0, at - now));
    this.armedAt = at;
  }

  private disarm(): void {
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timer = undefined;
    this.armedAt = Number.POSITIVE_INFINITY;
  }

  /** Earliest due of the first non-empty slot from the cursor, which holds the earliest entries. */
  private earliestInWheel(): number {
    const start = this.slotOf(this.cursor);
    for (let k = 0; k < this.slots; k++) {
      const slot = start + k < this.slots ? start + k : start + k - this.slots;
      let i = this.next[slot] ?? slot;
      if (i === slot) continue;
      let min = Number.POSITIVE_INFINITY;
      while (i !== slot) {
        const d = this.due[i] ?? min;
        if (d < min) min = d;
        i = this.next[i] ?? slot;
      }
      return min;
    }
    return Number.POSITIVE_INFINITY;
  }

  // --- Overflow ----------------------------------------------------------------------------------

  /**
   * The cursor tick at which the next overflow pass runs: `slots - half` ticks (at least half a
   * revolution) before the earliest overflow tick. The pass runs in its own turn, that far ahead,
   * so its O(overflow) cost never lands on a turn that fires the entries it moves; and passes are
   * at least `half` ticks apart, since what stays in overflow is >= cursor + slots.
   */
  private migrationTick(): number {
    return this.overflowMinTick - this.slots + this.half;
  }

  /** Moves every overflow entry whose tick is < cursor + slots into its slot. O(overflow size). */
  private migrate(): void {
    const limit = this.cursor + this.slots;
    let min = Number.POSITIVE_INFINITY;
    let i = this.next[this.overflowList] ?? this.overflowList;
    while (i !== this.overflowList) {
      const following = this.next[i] ?? this.overflowList;
      const tick = this.tickOf(this.due[i] ?? 0);
      if (tick < limit) {
        this.unlink(i);
        this.append(this.slotOf(Math.max(tick, this.cursor)), i);
        this.state[i] = WHEEL;
        this.overflowCount--;
        this.wheelCount++;
      } else if (tick < min) {
        min = tick;
      }
      i = following;
    }
    this.overflowMinTick = min;
  }

  // --- Pool and lists ----------------------------------------------------------------------------

  /** The tick `k` with `k * tickMs <= t < (k + 1) * tickMs`, exactly as those products round. */
  private tickOf(t: number): number {
    let k = Math.floor(t / this.tickMs);
    // The division rounds; correct it so tick starts computed as k * tickMs agree with it.
    if (k * this.tickMs > t) k -= 1;
    else if ((k + 1) * this.tickMs <= t) k += 1;
    return k;
  }

  private slotOf(tick: number): number {
    const s = tick % this.slots;
    return s < 0 ? s + this.slots : s;
  }

  private liveIndex(handle: number): number {
    if (!Number.isSafeInteger(handle) || handle < 0) return NIL;
    const i = handle % INDEX_SPACE;
    if (i < this.first || i >= this.due.length) return NIL;
    const state = this.state[i];
    if (state === FREE || state === SENTINEL) return NIL;
    return this.gen[i] === (handle - i) / INDEX_SPACE ? i : NIL;
  }

  private isReady(handle: number): boolean {
    const i = this.liveIndex(handle);
    return i !== NIL && this.state[i] === READY;
  }

  private append(list: number, i: number): void {
    const tail = this.prev[list] ?? list;
    this.next[i] = list;
    this.prev[i] = tail;
    this.next[tail] = i;
    this.prev[list] = i;
  }

  private unlink(i: number): void {
    const following = this.next[i] ?? i;
    const preceding = this.prev[i] ?? i;
    this.next[preceding] = following;
    this.prev[following] = preceding;
  }

  private allocate(): number {
    if (this.freeHead === NIL) this.grow();
    const i = this.freeHead;
    this.freeHead = this.next[i] ?? NIL;
    return i;
  }

  private release(i: number): void {
    this.state[i] = FREE;
    this.payloads[i] = undefined;
    const g = (this.gen[i] ?? 0) + 1;
    this.gen[i] = g >= GENERATION_SPACE ? 1 : g;
    this.next[i] = this.freeHead;
    this.freeHead = i;
  }

  private grow(): void {
    const oldLength = this.due.length;
    const length = Math.min(INDEX_SPACE, this.first + 2 * (oldLength - this.first));
    if (length <= oldLength) throw new RangeError("TimingWheel: the pool is full");
    const due = new Float64Array(length);
    due.set(this.due);
    this.due = due;
    const next = new Int32Array(length);
    next.set(this.next);
    this.next = next;
    const prev = new Int32Array(length);
    prev.set(this.prev);
    this.prev = prev;
    const gen = new Uint32Array(length).fill(1);
    gen.set(this.gen);
    this.gen = gen;
    const state = new Uint8Array(length);
    state.set(this.state);
    this.state = state;
    for (let i = oldLength; i < length; i++) this.payloads.push(undefined);
    this.addFree(oldLength, length);
  }

  /** Puts pool indices `[from, to)` on the free list, lowest first out. */
  private addFree(from: number, to: number): void {
    for (let i = to - 1; i >= from; i--) {
      this.next[i] = this.freeHead;
      this.freeHead = i;
    }
  }

  private report(err: unknown): void {
    try {
      this.onError(err);
    } catch {
      // The reporter itself failed; there is nowhere left to report to, and the wheel must go on.
    }
  }
}
