import * as z from "zod/mini";
import { eventSchema } from "./event.js";
import {
  acceptedSchema,
  busySchema,
  cancelSchema,
  dispatchSchema,
  finishedSchema,
  progressSchema,
  querySchema,
  rejectedSchema,
  startedSchema,
  stateSchema,
} from "./execution.js";
import { presenceSchema } from "./presence.js";
import { ackSchema, heartbeatSchema, helloSchema, timeSchema, welcomeSchema } from "./session.js";

/** Every message an agent publishes on its `up` topic. */
export const upMessageSchema = z.discriminatedUnion("type", [
  helloSchema,
  heartbeatSchema,
  acceptedSchema,
  rejectedSchema,
  busySchema,
  startedSchema,
  progressSchema,
  finishedSchema,
  stateSchema,
]);
export type UpMessage = z.infer<typeof upMessageSchema>;

/** Every message the coordinator publishes on an agent's `down` topic. */
export const downMessageSchema = z.discriminatedUnion("type", [
  welcomeSchema,
  timeSchema,
  dispatchSchema,
  cancelSchema,
  querySchema,
  ackSchema,
]);
export type DownMessage = z.infer<typeof downMessageSchema>;

/** Up messages that carry `seq` and wait in the outbox until acknowledged (rule 1). */
export type Report = Exclude<UpMessage, { type: "hello" | "heartbeat" }>;

/** The schema of each message type, per channel; used by `decode` to route on `type`. */
export const SCHEMAS_BY_CHANNEL = {
  up: {
    hello: helloSchema,
    heartbeat: heartbeatSchema,
    accepted: acceptedSchema,
    rejected: rejectedSchema,
    busy: busySchema,
    started: startedSchema,
    progress: progressSchema,
    finished: finishedSchema,
    state: stateSchema,
  },
  down: {
    welcome: welcomeSchema,
    time: timeSchema,
    dispatch: dispatchSchema,
    cancel: cancelSchema,
    query: querySchema,
    ack: ackSchema,
  },
  presence: { presence: presenceSchema },
  event: { event: eventSchema },
} as const satisfies Record<string, Record<string, z.ZodMiniType>>;
