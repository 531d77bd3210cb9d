/**
 * The names a firmware profile may list (shared/profile.ts). Kept apart from the profile schema
 * so that an agent bundle can check its config against them without carrying the schema.
 */

/** Every handler an agent can be built with: the built-in test handlers and the device handlers. */
export const HANDLER_NAMES = [
  "echo",
  "sleep",
  "fail",
  "mqtt.publish",
  "http.request",
  "file.write",
  "exec",
] as const;
export type HandlerName = (typeof HANDLER_NAMES)[number];

/**
 * Optional parts of the agent:
 * - `tls`: `mqtts://` brokers, for the coordinator link and `mqtt.publish`;
 * - `websocket`: `ws://` and `wss://` brokers for `mqtt.publish` (brings mqtt.js and its
 *   WebSocket transport into the bundle).
 */
export const FEATURE_NAMES = ["tls", "websocket"] as const;
export type FeatureName = (typeof FEATURE_NAMES)[number];
