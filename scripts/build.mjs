#!/usr/bin/env node
// Compiles the TypeScript sources of coordinator/, agent/ and shared/ into dist/, one .js file per
// source file, so `ax` runs plain JavaScript: no TypeScript loader at run time. It transpiles only
// (esbuild, well under a second); `npm run typecheck` is what checks the types of these sources.
// Runs as the package's `prepare` step (npm install in a checkout, npm pack) and before the tests.
import { cpSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist");
const SOURCES = ["coordinator", "agent", "shared"];

/** Every .ts file under `dir` that is part of the program (tests and declarations excluded). */
function sources(dir) {
  const found = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...sources(path));
    else if (/\.ts$/.test(entry.name) && !/\.(test|d)\.ts$/.test(entry.name)) found.push(path);
  }
  return found;
}

const started = performance.now();
// Only what this script writes is cleared: dist/bundles/ holds agent bundles that `ax bundle
// build` wrote there and must survive a rebuild.
for (const dir of SOURCES) rmSync(join(out, dir), { recursive: true, force: true });
const entryPoints = SOURCES.flatMap((dir) => sources(join(root, dir)));
await build({
  entryPoints,
  outdir: out,
  outbase: root,
  bundle: false,
  format: "esm",
  platform: "node",
  target: "node20",
  logLevel: "warning",
});
// The console's static files are served from beside the module that serves them.
cpSync(
  join(root, "coordinator/http/console-assets"),
  join(out, "coordinator/http/console-assets"),
  { recursive: true },
);
const ms = Math.round(performance.now() - started);
if (!process.argv.includes("--quiet")) {
  console.log(
    `built ${entryPoints.length} modules into ${relative(process.cwd(), out) || "."}/ in ${ms} ms`,
  );
}
