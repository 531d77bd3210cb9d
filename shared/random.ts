import { closeSync, openSync, readSync } from "node:fs";
import { createRequire } from "node:module";

/**
 * Random bytes from the kernel's CSPRNG (/dev/urandom, what OpenSSL seeds from too), read 4 KiB
 * at a time. Why not node:crypto: loading it initialises OpenSSL, about 2 MiB of RSS, which an
 * agent on a 128 MB board otherwise never needs when its broker is plain mqtt:// (measured:
 * docs/bundles.md, "Memory"). Where /dev/urandom is missing (Windows), node:crypto it is.
 */
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let offset = 0;
let urandom = true;

function fill(buf: Buffer): void {
  if (urandom) {
    try {
      const fd = openSync("/dev/urandom", "r");
      try {
        for (let at = 0; at < buf.length; ) at += readSync(fd, buf, at, buf.length - at, null);
      } finally {
        closeSync(fd);
      }
      return;
    } catch {
      urandom = false;
    }
  }
  const crypto = createRequire(import.meta.url)("node:crypto") as typeof import("node:crypto");
  crypto.randomFillSync(buf);
}

/** `n` cryptographically random bytes (a fresh buffer). */
export function randomBytes(n: number): Buffer {
  if (n > POOL_BYTES) {
    const out = Buffer.allocUnsafe(n);
    fill(out);
    return out;
  }
  if (offset + n > pool.length) {
    pool = Buffer.allocUnsafe(POOL_BYTES);
    fill(pool);
    offset = 0;
  }
  const out = Buffer.from(pool.subarray(offset, offset + n));
  // Handed out once: never again from this pool.
  pool.fill(0, offset, offset + n);
  offset += n;
  return out;
}
