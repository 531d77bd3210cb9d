import { describe, expect, it } from "vitest";
import { fitJsonText } from "./json-text.js";

const sent = (t: string) => Buffer.byteLength(JSON.stringify(t)) - 2;

describe("fitJsonText", () => {
  it("leaves text that fits as it is", () => {
    expect(fitJsonText("héllo", 6, "head")).toEqual({ text: "héllo", cut: false });
  });

  it("keeps the most of the head or the tail that fits, escaped", () => {
    const text = `${"\u0001".repeat(10)}${'"'.repeat(10)}`;
    expect(fitJsonText(text, 25, "head")).toEqual({ text: "\u0001".repeat(4), cut: true });
    expect(fitJsonText(text, 25, "tail")).toEqual({
      text: `${"\u0001".repeat(0)}${'"'.repeat(10)}`,
      cut: true,
    });
    for (const keep of ["head", "tail"] as const) {
      for (let max = 0; max < 90; max++) {
        const { text: kept } = fitJsonText(text, max, keep);
        expect(sent(kept)).toBeLessThanOrEqual(max);
        // One character more would not have fitted.
        const more =
          keep === "head" ? text.slice(0, kept.length + 1) : text.slice(-kept.length - 1);
        if (kept.length < text.length) expect(sent(more)).toBeGreaterThan(max);
      }
    }
  });

  it("never keeps half of a surrogate pair", () => {
    const text = "😀".repeat(10); // 4 bytes of UTF-8 each, 2 UTF-16 units
    for (let max = 0; max < 40; max++) {
      for (const keep of ["head", "tail"] as const) {
        const { text: kept } = fitJsonText(text, max, keep);
        expect(kept).toBe("😀".repeat(Math.floor(max / 4)));
      }
    }
  });
});
