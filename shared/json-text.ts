/**
 * JSON files read by people (configs, job files, identity files): a syntax error is reported as
 * `line:column`, which an editor can jump to, instead of V8's character offset.
 */

/** Where a JSON text first goes wrong: V8's offset when its message gives one, else a scan's. */
function errorOffset(text: string, message: string): number {
  const m = /at position (\d+)/.exec(message);
  if (m?.[1] !== undefined) return Number(m[1]);
  if (/Unexpected end of JSON input/.test(message)) return text.length;
  return scanForError(text);
}

/**
 * A minimal JSON scanner that only finds the offset of the first character that cannot continue a
 * valid text (for V8 messages such as `Unexpected token 'x', "…" is not valid JSON`).
 */
function scanForError(text: string): number {
  let i = 0;
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i] as string)) i++;
  };
  const fail = (): never => {
    throw i;
  };
  const literal = (word: string) => {
    for (const ch of word) {
      if (text[i] !== ch) fail();
      i++;
    }
  };
  const string = () => {
    i++;
    while (i < text.length && text[i] !== '"') {
      const ch = text.charCodeAt(i);
      if (ch < 0x20) fail();
      i += text[i] === "\\" ? 2 : 1;
    }
    if (i >= text.length) fail();
    i++;
  };
  const number = () => {
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!m) fail();
    i += (m as RegExpExecArray)[0].length;
  };
  const value = (): void => {
    ws();
    const ch = text[i];
    if (ch === "{") {
      i++;
      ws();
      if (text[i] === "}") {
        i++;
        return;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail();
        string();
        ws();
        if (text[i] !== ":") fail();
        i++;
        value();
        ws();
        if (text[i] === ",") i++;
        else if (text[i] === "}") {
          i++;
          return;
        } else fail();
      }
    }
    if (ch === "[") {
      i++;
      ws();
      if (text[i] === "]") {
        i++;
        return;
      }
      for (;;) {
        value();
        ws();
        if (text[i] === ",") i++;
        else if (text[i] === "]") {
          i++;
          return;
        } else fail();
      }
    }
    if (ch === '"') string();
    else if (ch === "t") literal("true");
    else if (ch === "f") literal("false");
    else if (ch === "n") literal("null");
    else number();
  };
  try {
    value();
    ws();
    return Math.min(i, text.length);
  } catch (at) {
    return typeof at === "number" ? at : 0;
  }
}

/** 1-based line and column of a character offset. */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, Math.max(0, Math.min(offset, text.length)));
  const lines = before.split("\n");
  return { line: lines.length, column: (lines[lines.length - 1] ?? "").length + 1 };
}

/** The outcome of parsing a JSON text: its value, or where and why it is not JSON. */
export type JsonTextResult =
  | { ok: true; value: unknown }
  | { ok: false; line: number; column: number; reason: string };

/**
 * Parses JSON; on a syntax error gives the 1-based line and column and V8's reason with its
 * position and echo of the text removed (`Expected double-quoted property name`).
 */
export function parseJsonText(text: string): JsonTextResult {
  // A byte-order mark is what some Windows editors put first; it is not a syntax error to a user.
  const body = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  try {
    return { ok: true, value: JSON.parse(body) as unknown };
  } catch (err) {
    const message = (err as Error).message;
    const offset = errorOffset(body, message);
    const { line, column } = lineColumn(body, offset);
    const at = body[offset];
    const reason =
      offset >= body.length
        ? "unexpected end of the file"
        : message.startsWith("Unexpected token")
          ? `unexpected ${JSON.stringify(at)}`
          : message.replace(/ in JSON at position \d+.*$/s, "");
    return { ok: false, line, column, reason };
  }
}
