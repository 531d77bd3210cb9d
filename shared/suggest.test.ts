import { describe, expect, it } from "vitest";
import { closest, didYouMean } from "./suggest.js";

describe("closest", () => {
  it("finds case-only and one-edit near misses", () => {
    expect(closest("agentID", ["agentId", "tags"])).toBe("agentId");
    expect(closest("tagz", ["agentId", "tags"])).toBe("tags");
    expect(closest("jsn", ["json", "url", "token"])).toBe("json");
    expect(closest("heartbeat", ["heartbeatMs", "poll"])).toBe("heartbeatMs");
  });

  it("offers nothing for a word far from every candidate", () => {
    expect(closest("zzzz", ["agentId", "tags"])).toBe(undefined);
    expect(closest("x", ["y"])).toBe("y");
    expect(closest("ab", ["cd"])).toBe(undefined);
  });

  it("counts a swap of two neighbouring letters as one edit", () => {
    expect(closest("prot", ["port", "host"])).toBe("port");
    expect(closest("nmae", ["name", "role"])).toBe("name");
  });

  it("prefers the nearest of several", () => {
    expect(closest("prefx", ["prefix", "profile"])).toBe("prefix");
  });
});

describe("didYouMean", () => {
  it("formats a suggestion, or nothing", () => {
    expect(didYouMean("tagz", ["tags"])).toBe('; did you mean "tags"?');
    expect(didYouMean("--jsn", ["--json"], (s) => s)).toBe("; did you mean --json?");
    expect(didYouMean("qqqq", ["tags"])).toBe("");
  });
});
