import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import type { Worker } from "node:worker_threads";
import type BetterSqlite3 from "better-sqlite3";

/**
 * Checkpoints a WAL-mode SQLite database on a worker thread, so the thread that writes never
 * waits for one.
 *
 * Why: by default SQLite checkpoints inside the commit that pushes the WAL past 1,000 pages. That
 * commit then fsyncs the WAL, copies its pages into the database file and fsyncs that too: tens
 * of ms on a busy disk, over 100 ms at times, during which the writer's event loop is held. On the
 * agent that is a device command starting late; on the coordinator, dispatches held back.
 *
 * How: the writer's own connection stops checkpointing (`wal_autocheckpoint = 0`). After enough
 * writes it asks a worker thread, which holds a second connection to the same file, for a PASSIVE
 * checkpoint: the fsyncs and the copying happen there while the writer goes on appending to the
 * WAL. A checkpoint that runs beside the writer can only copy what was committed when it began,
 * and SQLite starts the WAL over from its beginning only when every frame has been copied. So once
 * the WAL is long (`restartFrames`), the writer copies the few frames written during the worker's
 * pass itself, which lets its next commit start the WAL over; that costs it a small copy and its
 * syncs of a few pages instead of the whole checkpoint.
 *
 * The worker is started on the first request and stops after `idleMs` without one, so a device
 * that writes rarely does not keep a second thread (and its memory) for nothing. When no worker
 * can run (better-sqlite3 cannot be loaded on a thread here, or the worker fails), the connection
 * goes back to SQLite's own checkpoints, so the WAL never grows without bound.
 */
export interface WalCheckpointOptions {
  /** The database file (opened by the writer in WAL mode). */
  path: string;
  /** better-sqlite3's native addon, where it is not found in node_modules (a bundled agent). */
  nativeBinding?: string | undefined;
  /**
   * URL of a module the worker imports better-sqlite3's Database class from (its default export,
   * or an export named `Database`). @default better-sqlite3 as node_modules resolves it
   */
  sqliteModule?: string | undefined;
  /** The writer's `synchronous` setting: the worker's checkpoints sync as it would. */
  synchronous: "NORMAL" | "FULL";
  /** Commits between two checkpoint requests. @default 64 */
  everyWrites?: number;
  /** …and at least this long between them, ms. @default 200 */
  minIntervalMs?: number;
  /** A WAL this long (frames) is started over after the worker's pass. @default 4096 */
  restartFrames?: number;
  /** The worker stops after this long without a request, ms. @default 30_000 */
  idleMs?: number;
  log?: (level: "debug" | "warn", message: string) => void;
}

/** What one checkpoint did, for tests and figures. */
export interface CheckpointResult {
  /** Frames in the WAL, and how many of them are now in the database file. */
  log: number;
  checkpointed: number;
  /** Time the worker spent in the checkpoint, ms. */
  ms: number;
  /** The writer copied the rest itself so the WAL starts over. */
  finishedInline: boolean;
}

/**
 * Set on the checkpoint thread before it imports `sqliteModule`: an agent bundle's entry, which
 * is that module there, must not start an agent in it. A global, not `isMainThread`: loading
 * node:worker_threads costs every process about 1.6 MB of RSS, and most never start a thread.
 */
const WORKER_FLAG = "ax.walCheckpointThread";

/** True on the checkpoint thread (see WORKER_FLAG). */
export function onCheckpointThread(): boolean {
  return (globalThis as Record<symbol, unknown>)[Symbol.for(WORKER_FLAG)] === true;
}

/**
 * The worker: one connection, a PASSIVE checkpoint per request. It runs as an ES module in a
 * data: URL made from this function's text (WORKER_SOURCE), so it uses nothing of this module:
 * only what it imports itself. As a function, not a string, the bundler minifies it with the
 * rest of the agent.
 *
 * A PASSIVE checkpoint that cannot catch up with the writer leaves the pages it copied in the
 * OS's cache: only one that copies the whole WAL syncs the database file, and under steady
 * writes that is the writer's own, which starts the WAL over. It then paid for every page the
 * thread had copied since the last sync (up to 135 ms held on an agent at 2,000 fires/s). So when
 * the WAL is long enough for the writer to finish it, this thread syncs the file first (an
 * fdatasync through any descriptor writes the file's pages out), makes a second pass for what
 * came in meanwhile, and syncs again: the writer is left the last few frames. Syncing only then,
 * not after every pass, lets a page the passes rewrite go to disk once per WAL, as before.
 */
async function checkpointThread(
  { closeSync, fdatasyncSync, openSync }: typeof import("node:fs"),
  { parentPort, workerData }: typeof import("node:worker_threads"),
  load: (url: string) => Promise<Record<string, unknown>>,
  flag: string,
): Promise<void> {
  (globalThis as Record<symbol, unknown>)[Symbol.for(flag)] = true;
  const port = parentPort;
  if (!port) return;
  const m = await load(workerData.sqliteModule);
  const Database = (m.Database ?? m.default) as typeof import("better-sqlite3");
  const db = new Database(workerData.path, {
    fileMustExist: true,
    ...(workerData.nativeBinding ? { nativeBinding: workerData.nativeBinding } : {}),
  });
  db.pragma(`synchronous = ${workerData.synchronous}`);
  let dbFd: number | undefined;
  try {
    dbFd = openSync(workerData.path, "r+");
  } catch {
    dbFd = undefined;
  }
  const syncFile = () => {
    if (dbFd === undefined) return;
    try {
      fdatasyncSync(dbFd);
    } catch {
      dbFd = undefined;
    }
  };
  const pass = () =>
    (db.pragma("wal_checkpoint(PASSIVE)") as { log: number; checkpointed: number }[])[0] ?? {
      log: 0,
      checkpointed: 0,
    };
  port.on("message", (msg: unknown) => {
    if (msg === "close") {
      if (dbFd !== undefined) closeSync(dbFd);
      db.close();
      port.close();
      return;
    }
    const started = performance.now();
    try {
      let r = pass();
      if (r.log >= workerData.restartFrames) {
        syncFile();
        r = pass();
        syncFile();
      }
      port.postMessage({
        log: r.log,
        checkpointed: r.checkpointed,
        ms: performance.now() - started,
      });
    } catch (err) {
      port.postMessage({ error: String(err instanceof Error && err.message ? err.message : err) });
    }
  });
  port.postMessage({ ready: true });
}

// Its imports are the module's own: a test runner rewrites an import() in the function's text.
const WORKER_SOURCE = `import*as f from"node:fs";import*as w from"node:worker_threads";(${checkpointThread})(f,w,(u)=>import(u),${JSON.stringify(WORKER_FLAG)});`;

const WORKER_URL = new URL(`data:text/javascript,${encodeURIComponent(WORKER_SOURCE)}`);

/** better-sqlite3 as node_modules resolves it from here, or undefined (a bundle has none). */
function defaultSqliteModule(): string | undefined {
  try {
    return pathToFileURL(createRequire(import.meta.url).resolve("better-sqlite3")).href;
  } catch {
    return undefined;
  }
}

type WorkerReply =
  | { ready: true }
  | { log: number; checkpointed: number; ms: number }
  | { error: string };

export class WalCheckpointer {
  private readonly everyWrites: number;
  private readonly minIntervalMs: number;
  private readonly restartFrames: number;
  private readonly idleMs: number;
  private readonly sqliteModule: string | undefined;
  private worker: Worker | undefined;
  private writes = 0;
  private lastRequest = Number.NEGATIVE_INFINITY;
  private inFlight = false;
  private idleTimer: NodeJS.Timeout | undefined;
  private disabled = false;
  private closed = false;
  private readonly waiters: ((r: CheckpointResult) => void)[] = [];
  /** Checkpoints done by the worker, and how many the writer finished. */
  readonly stats = {
    checkpoints: 0,
    finishedInline: 0,
    workerStarts: 0,
    /** Time the writer spent finishing checkpoints itself, in all and at most once, ms. */
    inlineMs: 0,
    inlineMaxMs: 0,
  };

  constructor(
    private readonly db: BetterSqlite3.Database,
    private readonly o: WalCheckpointOptions,
  ) {
    this.everyWrites = o.everyWrites ?? 64;
    this.minIntervalMs = o.minIntervalMs ?? 200;
    this.restartFrames = o.restartFrames ?? 4096;
    this.idleMs = o.idleMs ?? 30_000;
    this.sqliteModule = o.sqliteModule ?? defaultSqliteModule();
    if (this.sqliteModule === undefined) {
      this.fallBack("better-sqlite3 cannot be loaded on a worker thread here");
      return;
    }
    db.pragma("wal_autocheckpoint = 0");
    // When the WAL is started over, a file grown past this is cut back, so a burst that outran
    // the worker does not keep its disk space.
    const pageSize = db.pragma("page_size", { simple: true }) as number;
    db.pragma(`journal_size_limit = ${2 * this.restartFrames * pageSize}`);
  }

  /** True while checkpoints run on the worker; false once SQLite checkpoints inline. */
  get offThread(): boolean {
    return !this.disabled;
  }

  /** Call after each commit of the writer. */
  wrote(): void {
    if (this.disabled || this.closed) return;
    if (++this.writes < this.everyWrites || this.inFlight) return;
    const now = performance.now();
    if (now - this.lastRequest < this.minIntervalMs) return;
    this.writes = 0;
    this.lastRequest = now;
    this.request();
  }

  /** Asks for a checkpoint now; resolves with what it did (tests, and a clean stop). */
  checkpoint(): Promise<CheckpointResult> {
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      if (this.disabled || this.closed) {
        this.settle(this.inline());
        return;
      }
      if (!this.inFlight) this.request();
    });
  }

  private request(): void {
    this.inFlight = true;
    if (this.idleTimer !== undefined) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const worker = this.worker ?? this.startWorker();
    worker?.postMessage("checkpoint");
  }

  private startWorker(): Worker | undefined {
    let worker: Worker;
    try {
      // Loaded on first use, not at import: see WORKER_FLAG.
      const { Worker } = createRequire(import.meta.url)(
        "node:worker_threads",
      ) as typeof import("node:worker_threads");
      worker = new Worker(WORKER_URL, {
        workerData: {
          path: this.o.path,
          nativeBinding: this.o.nativeBinding,
          sqliteModule: this.sqliteModule,
          synchronous: this.o.synchronous,
          restartFrames: this.restartFrames,
        },
        // A checkpointer needs little: keep the thread's heap small on a device.
        resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 2 },
        stdout: false,
        stderr: false,
      });
    } catch (err) {
      this.fallBack(`the checkpoint thread did not start: ${(err as Error).message}`);
      return undefined;
    }
    this.stats.workerStarts++;
    // The writer's process must be free to exit while the thread idles.
    worker.unref();
    worker.on("message", (m: WorkerReply) => this.onReply(worker, m));
    worker.on("error", (err) => {
      if (this.worker === worker) this.fallBack(`the checkpoint thread failed: ${err.message}`);
    });
    worker.on("exit", () => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      // Ended while a request was out: no reply will come.
      if (this.inFlight) this.fallBack("the checkpoint thread ended unexpectedly");
    });
    this.worker = worker;
    return worker;
  }

  private onReply(worker: Worker, m: WorkerReply): void {
    if (this.worker !== worker || "ready" in m) return;
    this.inFlight = false;
    if ("error" in m) {
      this.fallBack(`checkpoint on the thread failed: ${m.error}`);
      return;
    }
    this.stats.checkpoints++;
    let finishedInline = false;
    if (!this.closed && m.log >= this.restartFrames) {
      // Copy what was written during the worker's pass, so the next commit starts the WAL over.
      const { ms } = this.inline();
      finishedInline = true;
      this.stats.finishedInline++;
      this.stats.inlineMs += ms;
      this.stats.inlineMaxMs = Math.max(this.stats.inlineMaxMs, ms);
    }
    this.settle({ log: m.log, checkpointed: m.checkpointed, ms: m.ms, finishedInline });
    if (this.closed) return;
    this.idleTimer = setTimeout(() => this.stopWorker(), this.idleMs);
    this.idleTimer.unref();
  }

  /** A PASSIVE checkpoint on the writer's own connection. */
  private inline(): CheckpointResult {
    const started = performance.now();
    try {
      const [r] = this.db.pragma("wal_checkpoint(PASSIVE)") as {
        log: number;
        checkpointed: number;
      }[];
      return {
        log: r?.log ?? 0,
        checkpointed: r?.checkpointed ?? 0,
        ms: performance.now() - started,
        finishedInline: true,
      };
    } catch (err) {
      this.o.log?.("warn", `WAL checkpoint failed: ${(err as Error).message}`);
      return { log: -1, checkpointed: -1, ms: performance.now() - started, finishedInline: true };
    }
  }

  private settle(r: CheckpointResult): void {
    for (const resolve of this.waiters.splice(0)) resolve(r);
  }

  /** Back to SQLite's own checkpoints inside commits (its default of 1,000 pages). */
  private fallBack(why: string): void {
    if (!this.disabled) this.o.log?.("warn", `${why}; checkpointing inline`);
    this.disabled = true;
    this.inFlight = false;
    this.stopWorker();
    if (this.db.open) this.db.pragma("wal_autocheckpoint = 1000");
    if (this.waiters.length > 0 && this.db.open) this.settle(this.inline());
  }

  private stopWorker(): void {
    if (this.idleTimer !== undefined) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const worker = this.worker;
    if (!worker) return;
    this.worker = undefined;
    // A pass still running ends first: the worker handles "close" after it.
    worker.postMessage("close");
  }

  /** Stops the worker (it closes its connection after any pass in progress). */
  close(): void {
    this.closed = true;
    this.stopWorker();
    this.settle({ log: -1, checkpointed: -1, ms: 0, finishedInline: false });
  }
}
