import { randomUUID } from "node:crypto";
import { type FlagSpecs, type FlagValues, parseFlags } from "../../shared/command-line.js";
import { AxError, ERROR_CODES, type ErrorCode } from "../../shared/errors.js";
import { parseJsonText } from "../../shared/json-text.js";
import { parseDuration } from "../domain/duration.js";
import { noZoneProblem, parseIsoInstant } from "../domain/instant.js";
import { resolveToken, type TokenFlags } from "./token-source.js";

/** Flags every command that talks to the coordinator takes. */
export const CLIENT_FLAGS = {
  url: { type: "string" },
  token: { type: "string" },
  "token-file": { type: "string" },
  config: { type: "string" },
  json: { type: "boolean" },
} as const;

export const DEFAULT_URL = "http://127.0.0.1:8080";

/**
 * Parses a command's flags and its positional arguments, named in `positionals` (all required).
 * An unknown flag, a missing value, a missing or an extra argument is an AX_CLI_USAGE error.
 */
export function parseCommand<T extends FlagSpecs>(
  command: string,
  argv: string[],
  options: T,
  positionals: string[] = [],
): { flags: FlagValues<T>; args: string[] } {
  const parsed = parseFlags(command, argv, options);
  const args = parsed.positionals;
  if (args.length < positionals.length) {
    const missing = positionals.slice(args.length).join(" ");
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: give ${missing} (ax ${command} ${positionals.join(" ")})`,
    );
  }
  if (args.length > positionals.length) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: unexpected argument "${args[positionals.length]}"`,
    );
  }
  return { flags: parsed.values, args };
}

/** A whole number from a flag within [min, max], or an AX_CLI_USAGE error naming the flag. */
export function intFlag(
  command: string,
  name: string,
  value: string | undefined,
  range: { min: number; max: number },
): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^-?\d+$/.test(value.trim()) || n < range.min || n > range.max) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: --${name} must be a whole number from ${range.min} to ${range.max}, got "${value}"`,
    );
  }
  return n;
}

/**
 * An instant from a flag: UTC milliseconds, an ISO 8601 time, or `+DURATION` (such as `+10s`)
 * after `base`. Anything else is an AX_CLI_USAGE error naming the flag.
 */
export function instantFlag(
  command: string,
  name: string,
  value: string | undefined,
  base: number = Date.now(),
): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  let ms: number | undefined;
  if (v.startsWith("+")) {
    const d = parseDuration(v.slice(1));
    ms = d === undefined ? undefined : base + d;
  } else if (/^\d+(\.\d+)?$/.test(v)) ms = Number(v);
  else if (/^\d{4}-\d{2}-\d{2}/.test(v)) {
    const noZone = noZoneProblem(v);
    if (noZone !== undefined) throw new AxError("AX_CLI_USAGE", `${command}: --${name} ${noZone}`);
    ms = parseIsoInstant(v);
  }
  if (ms === undefined || !Number.isFinite(ms)) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: --${name} must be an ISO time (2026-01-31T12:00:00Z), UTC milliseconds or +DURATION (+10s), got "${value}"`,
    );
  }
  return ms;
}

/**
 * A duration from a flag (`500ms`, `30s`, `5m`, `1h`, `1d`) in milliseconds, or an AX_CLI_USAGE
 * error naming the flag.
 */
export function durationFlag(
  command: string,
  name: string,
  value: string | undefined,
): number | undefined {
  if (value === undefined) return undefined;
  const ms = parseDuration(value);
  if (ms === undefined) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: --${name} must be a duration such as 500ms, 30s, 5m, got "${value}"`,
    );
  }
  return ms;
}

/** Tags from a repeated `--NAME KEY=VALUE` flag, or an AX_CLI_USAGE error naming the flag. */
export function tagsFlag(
  command: string,
  name: string,
  values: readonly string[] | undefined,
): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const t of values ?? []) {
    const eq = t.indexOf("=");
    if (eq < 1) {
      throw new AxError("AX_CLI_USAGE", `${command}: --${name} must be KEY=VALUE, got "${t}"`);
    }
    tags[t.slice(0, eq)] = t.slice(eq + 1);
  }
  return tags;
}

/**
 * A JSON object from a flag, or an AX_CLI_USAGE error naming the flag; a syntax error says where,
 * as a column (and a line, when the value has several).
 */
export function jsonObjectFlag(
  command: string,
  name: string,
  value: string | undefined,
): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  const parsed = parseJsonText(value);
  if (!parsed.ok) {
    const at = value.includes("\n")
      ? `line ${parsed.line}, column ${parsed.column}`
      : `column ${parsed.column}`;
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: --${name}: not valid JSON at ${at}: ${parsed.reason.replace("end of the file", "end of the value")}`,
    );
  }
  const v = parsed.value;
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new AxError("AX_CLI_USAGE", `${command}: --${name} must be a JSON object, got ${value}`);
  }
  return v as Record<string, unknown>;
}

/** The coordinator's HTTP API, as the CLI calls it. */
export interface ApiClient {
  readonly url: string;
  /** Calls the API; an error answer is thrown as an AxError with the API's code and message. */
  /** `headers`: more request headers (an `idempotency-key`). */
  request<T>(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<T>;
  /**
   * The same with a body that is not JSON (a bundle archive), and the answer's status (201 or
   * 200 tell a creation from an idempotent repeat).
   */
  send<T>(
    method: string,
    path: string,
    body: { bytes: Buffer; contentType: string; timeoutMs: number },
  ): Promise<{ status: number; value: T }>;
}

/**
 * A client for `--url` (else `AX_URL`, else http://127.0.0.1:8080) with the token
 * {@link resolveToken} finds, using Node's global fetch.
 */
export function apiClient(
  command: string,
  flags: { url?: string | undefined } & TokenFlags,
  env: NodeJS.ProcessEnv = process.env,
): ApiClient {
  // An empty variable counts as unset.
  const envUrl = env.AX_URL || undefined;
  const raw = flags.url ?? envUrl ?? DEFAULT_URL;
  const from = flags.url !== undefined ? "--url" : envUrl !== undefined ? "AX_URL" : "the URL";
  let base: URL;
  try {
    base = new URL(raw);
    if (base.protocol !== "http:" && base.protocol !== "https:") throw new Error("not http");
  } catch {
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: ${from} must be an http:// or https:// URL, got "${raw}"`,
    );
  }
  const url = base.href.replace(/\/+$/, "");
  const { token, from: tokenFrom } = resolveToken(command, flags, env);
  const call = async <T>(
    method: string,
    path: string,
    body: { bytes: Buffer | string; contentType: string } | undefined,
    timeoutMs: number,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; value: T }> => {
    let res: Response;
    try {
      res = await fetch(`${url}${path}`, {
        method,
        headers: {
          accept: "application/json",
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body === undefined ? {} : { "content-type": body.contentType }),
          ...headers,
        },
        ...(body === undefined ? {} : { body: body.bytes }),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      const timedOut = (err as Error).name === "TimeoutError";
      throw new AxError(
        "AX_API_UNREACHABLE",
        `cannot reach the coordinator at ${url}: ${timedOut ? `no answer within ${timeoutMs / 1000} s` : (cause?.code ?? cause?.message ?? (err as Error).message)}`,
        { cause: err, context: { timedOut } },
      );
    }
    if (res.status === 204) return { status: 204, value: undefined as T };
    const text = await res.text();
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new AxError(
        "AX_API_UNREACHABLE",
        `${url}${path} answered HTTP ${res.status} with something other than the API's JSON`,
      );
    }
    if (!res.ok) {
      const e = (value as { error?: { code?: string; message?: string } }).error;
      const code =
        e?.code !== undefined && Object.hasOwn(ERROR_CODES, e.code)
          ? (e.code as ErrorCode)
          : "AX_API_INTERNAL";
      const message = e?.message ?? `HTTP ${res.status}`;
      // Which token was sent is the first thing to check on a 401 or 403.
      const hint = res.status === 401 || res.status === 403 ? ` (token: ${tokenFrom})` : "";
      throw new AxError(code, `${message}${hint}`, {
        context: { status: res.status, body: value },
      });
    }
    return { status: res.status, value: value as T };
  };
  return {
    url,
    async request<T>(
      method: string,
      path: string,
      body?: unknown,
      headers?: Record<string, string>,
    ): Promise<T> {
      const json =
        body === undefined
          ? undefined
          : { bytes: JSON.stringify(body), contentType: "application/json" };
      const key = headers?.["idempotency-key"];
      if (key === undefined) return (await call<T>(method, path, json, 30_000, headers)).value;
      // With a key, a request whose answer did not come is sent again, the same body with the
      // same key: the coordinator makes its executions once and answers each copy alike.
      for (let attempt = 0; ; attempt++) {
        try {
          return (await call<T>(method, path, json, 30_000, headers)).value;
        } catch (err) {
          if (!(err instanceof AxError) || !unanswered(err)) throw err;
          const wait = RESEND_AFTER_MS[attempt];
          if (wait === undefined || err.context?.timedOut === true) {
            throw new AxError(
              err.code,
              `${err.message}; it may have been made: the same command with --idempotency-key ${key} makes it at most once`,
              { cause: err },
            );
          }
          process.stderr.write(
            `ax: ${err.message}; sending the same request again with its Idempotency-Key in ${wait / 1000} s\n`,
          );
          await new Promise((resolve) => setTimeout(resolve, wait));
        }
      }
    },
    send: (method, path, body) => call(method, path, body, body.timeoutMs),
  };
}

/**
 * How long to wait before each time a keyed request with no answer is sent again: four more
 * tries over 7.5 s, about as long as a coordinator takes to restart.
 */
const RESEND_AFTER_MS = [500, 1_000, 2_000, 4_000];

/**
 * An error that may have left the request made without telling: no connection, one that failed
 * before the answer, or a 5xx (the coordinator failed or was not ready; with a key, what it made
 * or not is recorded with the key, so the same request again is safe). A 4xx is an answer.
 */
function unanswered(err: AxError): boolean {
  if (err.code === "AX_API_UNREACHABLE") return true;
  const status = err.context?.status;
  return typeof status === "number" && status >= 500;
}

/**
 * The `Idempotency-Key` of a command that makes executions: `--idempotency-key KEY`, else one
 * made for this run. The same command again with the key makes nothing more and prints what the
 * first made (docs/api.md, "Idempotency keys"); within a run, a request whose answer did not
 * come is sent again with it.
 */
export function idempotencyHeader(key: string | undefined): Record<string, string> {
  return { "idempotency-key": key ?? `cli-${randomUUID()}` };
}

/** Writes `value` as indented JSON (for `--json`). */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Writes text, with a final newline. */
export function print(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}

/**
 * A paged listing (`{ items, nextCursor }`) for `--limit N [--cursor C | --all]`: one page from
 * `--cursor` (or the first), or every page with `--all`, of at most `--limit` items (1 to
 * `maxLimit`). Calls the API `flags` name. Returns the items and the last page.
 */
export async function listPages<T, P extends { items: T[]; nextCursor: string | null }>(
  command: string,
  flags: { all?: boolean | undefined; cursor?: string | undefined; limit?: string | undefined } & {
    url?: string | undefined;
  } & TokenFlags,
  path: string,
  query: URLSearchParams,
  maxLimit: number,
): Promise<{ items: T[]; last: P }> {
  if (flags.all && flags.cursor !== undefined) {
    throw new AxError("AX_CLI_USAGE", `${command}: give --cursor or --all, not both`);
  }
  const limit = intFlag(command, "limit", flags.limit, { min: 1, max: maxLimit });
  if (limit !== undefined) query.set("limit", String(limit));
  if (flags.cursor !== undefined) query.set("cursor", flags.cursor);
  const api = apiClient(command, flags);
  const items: T[] = [];
  for (;;) {
    const page = await api.request<P>("GET", `${path}?${query}`);
    items.push(...page.items);
    if (!flags.all || page.nextCursor === null) return { items, last: page };
    query.set("cursor", page.nextCursor);
  }
}
