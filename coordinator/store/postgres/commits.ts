import { type ErrorCode, isAxError } from "../../../shared/errors.js";

/**
 * Refusals a caller asked to be told of, with nothing written: they are answers, not failed
 * commits, so they neither reach `onCommitError` nor hold back other writes' after-commit work.
 */
const REFUSALS: ReadonlySet<ErrorCode> = new Set(["AX_STORE_CONFLICT", "AX_API_TOKEN_EXISTS"]);

/**
 * The commit contract of the Store port for a store whose every write is its own transaction,
 * several in flight at once: {@link track} each write; {@link flush} and {@link afterCommit}
 * wait for the writes started before them. A write that failed (other than a
 * {@link REFUSALS refusal}) rejects the flushes and drops the after-commit work that waited for
 * it, and is told to {@link onError}.
 */
export class CommitTracker {
  /** Writes in flight, each settling to its failure or undefined once committed. */
  private readonly inFlight = new Set<Promise<Error | undefined>>();

  constructor(private readonly onError: (err: Error) => void) {}

  /** Records a write in flight; returns it unchanged. */
  track<T>(write: Promise<T>): Promise<T> {
    const settled: Promise<Error | undefined> = write.then(
      () => undefined,
      (err: unknown) => {
        if (isAxError(err) && REFUSALS.has(err.code)) return undefined;
        const error = err instanceof Error ? err : new Error(String(err));
        this.onError(error);
        return error;
      },
    );
    this.inFlight.add(settled);
    void settled.then(() => this.inFlight.delete(settled));
    return write;
  }

  /** How many writes are in flight. */
  get pending(): number {
    return this.inFlight.size;
  }

  /** Resolves when every write started so far has committed; rejects with the first failure. */
  async flush(): Promise<void> {
    if (this.inFlight.size === 0) return;
    const failures = await Promise.all([...this.inFlight]);
    const failed = failures.find((f) => f !== undefined);
    if (failed) throw failed;
  }

  /** Runs `fn` once every write started so far has committed; never, if one of them failed. */
  afterCommit(fn: () => void): void {
    if (this.inFlight.size === 0) {
      queueMicrotask(fn);
      return;
    }
    void Promise.all([...this.inFlight]).then((failures) => {
      if (failures.every((f) => f === undefined)) fn();
    });
  }

  /** Resolves once every write started so far has settled, however it ended. */
  async settle(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }
}
