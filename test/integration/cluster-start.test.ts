import { createServer } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { AxError } from "../../shared/errors.js";
import { type ClusterRig, clusterRig } from "../helpers/cluster.js";
import { describeOnPg } from "../helpers/postgres.js";

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
  let rig: ClusterRig;

  beforeAll(async () => {
    rig = await clusterRig(url);
  });

  afterAll(() => rig?.close());

  it("fails its start with AX_LINK_FAILED, and the next start takes the store", async () => {
    const lost = await rig.coordinator("coord-a", {
      mqttUrl: `mqtt://127.0.0.1:${await closedPort()}`,
      messages: "off",
    });
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
    await rig.closeOne(lost);

    // Its membership went with its close: another coordinator starts as the active one at once.
    const next = await rig.coordinator("coord-b", { messages: "off" });
    await next.start();
    expect((await next.readiness()).role).toBe("active");
  }, 30_000);
});
