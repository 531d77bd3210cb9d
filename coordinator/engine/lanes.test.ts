import { describe, expect, it } from "vitest";
import { inLanes } from "./execution-loop.js";

describe("inLanes", () => {
  it("keeps each lane in order, runs lanes side by side, never more than the width", async () => {
    const items = ["a1", "b1", "a2", "c1", "b2", "a3", "d1"];
    const started: string[] = [];
    const done: string[] = [];
    const busy = new Set<string>();
    let overlapInLane = false;
    let running = 0;
    let most = 0;
    await inLanes(
      items,
      (x) => x[0] as string,
      2,
      async (x) => {
        const lane = x[0] as string;
        if (busy.has(lane)) overlapInLane = true;
        busy.add(lane);
        started.push(x);
        running++;
        most = Math.max(most, running);
        await new Promise((r) => setTimeout(r, lane === "a" ? 15 : 5));
        running--;
        busy.delete(lane);
        done.push(x);
      },
    );
    expect(most).toBe(2);
    expect(overlapInLane).toBe(false);
    expect([...done].sort()).toEqual([...items].sort());
    for (const lane of ["a", "b", "c", "d"]) {
      expect(started.filter((x) => x[0] === lane)).toEqual(items.filter((x) => x[0] === lane));
    }
  });

  it("with width 1 is the plain loop, in order", async () => {
    const seen: number[] = [];
    await inLanes(
      [3, 1, 2],
      (x) => String(x),
      1,
      async (x) => {
        seen.push(x);
      },
    );
    expect(seen).toEqual([3, 1, 2]);
  });
});
