import * as z from "zod/mini";
import type { AgentFeatures, HandlerPart } from "../parts/types.js";
import type { Handler } from "./registry.js";

/** The handlers an agent offers, and how to release what they hold. */
export interface OfferedHandlers {
  handlers: Handler<unknown>[];
  /** Closes the handlers' connections; call it once the executor has stopped running work. */
  close(): Promise<void>;
}

/**
 * The schema of the agent config's `handlers` section for the handlers built in: one optional
 * section per device handler. Unknown keys are refused (see agent/config.ts for the message a
 * handler that is not built in gets).
 */
export function handlersConfigSchema(parts: readonly HandlerPart[], features: AgentFeatures) {
  const shape: Record<string, z.ZodMiniOptional<z.ZodMiniType>> = {};
  for (const p of parts) if (p.config) shape[p.name] = z.optional(p.config(features));
  return z.strictObject(shape);
}

/**
 * The handlers `config` (the parsed `handlers` section) turns on: every built-in test handler
 * built in, and each device handler whose section is present.
 */
export function buildHandlers(
  parts: readonly HandlerPart[],
  config: Readonly<Record<string, unknown>>,
  features: AgentFeatures,
): OfferedHandlers {
  const handlers: Handler<unknown>[] = [];
  const closers: (() => Promise<void>)[] = [];
  for (const part of parts) {
    const section = config[part.name];
    if (part.config && section === undefined) continue;
    const built = part.build(section, features);
    if (!built) continue;
    handlers.push(built.handler);
    if (built.close) closers.push(built.close);
  }
  return {
    handlers,
    close: async () => {
      await Promise.all(closers.map((close) => close()));
    },
  };
}
