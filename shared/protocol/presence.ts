import * as z from "zod/mini";
import { envelopeShape, id } from "./envelope.js";

/** An agent's presence: what the coordinator's registry records as the agent's status. */
export const PRESENCE_STATUSES = ["online", "offline"] as const;

/**
 * Retained on `…/presence`. The Last Will is the `offline` presence of that connection's
 * instanceId, so a late will from an old process names an instance that is no longer current.
 */
export const presenceSchema = z.object({
  ...envelopeShape,
  type: z.literal("presence"),
  status: z.enum(PRESENCE_STATUSES),
  instanceId: id(),
});
export type Presence = z.infer<typeof presenceSchema>;
