/** How a `SqliteStore` opens its file and groups its writes. */
export interface SqliteStoreOptions {
  /** The database file; `:memory:` for a throwaway store. */
  path: string;
  /**
   * The store's clock, UTC ms: of writes that take no time of their caller's, and of membership
   * leases and claims. @default Date.now
   */
  now?: () => number;
  /**
   * Cap, in UTF-8 bytes, on an execution's stored message and a timeline entry's detail JSON.
   * @default 2048
   */
  maxErrorTextBytes?: number;
  /**
   * Group commit: writes join one open transaction, committed once per turn of the event loop
   * (or every `GROUP_COMMIT_MAX_WRITES` writes), instead of one commit each. Their
   * effects are visible to this store's reads at once and durable at the commit; callers gate
   * whatever tells the outside world about a write behind `SqliteStore.afterCommit`.
   * Only for a store that is the file's sole writer in its thread: a second connection in the
   * same thread would wait on the open transaction's lock while holding the thread.
   * @default false
   */
  groupCommit?: boolean;
  /**
   * Group commit: the least time, in ms, from one commit to the next. A group opened sooner waits
   * for the rest of it (a timer) instead of committing at the end of its loop turn. Under a steady
   * stream of writes each commit then carries many turns' writes: pages that several of them
   * change are written to the WAL once, and a commit's fixed costs are paid less often. After a
   * quiet spell a write still commits at the end of its turn.
   * @default 0
   */
  commitIntervalMs?: number;
  /**
   * Where WAL checkpoints run: "thread" (a worker thread with its own connection, so the fsyncs
   * and copying of a checkpoint never hold up the coordinator's event loop; see
   * shared/wal-checkpoint.ts) or "inline" (inside a commit, as SQLite does by default).
   * @default "inline"
   */
  checkpoint?: "thread" | "inline";
  /**
   * Open an existing store for reading only: a missing file, or one whose schema is not this
   * build's, is refused (AX_STORE_FAILED, AX_STORE_MIGRATION); writes fail with AX_STORE_FAILED.
   * @default false
   */
  readonly?: boolean;
}
