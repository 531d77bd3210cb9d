import type { Pool, PoolClient, QueryResultRow } from "pg";
import { AxError } from "../../../shared/errors.js";

/** What a store operation runs its statements on: a client in a transaction, or the pool. */
export interface Queryable {
  query<R extends QueryResultRow = QueryResultRow>(config: {
    text: string;
    values?: unknown[];
    name?: string;
  }): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** A statement, prepared by name on each connection when it has one (the hot paths). */
export interface Statement {
  name?: string;
  text: string;
}

/** Runs `st` with `values` on `q` and returns its rows. */
export async function run<R extends QueryResultRow = QueryResultRow>(
  q: Queryable,
  st: Statement | string,
  values: unknown[] = [],
): Promise<{ rows: R[]; rowCount: number | null }> {
  const s = typeof st === "string" ? { text: st } : st;
  return q.query<R>(s.name === undefined ? { text: s.text, values } : { ...s, values });
}

/** The SQLSTATEs after which a transaction was rolled back whole and may simply run again. */
const RETRIED_SQLSTATES = new Set([
  "40001", // serialization_failure
  "40P01", // deadlock_detected
]);

/**
 * Unique keys a transaction computes from what it read (the next timeline or history seq, the
 * next job version): two writers computing the same one at once collide, and the later one
 * succeeds when it runs again on a fresh read. Any other unique key is a real conflict.
 */
const RETRIED_UNIQUE_KEYS = new Set(["timeline_pkey", "job_history_pkey", "job_versions_pkey"]);

/** Node's socket errors that mean the connection to the server is gone or never came. */
const SOCKET_ERRORS = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** True for an error after which running the whole transaction again may succeed. */
export function isRetriedTxError(err: unknown): boolean {
  const code = codeOf(err);
  if (code === undefined) return false;
  if (RETRIED_SQLSTATES.has(code)) return true;
  const constraint = (err as { constraint?: unknown }).constraint;
  return code === "23505" && typeof constraint === "string" && RETRIED_UNIQUE_KEYS.has(constraint);
}

/**
 * True when the connection failed (refused, reset, the server shut down): trying again later
 * may succeed. SQLSTATE class 08 is connection exceptions; 57P01-57P03 the server going away.
 */
export function isConnectionError(err: unknown): boolean {
  const code = codeOf(err);
  if (code !== undefined) {
    if (SOCKET_ERRORS.has(code) || code.startsWith("08")) return true;
    if (code === "57P01" || code === "57P02" || code === "57P03") return true;
  }
  const message = (err as Error | null)?.message ?? "";
  return /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
    message,
  );
}

/**
 * Translates a pg error into an AxError, keeping AxErrors as they are: a transaction the
 * database kept refusing is AX_STORE_BUSY (retryable), anything else AX_STORE_FAILED with the
 * pg error as `cause` (retryable when the connection failed), its message naming the operation.
 */
export function translatePgError(what: string, err: unknown, attempts = 1): AxError {
  if (err instanceof AxError) return err;
  const message = (err as Error | null)?.message ?? String(err);
  const sqlstate = codeOf(err);
  if (isRetriedTxError(err)) {
    return new AxError(
      "AX_STORE_BUSY",
      `store: ${what} failed: the database refused it ${attempts} times (${message})`,
      { cause: err, retryable: true, context: { sqlstate, attempts } },
    );
  }
  return new AxError("AX_STORE_FAILED", `store: ${what} failed: ${message}`, {
    cause: err,
    retryable: isConnectionError(err),
    ...(sqlstate === undefined ? {} : { context: { sqlstate } }),
  });
}

/** How {@link transaction} runs and retries. */
export interface TransactionOptions {
  /** @default "read committed" */
  isolation?: "read committed" | "repeatable read" | "serializable";
  /** Runs on the pool without BEGIN/COMMIT: for one statement, which is a transaction alone. */
  single?: boolean;
  /** Tries in all, counting the first. @default 5 */
  attempts?: number;
  /**
   * The query string that ends the transaction, in one round trip. @default "COMMIT" (a joined
   * store's writes check the membership's fence in it: membership.ts, fenceAndCommit)
   */
  commit?: string;
  /** The port's own error for a database error (a name taken), before the generic translation. */
  mapError?: (err: unknown) => AxError | undefined;
  /** Waits between tries. @default a timer */
  sleep?: (ms: number) => Promise<void>;
}

/** Default tries of a transaction. */
export const TX_ATTEMPTS = 5;

/** The wait before try `attempt + 1`: 5, 10, 20, 40 ms, each jittered to half to one and a half. */
export function retryDelayMs(attempt: number, random: () => number = Math.random): number {
  return 5 * 2 ** (attempt - 1) * (0.5 + random());
}

const timerSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs `fn` in one transaction on a client of `pool`, committing when it returns and rolling back
 * when it throws. A serialization failure, a deadlock, or a collision on a computed key (see
 * {@link isRetriedTxError}) rolls back and runs the whole of `fn` again after a short jittered
 * wait, up to `attempts` tries; then it is AX_STORE_BUSY. Other errors are translated by
 * {@link translatePgError}; AxErrors `fn` throws pass through.
 */
export async function transaction<T>(
  pool: Pool,
  what: string,
  fn: (q: Queryable) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  const attempts = options.attempts ?? TX_ATTEMPTS;
  const sleep = options.sleep ?? timerSleep;
  const begin =
    options.isolation === undefined || options.isolation === "read committed"
      ? "BEGIN"
      : `BEGIN ISOLATION LEVEL ${options.isolation.toUpperCase()}`;
  for (let attempt = 1; ; attempt++) {
    try {
      return options.single ? await fn(pool) : await once(pool, begin, fn, options);
    } catch (err) {
      if (!(err instanceof AxError) && isRetriedTxError(err) && attempt < attempts) {
        await sleep(retryDelayMs(attempt));
        continue;
      }
      throw options.mapError?.(err) ?? translatePgError(what, err, attempt);
    }
  }
}

/** Pooled connections that emitted 'error' (the server ended them): never handed out again. */
export const brokenClients = new WeakSet<object>();

/** One try of a transaction on a pooled client; the client is dropped if it broke. */
async function once<T>(
  pool: Pool,
  begin: string,
  fn: (q: Queryable) => Promise<T>,
  options: TransactionOptions,
): Promise<T> {
  const client: PoolClient = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query(begin);
    const result = await fn(client);
    await client.query(options.commit ?? "COMMIT");
    return result;
  } catch (err) {
    try {
      await client.query("ROLLBACK");
    } catch (rollbackErr) {
      // The connection is gone or unusable: the pool must not hand it out again.
      broken = rollbackErr as Error;
    }
    throw err;
  } finally {
    client.release(
      broken ?? (brokenClients.has(client) ? new Error("the connection broke") : undefined),
    );
  }
}
