#!/usr/bin/env node
// The `ax` command. It runs the TypeScript sources through tsx's loader, so `npm install` is the
// only build step.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../coordinator/cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
