#!/usr/bin/env node
// Builds what `ax` runs: the CLI and coordinator compiled and bundled by esbuild into dist/ax.js,
// with a chunk per lazily loaded command in dist/chunks/, so running ax costs no TypeScript
// compiler, and starting it reads a few files instead of a few hundred (the module resolution of
// the pure-JavaScript dependencies was most of the coordinator's start). better-sqlite3 (native)
// and esbuild (native; `ax bundle build` drives it) stay in node_modules. Types are checked by
// `npm run typecheck`; this only compiles (about a second or two).
// Runs as the package's `prepare` step (npm install in a checkout, npm pack) and before the tests.
import { existsSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist");

// An installed package ships dist/ built, and not the coordinator's sources: nothing to build.
if (!existsSync(join(root, "coordinator", "cli", "main.ts"))) process.exit(0);

const started = performance.now();
// Only what this script writes is cleared: dist/bundles/ holds agent bundles that `ax bundle
// build` wrote there and must survive a rebuild.
for (const name of ["ax.js", "chunks"]) rmSync(join(out, name), { recursive: true, force: true });
const result = await build({
  entryPoints: { ax: join(root, "coordinator/cli/main.ts") },
  outdir: out,
  chunkNames: "chunks/[name]-[hash]",
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external: ["better-sqlite3", "esbuild"],
  // CommonJS dependencies bundled into ES modules still call require() for Node's built-ins.
  banner: {
    js: 'import { createRequire as __axCreateRequire } from "node:module"; const require = __axCreateRequire(import.meta.url);',
  },
  legalComments: "eof",
  metafile: true,
  logLevel: "warning",
});
const ms = Math.round(performance.now() - started);
if (!process.argv.includes("--quiet")) {
  const files = Object.keys(result.metafile.outputs).length;
  const modules = Object.keys(result.metafile.inputs).length;
  console.log(
    `built ${modules} modules into ${relative(process.cwd(), out) || "."}/ax.js and ${files - 1} chunks in ${ms} ms`,
  );
}
