import * as z from "zod/mini";
import { defineHandler, HandlerFailure } from "../registry.js";
import { builtinPart } from "./part.js";

/** `fail`: always fails, with the given message and retryability (rule 11). */
export const failHandler = defineHandler(
  "fail",
  z.object({
    retryable: z.optional(z.boolean()),
    message: z.optional(z.string().check(z.maxLength(1024))),
  }),
  async (_ctx, params) => {
    throw new HandlerFailure(params.message ?? "failed on purpose", {
      retryable: params.retryable ?? true,
    });
  },
);

export const failPart = builtinPart(failHandler);
