import * as z from "zod/mini";
import { HANDLER_NAME_PATTERN, ID_PATTERN } from "../ids.js";

/** The protocol version this build speaks. */
export const PROTOCOL_VERSION = 1;

/** Default maximum payload size in bytes (DESIGN §5). */
export const DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024;

/** An id that is safe inside an MQTT topic (see {@link ID_PATTERN}). */
export const id = () =>
  z.string().check(z.regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)"));

/** A handler name such as `echo` or `mqtt.publish`. */
export const handlerName = () =>
  z.string().check(z.regex(HANDLER_NAME_PATTERN, "must be a handler name such as mqtt.publish"));

/**
 * A string of `min` to `max` characters counted in UTF-16 code units, as protocol.md counts them
 * (and as JavaScript's `length` does). zod's own length checks count code points instead, which
 * would let a string of emoji carry twice its bound.
 */
export const text = (max: number, min = 0) =>
  z.string().check(
    z.check<string>((ctx) => {
      const n = ctx.value.length;
      if (n > max) {
        ctx.issues.push({
          code: "too_big",
          origin: "string",
          maximum: max,
          inclusive: true,
          input: ctx.value,
        });
      } else if (n < min) {
        ctx.issues.push({
          code: "too_small",
          origin: "string",
          minimum: min,
          inclusive: true,
          input: ctx.value,
        });
      }
    }),
  );

/** UTC milliseconds on the coordinator's clock; fractions allowed (rule 4). */
export const timestamp = () => z.number().check(z.gte(0));

/** A count or size: a non-negative integer. */
export const count = () => z.int().check(z.gte(0));

/** A positive integer: rounds, attempts, seq (rule 2 — they start at 1). */
export const positive = () => z.int().check(z.gte(1));

/**
 * Most top-level keys a free-form JSON object (`params`, `result`, an event's `payload`) may have.
 * Its values are bounded by the payload's size and nesting depth; the key count bounds the work
 * of the record check itself.
 */
export const MAX_OBJECT_KEYS = 1024;

/** Most tags a hello may carry. */
export const MAX_TAGS = 256;

/** Fails an object with more than `n` own keys. */
export const maxKeys = (n: number) =>
  z.refine<Record<string, unknown>>((o) => Object.keys(o).length <= n, {
    message: `must have at most ${n} keys`,
  });

/** A free-form JSON object: `params`, `result`, an event's `payload`. */
export const jsonObject = () => z.record(z.string(), z.unknown()).check(maxKeys(MAX_OBJECT_KEYS));

/** A non-negative duration in milliseconds. */
export const durationMs = () => z.number().check(z.gte(0));

/** Fields every message carries. */
export const envelopeShape = {
  v: z.literal(PROTOCOL_VERSION),
  msgId: id(),
  sentAt: timestamp(),
};

/** Reports that wait in the agent's outbox carry `seq` (rule 1). */
export const seqShape = { seq: positive() };

/** Fields that name one (re)dispatch of an execution (rule 2). */
export const executionRefShape = {
  executionId: id(),
  round: positive(),
};
