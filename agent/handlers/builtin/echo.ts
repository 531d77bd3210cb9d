import * as z from "zod/mini";
import { defineHandler } from "../registry.js";
import { builtinPart } from "./part.js";

/** `echo`: returns `{ echo: params }` (rule 11). */
export const echoHandler = defineHandler(
  "echo",
  z.record(z.string(), z.unknown()),
  async (_ctx, params) => ({
    echo: params,
  }),
);

export const echoPart = builtinPart(echoHandler);
