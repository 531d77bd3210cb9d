import { randomFillSync } from "node:crypto";

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
  if (poolAt + 12 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  let rand = "";
  for (let i = poolAt; i < poolAt + 12; i++) rand += ALPHABET[(pool[i] as number) % 36];
  poolAt += 12;
  return `${prefix}${time}${rand}`;
}

/**
 * Random bytes drawn 4 KiB at a time: every message carries a new id, and one call into the
 * system's generator per id cost more than the rest of making it.
 */
const pool = new Uint8Array(4096);
let poolAt = pool.length;
