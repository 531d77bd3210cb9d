import { parseArgs } from "node:util";
import { AxError } from "../../shared/errors.js";

/** Parses flags for one subcommand; an unknown flag or a missing value is an AX_CLI_USAGE error. */
export function flags<T extends Record<string, { type: "string" | "boolean"; short?: string }>>(
  command: string,
  argv: string[],
  options: T,
): { [K in keyof T]?: T[K]["type"] extends "string" ? string : boolean } {
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      options,
      strict: true,
      allowPositionals: true,
    });
    if (positionals.length > 0) {
      throw new AxError("AX_CLI_USAGE", `${command}: unexpected argument "${positionals[0]}"`);
    }
    return values as { [K in keyof T]?: T[K]["type"] extends "string" ? string : boolean };
  } catch (err) {
    if (err instanceof AxError) throw err;
    throw new AxError("AX_CLI_USAGE", `${command}: ${(err as Error).message}`, { cause: err });
  }
}

/** A positive number of seconds from a flag, or an AX_CLI_USAGE error naming the flag. */
export function secondsFlag(
  command: string,
  name: string,
  value: string | undefined,
  fallback: number,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || value.trim() === "") {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: --${name} must be a positive number of seconds, got "${value}"`,
    );
  }
  return n;
}

/** A TCP port (0–65535; 0 picks a free one) from a flag, or an AX_CLI_USAGE error naming it. */
export function portFlag(command: string, name: string, value: string | undefined): number {
  if (value === undefined) return 0;
  const n = Number(value);
  if (value.trim() === "" || !Number.isInteger(n) || n < 0 || n > 65_535) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: --${name} must be a port number from 0 to 65535, got "${value}"`,
    );
  }
  return n;
}
