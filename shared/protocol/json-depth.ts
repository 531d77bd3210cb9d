/**
 * The deepest nesting of arrays and objects a v1 payload may have: the envelope object is level
 * 1, a batch's array adds one, and `params` or `result` inside a message are level 2. Anything
 * real fits many times over; a payload nested thousands deep (64 KiB holds 32,000 levels) only
 * exists to overflow a recursive walk — JSON.stringify, a deep clone, a logger — somewhere later.
 */
export const MAX_JSON_DEPTH = 32;

const OPEN_ARRAY = 0x5b; // [
const OPEN_OBJECT = 0x7b; // {
const CLOSE_ARRAY = 0x5d; // ]
const CLOSE_OBJECT = 0x7d; // }
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \

/**
 * How deeply a JSON text nests arrays and objects: the most `[` and `{` open at once outside
 * strings. One pass, no recursion, nothing allocated, so it is safe on hostile input of any shape.
 *
 * It reads UTF-8 bytes as well as a string: every character it looks for is ASCII, and no byte of
 * a multi-byte UTF-8 character is. It does not validate: on text that is not JSON the figure means
 * nothing, but it is still a number, found in linear time.
 */
export function jsonDepth(text: Uint8Array | string): number {
  const isString = typeof text === "string";
  const length = text.length;
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < length; i++) {
    const c = isString ? text.charCodeAt(i) : (text[i] as number);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    }
  }
  return deepest;
}
