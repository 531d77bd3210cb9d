import { newId } from "./ids.js";
import { PROTOCOL_VERSION } from "./protocol/envelope.js";

/** Wraps a message body in the envelope: `v`, a fresh `msgId` and `sentAt`. */
export function envelope<B extends { type: string }>(
  body: B,
  sentAt: number,
): B & { v: typeof PROTOCOL_VERSION; msgId: string; sentAt: number } {
  return { v: PROTOCOL_VERSION, msgId: newId("m"), sentAt, ...body };
}

/** A message without its envelope fields, distributed over a union of message types. */
export type BodyOf<M> = M extends unknown ? Omit<M, "v" | "msgId" | "sentAt"> : never;
