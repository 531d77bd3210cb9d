import { createServer } from "node:net";

/**
 * A TCP port on 127.0.0.1 that was free a moment ago. A process restarted on the same port (the
 * broker, the coordinator's HTTP API) needs it fixed up front, where port 0 would pick a new one.
 */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Resolves once something accepts TCP connections on `port`, or throws after `timeoutMs`. */
export async function waitForPort(port: number, what: string, timeoutMs = 10_000): Promise<void> {
  const { connect } = await import("node:net");
  const until = Date.now() + timeoutMs;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (open) return;
    if (Date.now() > until)
      throw new Error(`${what} did not listen on port ${port} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
