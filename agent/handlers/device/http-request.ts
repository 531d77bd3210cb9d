import * as z from "zod/mini";
import type { HandlerPart } from "../../parts/types.js";
import { defineHandler, type Handler, HandlerFailure } from "../registry.js";
import { displayUrl, errorText, head } from "./common.js";
import { fitJsonText } from "./json-text.js";

/** Options of `http.request`, resolved from the agent config's `"http.request"` section. */
export interface HttpRequestOptions {
  /**
   * Origins requests may go to, such as `"http://127.0.0.1:8080"`. Empty allows any http(s)
   * origin.
   */
  allowOrigins: readonly string[];
  /** Timeout of a request whose params give none. @default 10000 */
  defaultTimeoutMs?: number | undefined;
}

/** Bytes of response body kept in the result; the rest is not read. */
export const HTTP_BODY_CAP_BYTES = 16 * 1024;

/** Response headers copied into the result; the others are left out to keep reports small. */
const KEPT_HEADERS = [
  "content-type",
  "content-length",
  "location",
  "etag",
  "last-modified",
  "retry-after",
] as const;

function httpUrl(raw: string): URL | undefined {
  try {
    const u = new URL(raw);
    const ok =
      (u.protocol === "http:" || u.protocol === "https:") && u.username === "" && u.password === "";
    return ok ? u : undefined;
  } catch {
    return undefined;
  }
}

/** True for `scheme://host[:port]` with nothing after it but an optional `/`. */
export function isHttpOrigin(raw: string): boolean {
  const u = httpUrl(raw);
  return (
    u !== undefined && u.pathname === "/" && u.search === "" && u.hash === "" && !/[?#]/.test(raw)
  );
}

/** The params of one `http.request` execution. */
export const httpRequestParamsSchema = z
  .object({
    url: z
      .string()
      .check(
        z.refine(
          (s) => httpUrl(s) !== undefined,
          "must be an http:// or https:// URL without credentials",
        ),
      ),
    /** @default "GET" */
    method: z.optional(z.enum(["GET", "POST", "PUT", "PATCH", "DELETE"])),
    headers: z.optional(z.record(z.string(), z.string())),
    /** A string is sent as is; an object as JSON (with `content-type: application/json`). */
    body: z.optional(
      z.union([z.string(), z.record(z.string(), z.unknown())], {
        error: "must be a string or a JSON object",
      }),
    ),
    /** @default the handler's defaultTimeoutMs */
    timeoutMs: z.optional(z.int().check(z.gte(1), z.lte(600_000))),
  })
  .check(
    z.refine((p) => p.body === undefined || (p.method ?? "GET") !== "GET", {
      message: "a GET request cannot have a body",
      path: ["body"],
    }),
  );

export type HttpRequestParams = z.infer<typeof httpRequestParamsSchema>;

const NAME = "http.request";

/**
 * `http.request`: one HTTP request to a local service or device API. Redirects are not followed
 * (one could lead off the allowed origins); a 3xx is returned as the result with its `location`.
 *
 * A POST or PATCH carries `Idempotency-Key: <executionId>` unless the params set that header, so
 * a server that honours it applies a retried request once.
 *
 * Outcome: 2xx/3xx succeed; 5xx, 408, 429, network errors and timeouts fail retryable; any other
 * 4xx fails for good, since sending the same request again gets the same answer.
 */
export function httpRequestHandler(opts: HttpRequestOptions): Handler<HttpRequestParams> {
  const allowed = new Set(
    opts.allowOrigins.map((o) => {
      if (!isHttpOrigin(o))
        throw new TypeError(`allowOrigins: ${JSON.stringify(o)} is not an origin`);
      return new URL(o).origin;
    }),
  );
  const defaultTimeoutMs = opts.defaultTimeoutMs ?? 10_000;

  return defineHandler(NAME, httpRequestParamsSchema, async (ctx, params) => {
    const url = new URL(params.url);
    const method = params.method ?? "GET";
    const what = `${method} ${displayUrl(url)}`;
    if (allowed.size > 0 && !allowed.has(url.origin)) {
      throw new HandlerFailure(
        `${NAME}: ${url.origin} is not in this agent's allowOrigins (${[...allowed].join(", ")})`,
        { retryable: false },
      );
    }
    let headers: Headers;
    try {
      headers = new Headers(params.headers);
    } catch (err) {
      throw new HandlerFailure(`${NAME}: bad header: ${errorText(err)}`, {
        retryable: false,
        cause: err,
      });
    }
    // POST and PATCH are not idempotent: the execution id lets the server drop a retry's repeat
    // (draft-ietf-httpapi-idempotency-key-header). Params may set their own key.
    if ((method === "POST" || method === "PATCH") && !headers.has("idempotency-key")) {
      headers.set("idempotency-key", ctx.executionId);
    }
    let body: string | undefined;
    if (typeof params.body === "string") body = params.body;
    else if (params.body !== undefined) {
      body = JSON.stringify(params.body);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
    }
    const timeoutMs = params.timeoutMs ?? defaultTimeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    try {
      const res = await fetch(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        redirect: "manual",
        signal: AbortSignal.any([ctx.signal, timeout]),
      });
      const read = await readCapped(res, HTTP_BODY_CAP_BYTES);
      // The cap counts the body as it will be sent, JSON-escaped (json-text.ts).
      const fitted = fitJsonText(read.text, HTTP_BODY_CAP_BYTES, "head");
      const text = fitted.text;
      const truncated = read.truncated || fitted.cut;
      if (res.status >= 400) {
        const retryable = res.status >= 500 || res.status === 408 || res.status === 429;
        const snippet = text.trim() === "" ? "" : `: ${head(text.trim(), 200)}`;
        throw new HandlerFailure(
          `${NAME}: ${what} answered ${res.status} ${res.statusText}${snippet}`,
          { retryable },
        );
      }
      const kept: Record<string, string> = {};
      for (const name of KEPT_HEADERS) {
        const value = res.headers.get(name);
        if (value !== null) kept[name] = value;
      }
      const result: Record<string, unknown> = { status: res.status, headers: kept, body: text };
      if (truncated) result.truncated = true;
      else if (/[/+]json\b/i.test(res.headers.get("content-type") ?? "")) {
        try {
          result.json = JSON.parse(text);
        } catch {
          // Not JSON after all: the text is in `body`.
        }
      }
      return result;
    } catch (err) {
      if (err instanceof HandlerFailure) throw err;
      if (ctx.signal.aborted) {
        throw new HandlerFailure(`${NAME}: ${what} aborted`, { cause: ctx.signal.reason });
      }
      if (timeout.aborted) {
        throw new HandlerFailure(`${NAME}: ${what} timed out after ${timeoutMs} ms`, {
          cause: err,
        });
      }
      throw new HandlerFailure(`${NAME}: ${what} failed: ${fetchErrorText(err)}`, { cause: err });
    }
  });
}

/** Reads at most `max` bytes of the body as UTF-8 and cancels the rest. */
async function readCapped(
  res: Response,
  max: number,
): Promise<{ text: string; truncated: boolean }> {
  if (res.body === null) return { text: "", truncated: false };
  const reader = res.body.getReader();
  // A character cut at the cap stays in the streaming decoder and is dropped, not mangled.
  const decoder = new TextDecoder();
  let size = 0;
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { text: text + decoder.decode(), truncated: false };
    const room = max - size;
    if (value.byteLength > room) {
      text += decoder.decode(value.subarray(0, room), { stream: true });
      await reader.cancel().catch(() => {});
      return { text, truncated: true };
    }
    size += value.byteLength;
    text += decoder.decode(value, { stream: true });
  }
}

/** undici says "fetch failed" and puts the reason (ECONNREFUSED, a TLS error) in `cause`. */
function fetchErrorText(err: unknown): string {
  const cause = err instanceof Error ? err.cause : undefined;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return typeof code === "string" && !cause.message.includes(code)
      ? `${code} ${cause.message}`
      : cause.message;
  }
  return errorText(err);
}

/** The config section of `http.request`. */
export const httpRequestConfigSchema = z.strictObject({
  /** Origins such as "http://127.0.0.1:8080"; empty allows any http(s) origin. @default [] */
  allowOrigins: z._default(
    z.array(
      z
        .string()
        .check(
          z.refine(
            isHttpOrigin,
            "must be an http(s) origin such as http://127.0.0.1:8080 (no path)",
          ),
        ),
    ),
    [],
  ),
  /** @default 10000 */
  defaultTimeoutMs: z._default(z.int().check(z.gte(1), z.lte(600_000)), 10_000),
});

/** `http.request` as a part an agent is built with. */
export const httpRequestPart: HandlerPart = {
  name: "http.request",
  config: () => httpRequestConfigSchema,
  build: (section) => ({
    handler: httpRequestHandler(section as z.output<typeof httpRequestConfigSchema>) as never,
  }),
};
