import { echoHandler } from "./builtin/echo.js";
import { failHandler } from "./builtin/fail.js";
import { sleepHandler } from "./builtin/sleep.js";

export { echoHandler, echoPart } from "./builtin/echo.js";
export { failHandler, failPart } from "./builtin/fail.js";
export { sleepHandler, sleepPart } from "./builtin/sleep.js";

/** The built-in test handlers (rule 11), one file each so a bundle can leave any of them out. */
export const BUILTIN_HANDLERS = [echoHandler, sleepHandler, failHandler] as const;
