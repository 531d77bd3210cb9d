import { randomBytes } from "./random.js";

/**
 * Ids travel in MQTT topics, so they must not contain the topic separator or the wildcards
 * `+` and `#` [MQTT-4.7.1-1], nor start with `$` (reserved for broker topics [MQTT-4.7.2-1]).
 */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Handler names: a dotted name such as `mqtt.publish`. */
export const HANDLER_NAME_PATTERN = /^[A-Za-z][A-Za-z0-9._-]{0,63}$/;

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/**
 * A new id that sorts by creation time: 9 base-36 characters of milliseconds, then 12 random
 * base-36 characters (about 62 bits), optionally behind a prefix such as `ex_`.
 */
export function newId(prefix = "", nowMs: number = Date.now()): string {
  const time = Math.floor(nowMs).toString(36).padStart(9, "0");
  const bytes = randomBytes(12);
  let rand = "";
  for (const b of bytes) rand += ALPHABET[b % 36];
  return `${prefix}${time}${rand}`;
}
