/**
 * Reading a POSIX ustar archive (shared/tar.ts writes them): kept apart from the gzip layer, so
 * the agent, which reads one only while it installs an update, loads node:zlib only then.
 */
import type { TarEntry } from "./tar.js";

/** ustar block size. */
export const BLOCK = 512;

function field(h: Buffer, offset: number, length: number): string {
  const raw = h.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString("utf8");
}

/**
 * The regular files and directories in a tar. Throws on a damaged archive (a header checksum
 * that does not match, a file that runs past the end).
 */
export function readTar(tar: Buffer): TarEntry[] {
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
