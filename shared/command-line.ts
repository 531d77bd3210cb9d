/**
 * The command line of `ax` and of the agent: one flag parser and one meaning per exit code, so a
 * script that runs either reads the same answers (docs/cli.md, "Exit codes"). Small, because the
 * agent bundle carries it.
 */
import { AxError, isAxError } from "./errors.js";
import { closest } from "./suggest.js";

/**
 * Exit codes, the same across `ax` and the agent. 70 is sysexits' EX_SOFTWARE: what is left when
 * no AxError explains the failure is a bug.
 */
export const EXIT = {
  /** The command did what it was asked; for a long-running one, it stopped cleanly. */
  ok: 0,
  /** The operation failed with an AxError: bad config, a refused request, not found, … */
  failed: 1,
  /** The command line is wrong: an unknown command or flag, a missing or bad flag value. */
  usage: 2,
  /** An unexpected exception: a bug. */
  internal: 70,
  /**
   * `coordinator start` only: the coordinator was fenced (its membership of a shared store
   * lapsed or was taken over) and stopped; start it again (sysexits' `EX_TEMPFAIL`).
   */
  fenced: 75,
} as const;

/** The exit code for an error that ended a command. */
export function exitCodeOf(err: unknown): number {
  if (!isAxError(err)) return EXIT.internal;
  return err.code === "AX_CLI_USAGE" ? EXIT.usage : EXIT.failed;
}

/** The line(s) printed on stderr for an error that ended a command, without a final newline. */
export function errorText(program: string, err: unknown): string {
  if (isAxError(err)) return `${program}: ${err.code}: ${err.message}`;
  const detail = err instanceof Error ? (err.stack ?? err.message) : String(err);
  return `${program}: internal error (a bug; please report it): ${detail}`;
}

/** One flag a command takes: `--name VALUE` (string) or `--name` (boolean). */
export interface FlagSpec {
  type: "string" | "boolean";
  /** A string flag that may be given more than once; its values are collected in order. */
  multiple?: boolean;
  /** A one-letter alias, given as `-x`. */
  short?: string;
}

/** The flags a command takes, by long name. */
export type FlagSpecs = Record<string, FlagSpec>;

/** The parsed flags: each one given, typed by its spec. */
export type FlagValues<T extends FlagSpecs> = {
  [K in keyof T]?: T[K]["type"] extends "string"
    ? T[K]["multiple"] extends true
      ? string[]
      : string
    : boolean;
};

function usage(command: string, message: string): AxError {
  return new AxError("AX_CLI_USAGE", `${command}: ${message}`);
}

function unknownFlag(command: string, given: string, specs: FlagSpecs): AxError {
  const names = Object.keys(specs);
  const flag = given.split("=")[0] ?? given;
  const bare = flag.replace(/^-+/, "");
  // `-json` for `--json`: the name is right, the dashes are not.
  const near = Object.hasOwn(specs, bare) ? bare : closest(bare, names);
  if (near !== undefined) return usage(command, `unknown flag ${flag}; did you mean --${near}?`);
  const known = names.length === 0 ? "none" : names.map((n) => `--${n}`).join(", ");
  return usage(command, `unknown flag ${flag} (it takes ${known})`);
}

/**
 * Parses `argv` against `specs`: `--name VALUE`, `--name=VALUE`, `--flag`, `-x` for a flag with a
 * `short`, and `--` before arguments that start with a dash. A string flag takes the next argument
 * as its value unless that is missing or a `--flag` itself (so `-5` is a value). Every mistake is
 * an AX_CLI_USAGE error that starts with `command` and names the flag, with a did-you-mean for a
 * near miss. The arguments that are not flags are returned in order, for the caller to check.
 */
export function parseFlags<T extends FlagSpecs>(
  command: string,
  argv: readonly string[],
  specs: T,
): { values: FlagValues<T>; positionals: string[] } {
  const values: Record<string, string | string[] | boolean> = {};
  const positionals: string[] = [];
  const byShort = new Map(
    Object.entries(specs).flatMap(([name, s]) => (s.short ? [[s.short, name] as const] : [])),
  );
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      name = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
      if (eq !== -1) inline = arg.slice(eq + 1);
      if (!Object.hasOwn(specs, name)) throw unknownFlag(command, arg, specs);
    } else if (/^-[A-Za-z]/.test(arg)) {
      name = arg.length === 2 ? byShort.get(arg.slice(1)) : undefined;
      if (name === undefined) throw unknownFlag(command, arg, specs);
    } else {
      positionals.push(arg);
      continue;
    }
    const spec = specs[name] as FlagSpec;
    if (spec.type === "boolean") {
      if (inline !== undefined) throw usage(command, `--${name} takes no value, got "${arg}"`);
      values[name] = true;
      continue;
    }
    let value = inline;
    if (value === undefined) {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith("--")) {
        throw usage(command, `--${name} needs a value`);
      }
      value = next;
      i++;
    }
    if (spec.multiple) values[name] = [...((values[name] as string[] | undefined) ?? []), value];
    else values[name] = value;
  }
  return { values: values as FlagValues<T>, positionals };
}
