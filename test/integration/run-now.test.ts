import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { storeBeside, tempDir } from "../helpers/env.js";
import { type Cleanups, coordinatorSetup } from "../helpers/fake-agent.js";

/**
 * An operator's "run now" of a sharded job is one write: a fault in the store makes every shard
 * or none, so that nothing is left half made, and running it again does not run the made half
 * twice.
 */
describe("run now", () => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("makes every shard of a job or none", async () => {
    const tmp = tempDir();
    cleanups.push(() => tmp.cleanup());
    const path = join(tmp.dir, "ax.sqlite");
    const { start } = await coordinatorSetup(cleanups, { store: { path } });
    const coordinator = await start();
    cleanups.push(() => coordinator.close());
    await coordinator.putJob({
      id: "sharded",
      handler: "echo",
      trigger: { type: "manual" },
      shards: 3,
    });
    // The store refuses the last shard's row (a fault, a full disk): the whole run is refused.
    const db = storeBeside(path);
    cleanups.push(() => db.close());
    await db.exec(`CREATE TRIGGER no_shard BEFORE INSERT ON executions
      WHEN NEW.job_id = 'sharded' AND NEW.shard_index = 2
      BEGIN SELECT RAISE(ABORT, 'no room'); END`);
    await expect(coordinator.triggerJob("sharded")).rejects.toThrow(/no room/);
    expect(await coordinator.store.listExecutions({ jobId: "sharded" })).toEqual([]);
    await db.exec("DROP TRIGGER no_shard");
    await coordinator.triggerJob("sharded");
    const made = await coordinator.store.listExecutions({ jobId: "sharded" });
    expect(made.map((e) => e.shardIndex).sort()).toEqual([0, 1, 2]);
    expect(made.map((e) => e.state)).toEqual(["PENDING", "PENDING", "PENDING"]);
  });
});
