import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { z } from "zod";
import type { ApiRole } from "../config.js";
import type { Coordinator } from "../coordinator.js";

export type Method = "GET" | "POST" | "PUT" | "DELETE";

/**
 * Who may call a route: `public` anyone (health, the OpenAPI document, the console page);
 * `viewer` any token (every read); `operator` an operator or admin token (every change but the
 * admin routes); `admin` only an admin token (API tokens, agent enrolment). With auth off, anyone.
 */
export type Role = "public" | ApiRole;

/** Who made a request: the token's name (the actor recorded for what it changes) and role. */
export interface Principal {
  name: string;
  role: ApiRole;
}

/** What a JSON route's handler is given: its validated inputs, the coordinator and the caller. */
export interface RouteInput<P, Q, B> {
  params: P;
  query: Q;
  body: B;
  /** The request's headers (lower-case names), for the few routes that read one (`if-match`). */
  headers: IncomingHttpHeaders;
  coordinator: Coordinator;
  /** The caller; `anonymous` (role admin) with auth off. */
  principal: Principal;
}

/** A handler's answer when its status differs from the route's success status. */
export class Reply {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {}
}

/**
 * A JSON route. Its path parameters, query and body are validated by its zod schemas before the
 * handler runs; the OpenAPI document is generated from the same schemas.
 */
export interface ApiRoute<
  P extends z.ZodType = z.ZodType,
  Q extends z.ZodType = z.ZodType,
  B extends z.ZodType = z.ZodType,
> {
  kind: "api";
  method: Method;
  /** `/api/jobs/{id}`: `{name}` matches one path segment. */
  path: string;
  role: Role;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  params?: P;
  query?: Q;
  body?: B;
  /** An empty body is read as `{}` (routes whose body is all optional). */
  bodyOptional?: boolean;
  /** Optional request headers the handler reads, for the OpenAPI document. */
  headers?: { name: string; description: string; schema: Record<string, unknown> }[];
  success: { status: number; description: string; schema?: z.ZodType };
  /** Statuses besides 400, 401 and 403 that the route answers with an error body. */
  errors?: number[];
  /** Other answers that are not errors (a 503 with the readiness body). */
  otherResponses?: { status: number; description: string; schema: z.ZodType }[];
  /** Returns the success body (or a {@link Reply}); throws AxError for errors. */
  handle(input: RouteInput<z.output<P>, z.output<Q>, z.output<B>>): Promise<unknown>;
}

/**
 * A route that writes its own response: metrics, the OpenAPI document, the console, files, and
 * bodies that are not JSON (a bundle's archive, up and down).
 */
export interface RawRoute {
  kind: "raw";
  method: "GET" | "POST";
  /** As {@link ApiRoute.path}; a last segment `*` matches the rest of the path (static files). */
  path: string;
  role: Role;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  /** The Content-Type of a successful answer, for the OpenAPI document. */
  contentType: string;
  /**
   * The route takes no query string: a request with any query parameter is refused
   * (AX_API_INVALID_REQUEST), as the JSON routes refuse unknown ones. Pages and files a browser
   * loads leave it unset, so that a cache-buster (`app.js?v=2`) still loads them. @default false
   */
  noQuery?: boolean;
  /**
   * A body that is not JSON: the Content-Types taken (instead of application/json) and the most
   * bytes read ({@link RawRouteContext.readBody}).
   */
  body?: { contentTypes: readonly string[]; maxBytes: number; description: string };
  /** The success status and what it means, for the OpenAPI document. @default 200, the summary */
  success?: { status: number; description: string };
  /** Other successful answers, in the same content type (a 200 beside a 201). */
  alsoSuccess?: { status: number; description: string }[];
  /** Statuses besides 400, 401 and 403 that the route answers with an error body. */
  errors?: number[];
  /**
   * Credentials the route takes besides bearer tokens (an agent's `AX-Agent` header): returns
   * the caller when the Authorization header is one of them, throwing AX_API_UNAUTHORIZED when
   * it is but does not verify; undefined to check it as a bearer token against `role`.
   */
  authenticate?(
    header: string | undefined,
    ctx: { coordinator: Coordinator; params: Record<string, string> },
  ): Principal | undefined;
  handle(req: IncomingMessage, res: ServerResponse, ctx: RawRouteContext): Promise<void> | void;
}

/** What a raw route's handler is given. */
export interface RawRouteContext {
  coordinator: Coordinator;
  params: Record<string, string>;
  principal: Principal;
  /** Reads the request's body, at most the route's `body.maxBytes` (else AX_API_TOO_LARGE). */
  readBody(): Promise<Buffer>;
}

export type AnyRoute = ApiRoute | RawRoute;

/** Declares a JSON route, typing its handler's inputs from its schemas. */
export function apiRoute<
  P extends z.ZodType = z.ZodType<Record<string, never>>,
  Q extends z.ZodType = z.ZodType<Record<string, never>>,
  B extends z.ZodType = z.ZodType<undefined>,
>(route: Omit<ApiRoute<P, Q, B>, "kind">): ApiRoute {
  return { kind: "api", ...route } as unknown as ApiRoute;
}
