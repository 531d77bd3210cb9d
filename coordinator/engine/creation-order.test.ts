import { describe, expect, it } from "vitest";
import { jobDefinitionSchema } from "../domain/job.js";
import { decideOverlap } from "../domain/overlap.js";
import type { StoredJob } from "../store/port.js";
import { jobExecutions } from "./job-executions.js";

/**
 * A group runs its executions one at a time "in creation order" (docs/scheduling.md), and the
 * dispatcher's order breaks ties on time by id. Executions made in one millisecond — a firing's
 * shards here — must therefore have ids in the order they were made: with random ids, the
 * group ran a shard other than 0 first in about two firings of three.
 */
describe("executions made together keep their creation order", () => {
  it("a group lets a firing's shards go in shard order, every time", () => {
    const def = jobDefinitionSchema.parse({
      id: "g",
      handler: "echo",
      trigger: { type: "manual" },
      shards: 3,
      group: "grp",
    });
    const job = { id: "g", version: 1, definition: def } as unknown as StoredJob;
    for (let firing = 0; firing < 200; firing++) {
      const now = 1_900_000_000_000 + firing;
      const made = jobExecutions(job, now, now);
      expect(made.map((e) => e.id)).toEqual([...made.map((e) => e.id)].sort());
      const peers = made.map((e) => ({
        id: e.id,
        state: "PENDING",
        createdAt: e.createdAt,
        shardOf: `g@${now}`,
      }));
      const goes = made.filter(
        (e) =>
          decideOverlap({
            execution: { id: e.id, attempt: 1, createdAt: e.createdAt, shardOf: `g@${now}` },
            policy: "PARALLEL",
            queueMax: 10,
            sameJob: [],
            sameGroup: peers.filter((p) => p.id !== e.id),
          }).action === "dispatch",
      );
      expect(goes.map((e) => e.shardIndex)).toEqual([0]);
    }
  });
});
