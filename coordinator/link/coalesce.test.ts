import { once } from "node:events";
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { coalesceWrites } from "./coalesce.js";

/** A connected loopback pair: `client` writes, `chunks` collects what the server reads. */
async function pair(): Promise<{ client: Socket; chunks: Buffer[]; server: Server }> {
  const chunks: Buffer[] = [];
  const server = createServer((s) => s.on("data", (c: Buffer) => chunks.push(c)));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  const client = connect(address.port, "127.0.0.1");
  client.setNoDelay(true);
  await once(client, "connect");
  return { client, chunks, server };
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 2));
  if (!check()) throw new Error("timed out");
}

describe("coalesceWrites", () => {
  let open: { client: Socket; server: Server } | undefined;
  afterEach(async () => {
    open?.client.destroy();
    await new Promise((r) => open?.server.close(r));
    open = undefined;
  });

  it("sends the writes of one turn of the loop, made in separate ticks, in one system call", async () => {
    const p = await pair();
    open = p;
    let calls = 0;
    const handle = (p.client as unknown as { _handle: Record<string, unknown> })._handle;
    for (const name of ["writev", "writeBuffer", "writeUtf8String", "writeLatin1String"]) {
      const original = handle[name] as ((...a: unknown[]) => unknown) | undefined;
      if (!original) continue;
      handle[name] = function (this: unknown, ...a: unknown[]) {
        calls++;
        return original.apply(this, a);
      };
    }
    coalesceWrites(p.client);
    // As mqtt.js answers received packets: one write per tick, each corked to its own tick.
    const parts = Array.from({ length: 20 }, (_, i) => `packet-${i};`);
    await new Promise<void>((resolve) => {
      const next = (i: number) => {
        if (i === parts.length) return resolve();
        p.client.cork();
        p.client.write(parts[i] as string);
        process.nextTick(() => {
          p.client.uncork();
          process.nextTick(() => next(i + 1));
        });
      };
      next(0);
    });
    expect(calls).toBe(0);
    await until(() => Buffer.concat(p.chunks).toString() === parts.join(""));
    expect(calls).toBe(1);
  });

  it("sends at once what the returned function flushes, in order", async () => {
    const p = await pair();
    open = p;
    const flush = coalesceWrites(p.client);
    p.client.write("a");
    p.client.write("b");
    expect(p.client.writableLength).toBe(2);
    flush();
    expect(p.client.writableLength).toBe(0);
    p.client.write("c");
    expect(p.client.writableLength).toBe(1);
    await until(() => Buffer.concat(p.chunks).toString() === "abc");
  });
});
