import { createConnection, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy on 127.0.0.1 in front of one service (a database), so a test can cut a process
 * off from it the way a network partition does: `blackhole()` makes every connection, open or
 * new, go silent (bytes are swallowed, nothing is closed, so the client only learns by its own
 * timeouts); `heal()` resets the connections that went silent, as a healed network's peers do,
 * and forwards again.
 */
export interface TcpProxy {
  /** The proxy's port (connect here instead of the service's). */
  port: number;
  blackhole(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function tcpProxy(targetPort: number, targetHost = "127.0.0.1"): Promise<TcpProxy> {
  let silent = false;
  const pairs = new Set<{ client: Socket; upstream: Socket | undefined }>();
  const server: Server = createServer((client) => {
    const pair: { client: Socket; upstream: Socket | undefined } = { client, upstream: undefined };
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      pair.upstream?.destroy();
    };
    client.on("error", drop);
    client.on("close", drop);
    if (silent) {
      // Accepted and never answered: what a client sees of a peer it cannot reach.
      client.on("data", () => {});
      return;
    }
    const upstream = createConnection({ port: targetPort, host: targetHost });
    pair.upstream = upstream;
    upstream.on("error", drop);
    upstream.on("close", drop);
    client.on("data", (chunk: Buffer) => {
      if (!silent) upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!silent) client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("proxy has no port");
  return {
    port: address.port,
    blackhole() {
      silent = true;
    },
    heal() {
      silent = false;
      for (const p of [...pairs]) {
        p.client.resetAndDestroy();
        p.upstream?.destroy();
      }
      pairs.clear();
    },
    async close() {
      for (const p of pairs) {
        p.client.destroy();
        p.upstream?.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
