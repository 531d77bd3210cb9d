import * as z from "zod/mini";
import { randomBytes } from "../../../shared/random.js";
import { transportsFor } from "../../link/transport.js";
import type { AgentFeatures, HandlerPart } from "../../parts/types.js";
import { defineHandler, HandlerFailure } from "../registry.js";
import { abortedFailure, type ClosableHandler, displayUrl, errorText } from "./common.js";
import {
  type PublishConnection,
  type PublishConnector,
  sessionConnector,
} from "./publish-connection.js";

/** Options of `mqtt.publish`, resolved from the agent config's `"mqtt.publish"` section. */
export interface MqttPublishOptions {
  /** The local broker the devices listen on: `mqtt://`, or `mqtts://`, `ws://`, `wss://` with the features for them. */
  url: string;
  /** @default a random id */
  clientId?: string | undefined;
  username?: string | undefined;
  password?: string | undefined;
  /** How long a publish waits for the broker's CONNACK before failing. @default 5000 */
  connectTimeoutMs?: number | undefined;
  /** What this agent was built with. @default plain TCP only */
  features?: AgentFeatures | undefined;
}

/** The params of one `mqtt.publish` execution. */
export const mqttPublishParamsSchema = z.object({
  topic: z.string().check(
    z.minLength(1),
    // [MQTT-3.3.2-2] a PUBLISH topic name must not contain wildcards; [MQTT-4.7.3-2] nor U+0000.
    z.refine((t) => !/[+#\0]/.test(t), "must not contain the wildcards + or #"),
  ),
  payload: z.union([z.string(), z.record(z.string(), z.unknown())], {
    error: "must be a string or a JSON object",
  }),
  /** @default 1 */
  qos: z.optional(z.literal([0, 1, 2])),
  /** @default false */
  retain: z.optional(z.boolean()),
});

export type MqttPublishParams = z.infer<typeof mqttPublishParamsSchema>;

const NAME = "mqtt.publish";

/** The URL schemes `features` make available, and the feature each other scheme needs. */
function schemes(features: AgentFeatures): { ok: string[]; missing: string[] } {
  const ok = ["mqtt"];
  const missing: string[] = [];
  if (features.tls) ok.push("mqtts");
  else missing.push("mqtts:// needs the tls feature");
  if (features.websocket) ok.push("ws", "wss");
  else missing.push("ws:// and wss:// need the websocket feature");
  return { ok, missing };
}

function oneOf(list: string[]): string {
  const urls = list.map((s) => `${s}://`);
  return urls.length === 1 ? (urls[0] ?? "") : `${urls.slice(0, -1).join(", ")} or ${urls.at(-1)}`;
}

/** The config section of `mqtt.publish`; the URL schemes allowed depend on the features built in. */
export function mqttPublishConfigSchema(features: AgentFeatures) {
  const { ok, missing } = schemes(features);
  const pattern = new RegExp(`^(${ok.join("|")}):\\/\\/.+`);
  const left = missing.length > 0 ? ` (${missing.join("; ")}, left out of this agent)` : "";
  return z.strictObject({
    /** The local broker the devices listen on. */
    url: z.string().check(z.regex(pattern, `must be an ${oneOf(ok)} URL${left}`)),
    /** @default a random id */
    clientId: z.optional(z.string().check(z.minLength(1), z.maxLength(128))),
    username: z.optional(z.string()),
    password: z.optional(z.string()),
    /** @default 5000 */
    connectTimeoutMs: z._default(z.int().check(z.gte(100), z.lte(60_000)), 5_000),
  });
}

export type MqttPublishConfig = z.output<ReturnType<typeof mqttPublishConfigSchema>>;

/** `mqtt.publish` as a part an agent is built with. */
export const mqttPublishPart: HandlerPart = {
  name: "mqtt.publish",
  config: mqttPublishConfigSchema,
  build: (section, features) =>
    mqttPublishHandler({ ...(section as MqttPublishConfig), features }) as ReturnType<
      HandlerPart["build"]
    >,
};

/** The connector for a URL's protocol, from what the agent was built with. */
function connectorFor(url: string, features: AgentFeatures): PublishConnector | undefined {
  const protocol = url.slice(0, url.indexOf(":"));
  if (protocol === "ws" || protocol === "wss") return features.websocket;
  if (protocol === "mqtts" && !features.tls) return undefined;
  return sessionConnector(transportsFor(features));
}

/**
 * `mqtt.publish`: publishes one message to a local broker, the way zigbee2mqtt or Tasmota devices
 * are driven (`zigbee2mqtt/lamp/set` with `{"state":"ON"}`). An object payload is sent as JSON.
 *
 * One MQTT connection per handler, opened on the first run and reused. It does not reconnect on
 * its own: a run that finds it down opens a new one. That way a publish reported failed is never
 * re-sent later by a background reconnect, behind the coordinator's back.
 */
export function mqttPublishHandler(opts: MqttPublishOptions): ClosableHandler<MqttPublishParams> {
  const connectTimeoutMs = opts.connectTimeoutMs ?? 5_000;
  const where = displayUrl(opts.url);
  const clientId = opts.clientId ?? `ax-publish-${randomBytes(6).toString("hex")}`;
  let client: PublishConnection | undefined;
  let connecting: Promise<PublishConnection> | undefined;
  let closed = false;
  /** Runs waiting on the current connection's PUBACKs, failed at once when it is lost. */
  const onLost = new Set<() => void>();

  const discard = (c: PublishConnection) => {
    if (client === c) client = undefined;
    c.end().catch(() => {});
  };

  const connect = (): Promise<PublishConnection> =>
    new Promise((resolve, reject) => {
      if (client) discard(client);
      const connector = connectorFor(opts.url, opts.features ?? {});
      if (connector === undefined) {
        reject(
          new HandlerFailure(`${NAME}: cannot connect to ${where}: not available in this agent`, {
            retryable: false,
          }),
        );
        return;
      }
      let opened: ReturnType<PublishConnector>;
      try {
        opened = connector({
          url: opts.url,
          clientId,
          username: opts.username,
          password: opts.password,
          // Our own timer below answers first, with a clearer message; this is a backstop.
          connectTimeoutMs: connectTimeoutMs + 1_000,
          onClose: () => {
            for (const lost of [...onLost]) lost();
          },
        });
      } catch (err) {
        reject(
          new HandlerFailure(`${NAME}: cannot connect to ${where}: ${errorText(err)}`, {
            retryable: false,
            cause: err,
          }),
        );
        return;
      }
      const c = opened.connection;
      client = c;
      const settle = (err: unknown) => {
        clearTimeout(timer);
        if (settled) return;
        settled = true;
        if (err === undefined) {
          resolve(c);
          return;
        }
        discard(c);
        reject(
          new HandlerFailure(`${NAME}: cannot connect to ${where}: ${errorText(err)}`, {
            cause: err,
          }),
        );
      };
      let settled = false;
      const timer = setTimeout(
        () => settle(new Error(`no answer within ${connectTimeoutMs} ms`)),
        connectTimeoutMs,
      );
      opened.ready.then(
        () => settle(undefined),
        (err: unknown) => settle(err),
      );
    });

  /** The connected client, connecting first if needed; concurrent runs share one attempt. */
  const connected = (): Promise<PublishConnection> => {
    if (closed) {
      return Promise.reject(new HandlerFailure(`${NAME}: the handler is closed`));
    }
    if (client?.connected && connecting === undefined) return Promise.resolve(client);
    if (connecting === undefined) {
      const attempt = connect().finally(() => {
        if (connecting === attempt) connecting = undefined;
      });
      connecting = attempt;
    }
    return connecting;
  };

  const handler = defineHandler(NAME, mqttPublishParamsSchema, async (ctx, params) => {
    const payload = Buffer.from(
      typeof params.payload === "string" ? params.payload : JSON.stringify(params.payload),
    );
    const c = await untilAborted(connected(), ctx.signal);
    if (ctx.signal.aborted) throw abortedFailure(NAME, ctx.signal.reason);
    if (!c.connected) throw new HandlerFailure(`${NAME}: connection to ${where} lost`);
    await new Promise<void>((resolve, reject) => {
      const done = (err?: unknown) => {
        ctx.signal.removeEventListener("abort", onAbort);
        onLost.delete(onClose);
        if (err === undefined) resolve();
        else reject(err);
      };
      // After an abort or a lost connection the PUBACK may still come, or never: the message
      // may or may not have reached the broker (at least once), which the failure's text says.
      const onAbort = () => done(abortedFailure(NAME, ctx.signal.reason));
      const onClose = () =>
        done(
          new HandlerFailure(
            `${NAME}: connection to ${where} lost before the broker acknowledged the message`,
          ),
        );
      ctx.signal.addEventListener("abort", onAbort, { once: true });
      onLost.add(onClose);
      c.publish(params.topic, payload, {
        qos: params.qos ?? 1,
        retain: params.retain ?? false,
      }).then(
        () => done(),
        (err: unknown) =>
          done(
            c.connected
              ? new HandlerFailure(`${NAME}: publish failed: ${errorText(err)}`, { cause: err })
              : new HandlerFailure(
                  `${NAME}: connection to ${where} lost before the broker acknowledged the message`,
                  { cause: err },
                ),
          ),
      );
    });
    return { topic: params.topic, bytes: payload.byteLength };
  });

  return {
    handler,
    close: async () => {
      closed = true;
      const c = client;
      client = undefined;
      if (c) await c.end();
    },
  };
}

/** `promise`, or a retryable abort failure as soon as `signal` fires. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    // The shared connect attempt carries on for other runs; only this one gives up.
    promise.catch(() => {});
    return Promise.reject(abortedFailure(NAME, signal.reason));
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(abortedFailure(NAME, signal.reason));
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}
