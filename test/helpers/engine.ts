import { parseCoordinatorConfig } from "../../coordinator/config.js";
import type { EngineContext } from "../../coordinator/engine/context.js";
import { EngineEventBus } from "../../coordinator/engine/events.js";
import { CoordinatorLink } from "../../coordinator/link/mqtt-link.js";
import type { NewExecution, Store } from "../../coordinator/store/port.js";
import type { Clock } from "../../shared/clock.js";

/**
 * An engine context for a test of one engine part on `store` and `clock`, with the default config
 * (a broker that is never reached) unless one is given. Its link is built but never started: what
 * the part would send goes nowhere.
 */
export function engineContext(o: {
  store: Store;
  clock: Clock;
  config?: EngineContext["config"];
  coordinatorId?: string;
  log?: EngineContext["log"];
}): EngineContext {
  const config = o.config ?? parseCoordinatorConfig({ mqtt: { url: "mqtt://127.0.0.1:1" } });
  const link = new CoordinatorLink(
    {
      url: config.mqtt.url,
      clientId: `ax-c-${o.coordinatorId ?? ""}${Math.random().toString(36).slice(2)}`,
    },
    () => o.clock.wallNow(),
  );
  return {
    config,
    store: o.store,
    link,
    clock: o.clock,
    log: o.log ?? (() => {}),
    events: new EngineEventBus(),
    ...(o.coordinatorId === undefined ? {} : { coordinatorId: o.coordinatorId }),
  };
}

/**
 * A command due `now` for `targetAgentId` (a1 unless given): an hour to start, a second to run,
 * retried from 1 s backoff capped at 3 s.
 */
export function newCommand(
  id: string,
  now: number,
  o: { handler?: string; targetAgentId?: string; maxAttempts?: number } = {},
): NewExecution {
  return {
    id,
    kind: "command",
    jobId: null,
    jobVersion: null,
    handler: o.handler ?? "echo",
    params: {},
    targetAgentId: o.targetAgentId ?? "a1",
    fireAt: now,
    deadline: now + 3_600_000,
    timeoutMs: 1000,
    dispatchTimeoutMs: 5000,
    maxAttempts: o.maxAttempts ?? 1,
    maxDispatches: 3,
    priority: 0,
    retryBaseMs: 1000,
    retryCapMs: 3000,
    createdAt: now,
  };
}
