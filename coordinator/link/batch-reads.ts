/** The parts of a net.Socket's (or TLSSocket's) native handle this uses. */
interface ReadHandle {
  readStop(): number;
  readStart(): number;
  reading?: boolean;
}

/** A socket as far as {@link batchReads} needs it. */
export interface BatchableSocket {
  on(event: "data", listener: (chunk: Buffer) => void): unknown;
  on(event: "close", listener: () => void): unknown;
  readonly destroyed: boolean;
  _handle?: Partial<ReadHandle> | null;
}

/**
 * A read at least this large was not the kernel's whole queue for the socket, or nearly: traffic
 * is heavy, each wake-up already reads many messages, and holding the rest back would only cut
 * throughput (libuv reads 64 KiB at a time).
 */
export const BUSY_READ_BYTES = 16_384;

/**
 * After a small read from the socket, stops reading for `windowMs`, so that what arrives
 * meanwhile waits in the kernel and is read in one go when the window ends: at a steady trickle
 * (a large fleet's idle heartbeats) the process wakes about 1,000 / `windowMs` times a second
 * instead of once per message. While `precise()` is true, or after a large read, it reads on.
 * Returns false (and does nothing) for a stream without a native handle to stop (a WebSocket).
 *
 * It uses the handle's `readStop` / `readStart`, which net.Socket itself uses for backpressure:
 * pausing the stream would not do, since a paused socket still reads into its buffer, one
 * wake-up per message. `reading` stays true while stopped, so the stream does not start reading
 * again on its own; when the stream has stopped for its own reasons (`reading` false), the end
 * of the window leaves it to restart when it wants more.
 */
export function batchReads(
  socket: BatchableSocket,
  windowMs: number,
  precise: () => boolean = () => false,
): boolean {
  const first = socket._handle;
  if (typeof first?.readStop !== "function" || typeof first.readStart !== "function") return false;
  let timer: NodeJS.Timeout | undefined;
  const resume = (): void => {
    timer = undefined;
    const handle = socket._handle;
    if (socket.destroyed || handle?.reading !== true) return;
    handle.readStart?.();
  };
  socket.on("data", (chunk) => {
    if (timer !== undefined || chunk.byteLength >= BUSY_READ_BYTES || precise()) return;
    const handle = socket._handle;
    if (handle?.reading !== true) return;
    handle.readStop?.();
    timer = setTimeout(resume, windowMs);
    timer.unref();
  });
  socket.on("close", () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  });
  return true;
}
