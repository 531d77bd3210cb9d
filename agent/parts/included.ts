import { echoPart, failPart, sleepPart } from "../handlers/builtins.js";
import { ALL_FEATURES, DEVICE_HANDLER_PARTS } from "../handlers/device/index.js";
import type { AgentParts } from "./types.js";

/**
 * The handlers and features compiled into this agent. Run from source, that is all of them.
 * `ax bundle build` replaces this module with one generated from the firmware profile
 * (coordinator/bundle/parts-plugin.ts) that imports only what the profile includes, so the
 * bundler never sees the rest.
 */
export const PARTS: AgentParts = {
  handlers: [echoPart, sleepPart, failPart, ...DEVICE_HANDLER_PARTS],
  features: ALL_FEATURES,
  bundle: undefined,
};
