import type Database from "better-sqlite3";
import type { DefinitionCache, ExecutionCache } from "./caches.js";
import type { GroupCommit } from "./group-commit.js";
import type { Statements } from "./statements.js";

/**
 * What the SQLite store's parts share: the connection, its prepared statements, the writer every
 * write goes through, the caches and the settings. One per {@link SqliteStore}; the parts
 * (jobs.ts, executions.ts, …) are functions of it.
 */
export interface StoreContext {
  readonly db: Database.Database;
  readonly statements: Statements;
  readonly writer: GroupCommit;
  readonly executions: ExecutionCache;
  readonly definitions: DefinitionCache;
  /** Cap on stored error text and timeline details, UTF-8 bytes. */
  readonly maxErrorTextBytes: number;
  /** The store's clock: of writes that take no time of their caller's, leases and claims. */
  readonly nowMs: () => number;
}
