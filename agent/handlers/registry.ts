import type * as z from "zod/mini";
import { HANDLER_NAME_PATTERN } from "../../shared/ids.js";

/** What a handler is told about the execution it runs. */
export interface HandlerContext {
  /** Globally unique; use it as an idempotency key for side effects. */
  executionId: string;
  attempt: number;
  round: number;
  shard: { index: number; total: number } | undefined;
  /** Aborted on cancel or timeout; a handler should stop promptly when it fires. */
  signal: AbortSignal;
  /**
   * Journals the child processes the handler starts, so that after a crash of the agent what
   * survived is stopped, or how it ended is reported (docs/handlers.md, "Side effects"). A
   * handler that spawns must call `spawned` at once and `exited` when the child exits. Absent
   * where nothing journals them (tests).
   */
  children?: ChildTracker | undefined;
  /** Reports progress to the coordinator. */
  progress(percent?: number, note?: string): void;
  log(message: string, fields?: Record<string, unknown>): void;
}

/** Where a handler tells of the child processes it starts (see HandlerContext.children). */
export interface ChildTracker {
  /** A child started, leader of its own process group (`detached: true`). */
  spawned(pid: number): void;
  /** That child exited; `stoppedByAgent` when the agent killed it (cancel, timeout, shutdown). */
  exited(
    pid: number,
    exit: { code: number | null; signal: string | null; stoppedByAgent: boolean },
  ): void;
  /**
   * A file where a child may append `pid status` as it ends (exec's wrapper does), so that a
   * restart knows how a child that ended while the agent was down did. Absent: none is kept.
   */
  exitFile?: string | undefined;
}

/** A handler failure; `retryable` (default true) tells the coordinator whether to try again. */
export class HandlerFailure extends Error {
  readonly retryable: boolean;
  constructor(message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "HandlerFailure";
    this.retryable = options.retryable ?? true;
  }
}

export type HandlerResult = Record<string, unknown> | undefined;

/** A named handler with the schema its params must pass. */
export interface Handler<P = unknown> {
  readonly name: string;
  readonly params: z.ZodMiniType<P>;
  run(ctx: HandlerContext, params: P): Promise<HandlerResult>;
}

/**
 * Defines a handler. Params are validated by `paramsSchema` before the handler runs (a failure is
 * answered `rejected: invalid_params`); a thrown error ends the execution `failed`, retryable
 * unless it is a {@link HandlerFailure} that says otherwise.
 */
export function defineHandler<S extends z.ZodMiniType>(
  name: string,
  paramsSchema: S,
  run: (ctx: HandlerContext, params: z.infer<S>) => Promise<HandlerResult>,
): Handler<z.infer<S>> {
  return { name, params: paramsSchema as unknown as z.ZodMiniType<z.infer<S>>, run };
}

/** The handlers an agent offers, by name. */
export class HandlerRegistry {
  private readonly handlers = new Map<string, Handler>();

  constructor(handlers: readonly Handler<unknown>[] = []) {
    for (const h of handlers) this.add(h);
  }

  add(handler: Handler<unknown>): void {
    // A name the protocol refuses would only fail later, in every hello (handlers.md).
    if (!HANDLER_NAME_PATTERN.test(handler.name)) {
      throw new TypeError(
        `handler name ${JSON.stringify(handler.name)} must match ${HANDLER_NAME_PATTERN.source}`,
      );
    }
    if (this.handlers.has(handler.name))
      throw new TypeError(`handler "${handler.name}" is defined twice`);
    this.handlers.set(handler.name, handler);
  }

  get(name: string): Handler | undefined {
    return this.handlers.get(name);
  }

  names(): string[] {
    return [...this.handlers.keys()].sort();
  }
}
