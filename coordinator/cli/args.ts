import { type FlagSpecs, type FlagValues, parseFlags } from "../../shared/command-line.js";
import { AxError } from "../../shared/errors.js";
import { didYouMean } from "../../shared/suggest.js";

/**
 * Parses flags for one subcommand that takes no arguments; an unknown flag, a missing value or an
 * argument is an AX_CLI_USAGE error (see parseFlags in shared/command-line.ts).
 */
export function flags<T extends FlagSpecs>(
  command: string,
  argv: readonly string[],
  options: T,
): FlagValues<T> {
  const { values, positionals } = parseFlags(command, argv, options);
  if (positionals.length > 0) {
    throw new AxError("AX_CLI_USAGE", `${command}: unexpected argument "${positionals[0]}"`);
  }
  return values;
}

/**
 * The AX_CLI_USAGE error for a missing or unknown subcommand: a near miss gets a did-you-mean,
 * anything else the list of subcommands.
 */
export function unknownSubcommand(
  command: string,
  sub: string | undefined,
  expected: readonly string[],
): AxError {
  const list = `${expected.slice(0, -1).join(", ")}${expected.length > 1 ? " or " : ""}${expected.at(-1) ?? ""}`;
  if (sub === undefined) {
    return new AxError("AX_CLI_USAGE", `${command}: give a subcommand: ${list}`);
  }
  const hint = didYouMean(sub, expected);
  return new AxError(
    "AX_CLI_USAGE",
    hint
      ? `${command}: unknown subcommand "${sub}"${hint}`
      : `${command}: unknown subcommand "${sub}" (expected ${list})`,
  );
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
