import * as z from "zod/mini";
import { defineHandler, HandlerFailure } from "../registry.js";
import { builtinPart } from "./part.js";

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

export const sleepPart = builtinPart(sleepHandler);
