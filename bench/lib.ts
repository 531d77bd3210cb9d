import { readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
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

const round2 = (v: number) => Math.round(v * 100) / 100;

/**
 * What a results file says of the machine a run had: its cores and their model, and the load
 * average at the start; {@link finishRun} fills in the load at the end and the run's length.
 */
export function machineAtStart() {
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "?",
    loadavgAtStart: loadavg().map(round2),
    loadavgAtEnd: [] as number[],
    runSeconds: 0,
  };
}

/** Notes the load average at the end and the run's length, from `started` (performance.now()). */
export function finishRun(
  machine: { loadavgAtEnd: number[]; runSeconds: number },
  started: number,
): void {
  machine.loadavgAtEnd = loadavg().map(round2);
  machine.runSeconds = Math.round((performance.now() - started) / 1000);
}

/**
 * Calls the coordinator's HTTP API with a bearer token: the answer's text and how long it took
 * (ms, including reading the body). Throws on a status other than 2xx, with its start.
 */
export async function callApi(
  baseUrl: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ ms: number; text: string }> {
  const started = performance.now();
  const r = await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await r.text();
  const ms = performance.now() - started;
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text.slice(0, 500)}`);
  return { ms, text };
}

/**
 * Bundles one bench entry into one ESM file for Node 20 with esbuild: packages stay imports
 * (resolved from node_modules), and nothing is minified, so a CPU profile keeps function names.
 */
export async function bundleBenchEntry(entry: string, outfile: string): Promise<void> {
  const { build } = await import("esbuild");
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    packages: "external",
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "silent",
  });
}
