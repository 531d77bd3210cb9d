import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const ROOT = new URL("..", import.meta.url);

/** Percentile (0..100) of an ascending-sorted array, nearest rank. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

/** Prints rows as an aligned table. */
export function printTable(header: string[], rows: (string | number)[][]): void {
  const cells = rows.map((r) => r.map((c) => (typeof c === "number" ? fmt(c) : c)));
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]) => r.map((c, i) => c.padStart(widths[i] ?? 0)).join("  ");
  console.log(line(header));
  for (const r of cells) console.log(line(r));
}

/** A number for people: 3 significant decimals below 10, fewer above. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 1000) return Math.round(n).toLocaleString("en-US");
  if (Math.abs(n) >= 10) return n.toFixed(1);
  return n.toFixed(3);
}

/**
 * Writes `bench/results/NAME.json` ({ name, date, node, figures }) and replaces the section of
 * docs/benchmarks.md between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` with `markdown`.
 */
export function writeResults(
  name: string,
  figures: Record<string, unknown>,
  markdown: string,
): void {
  const result = { name, date: new Date().toISOString(), node: process.version, figures };
  const json = fileURLToPath(new URL(`bench/results/${name}.json`, ROOT));
  writeFileSync(json, `${JSON.stringify(result, null, 2)}\n`);
  const docPath = fileURLToPath(new URL("docs/benchmarks.md", ROOT));
  const doc = readFileSync(docPath, "utf8");
  const open = `<!-- bench:${name} -->`;
  const close = `<!-- /bench:${name} -->`;
  const section = `${open}\n${markdown.trim()}\n\n_Last run ${result.date.slice(0, 10)} on Node ${process.version}; raw figures in \`bench/results/${name}.json\`._\n${close}`;
  const start = doc.indexOf(open);
  const end = doc.indexOf(close);
  const next =
    start >= 0 && end > start
      ? `${doc.slice(0, start)}${section}${doc.slice(end + close.length)}`
      : `${doc.trimEnd()}\n\n${section}\n`;
  writeFileSync(docPath, next);
  console.log(`\nwrote bench/results/${name}.json and docs/benchmarks.md`);
}

/** Markdown table from a header and rows. */
export function mdTable(header: string[], rows: (string | number)[][]): string {
  const cells = rows.map((r) => r.map((c) => (typeof c === "number" ? fmt(c) : c)));
  return [
    `| ${header.join(" | ")} |`,
    `|${header.map(() => "---").join("|")}|`,
    ...cells.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}
