/**
 * "Did you mean" for near-miss names: config keys, CLI flags and subcommands. Pure; used by both
 * sides (the agent's config included), so it stays small.
 */

/**
 * Edit distance counting a swap of two neighbouring letters as one edit (`prot` → `port`), with
 * an early exit once every entry of a row exceeds `max`.
 */
function distance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let before: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        v = Math.min(v, (before[j - 2] ?? 0) + 1);
      }
      row.push(v);
      if (v < best) best = v;
    }
    if (best > max) return max + 1;
    before = prev;
    prev = row;
  }
  return prev[b.length] ?? max + 1;
}

/**
 * The candidate closest to `word`, or undefined when none is close: a case-only difference
 * (`agentID` → `agentId`) always counts; otherwise at most a third of the word's length in edits
 * (`tagz` → `tags`, `--jsn` → `--json`), and never more than 3.
 */
export function closest(word: string, candidates: Iterable<string>): string | undefined {
  const lower = word.toLowerCase();
  const max = Math.min(3, Math.max(1, Math.floor(word.length / 3)));
  let best: string | undefined;
  let bestDistance = max + 1;
  for (const c of candidates) {
    if (c === word) continue;
    const d = c.toLowerCase() === lower ? 0 : distance(lower, c.toLowerCase(), max);
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

/** `; did you mean "X"?` for a near miss, or "" (ready to append to an error message). */
export function didYouMean(
  word: string,
  candidates: Iterable<string>,
  quote: (s: string) => string = (s) => `"${s}"`,
): string {
  const c = closest(word, candidates);
  return c === undefined ? "" : `; did you mean ${quote(c)}?`;
}
