/*
 * SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104) in plain TypeScript, for the agent. Why not
 * node:crypto: loading it initialises OpenSSL, which costs an idle agent about 2 MB of RSS
 * against a 50 MB budget (docs/benchmarks.md, "Bundles"); a message MAC over a few hundred bytes
 * costs a few microseconds either way. The coordinator uses node:crypto (coordinator/link/auth.ts);
 * a test checks the two agree on random inputs.
 */

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

const INIT = [
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/** The message schedule, shared: compress never runs re-entrantly. */
const W = new Int32Array(64);

/** An incremental SHA-256, optionally resumed from a state after whole blocks. */
class Sha256 {
  private readonly h: Int32Array;
  private readonly w = W;
  private readonly block = new Uint8Array(64);
  private used = 0;
  private bytes: number;

  constructor(state: ArrayLike<number> = INIT, bytes = 0) {
    this.h = new Int32Array(state);
    this.bytes = bytes;
  }

  /** The chaining state (valid after whole blocks only). */
  state(): Int32Array {
    return new Int32Array(this.h);
  }

  update(data: Uint8Array): this {
    let i = 0;
    this.bytes += data.length;
    if (this.used > 0) {
      const take = Math.min(64 - this.used, data.length);
      this.block.set(data.subarray(0, take), this.used);
      this.used += take;
      i = take;
      if (this.used < 64) return this;
      this.compress(this.block, 0);
      this.used = 0;
    }
    for (; i + 64 <= data.length; i += 64) this.compress(data, i);
    if (i < data.length) {
      this.block.set(data.subarray(i), 0);
      this.used = data.length - i;
    }
    return this;
  }

  digest(): Uint8Array {
    const bits = this.bytes * 8;
    const b = this.block;
    b[this.used++] = 0x80;
    if (this.used > 56) {
      b.fill(0, this.used);
      this.compress(b, 0);
      this.used = 0;
    }
    b.fill(0, this.used, 56);
    // The length in bits, big-endian in the last 8 bytes (messages here are far below 2^53).
    const hi = Math.floor(bits / 0x1_0000_0000);
    const lo = bits >>> 0;
    for (let j = 0; j < 4; j++) {
      b[56 + j] = (hi >>> (24 - 8 * j)) & 0xff;
      b[60 + j] = (lo >>> (24 - 8 * j)) & 0xff;
    }
    this.compress(b, 0);
    const out = new Uint8Array(32);
    for (let j = 0; j < 8; j++) {
      const v = this.h[j] as number;
      out[4 * j] = v >>> 24;
      out[4 * j + 1] = (v >>> 16) & 0xff;
      out[4 * j + 2] = (v >>> 8) & 0xff;
      out[4 * j + 3] = v & 0xff;
    }
    return out;
  }

  private compress(p: Uint8Array, o: number): void {
    const w = this.w;
    for (let t = 0; t < 16; t++) {
      const q = o + 4 * t;
      w[t] =
        ((p[q] as number) << 24) |
        ((p[q + 1] as number) << 16) |
        ((p[q + 2] as number) << 8) |
        (p[q + 3] as number);
    }
    for (let t = 16; t < 64; t++) {
      const x = w[t - 15] as number;
      const y = w[t - 2] as number;
      const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      w[t] = ((w[t - 16] as number) + s0 + (w[t - 7] as number) + s1) | 0;
    }
    const h = this.h;
    let a = h[0] as number;
    let b = h[1] as number;
    let c = h[2] as number;
    let d = h[3] as number;
    let e = h[4] as number;
    let f = h[5] as number;
    let g = h[6] as number;
    let k = h[7] as number;
    for (let t = 0; t < 64; t++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (k + S1 + ch + (K[t] as number) + (w[t] as number)) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (S0 + maj) | 0;
      k = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] = ((h[0] as number) + a) | 0;
    h[1] = ((h[1] as number) + b) | 0;
    h[2] = ((h[2] as number) + c) | 0;
    h[3] = ((h[3] as number) + d) | 0;
    h[4] = ((h[4] as number) + e) | 0;
    h[5] = ((h[5] as number) + f) | 0;
    h[6] = ((h[6] as number) + g) | 0;
    h[7] = ((h[7] as number) + k) | 0;
  }
}

/** SHA-256 of the concatenation of `chunks`. */
export function sha256(...chunks: readonly Uint8Array[]): Uint8Array {
  const s = new Sha256();
  for (const c of chunks) s.update(c);
  return s.digest();
}

/**
 * One HMAC key, prepared: the SHA-256 states after its inner and outer padded blocks, so each
 * message costs two compressions fewer.
 */
export interface HmacKey {
  inner: Int32Array;
  outer: Int32Array;
}

/** Prepares `key` for {@link hmacSha256} (RFC 2104: a key longer than a block is hashed first). */
export function hmacKey(key: Uint8Array): HmacKey {
  const k = new Uint8Array(64);
  k.set(key.length > 64 ? sha256(key) : key);
  const pad = new Uint8Array(64);
  for (let i = 0; i < 64; i++) pad[i] = (k[i] as number) ^ 0x36;
  const inner = new Sha256().update(pad).state();
  for (let i = 0; i < 64; i++) pad[i] = (k[i] as number) ^ 0x5c;
  const outer = new Sha256().update(pad).state();
  return { inner, outer };
}

/** HMAC-SHA256 of the concatenation of `chunks` under a prepared key. */
export function hmacSha256(key: HmacKey, chunks: readonly Uint8Array[]): Uint8Array {
  const s = new Sha256(key.inner, 64);
  for (const c of chunks) s.update(c);
  return new Sha256(key.outer, 64).update(s.digest()).digest();
}

/** True when `a` and `b` are equal, in time that depends only on their lengths. */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] as number);
  return diff === 0;
}
