import * as z from "zod/mini";
import type { Handler } from "../registry.js";
import { absolutePath } from "./common.js";
import { EXEC_DEFAULT_MAX_OUTPUT_BYTES, execHandler } from "./exec.js";
import { fileWriteHandler } from "./file-write.js";
import { httpRequestHandler, isHttpOrigin } from "./http-request.js";
import { mqttPublishHandler } from "./mqtt-publish.js";

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

/**
 * The agent config section for the built-in device handlers. A handler is offered only when its
 * section is present; `exec` also needs `enabled: true`. Unknown keys are refused, so a misspelt
 * section name is an error rather than a handler silently missing.
 */
export const deviceHandlersConfigSchema = z.strictObject({
  "mqtt.publish": z.optional(
    z.strictObject({
      /** The local broker the devices listen on. */
      url: z
        .string()
        .check(
          z.regex(/^(mqtts?|wss?):\/\/.+/, "must be an mqtt://, mqtts://, ws:// or wss:// URL"),
        ),
      /** @default a random id chosen by mqtt.js */
      clientId: z.optional(z.string().check(z.minLength(1), z.maxLength(128))),
      username: z.optional(z.string()),
      password: z.optional(z.string()),
      /** @default 5000 */
      connectTimeoutMs: z._default(z.int().check(z.gte(100), z.lte(60_000)), 5_000),
    }),
  ),
  "http.request": z.optional(
    z.strictObject({
      /** Origins such as "http://127.0.0.1:8080"; empty allows any http(s) origin. @default [] */
      allowOrigins: z._default(
        z.array(
          z
            .string()
            .check(
              z.refine(
                isHttpOrigin,
                "must be an http(s) origin such as http://127.0.0.1:8080 (no path)",
              ),
            ),
        ),
        [],
      ),
      /** @default 10000 */
      defaultTimeoutMs: z._default(z.int().check(z.gte(1), z.lte(600_000)), 10_000),
    }),
  ),
  "file.write": z.optional(
    z.strictObject({
      /** Path prefixes writes may go to, such as "/sys/class/gpio/". */
      allow: z.array(absolutePath),
    }),
  ),
  exec: z.optional(
    z.strictObject({
      /** @default false */
      enabled: z._default(z.boolean(), false),
      /** Absolute paths of the executables that may run. @default [] */
      allow: z._default(z.array(absolutePath), []),
      /**
       * Bytes kept of stdout and of stderr, each; at most 24 KiB so that both fit a `finished`
       * report (64 KiB message limit). @default 16384
       */
      maxOutputBytes: z._default(
        z.int().check(z.gte(1), z.lte(24_576)),
        EXEC_DEFAULT_MAX_OUTPUT_BYTES,
      ),
    }),
  ),
});

/** The section as written in the config file. */
export type DeviceHandlersConfigInput = z.input<typeof deviceHandlersConfigSchema>;
/** The section after parsing, defaults filled in. */
export type DeviceHandlersConfig = z.output<typeof deviceHandlersConfigSchema>;

/** The device handlers an agent offers, and how to release what they hold. */
export interface DeviceHandlers {
  handlers: Handler<unknown>[];
  /** Closes the handlers' connections; call it once the executor has stopped running work. */
  close(): Promise<void>;
}

/** Builds the device handlers that `config` (already parsed) turns on. */
export function buildDeviceHandlers(config: DeviceHandlersConfig): DeviceHandlers {
  const handlers: Handler<unknown>[] = [];
  const closers: (() => Promise<void>)[] = [];
  const mqtt = config["mqtt.publish"];
  if (mqtt) {
    const built = mqttPublishHandler(mqtt);
    handlers.push(built.handler);
    closers.push(built.close);
  }
  const http = config["http.request"];
  if (http) handlers.push(httpRequestHandler(http));
  const file = config["file.write"];
  if (file) handlers.push(fileWriteHandler(file));
  if (config.exec?.enabled) handlers.push(execHandler(config.exec));
  return {
    handlers,
    close: async () => {
      await Promise.all(closers.map((close) => close()));
    },
  };
}
