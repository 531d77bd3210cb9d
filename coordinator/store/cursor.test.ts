import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { decodeExecutionCursor, encodeExecutionCursor, setCursorKey } from "./cursor.js";

const bad = (cursor: string) => {
  expect(() => decodeExecutionCursor(cursor), cursor).toThrow(
    expect.objectContaining({ code: "AX_STORE_BAD_CURSOR" }),
  );
};

describe("paging cursors", () => {
  it("read back the position they were made from", () => {
    const c = encodeExecutionCursor({ createdAt: 1_767_225_600_000.5, id: "ex-1" });
    expect(decodeExecutionCursor(c)).toEqual({ createdAt: 1_767_225_600_000.5, id: "ex-1" });
  });

  it("refuse one cut, altered in any character, or made up in their format", () => {
    const c = encodeExecutionCursor({ createdAt: 1_796_300_599_741, id: "ex_abc" });
    bad(c.slice(0, -1));
    bad(c.slice(1));
    for (let i = 0; i < c.length; i++) {
      if (c[i] === ".") continue;
      const other = c[i] === "A" ? "B" : "A";
      bad(`${c.slice(0, i)}${other}${c.slice(i + 1)}`);
    }
    const forged = Buffer.from(JSON.stringify([9e15, "zzz"])).toString("base64url");
    bad(forged);
    bad(`${forged}.${"A".repeat(16)}`);
    bad(`${forged}.${c.split(".")[1]}`);
  });

  it("hold across a restart with the same fleet key, and not under another", () => {
    const fleet = randomBytes(32);
    setCursorKey(fleet);
    const c = encodeExecutionCursor({ createdAt: 5, id: "ex-5" });
    setCursorKey(Buffer.from(fleet));
    expect(decodeExecutionCursor(c).id).toBe("ex-5");
    setCursorKey(randomBytes(32));
    bad(c);
  });
});
