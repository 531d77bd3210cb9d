import type { IncomingMessage } from "node:http";
import { AxError } from "../../shared/errors.js";

/*
 * Checks every request passes before it is routed, with auth on or off (issue 16):
 * 1. Host is one of the coordinator's names: a web page that rebinds its own DNS name to this
 *    address would otherwise be same-origin with the API and could read it.
 * 2. An Origin, when a browser sends one, is this server's own or an allowed one: a page of
 *    another site can send a request (CSRF) even where it cannot read the answer.
 * 3. A body is JSON: a page can POST text/plain or a form to any address without the browser
 *    asking first (no CORS preflight); application/json always needs one, which is granted only
 *    to the origins of `http.allowedOrigins` (server.ts).
 * 4. No token in the query string: URLs end up in logs, proxies and browser history.
 */

/** Hosts that mean "every address": no name to answer to follows from them. */
const WILDCARDS = new Set(["0.0.0.0", "::", "[::]", ""]);

/**
 * The Host header values a server bound to `host:port` answers: the loopback names, `host` when it
 * is not a wildcard, and `extra` (a name without a port matches with none or with `port`). Lower
 * case.
 */
export function allowedHostSet(host: string, port: number, extra: readonly string[]): Set<string> {
  const out = new Set<string>();
  const add = (name: string) => {
    const n = name.toLowerCase();
    out.add(`${n}:${port}`);
    // A browser leaves out the scheme's default port.
    if (port === 80) out.add(n);
  };
  for (const n of ["localhost", "127.0.0.1", "[::1]"]) add(n);
  if (!WILDCARDS.has(host)) add(host.includes(":") && !host.startsWith("[") ? `[${host}]` : host);
  for (const e of extra) {
    if (/:\d+$/.test(e)) out.add(e.toLowerCase());
    else {
      add(e);
      out.add(e.toLowerCase());
    }
  }
  return out;
}

/** `application/json`, with at most a `charset=utf-8` parameter. */
function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const [type, ...params] = contentType.split(";").map((p) => p.trim().toLowerCase());
  if (type !== "application/json") return false;
  return params.every((p) => p === "" || /^charset="?utf-8"?$/.test(p));
}

/** `type`, with any parameters, is one of `types` (lower case). */
function isOneOf(contentType: string | undefined, types: readonly string[]): boolean {
  const type = contentType?.split(";")[0]?.trim().toLowerCase();
  return type !== undefined && types.includes(type);
}

/**
 * Throws the AxError a request that fails one of the checks above is answered with. `bodyTypes`:
 * the Content-Types the route takes instead of JSON (a bundle's archive). None of them may be a
 * type a page can send without a preflight (text/plain, a form), or check 3 would be void.
 * Returns the request's Origin when it is another one that `http.allowedOrigins` lets in (its
 * answer then carries the CORS headers that let the page read it); `admitted` is told of it as
 * soon as it is let in, before the checks after it, so that their refusals carry them too.
 */
export function checkRequestHygiene(
  req: IncomingMessage,
  url: URL,
  allowed: { hosts: ReadonlySet<string>; allowedOrigins: ReadonlySet<string> },
  bodyTypes?: readonly string[],
  admitted?: (origin: string) => void,
): string | undefined {
  const host = req.headers.host?.toLowerCase();
  if (host === undefined || !allowed.hosts.has(host)) {
    throw new AxError(
      "AX_API_HOST_REFUSED",
      host === undefined
        ? "the request has no Host header"
        : `Host header "${req.headers.host}" is not a name of this coordinator (add it to http.allowedHosts)`,
      { context: { host: req.headers.host } },
    );
  }
  const origin = req.headers.origin;
  let crossOrigin: string | undefined;
  if (origin !== undefined) {
    const o = origin.toLowerCase();
    const same = o === `http://${host}` || o === `https://${host}`;
    if (!same && !allowed.allowedOrigins.has(o)) {
      throw new AxError(
        "AX_API_ORIGIN_REFUSED",
        `Origin header "${origin}" is not this coordinator's origin nor in http.allowedOrigins`,
        { context: { origin } },
      );
    }
    if (!same) {
      crossOrigin = origin;
      admitted?.(origin);
    }
  }
  const length = req.headers["content-length"];
  const hasBody =
    (length !== undefined && length !== "0") || req.headers["transfer-encoding"] !== undefined;
  const got = req.headers["content-type"];
  const ok = bodyTypes === undefined ? isJson(got) : isOneOf(got, bodyTypes);
  if (hasBody && !ok) {
    const want = bodyTypes === undefined ? "application/json" : bodyTypes.join(" or ");
    throw new AxError(
      "AX_API_UNSUPPORTED_MEDIA_TYPE",
      got === undefined
        ? `Content-Type header missing: a request body must be sent as ${want}`
        : `Content-Type header "${got}" is not allowed: a request body must be sent as ${want}`,
      { context: { contentType: got } },
    );
  }
  for (const key of ["token", "access_token"]) {
    if (url.searchParams.has(key)) {
      throw new AxError(
        "AX_API_UNAUTHORIZED",
        `a token in the query string (?${key}=) is refused: send it in the Authorization header (Authorization: Bearer …)`,
      );
    }
  }
  return crossOrigin;
}
