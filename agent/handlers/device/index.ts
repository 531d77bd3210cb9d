import * as z from "zod/mini";
import { tlsTransport } from "../../link/tls.js";
import type { AgentFeatures } from "../../parts/types.js";
import { buildHandlers, type OfferedHandlers } from "../set.js";
import { execConfigSchema, execPart } from "./exec.js";
import { fileWriteConfigSchema, fileWritePart } from "./file-write.js";
import { httpRequestConfigSchema, httpRequestPart } from "./http-request.js";
import { mqttPublishConfigSchema, mqttPublishPart } from "./mqtt-publish.js";
import { websocketConnector } from "./mqtt-websocket.js";

export type { ClosableHandler } from "./common.js";
export { type ExecOptions, type ExecParams, execHandler } from "./exec.js";
export { type FileWriteOptions, type FileWriteParams, fileWriteHandler } from "./file-write.js";
export {
  type HttpRequestOptions,
  type HttpRequestParams,
  httpRequestHandler,
} from "./http-request.js";
export {
  type MqttPublishOptions,
  type MqttPublishParams,
  mqttPublishHandler,
} from "./mqtt-publish.js";

/** Every device handler, in the order an agent offers them. */
export const DEVICE_HANDLER_PARTS = [mqttPublishPart, httpRequestPart, fileWritePart, execPart];

/** Every feature: what an agent run from source has. */
export const ALL_FEATURES: AgentFeatures = { tls: tlsTransport, websocket: websocketConnector };

/**
 * The agent config section for the built-in device handlers, with every handler and feature (an
 * agent run from source). A handler is offered only when its section is present; `exec` also
 * needs `enabled: true`. Unknown keys are refused, so a misspelt section name is an error rather
 * than a handler silently missing. A bundle checks its config against only what it contains
 * (handlers/set.ts).
 */
export const deviceHandlersConfigSchema = z.strictObject({
  "mqtt.publish": z.optional(mqttPublishConfigSchema(ALL_FEATURES)),
  "http.request": z.optional(httpRequestConfigSchema),
  "file.write": z.optional(fileWriteConfigSchema),
  exec: z.optional(execConfigSchema),
});

/** The section as written in the config file. */
export type DeviceHandlersConfigInput = z.input<typeof deviceHandlersConfigSchema>;
/** The section after parsing, defaults filled in. */
export type DeviceHandlersConfig = z.output<typeof deviceHandlersConfigSchema>;

/** The device handlers an agent offers, and how to release what they hold. */
export type DeviceHandlers = OfferedHandlers;

/** Builds the device handlers that `config` (already parsed) turns on, with every feature. */
export function buildDeviceHandlers(config: DeviceHandlersConfig): DeviceHandlers {
  return buildHandlers(DEVICE_HANDLER_PARTS, config, ALL_FEATURES);
}
