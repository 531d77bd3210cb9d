#!/usr/bin/env node
// The `ax` command: the compiled CLI in dist/ (built by `npm install` in a checkout, shipped in the
// package). Plain JavaScript, so starting it costs no TypeScript compiler.
let cli;
try {
  cli = await import("../dist/ax.js");
} catch (err) {
  if (err?.code !== "ERR_MODULE_NOT_FOUND" || !String(err.message).includes("/dist/")) throw err;
  process.stderr.write(
    "ax: the compiled CLI (dist/) is missing; run `npm run build` in the checkout (npm install runs it)\n",
  );
  process.exit(70);
}
process.exitCode = await cli.main(process.argv.slice(2));
