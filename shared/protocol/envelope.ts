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

/** UTC milliseconds on the coordinator's clock; fractions allowed (rule 4). */
export const timestamp = () => z.number().check(z.gte(0));

/** A count or size: a non-negative integer. */
export const count = () => z.int().check(z.gte(0));

/** A positive integer: rounds, attempts, seq (rule 2 — they start at 1). */
export const positive = () => z.int().check(z.gte(1));

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
