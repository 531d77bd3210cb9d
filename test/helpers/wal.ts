import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import Database from "better-sqlite3";

/** What a SQLite WAL file holds: frames (one page each) and how many of them end a commit. */
export interface WalStats {
  frames: number;
  commits: number;
}

/**
 * Counts the valid frames of a WAL file and the commits among them, from the file format
 * (sqlite.org/fileformat2.html#walformat): a 32-byte header, then frames of a 24-byte header and
 * one page. A frame's second word is the database size after a commit, and zero for the other
 * frames of a transaction; frames whose salt differs from the header's are left over from before
 * a reset and are not counted. A real measure of what a workload wrote, not a count of calls.
 */
export function walStats(walPath: string): WalStats {
  const fd = openSync(walPath, "r");
  try {
    const size = fstatSync(fd).size;
    if (size < 32) return { frames: 0, commits: 0 };
    const header = Buffer.alloc(32);
    readSync(fd, header, 0, 32, 0);
    const pageSize = header.readUInt32BE(8);
    const salt1 = header.readUInt32BE(16);
    const salt2 = header.readUInt32BE(20);
    const frameHeader = Buffer.alloc(24);
    let frames = 0;
    let commits = 0;
    for (let at = 32; at + 24 + pageSize <= size; at += 24 + pageSize) {
      readSync(fd, frameHeader, 0, 24, at);
      if (frameHeader.readUInt32BE(8) !== salt1 || frameHeader.readUInt32BE(12) !== salt2) break;
      frames++;
      if (frameHeader.readUInt32BE(4) !== 0) commits++;
    }
    return { frames, commits };
  } finally {
    closeSync(fd);
  }
}

/**
 * Keeps a SQLite file's WAL from being reset while a workload runs, so {@link walStats} sees
 * every frame it wrote: a second connection holds a read transaction open, and while a reader
 * uses the WAL no checkpoint may start it over (frames are only appended). Returns the release.
 */
export function holdWal(dbPath: string): () => void {
  const reader = new Database(dbPath, { readonly: true });
  reader.exec("BEGIN");
  reader.prepare("SELECT COUNT(*) FROM sqlite_master").get();
  return () => {
    if (reader.inTransaction) reader.exec("COMMIT");
    reader.close();
  };
}
