import {
  closeSync,
  ftruncateSync,
  openSync,
  readFileSync,
  renameSync,
  writeFileSync,
  writeSync,
} from "node:fs";

/**
 * The ids of commands whose handlers were launched, appended to a file beside the journal
 * (`<journal>.launches`) after a start commits and before its handler runs. A command found
 * `running` after a crash whose id is not here never reached its handler (interrupted
 * `before_handler`); one that is may have done its work (`in_handler`).
 *
 * Why a plain file and not the journal: a launch mark in SQLite would be one more commit per
 * start, which is what the commit queue exists to avoid (two commits per command made the WAL
 * checkpoint several times a second). An append without fsync costs a few µs and survives a crash
 * of the process; a power loss may lose it, which the journal detects (Journal.sameBoot) and then
 * reads every running command as `in_handler`. A stale id (a row id reused after a purge) errs the
 * same, safe way. The file is emptied after recovery and rewritten with only the running
 * commands' ids once it has grown (compact), so it stays small under any load.
 */
export class LaunchLog {
  private fd: number | undefined;
  private readonly memory = new Set<number>();
  private written = 0;

  /** `path` undefined: kept in memory (a `:memory:` journal). */
  constructor(private readonly path: string | undefined) {
    if (path !== undefined) this.fd = openSync(path, "a");
  }

  /** Marks commands launched; returns once the marks are in the file (not fsynced). */
  mark(ids: readonly number[]): void {
    if (ids.length === 0) return;
    if (this.fd === undefined) {
      for (const id of ids) this.memory.add(id);
      return;
    }
    const text = `${ids.join("\n")}\n`;
    this.written += writeSync(this.fd, text);
  }

  /** Every id marked since the file was last emptied. */
  read(): Set<number> {
    if (this.path === undefined) return new Set(this.memory);
    const out = new Set<number>();
    for (const line of readFileSync(this.path, "utf8").split("\n")) {
      const id = Number(line);
      if (line !== "" && Number.isInteger(id)) out.add(id);
    }
    return out;
  }

  /** Bytes appended since the last {@link clear}. */
  get size(): number {
    return this.written;
  }

  /** Empties the log: call only when no command is running (or all were settled). */
  clear(): void {
    this.memory.clear();
    this.written = 0;
    if (this.fd !== undefined) ftruncateSync(this.fd, 0);
  }

  /**
   * Rewrites the log to hold only `keep` (the commands running now). Written beside it and
   * renamed over it, so a crash at any moment leaves either the old log or the new one, and a
   * running command never loses its mark.
   */
  compact(keep: readonly number[]): void {
    if (this.path === undefined) {
      const kept = keep.filter((id) => this.memory.has(id));
      this.memory.clear();
      for (const id of kept) this.memory.add(id);
      return;
    }
    const text = keep.length === 0 ? "" : `${keep.join("\n")}\n`;
    const temp = `${this.path}.tmp`;
    writeFileSync(temp, text);
    renameSync(temp, this.path);
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = openSync(this.path, "a");
    this.written = Buffer.byteLength(text);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
