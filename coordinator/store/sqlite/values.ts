import { AxError } from "../../../shared/errors.js";

// What both stores write the same way (error text caps, canonical JSON) lives in stored-text.ts.
export {
  canonicalJson,
  cappedDetailJson as detailJson,
  capUtf8,
  DEFAULT_MAX_ERROR_TEXT_BYTES,
  versionedJson,
} from "../stored-text.js";

/*
 * How the SQLite store turns values into what it stores, and driver errors into AxErrors.
 */

/** Freezes `value` and everything in it; returns it. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** Translates a driver error into an AxError, keeping AxErrors as they are. */
export function wrap<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof AxError) throw err;
    throw new AxError("AX_STORE_FAILED", `store: ${what} failed: ${(err as Error).message}`, {
      cause: err,
      retryable: (err as { code?: string }).code === "SQLITE_BUSY",
    });
  }
}
