import * as z from "zod/mini";
import { envelopeShape, jsonObject } from "./envelope.js";

/** Any application → coordinator on `ax/v1/events/{name}`: fires the jobs listening for it. */
export const eventSchema = z.object({
  ...envelopeShape,
  type: z.literal("event"),
  payload: z.optional(jsonObject()),
});
export type Event = z.infer<typeof eventSchema>;
