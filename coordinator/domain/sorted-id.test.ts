import { describe, expect, it } from "vitest";
import { ID_PATTERN } from "../../shared/ids.js";
import { newSortedId } from "./sorted-id.js";

describe("newSortedId", () => {
  it("sorts ids made in one millisecond in the order they were made", () => {
    const ids = Array.from({ length: 1000 }, () => newSortedId("ex_", 1_900_000_000_000));
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(1000);
    for (const id of ids) expect(id).toMatch(ID_PATTERN);
  });

  it("sorts by time first, and starts a new millisecond at random", () => {
    const a = newSortedId("ex_", 1_900_000_000_001);
    const b = newSortedId("ex_", 1_900_000_000_002);
    const c = newSortedId("ex_", 1_900_000_000_002);
    expect(a < b && b < c).toBe(true);
    expect(a.length).toBe(3 + 9 + 12);
    const randoms = new Set(
      Array.from({ length: 50 }, (_, i) => newSortedId("", 1_900_000_001_000 + i).slice(9)),
    );
    expect(randoms.size).toBe(50);
  });
});
