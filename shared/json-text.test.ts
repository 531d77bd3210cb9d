import { describe, expect, it } from "vitest";
import { lineColumn, parseJsonText } from "./json-text.js";

describe("parseJsonText", () => {
  it("parses valid JSON, with or without a byte-order mark", () => {
    expect(parseJsonText('{"a": [1, true, null, "x"]}')).toEqual({
      ok: true,
      value: { a: [1, true, null, "x"] },
    });
    expect(parseJsonText('\ufeff{"a":1}')).toEqual({ ok: true, value: { a: 1 } });
  });

  it("gives line and column of a trailing comma", () => {
    expect(parseJsonText('{\n  "a": 1,\n}\n')).toEqual({
      ok: false,
      line: 3,
      column: 1,
      reason: "Expected double-quoted property name",
    });
  });

  it("finds the position itself when V8's message has none", () => {
    expect(parseJsonText('{\n  "a": tru\n}')).toEqual({
      ok: false,
      line: 2,
      column: 11,
      reason: 'unexpected "\\n"',
    });
    expect(parseJsonText("\n\n   xyz")).toEqual({
      ok: false,
      line: 3,
      column: 4,
      reason: 'unexpected "x"',
    });
  });

  it("places an unexpected end at the end of the text", () => {
    expect(parseJsonText('{\n  "a": [1,')).toMatchObject({ ok: false, line: 2, column: 11 });
    expect(parseJsonText("")).toEqual({
      ok: false,
      line: 1,
      column: 1,
      reason: "unexpected end of the file",
    });
  });
});

describe("lineColumn", () => {
  it("counts from 1", () => {
    expect(lineColumn("ab\ncd", 0)).toEqual({ line: 1, column: 1 });
    expect(lineColumn("ab\ncd", 4)).toEqual({ line: 2, column: 2 });
  });
});
