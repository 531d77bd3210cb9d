import type { HandlerPart } from "../../parts/types.js";
import type { Handler } from "../registry.js";

/** A built-in test handler as a part: no config section, always offered when built in. */
export function builtinPart<P>(handler: Handler<P>): HandlerPart {
  return {
    name: handler.name as HandlerPart["name"],
    build: () => ({ handler: handler as Handler<unknown> }),
  };
}
