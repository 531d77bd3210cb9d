import { appendFileSync } from "node:fs";
import type { Logger } from "../engine/context.js";

const ORDER = { debug: 0, info: 1, warn: 2, error: 3 } as const;

/** JSON-lines logger to stderr, or appended to `file` when given. */
export function jsonLogger(
  options: { file?: string; minLevel?: keyof typeof ORDER; component?: string } = {},
): Logger {
  const min = ORDER[options.minLevel ?? "info"];
  return (level, msg, fields) => {
    if (ORDER[level] < min) return;
    const line = `${JSON.stringify({ t: new Date().toISOString(), level, component: options.component ?? "coordinator", msg, ...fields })}\n`;
    if (options.file) appendFileSync(options.file, line);
    else process.stderr.write(line);
  };
}
