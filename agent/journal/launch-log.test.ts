import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { LaunchLog } from "./launch-log.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function file(): string {
  const dir = mkdtempSync(join(tmpdir(), "ax-launches-"));
  dirs.push(dir);
  return join(dir, "j.sqlite.launches");
}

describe("LaunchLog", () => {
  it("keeps marks across a reopen (a restart), and compacts to the running ones without losing them", () => {
    const path = file();
    const a = new LaunchLog(path);
    a.mark([1, 2]);
    a.mark([3]);
    a.close(); // as a killed process leaves it: appended, never fsynced
    const b = new LaunchLog(path);
    expect(b.read()).toEqual(new Set([1, 2, 3]));
    b.mark([4]);
    b.compact([3, 4]);
    expect(readFileSync(path, "utf8")).toBe("3\n4\n");
    b.mark([5]); // appends to the new file
    expect(b.read()).toEqual(new Set([3, 4, 5]));
    expect(b.size).toBe("3\n4\n5\n".length);
    b.clear();
    expect(b.read()).toEqual(new Set());
    b.close();
  });

  it("lives in memory for an in-memory journal", () => {
    const log = new LaunchLog(undefined);
    log.mark([7, 8]);
    log.compact([8, 9]);
    expect(log.read()).toEqual(new Set([8]));
  });
});
