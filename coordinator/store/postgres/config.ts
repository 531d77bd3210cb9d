import pg from "pg";
import { AxError } from "../../../shared/errors.js";
import { DEFAULT_MAX_ERROR_TEXT_BYTES } from "../stored-text.js";

/** How to open a {@link PgStore}: what the user gives. */
export interface PgStoreOptions {
  /** The database, as a `postgres://` connection string. */
  url: string;
  /**
   * The schema that holds the store's tables, created if missing: several stores (tests, two
   * fleets) can share one database. A lowercase SQL identifier of at most 55 characters.
   * @default the connection's current schema (normally `public`)
   */
  schema?: string;
  /** Connections in the pool, besides the one `watchWork` listens on. @default 10 */
  poolMax?: number;
  /** The clock of writes that take no time of their caller's (a deletion without `at`, a migration). @default Date.now */
  now?: () => number;
  /**
   * Cap, in UTF-8 bytes, on an execution's stored message, an alert's last error and a timeline
   * entry's detail JSON. @default 2048
   */
  maxErrorTextBytes?: number;
  /**
   * How long a membership call (join, renew, the members, the clock) may wait for a connection
   * and then for its answer, ms. A coordinator passes a third of its lease: a renewal stuck on a
   * dead connection must give way to the next one before the lease lapses, not after a minute.
   * @default 10000
   */
  membershipTimeoutMs?: number;
}

/** {@link PgStoreOptions} resolved: defaults applied, checked. */
export interface PgStoreConfig {
  url: string;
  schema: string | undefined;
  poolMax: number;
  now: () => number;
  maxErrorTextBytes: number;
  membershipTimeoutMs: number;
}

/** A lowercase identifier that needs no quoting and leaves room for the `ax_work_` channel prefix. */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,54}$/;

function invalid(field: string, problem: string, value: unknown): AxError {
  return new AxError("AX_CONFIG_INVALID", `store: ${field} ${problem}`, {
    context: { field, value },
  });
}

/** Applies the defaults and checks each option, naming the field and the problem. */
export function resolvePgStoreOptions(options: PgStoreOptions): PgStoreConfig {
  if (typeof options.url !== "string" || !/^postgres(ql)?:\/\//.test(options.url)) {
    throw invalid("url", "must be a postgres:// connection string", "(not shown)");
  }
  if (options.schema !== undefined && !SCHEMA_NAME.test(options.schema)) {
    throw invalid(
      "schema",
      `"${options.schema}" must be a lowercase SQL identifier (a-z, 0-9, _; not starting with a digit) of at most 55 characters`,
      options.schema,
    );
  }
  const poolMax = options.poolMax ?? 10;
  if (!Number.isInteger(poolMax) || poolMax < 1) {
    throw invalid("poolMax", `must be a whole number of at least 1, not ${poolMax}`, poolMax);
  }
  const maxErrorTextBytes = options.maxErrorTextBytes ?? DEFAULT_MAX_ERROR_TEXT_BYTES;
  if (!Number.isInteger(maxErrorTextBytes) || maxErrorTextBytes < 0) {
    throw invalid(
      "maxErrorTextBytes",
      `must be a whole number of bytes, not ${maxErrorTextBytes}`,
      maxErrorTextBytes,
    );
  }
  const membershipTimeoutMs = options.membershipTimeoutMs ?? 10_000;
  if (!Number.isInteger(membershipTimeoutMs) || membershipTimeoutMs < 1) {
    throw invalid(
      "membershipTimeoutMs",
      `must be a whole number of ms of at least 1, not ${membershipTimeoutMs}`,
      membershipTimeoutMs,
    );
  }
  return {
    url: options.url,
    schema: options.schema,
    poolMax,
    now: options.now ?? Date.now,
    maxErrorTextBytes,
    membershipTimeoutMs,
  };
}

/** OID of int8 (bigint): counts, counters, database-clock times. */
const INT8_OID = 20;

/**
 * The store's own type parsers: int8 as a JS number (every int8 it reads is far below 2^53:
 * counts, sequence numbers, ms). Set on its pool and listener only, never on the global
 * `pg.types`, so other users of pg in the process are untouched.
 */
const storeTypes: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === INT8_OID && format !== "binary"
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig["getTypeParser"],
};

/** The connection settings of the store's pool and its listener. */
export function clientConfig(config: PgStoreConfig): pg.ClientConfig {
  return {
    connectionString: config.url,
    types: storeTypes,
    application_name: "ax-coordinator",
    // A database cut off by a partition answers nothing: connecting gives up after 10 s, and a
    // query after 60 s (no store call takes that long), so the pool and the loops recover once
    // the network is back instead of waiting on dead sockets for ever.
    connectionTimeoutMillis: 10_000,
    query_timeout: 60_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    // The schema is the session's search_path, from connection start: every statement
    // (prepared ones too) resolves its tables there and nowhere else.
    ...(config.schema === undefined ? {} : { options: `-c search_path=${config.schema}` }),
  };
}
