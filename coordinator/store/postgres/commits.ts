import { type ErrorCode, isAxError } from "../../../shared/errors.js";

/**
 * Refusals a caller asked to be told of, with nothing written: they are answers, not failed
 * commits, so they neither reach `onCommitError` nor hold back other writes' after-commit work.
 */
const REFUSALS: ReadonlySet<ErrorCode> = new Set(["AX_STORE_CONFLICT", "AX_API_TOKEN_EXISTS"]);

/** After-commit work waiting for the writes started before it. */
interface Waiting {
  /** The last write started when it was asked for: it runs once every write up to it settled. */
  upTo: number;
  /** When it was asked for ({@link CommitTracker} `tick`): failures settled later drop it. */
  at: number;
  fn: () => void;
}

/**
 * The commit contract of the Store port for a store whose every write is its own transaction,
 * several in flight at once: {@link track} each write; {@link flush} and {@link afterCommit}
 * wait for the writes started before them. A write that failed (other than a
 * {@link REFUSALS refusal}) rejects the flushes and drops the after-commit work that waited for
 * it, and is told to {@link onError}.
 *
 * Writes are numbered as they start, so after-commit work waits for a number: it runs once every
 * write up to it has settled. (Waiting on a promise of all the writes in flight cost each call
 * as many reactions as there were writes: under load, with hundreds in flight and a call per
 * transition, that was a fifth of the coordinator's time in microtasks and a third in GC, and it
 * fell behind for good.)
 */
export class CommitTracker {
  /** Writes in flight by number, each settling to its failure or undefined once committed. */
  private readonly inFlight = new Map<number, Promise<Error | undefined>>();
  /** The number of the next write to start. */
  private next = 0;
  /** Every write numbered below this has settled. */
  private settledBelow = 0;
  /** After-commit work in the order it was asked for (so `upTo` never decreases), from `head`. */
  private waiting: Waiting[] = [];
  private head = 0;
  /** Failures that work still waiting may have waited for: their write's number and when. */
  private failures: { n: number; at: number }[] = [];
  /** Counts settlements and requests, to tell which came first. */
  private tick = 0;

  constructor(private readonly onError: (err: Error) => void) {}

  /** Records a write in flight; returns it unchanged. */
  track<T>(write: Promise<T>): Promise<T> {
    const n = this.next++;
    const settled: Promise<Error | undefined> = write.then(
      () => undefined,
      (err: unknown) => {
        if (isAxError(err) && REFUSALS.has(err.code)) return undefined;
        const error = err instanceof Error ? err : new Error(String(err));
        this.onError(error);
        return error;
      },
    );
    this.inFlight.set(n, settled);
    void settled.then((failure) => this.settled(n, failure));
    return write;
  }

  /** How many writes are in flight. */
  get pending(): number {
    return this.inFlight.size;
  }

  /** Resolves when every write started so far has committed; rejects with the first failure. */
  async flush(): Promise<void> {
    if (this.inFlight.size === 0) return;
    const failures = await Promise.all([...this.inFlight.values()]);
    const failed = failures.find((f) => f !== undefined);
    if (failed) throw failed;
  }

  /** Runs `fn` once every write started so far has committed; never, if one of them failed. */
  afterCommit(fn: () => void): void {
    if (this.inFlight.size === 0) {
      queueMicrotask(fn);
      return;
    }
    this.waiting.push({ upTo: this.next - 1, at: this.tick++, fn });
  }

  /** Resolves once every write started so far has settled, however it ended. */
  async settle(): Promise<void> {
    await Promise.all([...this.inFlight.values()]);
  }

  private settled(n: number, failure: Error | undefined): void {
    this.inFlight.delete(n);
    const at = this.tick++;
    if (failure !== undefined && this.head < this.waiting.length) this.failures.push({ n, at });
    while (this.settledBelow < this.next && !this.inFlight.has(this.settledBelow)) {
      this.settledBelow++;
    }
    while (this.head < this.waiting.length) {
      const w = this.waiting[this.head] as Waiting;
      if (w.upTo >= this.settledBelow) break;
      this.head++;
      // Dropped if a write it waited for (started before it was asked for, settled after) failed.
      if (this.failures.some((f) => f.n <= w.upTo && f.at > w.at)) continue;
      // Each on its own, after the continuations of the write that settled.
      queueMicrotask(w.fn);
    }
    if (this.head === this.waiting.length) {
      this.waiting = [];
      this.head = 0;
      this.failures = [];
    } else if (this.head >= 1024 && this.head * 2 >= this.waiting.length) {
      this.waiting = this.waiting.slice(this.head);
      this.head = 0;
    }
  }
}
