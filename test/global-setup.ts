import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Tests that run `ax` as a child process run what ships: bin/ax.js and the compiled dist/. Build it
 * once before any test, so those tests never run a dist/ older than the sources under test.
 */
export default function setup(): void {
  execFileSync(
    process.execPath,
    [fileURLToPath(new URL("../scripts/build.mjs", import.meta.url)), "--quiet"],
    {
      stdio: "inherit",
    },
  );
}
