import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { makeDirs } from "./make-dirs.js";

describe("makeDirs", () => {
  const made: string[] = [];
  const tmp = () => {
    const dir = mkdtempSync(join(tmpdir(), "ax-make-dirs-"));
    made.push(dir);
    return dir;
  };
  afterEach(() => {
    for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it("creates every missing level, each with the mode given", () => {
    const root = tmp();
    const dir = join(root, "a", "b", "c");
    makeDirs(dir, 0o700);
    for (const level of [join(root, "a"), join(root, "a", "b"), dir]) {
      expect(statSync(level).isDirectory()).toBe(true);
      expect(statSync(level).mode & 0o777).toBe(0o700);
    }
  });

  it("leaves a folder that exists as it is", () => {
    const root = tmp();
    makeDirs(root, 0o700);
    makeDirs(join(root, "x"));
    makeDirs(join(root, "x"));
    expect(statSync(join(root, "x")).isDirectory()).toBe(true);
  });

  it("throws ENOTDIR where a file stands in the way", () => {
    const root = tmp();
    writeFileSync(join(root, "file"), "");
    expect(() => makeDirs(join(root, "file", "sub"))).toThrow(
      expect.objectContaining({ code: "ENOTDIR" }),
    );
  });

  // Node 20's mkdirSync(…, { recursive: true }) spins for ever on this path (procfs answers
  // ENOENT under /proc, which exists); one level at a time it fails at once.
  it.runIf(existsSync("/proc/self"))(
    "fails at once, naming the level, under a folder where nothing can be made",
    () => {
      const started = performance.now();
      expect(() => makeDirs("/proc/ax-no-such/sub")).toThrow(/ENOENT.*\/proc\/ax-no-such'/);
      expect(performance.now() - started).toBeLessThan(1_000);
    },
  );
});
