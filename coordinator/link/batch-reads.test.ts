import { once } from "node:events";
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type BatchableSocket, BUSY_READ_BYTES, batchReads } from "./batch-reads.js";

/** A connected loopback pair: `peer` (the server's side) writes, `reader` reads. */
async function pair(): Promise<{ peer: Socket; reader: Socket; server: Server }> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  const accepted = once(server, "connection") as Promise<[Socket]>;
  const reader = connect(address.port, "127.0.0.1");
  await once(reader, "connect");
  const [peer] = await accepted;
  peer.setNoDelay(true);
  return { peer, reader, server };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What the reader receives, each read with the time it came. */
function record(reader: Socket): { reads: { at: number; bytes: number }[]; text: () => string } {
  const reads: { at: number; bytes: number }[] = [];
  const parts: Buffer[] = [];
  reader.on("data", (c: Buffer) => {
    reads.push({ at: performance.now(), bytes: c.byteLength });
    parts.push(c);
  });
  return { reads, text: () => Buffer.concat(parts).toString() };
}

/** Writes `count` small messages `gapMs` apart; resolves with when each was written. */
async function trickle(peer: Socket, count: number, gapMs: number): Promise<number[]> {
  const sent: number[] = [];
  for (let i = 0; i < count; i++) {
    sent.push(performance.now());
    peer.write(`m${i};`);
    await sleep(gapMs);
  }
  return sent;
}

async function until(check: () => boolean, ms = 5_000): Promise<void> {
  const end = performance.now() + ms;
  while (!check() && performance.now() < end) await sleep(2);
  if (!check()) throw new Error("timed out");
}

const expected = (n: number) => Array.from({ length: n }, (_, i) => `m${i};`).join("");

describe("batchReads", () => {
  let open: { peer: Socket; reader: Socket; server: Server } | undefined;
  const close = async () => {
    const p = open;
    open = undefined;
    if (p === undefined) return;
    p.peer.destroy();
    p.reader.destroy();
    await new Promise((r) => p.server.close(r));
  };
  afterEach(close);

  it("reads a trickle in one read per window, losing and reordering nothing", async () => {
    const p = await pair();
    open = p;
    expect(batchReads(p.reader as unknown as BatchableSocket, 100)).toBe(true);
    const got = record(p.reader);
    const sent = await trickle(p.peer, 60, 5);
    await until(() => got.text() === expected(60));
    // 60 messages over about 300 ms: without the window about 60 reads (see the next test);
    // with it, one per 100 ms window and the first at once.
    expect(got.reads.length).toBeLessThanOrEqual(8);
    expect(got.reads.length).toBeGreaterThanOrEqual(3);
    // The first message of a quiet connection is read as it arrives, not a window later.
    expect((got.reads[0]?.at ?? 0) - (sent[0] ?? 0)).toBeLessThan(50);
    // No message waits much longer than a window.
    const last = got.reads.at(-1)?.at ?? 0;
    expect(last - (sent.at(-1) ?? 0)).toBeLessThan(100 + 60);
  });

  it("without it, or while precise() is true, each message of the same trickle is a read of its own", async () => {
    for (const precise of [undefined, () => true]) {
      const p = await pair();
      open = p;
      if (precise) batchReads(p.reader as unknown as BatchableSocket, 100, precise);
      const got = record(p.reader);
      await trickle(p.peer, 30, 5);
      await until(() => got.text() === expected(30));
      expect(got.reads.length).toBeGreaterThanOrEqual(20);
      await close();
    }
  });

  it("reads a burst through without windows: throughput is not capped at a read per window", async () => {
    const p = await pair();
    open = p;
    batchReads(p.reader as unknown as BatchableSocket, 1_000);
    const got = record(p.reader);
    const size = 4 * 1024 * 1024;
    const started = performance.now();
    p.peer.write(Buffer.alloc(size, 97));
    await until(() => got.reads.reduce((n, r) => n + r.bytes, 0) >= size);
    // Read in 64 KiB pieces: a window after each would take 64 seconds; the large reads skip it,
    // and at most the burst's small tail waits one window.
    expect(performance.now() - started).toBeLessThan(2_500);
    expect(got.reads.some((r) => r.bytes >= BUSY_READ_BYTES)).toBe(true);
  });

  it("leaves the stream's own backpressure alone: a paused reader is not made to read", async () => {
    const p = await pair();
    open = p;
    batchReads(p.reader as unknown as BatchableSocket, 20);
    const got = record(p.reader);
    p.peer.write("m0;");
    await until(() => got.reads.length === 1);
    p.reader.pause();
    // Far more than the stream buffers (its high-water mark): the stream stops reading itself.
    p.peer.write(Buffer.alloc(8 * 1024 * 1024, 98));
    await sleep(200);
    const buffered = p.reader.readableLength;
    expect(buffered).toBeLessThan(8 * 1024 * 1024);
    await sleep(200);
    // Windows ended meanwhile; none started reading past the stream's limit.
    expect(p.reader.readableLength).toBe(buffered);
    p.reader.resume();
    await until(() => got.reads.reduce((n, r) => n + r.bytes, 0) >= 3 + 8 * 1024 * 1024);
  });

  it("does nothing for a stream without a native handle", () => {
    const fake = { on: () => fake, destroyed: false, _handle: null };
    expect(batchReads(fake as unknown as BatchableSocket, 50)).toBe(false);
  });
});
