import mqtt, { type MqttClient } from "mqtt";
import * as z from "zod/mini";
import { defineHandler, HandlerFailure } from "../registry.js";
import { abortedFailure, type ClosableHandler, displayUrl, errorText } from "./common.js";

/** Options of `mqtt.publish`, resolved from the agent config's `"mqtt.publish"` section. */
export interface MqttPublishOptions {
  /** The local broker the devices listen on: `mqtt://`, `mqtts://`, `ws://` or `wss://`. */
  url: string;
  /** @default a random id chosen by mqtt.js */
  clientId?: string | undefined;
  username?: string | undefined;
  password?: string | undefined;
  /** How long a publish waits for the broker's CONNACK before failing. @default 5000 */
  connectTimeoutMs?: number | undefined;
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
  let client: MqttClient | undefined;
  let connecting: Promise<MqttClient> | undefined;
  let closed = false;

  const discard = (c: MqttClient) => {
    if (client === c) client = undefined;
    c.end(true);
  };

  const connect = (): Promise<MqttClient> =>
    new Promise((resolve, reject) => {
      if (client) discard(client);
      let c: MqttClient;
      try {
        c = mqtt.connect(opts.url, {
          clean: true,
          reconnectPeriod: 0,
          // Our own timer below answers first, with a clearer message; this is a backstop.
          connectTimeout: connectTimeoutMs + 1_000,
          ...(opts.clientId === undefined ? {} : { clientId: opts.clientId }),
          ...(opts.username === undefined ? {} : { username: opts.username }),
          ...(opts.password === undefined ? {} : { password: opts.password }),
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
      client = c;
      // Always listen: an EventEmitter with no "error" listener throws.
      c.on("error", () => {});
      const settle = (err: unknown) => {
        clearTimeout(timer);
        c.off("connect", onConnect);
        c.off("error", settle);
        c.off("close", onClose);
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
      const onConnect = () => {
        // Rule 10: device commands are latency-sensitive; do not wait on delayed ACKs.
        (c.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
        settle(undefined);
      };
      const onClose = () => settle(new Error("connection closed"));
      const timer = setTimeout(
        () => settle(new Error(`no answer within ${connectTimeoutMs} ms`)),
        connectTimeoutMs,
      );
      c.on("connect", onConnect);
      c.on("error", settle);
      c.on("close", onClose);
    });

  /** The connected client, connecting first if needed; concurrent runs share one attempt. */
  const connected = (): Promise<MqttClient> => {
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
        c.off("close", onClose);
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
      c.on("close", onClose);
      c.publishAsync(params.topic, payload, {
        qos: params.qos ?? 1,
        retain: params.retain ?? false,
      }).then(
        () => done(),
        (err: unknown) =>
          done(new HandlerFailure(`${NAME}: publish failed: ${errorText(err)}`, { cause: err })),
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
      if (c) await c.endAsync(true);
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
