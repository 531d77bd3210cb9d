/**
 * A POSIX ustar archive writer and reader, gzip-compressed with node:zlib: enough for a bundle's
 * flat folder of regular files, and no dependency (POSIX.1-2001 "pax" format, ustar header).
 */
import { gunzipSync, gzipSync } from "node:zlib";
import { BLOCK, readTar } from "./tar-read.js";

export interface TarEntry {
  /** Path inside the archive, `/`-separated; a trailing `/` makes a directory. */
  name: string;
  /** File contents; empty for a directory. */
  data: Buffer;
  /** Permission bits. @default 0o644 for files, 0o755 for directories */
  mode?: number;
}

function octal(value: number, width: number): string {
  // width - 1 digits and a NUL, as ustar writers do.
  return `${value.toString(8).padStart(width - 1, "0")}\0`;
}

function header(entry: TarEntry, mtimeS: number): Buffer {
  const dir = entry.name.endsWith("/");
  const h = Buffer.alloc(BLOCK);
  const name = Buffer.from(entry.name, "utf8");
  if (name.length > 100) throw new RangeError(`tar: path longer than 100 bytes: ${entry.name}`);
  name.copy(h, 0);
  h.write(octal(entry.mode ?? (dir ? 0o755 : 0o644), 8), 100, "ascii");
  h.write(octal(0, 8), 108, "ascii"); // uid
  h.write(octal(0, 8), 116, "ascii"); // gid
  h.write(octal(dir ? 0 : entry.data.length, 12), 124, "ascii");
  h.write(octal(Math.floor(mtimeS), 12), 136, "ascii");
  h.write("        ", 148, "ascii"); // checksum counts as spaces while it is computed
  h.write(dir ? "5" : "0", 156, "ascii");
  h.write("ustar\0", 257, "ascii");
  h.write("00", 263, "ascii");
  h.write("root", 265, "ascii");
  h.write("root", 297, "ascii");
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
  return h;
}

/** A gzipped tar of `entries`, every entry stamped with `mtime`; the same input gives the same bytes. */
export function tarGz(entries: readonly TarEntry[], mtime: Date): Buffer {
  const parts: Buffer[] = [];
  const mtimeS = mtime.getTime() / 1000;
  for (const e of entries) {
    parts.push(header(e, mtimeS));
    if (!e.name.endsWith("/")) {
      parts.push(e.data);
      const pad = (BLOCK - (e.data.length % BLOCK)) % BLOCK;
      if (pad > 0) parts.push(Buffer.alloc(pad));
    }
  }
  parts.push(Buffer.alloc(BLOCK * 2)); // end of archive: two zero blocks
  return gzipSync(Buffer.concat(parts), { level: 9 });
}

/**
 * The regular files and directories in a gzipped tar. Throws on a damaged archive (bad gzip, a
 * header checksum that does not match, a file that runs past the end).
 */
export function readTarGz(gz: Buffer): TarEntry[] {
  return readTar(gunzipSync(gz));
}
