import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { AxError, type ErrorCode, isAxError } from "../../shared/errors.js";
import { type HttpConfigInput, httpConfigSchema } from "../config.js";
import type { Coordinator } from "../coordinator.js";
import { formatIssues } from "../domain/job.js";
import type { Logger } from "../engine/context.js";
import { packageJson } from "../package-files.js";
import { type Auth, authorize, resolveAuth } from "./auth.js";
import { consoleAssetsRoute, consoleHandler } from "./console.js";
import { allowedHostSet, checkRequestHygiene } from "./hygiene.js";
import { openApiDocument } from "./openapi.js";
import type { AnyRoute, ApiRoute } from "./route.js";
import { Reply } from "./route.js";
import { Router } from "./router.js";
import { accessRoutes } from "./routes/access.js";
import { bundleRoutes } from "./routes/bundles.js";
import { executionRoutes } from "./routes/executions.js";
import { fleetRoutes } from "./routes/fleet.js";
import { healthRoutes } from "./routes/health.js";
import { jobRoutes } from "./routes/jobs.js";
import { rolloutRoutes } from "./routes/rollouts.js";

/*
 * Why node:http and no framework: the API is about twenty JSON routes with zod doing all the
 * validation, and the OpenAPI document comes from those same schemas. What a framework would add
 * here — routing, body parsing, error mapping — is a page of code, while it would bring a
 * dependency tree to keep patched and a second validation and schema layer to keep in step.
 */

const VERSION = packageJson().version;

/** Options of {@link startHttpServer}: the config file's `http` section, plus wiring. */
export interface HttpServerOptions extends HttpConfigInput {
  log?: Logger;
  /**
   * Routes served besides the built-in ones, such as a static folder (`GET /assets/*`). Where a
   * path matches both, the one with more literal segments wins.
   */
  routes?: readonly AnyRoute[];
}

/** A running HTTP server. */
export interface HttpServer {
  /** `http://host:port`, with the port actually bound (for port 0). */
  url: string;
  /** Stops accepting connections and waits for requests in progress (2 s at most). */
  close(): Promise<void>;
}

/** Error codes and their HTTP status; any other code is a 500. */
const STATUS: Partial<Record<ErrorCode, number>> = {
  AX_API_INVALID_REQUEST: 400,
  AX_JOB_INVALID: 400,
  AX_TRIGGER_INVALID: 400,
  AX_STORE_BAD_CURSOR: 400,
  AX_BUNDLE_INVALID: 400,
  AX_API_UNAUTHORIZED: 401,
  AX_API_FORBIDDEN: 403,
  AX_API_ORIGIN_REFUSED: 403,
  AX_API_NOT_FOUND: 404,
  AX_JOB_NOT_FOUND: 404,
  AX_EXEC_NOT_FOUND: 404,
  AX_ROLLOUT_NOT_FOUND: 404,
  AX_BUNDLE_NOT_FOUND: 404,
  AX_AGENT_NOT_FOUND: 404,
  AX_API_TOKEN_NOT_FOUND: 404,
  AX_API_METHOD_NOT_ALLOWED: 405,
  AX_JOB_EXISTS: 409,
  AX_EXEC_CONFLICT: 409,
  AX_ROLLOUT_CONFLICT: 409,
  AX_STORE_CONFLICT: 409,
  AX_AGENT_ENROLLED: 409,
  AX_AGENT_NO_HANDLER: 409,
  AX_AUTH_NOT_ENROLLED: 409,
  AX_API_TOKEN_EXISTS: 409,
  AX_API_TOO_LARGE: 413,
  AX_API_RANGE_NOT_SATISFIABLE: 416,
  AX_API_UNSUPPORTED_MEDIA_TYPE: 415,
  // 421 Misdirected Request (RFC 9110 §15.5.20): this server does not answer for that name.
  AX_API_HOST_REFUSED: 421,
  // The store refused for now (PostgreSQL kept failing the transaction with a retryable error, or
  // this coordinator's membership lapsed and it is stepping down): nothing was written, and the
  // same request may succeed in a moment, here or at another coordinator.
  AX_STORE_BUSY: 503,
  AX_STORE_FENCED: 503,
};

/** Seconds a client is asked to wait (`Retry-After`) before repeating a request answered 503. */
const RETRY_AFTER_S = 1;

/**
 * The routes every server has: the API, its OpenAPI document (of `all()`, the routes served),
 * metrics and the console page.
 */
export function builtinRoutes(all: () => readonly AnyRoute[]): AnyRoute[] {
  let document: string | undefined;
  return [
    ...healthRoutes,
    ...jobRoutes,
    ...executionRoutes,
    ...fleetRoutes,
    ...rolloutRoutes,
    ...bundleRoutes,
    ...accessRoutes,
    {
      kind: "raw",
      method: "GET",
      path: "/api/openapi.json",
      role: "public",
      operationId: "openapi",
      summary: "This API's OpenAPI 3.1 document",
      tag: "meta",
      contentType: "application/json",
      noQuery: true,
      handle: (_req, res) => {
        document ??= JSON.stringify(openApiDocument(all(), VERSION));
        send(res, 200, document);
      },
    },
    {
      kind: "raw",
      method: "GET",
      path: "/metrics",
      role: "viewer",
      operationId: "metrics",
      summary: "Prometheus metrics",
      tag: "meta",
      contentType: "text/plain",
      noQuery: true,
      handle: async (_req, res, { coordinator }) => {
        const text = await coordinator.metrics.render();
        res.writeHead(200, { "content-type": coordinator.metrics.contentType });
        res.end(text);
      },
    },
    {
      kind: "raw",
      method: "GET",
      path: "/",
      role: "public",
      operationId: "console",
      summary: "The web console",
      tag: "meta",
      contentType: "text/html",
      handle: consoleHandler,
    },
    consoleAssetsRoute,
  ];
}

/**
 * Serves the coordinator's HTTP API, `/metrics` and the console on `options.host:port` (port 0:
 * a free one). Options are checked by the config file's schema; a bad one, or a token file that
 * cannot be read, throws before anything listens. With token auth (the default) the admin token
 * file is created in the coordinator's secrets folder if it does not exist yet.
 */
export async function startHttpServer(
  coordinator: Coordinator,
  options: HttpServerOptions = {},
): Promise<HttpServer> {
  const { log = () => {}, routes: extra = [], ...input } = options;
  const parsed = httpConfigSchema.safeParse(input);
  if (!parsed.success) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      `http: invalid options\n${formatIssues(parsed.error, "http")}`,
    );
  }
  const config = parsed.data;
  const auth = resolveAuth(config.auth, coordinator.apiTokens);
  if (auth === "off") {
    log(
      "warn",
      'HTTP AUTH IS OFF (http.auth: "off"): every process and user on this machine can run jobs, ' +
        "send device commands and enrol agents; remove it to require tokens",
      { auth: "off" },
    );
  } else {
    const admin = coordinator.apiTokens.ensureAdminToken();
    coordinator.apiTokens.reserve(auth.config.map((t) => t.name));
    log(
      "info",
      `${admin.created ? "created the admin token in" : "admin token in"} ${admin.path} ` +
        "(the CLI on this machine reads it from there; ax token create makes others)",
      { adminTokenFile: admin.path },
    );
  }
  const routes: AnyRoute[] = [...builtinRoutes(() => routes), ...extra];
  const router = new Router(routes);

  // Filled in once the port is bound: Host headers name it.
  const state: ServerState = {
    coordinator,
    router,
    auth,
    maxBodyBytes: config.maxBodyBytes,
    hosts: new Set(),
    allowedOrigins: new Set(config.allowedOrigins.map((o) => o.toLowerCase())),
  };
  const server = createServer((req, res) => {
    handle(req, res, state).catch((err: unknown) => {
      const status = isAxError(err) ? (STATUS[err.code] ?? 500) : 500;
      if (status === 503) {
        log("warn", `http ${req.method} ${req.url}: ${(err as Error).message}`);
      } else if (status >= 500) {
        log("error", `http ${req.method} ${req.url}: ${(err as Error).stack ?? String(err)}`);
      }
      if (res.headersSent) {
        res.destroy();
        return;
      }
      sendError(res, status, err, req.readableEnded ? {} : { connection: "close" });
      // The rest of a refused body is read and dropped, so the client gets the answer rather
      // than a reset connection.
      if (!req.readableEnded) req.resume();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new AxError(
          "AX_CONFIG_INVALID",
          `http.port: cannot listen on ${config.host}:${config.port}: ${err.code ?? err.message}`,
          { cause: err },
        ),
      ),
    );
    server.listen(config.port, config.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  for (const h of allowedHostSet(config.host, address.port, config.allowedHosts))
    state.hosts.add(h);
  // Agents download bundles from the public URL: its host is a name of this coordinator too.
  if (config.publicUrl !== undefined) state.hosts.add(new URL(config.publicUrl).host.toLowerCase());
  coordinator.servedAt(config.host, address.port);
  log("info", `http listening on ${url}`, {
    url,
    auth: auth === "off" ? "off" : "tokens",
    hosts: [...state.hosts],
  });
  let closing: Promise<void> | undefined;
  return {
    url,
    close() {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), 2_000);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}

interface ServerState {
  coordinator: Coordinator;
  router: Router;
  auth: Auth;
  maxBodyBytes: number;
  /** Host header values answered, lower case. */
  hosts: Set<string>;
  allowedOrigins: Set<string>;
}

/** One request: route, authorize, validate, run the handler, answer. */
/** Request headers a page of an allowed origin may send (the token, JSON, a version check). */
const CORS_REQUEST_HEADERS = "authorization, content-type, if-match, idempotency-key";
/** Answer headers such a page may read besides the simple ones. */
const CORS_EXPOSED_HEADERS = "etag, location, retry-after, www-authenticate, allow";

/**
 * A request from a page of an origin in `http.allowedOrigins` (docs/api.md): its answer carries
 * `Access-Control-Allow-Origin` (set in {@link handle} as the Origin is let in), so the page may
 * read it; a CORS preflight (OPTIONS with
 * `Access-Control-Request-Method`) is answered 204 here, with the path's methods, without a
 * token (a browser sends none with it). Never with credentials: the API takes no cookies. True
 * when the request was answered here.
 */
function answerPreflight(
  req: IncomingMessage,
  res: ServerResponse,
  matches: ReturnType<Router["match"]>,
): boolean {
  if (req.method !== "OPTIONS" || req.headers["access-control-request-method"] === undefined) {
    return false;
  }
  if (matches === undefined || matches.length === 0) return false; // 404 as any unknown path
  const methods = [...new Set(matches.map((m) => m.route.method))];
  res.setHeader("access-control-allow-methods", methods.join(", "));
  res.setHeader("access-control-allow-headers", CORS_REQUEST_HEADERS);
  res.setHeader("access-control-max-age", "600");
  res.writeHead(204);
  res.end();
  return true;
}

async function handle(req: IncomingMessage, res: ServerResponse, s: ServerState): Promise<void> {
  const url = new URL(req.url ?? "/", "http://localhost");
  const matches = s.router.match(url.pathname);
  const match = matches?.find((m) => m.route.method === req.method);
  const bodyTypes = match?.route.kind === "raw" ? match.route.body?.contentTypes : undefined;
  // The CORS headers as soon as the Origin is let in: a refusal of a later check carries them
  // too, so the page can read why (docs/api.md).
  const crossOrigin = checkRequestHygiene(req, url, s, bodyTypes, (origin) => {
    res.setHeader("access-control-allow-origin", origin);
    res.setHeader("vary", "Origin");
    res.setHeader("access-control-expose-headers", CORS_EXPOSED_HEADERS);
  });
  if (crossOrigin !== undefined && answerPreflight(req, res, matches)) return;
  if (matches === undefined) {
    // As every invalid request: its issue listed, with where it is (docs/errors.md).
    const issues = [{ path: "path", message: `"${url.pathname}" is not valid percent-encoding` }];
    throw new AxError("AX_API_INVALID_REQUEST", `invalid request\npath: ${issues[0]?.message}`, {
      context: { issues },
    });
  }
  if (!match) {
    if (matches.length === 0) {
      throw new AxError("AX_API_NOT_FOUND", `no route ${url.pathname}; see /api/openapi.json`);
    }
    const allow = [...new Set(matches.map((m) => m.route.method))];
    res.setHeader("allow", allow.join(", "));
    throw new AxError(
      "AX_API_METHOD_NOT_ALLOWED",
      `${url.pathname} does not take ${req.method}; it takes ${allow.join(", ")}`,
    );
  }
  const { route, params } = match;
  const header = req.headers.authorization;
  const principal =
    (s.auth !== "off" && route.kind === "raw"
      ? route.authenticate?.(header, { coordinator: s.coordinator, params })
      : undefined) ?? authorize(s.auth, header, route.role);
  if (route.kind === "raw") {
    if (route.noQuery) refuseIssues(checked("query", NOTHING, queryObject(url.searchParams)));
    const maxBytes = route.body?.maxBytes ?? s.maxBodyBytes;
    await route.handle(req, res, {
      coordinator: s.coordinator,
      params,
      principal,
      readBody: () => readBody(req, maxBytes),
    });
    return;
  }

  const issues: Issue[] = [];
  const input = {
    params: check("params", route.params, params, issues),
    query: check("query", route.query ?? NOTHING, queryObject(url.searchParams), issues),
    body: undefined as unknown,
  };
  if (route.body) {
    const raw = await readBody(req, s.maxBodyBytes);
    let value: unknown;
    if (raw.length === 0) {
      value = route.bodyOptional ? {} : undefined;
    } else {
      try {
        value = JSON.parse(raw.toString("utf8"));
      } catch (err) {
        issues.push({ path: "body", message: `not valid JSON: ${(err as Error).message}` });
      }
    }
    if (raw.length === 0 || value !== undefined)
      input.body = check("body", route.body, value, issues);
  } else {
    // A route that takes no body refuses one that says anything: invalid JSON, or any field.
    // An empty body, or `{}`, is nothing.
    const raw = await readBody(req, s.maxBodyBytes);
    if (raw.length > 0) {
      try {
        check("body", NOTHING, JSON.parse(raw.toString("utf8")), issues);
      } catch (err) {
        issues.push({ path: "body", message: `not valid JSON: ${(err as Error).message}` });
      }
    }
  }
  refuseIssues(issues);
  const result = await route.handle({
    ...input,
    headers: req.headers,
    coordinator: s.coordinator,
    principal,
  } as Parameters<ApiRoute["handle"]>[0]);
  if (result instanceof Reply) send(res, result.status, JSON.stringify(result.body));
  else if (result === undefined) {
    res.writeHead(route.success.status, { "cache-control": "no-store" });
    res.end();
  } else send(res, route.success.status, JSON.stringify(result));
}

interface Issue {
  path: string;
  message: string;
}

/** What a route without a query or body schema takes: nothing (every key is unknown). */
const NOTHING = z.object({}).strict();

/** Refuses a request whose validation found issues, listing each with its path. */
function refuseIssues(issues: readonly Issue[]): void {
  if (issues.length === 0) return;
  throw new AxError(
    "AX_API_INVALID_REQUEST",
    `invalid request\n${issues.map((i) => `${i.path}: ${i.message}`).join("\n")}`,
    { context: { issues } },
  );
}

/** The issues of one part of a request, each with its path under `where`. */
function checked(where: "params" | "query" | "body", schema: z.ZodType, value: unknown): Issue[] {
  const issues: Issue[] = [];
  check(where, schema, value, issues);
  return issues;
}

/** Validates one part of a request; its issues are added with their path under `where`. */
function check(
  where: "params" | "query" | "body",
  schema: z.ZodType | undefined,
  value: unknown,
  issues: Issue[],
): unknown {
  if (!schema) return {};
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  for (const i of r.error.issues) {
    issues.push({ path: [where, ...i.path.map(String)].join("."), message: i.message });
  }
  return undefined;
}

/** A query string as an object; a repeated key's values are joined with commas. */
function queryObject(search: URLSearchParams): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of search) out[k] = out[k] === undefined ? v : `${out[k]},${v}`;
  return out;
}

function tooLarge(limit: number): AxError {
  return new AxError("AX_API_TOO_LARGE", `the request body is over ${limit} bytes`, {
    context: { limit },
  });
}

/** Reads a request body of at most `limit` bytes; a larger one is AX_API_TOO_LARGE. */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  if (Number(req.headers["content-length"] ?? 0) > limit) return Promise.reject(tooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      req.off("data", onData);
      req.off("end", onEnd);
      reject(tooLarge(limit));
    };
    const onEnd = () => resolve(Buffer.concat(chunks));
    req.on("data", onData);
    req.on("end", onEnd);
    req.once("error", reject);
  });
}

function send(res: ServerResponse, status: number, json: string): void {
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "cache-control": "no-store",
  });
  res.end(json);
}

/** Answers with the error body; issues from the context are listed with their paths. */
function sendError(
  res: ServerResponse,
  status: number,
  err: unknown,
  headers: Record<string, string>,
): void {
  const ax = isAxError(err)
    ? err
    : new AxError("AX_API_INTERNAL", `internal error: ${(err as Error).message}`);
  const code = status === 500 && !isAxError(err) ? "AX_API_INTERNAL" : ax.code;
  const raw = ax.context.issues;
  const issues = Array.isArray(raw)
    ? (raw as { path: unknown; message: string }[]).map((i) => ({
        path: Array.isArray(i.path) ? i.path.map(String).join(".") || "(root)" : String(i.path),
        message: i.message,
      }))
    : undefined;
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  if (status === 401) res.setHeader("www-authenticate", 'Bearer realm="ax"');
  if (status === 503) res.setHeader("retry-after", String(RETRY_AFTER_S));
  send(
    res,
    status,
    JSON.stringify({
      error: { code, message: ax.message, ...(issues === undefined ? {} : { issues }) },
    }),
  );
}
