/**
 * A POSIX ustar archive writer and reader, gzip-compressed with node:zlib: enough for a bundle's
 * flat folder of regular files, and no dependency (POSIX.1-2001 "pax" format, ustar header).
 */
import { gunzipSync, gzipSync } from "node:zlib";

export interface TarEntry {
  /** Path inside the archive, `/`-separated; a trailing `/` makes a directory. */
  name: string;
  /** File contents; empty for a directory. */
  data: Buffer;
  /** Permission bits. @default 0o644 for files, 0o755 for directories */
  mode?: number;
}

const BLOCK = 512;

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

function field(h: Buffer, offset: number, length: number): string {
  const raw = h.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString("utf8");
}

/**
 * The regular files and directories in a gzipped tar. Throws on a damaged archive (bad gzip, a
 * header checksum that does not match, a file that runs past the end).
 */
export function readTarGz(gz: Buffer): TarEntry[] {
  const tar = gunzipSync(gz);
  const out: TarEntry[] = [];
  let offset = 0;
  while (offset + BLOCK <= tar.length) {
    const h = tar.subarray(offset, offset + BLOCK);
    if (h.every((b) => b === 0)) break;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : (h[i] as number);
    const stored = Number.parseInt(field(h, 148, 8).trim(), 8);
    if (stored !== sum) throw new Error(`tar: bad header checksum at byte ${offset}`);
    const size = Number.parseInt(field(h, 124, 12).trim() || "0", 8);
    const type = String.fromCharCode(h[156] as number);
    const prefix = field(h, 345, 155);
    const name = prefix ? `${prefix}/${field(h, 0, 100)}` : field(h, 0, 100);
    const start = offset + BLOCK;
    if (start + size > tar.length) throw new Error(`tar: ${name} runs past the end of the archive`);
    const data = Buffer.from(tar.subarray(start, start + size));
    const mode = Number.parseInt(field(h, 100, 8).trim() || "0", 8);
    if (type === "0" || type === "\0") out.push({ name, data, mode });
    else if (type === "5") out.push({ name: name.endsWith("/") ? name : `${name}/`, data, mode });
    offset = start + Math.ceil(size / BLOCK) * BLOCK;
  }
  return out;
}
