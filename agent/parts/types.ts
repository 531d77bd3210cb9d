import type * as z from "zod/mini";
import type { FeatureName, HandlerName } from "../../shared/profile-names.js";
import type { PublishConnector } from "../handlers/device/publish-connection.js";
import type { Handler } from "../handlers/registry.js";
import type { Transport } from "../link/transport.js";

/** The optional parts an agent has (shared/profile.ts explains each); absent ones are left out. */
export interface AgentFeatures {
  /** `mqtts://`: TLS, for the coordinator link and `mqtt.publish`. */
  tls?: Transport;
  /** `ws://` and `wss://` for `mqtt.publish`. */
  websocket?: PublishConnector;
}

/** A handler offered by an agent, and how to release what it holds. */
export interface BuiltHandler {
  handler: Handler<unknown>;
  /** Closes the handler's connections; called once the executor has stopped running work. */
  close?: () => Promise<void>;
}

/** A handler an agent can be built with. */
export interface HandlerPart {
  name: HandlerName;
  /**
   * Schema of its section under `handlers` in the agent config. A device handler is offered only
   * when its section is there; a built-in test handler has no section and is always offered.
   */
  config?: (features: AgentFeatures) => z.ZodMiniType;
  /** The handler for its parsed section, or undefined when the section leaves it off. */
  build(section: unknown, features: AgentFeatures): BuiltHandler | undefined;
}

/** What a bundle was built from, set by `ax bundle build` in the bundle's own parts module. */
export interface BundleFacts {
  /** The firmware profile's name. */
  profile: string;
  /** The ax version (package.json) the bundle was built from. */
  version: string;
  /** The profile's runtime settings, in the agent config's shape: the config's defaults. */
  defaults: Record<string, unknown>;
  /** File name of the better-sqlite3 native binding, beside the agent file. */
  nativeBinding: string;
}

/** The handlers and features compiled into this agent. */
export interface AgentParts {
  handlers: readonly HandlerPart[];
  features: AgentFeatures;
  /** Present in a bundle; absent when the agent runs from source. */
  bundle?: BundleFacts | undefined;
}

/** Names of the features present, in a stable order, for messages. */
export function featureNames(features: AgentFeatures): FeatureName[] {
  return (["tls", "websocket"] as const).filter((f) => features[f] !== undefined);
}
