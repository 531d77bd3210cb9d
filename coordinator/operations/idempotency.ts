import { createHash } from "node:crypto";
import { AxError } from "../../shared/errors.js";
import type { EngineContext } from "../engine/context.js";
import type { IdempotencyRecord } from "../store/port.js";

/**
 * An operator's request made with an `Idempotency-Key` header (docs/api.md, "Idempotency
 * keys"): the scope names who asked, what and the key; the request is the body's hash.
 */
export interface Idempotency {
  scope: string;
  request: string;
}

/** The header, as the routes that take it declare it (OpenAPI). */
export const IDEMPOTENCY_HEADER = {
  name: "Idempotency-Key",
  description:
    "1 to 255 visible ASCII characters: the same request again with the key makes nothing more " +
    "and gets the first answer; with another body it is refused (docs/api.md).",
  schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x21-\\x7e]+$" },
};

/** 1 to 255 visible ASCII characters. */
const KEY = /^[\x21-\x7e]{1,255}$/;

const hash = (text: string) => createHash("sha256").update(text).digest("base64url");

const keyIssue = (message: string) =>
  new AxError("AX_API_INVALID_REQUEST", `the Idempotency-Key header ${message}`, {
    context: { issues: [{ path: ["headers", "idempotency-key"], message }] },
  });

/**
 * The idempotency of a request from its `Idempotency-Key` header (undefined without one), scoped
 * to the principal and the route: another token, or another route, with the same key is another
 * request.
 */
export function idempotencyOf(
  header: string | string[] | undefined,
  principal: string,
  route: string,
  body: unknown,
): Idempotency | undefined {
  if (header === undefined) return undefined;
  if (typeof header !== "string" || !KEY.test(header)) {
    throw keyIssue("must be given once, as 1 to 255 visible ASCII characters");
  }
  return {
    scope: hash(`${principal}\n${route}\n${header}`),
    request: hash(JSON.stringify(body ?? null)),
  };
}

/**
 * {@link idempotencyOf} for a route that takes no body (a retry, a run now): from the request's
 * headers, the principal's name and the route.
 */
export function bodilessIdempotency(
  headers: Record<string, string | string[] | undefined>,
  principal: string,
  route: string,
): Idempotency | undefined {
  return idempotencyOf(headers["idempotency-key"], principal, route, {});
}

/**
 * What the request with this key had as its result, when it was made: the same request again
 * gets it, and creates nothing. The key given with another body is refused.
 */
export async function replayed<T>(
  ctx: EngineContext,
  key: Idempotency | undefined,
): Promise<T | undefined> {
  if (key === undefined) return undefined;
  const made = await ctx.store.getIdempotency(key.scope);
  if (made === undefined) return undefined;
  if (made.request !== key.request) {
    throw keyIssue("was used for a request with another body: a new request needs a new key");
  }
  return JSON.parse(made.result) as T;
}

/** The record a request's executions are written with (Store.createExecutions). */
export function idempotencyRecord(
  key: Idempotency | undefined,
  result: unknown,
  at: number,
): IdempotencyRecord | undefined {
  return key === undefined ? undefined : { ...key, result: JSON.stringify(result), at };
}

/**
 * Creates what a request makes, once per key: `create` writes its executions with the record of
 * `result`; a request with the key already made answers as it did. When `create` fails because
 * another request with the key got there first, that one's result is the answer.
 */
export async function once<T>(
  ctx: EngineContext,
  key: Idempotency | undefined,
  result: T,
  create: (record: IdempotencyRecord | undefined) => Promise<void>,
): Promise<T> {
  try {
    await create(idempotencyRecord(key, result, ctx.clock.wallNow()));
    return result;
  } catch (err) {
    const first = await replayed<T>(ctx, key);
    if (first !== undefined) return first;
    throw err;
  }
}
