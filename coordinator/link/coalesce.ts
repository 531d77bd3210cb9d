/** The part of a socket (a net.Socket, or the stream mqtt.js or aedes write to) this needs. */
export interface CorkableStream {
  write(...args: never[]): boolean;
  cork(): void;
  uncork(): void;
}

/**
 * Holds a stream's writes until the event loop's check phase (`setImmediate`), so what one turn
 * of the loop writes leaves in one `writev` call. Returns a function that sends what is held at
 * once, for a message whose timing matters (a clock sample).
 *
 * Why: mqtt.js and aedes handle received packets one per tick, and each tick's acknowledgement
 * (PUBACK) or forwarded message was its own system call and, with TCP_NODELAY, its own segment
 * that woke the peer: at 2,000 fires/s that was about one writev per message received, 12 % of
 * the coordinator's main thread. Holding them to the check phase delays a write by at most the
 * rest of the loop turn it was made in.
 */
export function coalesceWrites(stream: CorkableStream): () => void {
  let held = false;
  const release = (): void => {
    if (!held) return;
    held = false;
    stream.uncork();
  };
  const write = stream.write;
  stream.write = function (this: CorkableStream, ...args: never[]): boolean {
    if (!held) {
      held = true;
      stream.cork();
      setImmediate(release);
    }
    return write.apply(this, args);
  } as CorkableStream["write"];
  return release;
}
