/** Bytes `text` takes as a JSON string in a report, without its two quotes. */
function jsonBytes(text: string): number {
  return Buffer.byteLength(JSON.stringify(text)) - 2;
}

/**
 * `text` cut so that, escaped as a JSON string, it takes at most `max` bytes: its start kept
 * (`head`) or its end (`tail`), never half of a surrogate pair. A handler's output counts as it
 * will be sent: a byte such as 0x01 takes 6 as `\u0001`, and a cap on raw bytes let a report
 * outgrow the payload limit, which then dropped the whole result (exit code, status and all).
 */
export function fitJsonText(
  text: string,
  max: number,
  keep: "head" | "tail",
): { text: string; cut: boolean } {
  if (jsonBytes(text) <= max) return { text, cut: false };
  // The first or last `n` characters, one fewer where the `n`th would split a surrogate pair
  // (a high one ending a head, a low one starting a tail): so the size only grows with `n`.
  const part = (n: number) => {
    if (keep === "head") {
      const c = text.charCodeAt(n - 1);
      return text.slice(0, c >= 0xd800 && c <= 0xdbff ? n - 1 : n);
    }
    const c = text.charCodeAt(text.length - n);
    return text.slice(text.length - (c >= 0xdc00 && c <= 0xdfff ? n - 1 : n));
  };
  // The most characters that fit: `lo` fits, `hi` does not.
  let lo = 0;
  let hi = text.length;
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if (jsonBytes(part(mid)) <= max) lo = mid;
    else hi = mid;
  }
  const kept = part(lo);
  return { text: kept, cut: true };
}
