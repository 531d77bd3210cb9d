import { isAbsolute } from "node:path";
import * as z from "zod/mini";
import { type Handler, HandlerFailure } from "../registry.js";

/** A handler that holds a resource (a connection) and must be closed when the agent stops. */
export interface ClosableHandler<P> {
  handler: Handler<P>;
  /** Releases what the handler holds; later runs fail. Safe to call more than once. */
  close(): Promise<void>;
}

/** An absolute file-system path without NUL bytes (the kernel would cut it there). */
export const absolutePath = z
  .string()
  .check(z.refine((p) => isAbsolute(p) && !p.includes("\0"), "must be an absolute path"));

/** `text` cut to its last `max` characters, marked with a leading ellipsis when cut. */
export function tail(text: string, max: number): string {
  return text.length > max ? `…${text.slice(text.length - max)}` : text;
}

/** `text` cut to its first `max` characters, marked with a trailing ellipsis when cut. */
export function head(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** The error's message, or its string form for a non-Error throw. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A URL as it may appear in an error message: without user, password, query or fragment, since
 * messages are stored by the coordinator and shown to operators.
 */
export function displayUrl(raw: string | URL): string {
  try {
    const u = new URL(raw);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return "(invalid URL)";
  }
}

/** The failure a handler reports when its execution is cancelled or timed out (retryable). */
export function abortedFailure(handler: string, reason: unknown): HandlerFailure {
  return new HandlerFailure(`${handler}: aborted`, { cause: reason });
}
