import { createServer } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { AxError } from "../../shared/errors.js";
import { clusterCoordinator } from "../helpers/cluster.js";
import { type TestBroker, tempDir, testBroker } from "../helpers/env.js";
import { describeOnPg, dropPgSchema, freshPgSchema } from "../helpers/postgres.js";

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/**
 * A coordinator on a shared PostgreSQL store that is the active one from its start and cannot
 * reach its broker fails its start as a coordinator of its own does (docs/operations.md: exit 1
 * with AX_LINK_FAILED, for the supervisor to start it again), rather than reporting itself
 * fenced (exit 75) as one that lost its place would; and it leaves the store to the next one.
 */
await describeOnPg("a shared store's coordinator whose broker is out of reach at start", (url) => {
  const schema = freshPgSchema();
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  const coordinators: Coordinator[] = [];

  const make = async (id: string, mqttUrl: string) => {
    const shared = { url, schema, broker, dir: tmp.dir };
    const c = await clusterCoordinator(shared, id, { mqttUrl, messages: "off" });
    coordinators.push(c);
    return c;
  };

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
  });

  afterAll(async () => {
    for (const c of coordinators.reverse()) await c.close().catch(() => {});
    await broker?.close();
    await dropPgSchema(url, schema);
    tmp?.cleanup();
  });

  it("fails its start with AX_LINK_FAILED, and the next start takes the store", async () => {
    const lost = await make("coord-a", `mqtt://127.0.0.1:${await closedPort()}`);
    let fenced: string | undefined;
    lost.onFenced = (reason) => {
      fenced = reason;
    };
    const failed = await lost.start().then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failed).toBeInstanceOf(AxError);
    expect((failed as AxError).code).toBe("AX_LINK_FAILED");
    expect(fenced).toBeUndefined();
    await lost.close();

    // Its membership went with its close: another coordinator starts as the active one at once.
    const next = await make("coord-b", broker.url);
    await next.start();
    expect((await next.readiness()).role).toBe("active");
  }, 30_000);
});
