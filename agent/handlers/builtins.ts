import * as z from "zod/mini";
import { defineHandler, HandlerFailure } from "./registry.js";

/** `echo`: returns `{ echo: params }` (rule 11). */
export const echoHandler = defineHandler(
  "echo",
  z.record(z.string(), z.unknown()),
  async (_ctx, params) => ({
    echo: params,
  }),
);

/** `sleep`: waits `ms`, or until cancelled or timed out (rule 11). */
export const sleepHandler = defineHandler(
  "sleep",
  z.object({ ms: z.number().check(z.gte(0), z.lte(86_400_000)) }),
  (ctx, params) =>
    new Promise((resolve, reject) => {
      if (ctx.signal.aborted) {
        reject(new HandlerFailure("aborted before start"));
        return;
      }
      const timer = setTimeout(() => {
        ctx.signal.removeEventListener("abort", onAbort);
        resolve({ sleptMs: params.ms });
      }, params.ms);
      const onAbort = () => {
        clearTimeout(timer);
        reject(new HandlerFailure("aborted"));
      };
      ctx.signal.addEventListener("abort", onAbort, { once: true });
    }),
);

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

/** The built-in test handlers. */
export const BUILTIN_HANDLERS = [echoHandler, sleepHandler, failHandler] as const;
