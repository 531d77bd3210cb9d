import { existsSync, mkdirSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";

/**
 * `mkdir -p`: creates `dir` and whichever of its parents are missing, each with `mode` (when
 * given), and throws the error of the first one that cannot be made.
 *
 * Why not `mkdirSync(dir, { recursive: true })`: on Node 20 it never returns where mkdir keeps
 * answering ENOENT under a parent that exists, as procfs does (`/proc/x/y`): it spins at full
 * CPU. One level at a time, such a path fails at once with ENOENT, naming the level.
 */
export function makeDirs(dir: string, mode?: number): void {
  const missing: string[] = [];
  for (let at = resolve(dir); !existsSync(at); at = dirname(at)) {
    missing.push(at);
    if (dirname(at) === at) break;
  }
  for (const level of missing.reverse()) {
    try {
      mkdirSync(level, mode === undefined ? undefined : { mode });
    } catch (err) {
      // Made meanwhile by someone else: what matters is that it is a folder now.
      if ((err as NodeJS.ErrnoException).code === "EEXIST" && statSync(level).isDirectory()) {
        continue;
      }
      throw err;
    }
  }
}
