import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The folder of ax's package.json: the checkout, or `node_modules/ax` of an install. Code runs
 * from its TypeScript sources (tests, benches) or compiled into `dist/`, one folder deeper, so
 * files that ship beside the code (package.json, firmware-profiles/, the agent's sources that a
 * bundle is built from, bin/ax.js) are found from here, not by counting `../` from a module.
 */
export const PACKAGE_ROOT: string = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "package.json"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
})();

/** The absolute path of a file or folder of the package, from its root. */
export function packageFile(...parts: string[]): string {
  return join(PACKAGE_ROOT, ...parts);
}

let pkg: { version: string; engines?: { node?: string } } | undefined;

/** ax's package.json (read once). */
export function packageJson(): { version: string; engines?: { node?: string } } {
  pkg ??= JSON.parse(readFileSync(packageFile("package.json"), "utf8")) as {
    version: string;
    engines?: { node?: string };
  };
  return pkg;
}
