import { AxError } from "../../shared/errors.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import type { EngineContext } from "../engine/context.js";
import { applyEvent, newExecutionId } from "../engine/transitions.js";
import type {
  ExecutionPage,
  ExecutionPageQuery,
  ExecutionRecord,
  TimelineEntry,
} from "../store/port.js";
import { type Idempotency, once, replayed } from "./idempotency.js";

/** States an operator may retry from. */
const RETRYABLE = new Set(["FAILED", "TIMED_OUT", "EXPIRED", "CANCELED"]);

function executionNotFound(id: string): AxError {
  return new AxError("AX_EXEC_NOT_FOUND", `execution "${id}" not found`, { context: { id } });
}

/** Executions: read, cancel, retry. */
export class ExecutionOperations {
  constructor(
    private readonly ctx: EngineContext,
    /** Tells the dispatch loop there is new work. */
    private readonly kick: () => void,
    /** Counts an operator's retry (a metric). */
    private readonly countRetry: () => void,
  ) {}

  /** One page of executions, newest first, filtered (see the store's `pageExecutions`). */
  async list(query: ExecutionPageQuery): Promise<ExecutionPage> {
    return this.ctx.store.pageExecutions(query);
  }

  /** An execution; AX_EXEC_NOT_FOUND when there is none. */
  async get(id: string): Promise<ExecutionRecord> {
    const execution = await this.ctx.store.getExecution(id);
    if (!execution) throw executionNotFound(id);
    return execution;
  }

  /** An execution and every transition it made. */
  async detail(id: string): Promise<{ execution: ExecutionRecord; timeline: TimelineEntry[] }> {
    const execution = await this.get(id);
    return { execution, timeline: await this.ctx.store.getTimeline(id) };
  }

  /**
   * Cancels an execution (DESIGN §3). One not yet dispatched ends CANCELED at once; one held by
   * an agent is sent a cancel, and the agent's answer ends it (or says it was too late).
   */
  async cancel(id: string, actor = "system"): Promise<ExecutionRecord> {
    const exec = await this.get(id);
    if (TERMINAL_STATES.has(exec.state)) {
      throw new AxError("AX_EXEC_CONFLICT", `execution "${id}" already ended ${exec.state}`, {
        context: { id },
      });
    }
    await applyEvent(this.ctx, id, { type: "cancel" }, () => ({}), { by: "operator", actor });
    await this.ctx.store.flush();
    return this.get(id);
  }

  /**
   * Retries an execution that ended FAILED, TIMED_OUT, EXPIRED or CANCELED, once: a new
   * execution (terminal states stay final) that runs at most once and records which one it
   * retries. Returns its id.
   */
  async retry(id: string, actor = "system", key?: Idempotency): Promise<string> {
    const made = await replayed<string>(this.ctx, key);
    if (made !== undefined) return made;
    const old = await this.get(id);
    if (!RETRYABLE.has(old.state)) {
      throw new AxError(
        "AX_EXEC_CONFLICT",
        `execution "${id}" is ${old.state}; only a failed, timed-out, expired or canceled one can be retried`,
        { context: { id } },
      );
    }
    const now = this.ctx.clock.wallNow();
    const newId = newExecutionId(now);
    const execution = {
      ...old,
      id: newId,
      fireAt: now,
      deadline: now + Math.max(0, old.deadline - old.fireAt),
      // One run: the operator asked for one more try, not for the retry policy again (a
      // retryable failure of the retry must not run the handler once more on its own).
      maxAttempts: 1,
      createdAt: now,
    };
    const first = await once(this.ctx, key, newId, (record) =>
      this.ctx.store.createExecutions([execution], now, { actor, retryOf: id }, record),
    );
    // Another request with the key made the retry meanwhile: its answer, and nothing more.
    if (first !== newId) return first;
    this.countRetry();
    this.ctx.log("info", `execution ${id} retried as ${newId}`, {
      executionId: newId,
      retryOf: id,
    });
    await this.ctx.store.flush();
    this.kick();
    return newId;
  }
}
