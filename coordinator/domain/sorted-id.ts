import { randomBytes } from "../../shared/random.js";

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/** The time part and random part of the last id made in this process. */
let lastTime = "";
let lastRand: number[] = [];

/**
 * A new id in the form of shared/ids.ts `newId` (9 base-36 characters of milliseconds, then 12
 * random base-36 characters, behind `prefix`), except that within one millisecond the ids this
 * process makes sort in the order it made them: the random part is the previous one's plus one.
 * Executions made together — a firing's shards, the times a misfire catches up, jobs of one
 * group fired in the same tick — then keep their creation order wherever a tie on time is broken
 * by id (dispatch order, a group's and a queue's FIFO), instead of a random one.
 */
export function newSortedId(prefix: string, nowMs: number): string {
  const time = Math.floor(nowMs).toString(36).padStart(9, "0");
  let rand: number[] | undefined;
  if (time === lastTime) rand = increment(lastRand);
  if (rand === undefined) rand = Array.from(randomBytes(12), (b) => b % 36);
  lastTime = time;
  lastRand = rand;
  let text = "";
  for (const d of rand) text += ALPHABET[d];
  return `${prefix}${time}${text}`;
}

/** `digits` (base 36) plus one, or undefined when it would overflow. */
function increment(digits: readonly number[]): number[] | undefined {
  const next = [...digits];
  for (let i = next.length - 1; i >= 0; i--) {
    if ((next[i] as number) < 35) {
      next[i] = (next[i] as number) + 1;
      return next;
    }
    next[i] = 0;
  }
  return undefined;
}
