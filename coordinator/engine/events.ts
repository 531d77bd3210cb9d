import { EventEmitter } from "node:events";
import type { ExecState } from "../../shared/fsm.js";

/** Everything the engine announces; metrics and alerts subscribe here, never to the store. */
export interface EngineEvents {
  /** An execution changed state (or an event was recorded on it). */
  transition: {
    executionId: string;
    jobId: string | null;
    agentId: string | null;
    event: string;
    from: ExecState;
    to: ExecState;
    round: number;
    at: number;
    /** The execution's fire time after the transition (UTC ms). */
    fireAt: number;
    /** The nominal time a job execution fired for; null for commands and manual runs. */
    scheduledFor: number | null;
  };
  /** A nominal time fired (an execution was created for it). */
  fired: { jobId: string; scheduledFor: number; executionId: string; at: number; late: boolean };
  /** Nominal times missed (and not fired) under the job's misfire policy. */
  missed: { jobId: string; scheduledFor: number[]; uncounted: number; policy: string; at: number };
  /** An agent came online or went offline. */
  agent: { agentId: string; status: "online" | "offline"; reason: string; at: number };
  /** A message was rejected before it reached the engine. */
  invalidMessage: { topic: string; code: string; message: string; at: number };
  /** A message failed authentication (docs/security.md); it changed nothing. */
  refusedMessage: { topic: string; code: string; source: string; message: string; at: number };
  /** A report was dropped: older round, illegal in the current state, or from a superseded instance. */
  dropped: { executionId: string | null; reason: string; at: number };
}

type Listener<K extends keyof EngineEvents> = (event: EngineEvents[K]) => void;

/**
 * A typed, in-process event bus. A listener that throws is isolated: the error is reported to
 * `onListenerError` and neither the emitter nor the other listeners are affected.
 */
export class EngineEventBus {
  private readonly emitter = new EventEmitter();

  constructor(private readonly onListenerError: (err: unknown) => void = () => {}) {
    this.emitter.setMaxListeners(100);
  }

  on<K extends keyof EngineEvents>(name: K, listener: Listener<K>): () => void {
    const wrapped = (event: EngineEvents[K]) => {
      try {
        listener(event);
      } catch (err) {
        this.onListenerError(err);
      }
    };
    this.emitter.on(name, wrapped);
    return () => this.emitter.off(name, wrapped);
  }

  emit<K extends keyof EngineEvents>(name: K, event: EngineEvents[K]): void {
    this.emitter.emit(name, event);
  }
}
