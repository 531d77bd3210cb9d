import * as z from "zod/mini";
import { envelopeShape, id, jsonObject } from "./envelope.js";

/** Any application → coordinator on `ax/v1/events/{name}`: fires the jobs listening for it. */
export const eventSchema = z.object({
  ...envelopeShape,
  type: z.literal("event"),
  /**
   * The enrolled identity that sends it: a coordinator that authenticates messages checks the
   * event's MAC under this identity's key (docs/protocol.md, "Authenticated messages").
   */
  from: z.optional(id()),
  payload: z.optional(jsonObject()),
});
export type Event = z.infer<typeof eventSchema>;
