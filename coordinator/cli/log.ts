import { pino } from "pino";
import type { Logger } from "../engine/context.js";

export type LogLevel = "debug" | "info" | "warn" | "error";

export interface LoggerOptions {
  /** Append JSON lines to this file instead of writing to stderr. */
  file?: string;
  /** @default "info" */
  minLevel?: LogLevel;
  /** The `component` field of every line. @default "coordinator" */
  component?: string;
  /**
   * Human-readable lines instead of JSON. @default true when writing to stderr and stderr is a
   * terminal
   */
  pretty?: boolean;
}

/** Fields of a pino line the readable form shows on their own, not as key=value. */
const OWN = new Set(["level", "time", "msg", "pid", "hostname", "component"]);

/**
 * Turns one pino JSON line into `12:00:01.234 INFO  coordinator message key=value …`, with the
 * ids the line carries (executionId, agentId, jobId) as plain key=value pairs.
 */
export function prettyLine(json: string): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const time = typeof rec.time === "string" ? rec.time.slice(11, 23) : "";
  const level = String(rec.level ?? "")
    .toUpperCase()
    .padEnd(5);
  const fields = Object.entries(rec)
    .filter(([k]) => !OWN.has(k))
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
  return `${time} ${level} ${String(rec.component ?? "")} ${String(rec.msg ?? "")}${fields ? ` ${fields}` : ""}\n`;
}

/**
 * The coordinator's logger: structured JSON lines (pino) carrying the ids of what they are
 * about (executionId, agentId, jobId), to stderr or a file; readable lines on a terminal.
 */
export function jsonLogger(options: LoggerOptions = {}): Logger {
  const pretty = options.pretty ?? (options.file === undefined && process.stderr.isTTY === true);
  const destination = options.file
    ? pino.destination({ dest: options.file, append: true, mkdir: true, sync: true })
    : pretty
      ? { write: (line: string) => process.stderr.write(prettyLine(line)) }
      : pino.destination({ dest: 2, sync: true });
  const logger = pino(
    {
      level: options.minLevel ?? "info",
      base: { component: options.component ?? "coordinator" },
      timestamp: pino.stdTimeFunctions.isoTime,
      // Level names, not numbers: the lines are read by people and by grep as well as by tools.
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
  return (level, msg, fields) => {
    if (fields) logger[level](fields, msg);
    else logger[level](msg);
  };
}
