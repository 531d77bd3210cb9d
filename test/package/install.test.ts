import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/env.js";

/**
 * What a user installs: `npm pack`, then `npm install -g` of the tarball into a fresh prefix, then
 * `ax` run from a folder that is not the checkout. It installs the package's dependencies from the
 * registry and compiles better-sqlite3, which takes minutes of CPU, so it runs only with
 * AX_TEST_PACKAGE=1: .ci/run runs it on its own before the rest of the suite, and `npm test`
 * elsewhere skips it with a message.
 */
const run = promisify(execFile);
const ROOT = join(import.meta.dirname, "..", "..");
const ENABLED = process.env.AX_TEST_PACKAGE === "1";
const VERSION = (
  JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }
).version;

if (!ENABLED) {
  console.warn("test/package: skipped (set AX_TEST_PACKAGE=1 to pack and install ax globally)");
}

describe.skipIf(!ENABLED)("the packed and globally installed ax", () => {
  let tmp: ReturnType<typeof tempDir>;
  let ax: string;
  let elsewhere: string;
  let installLog: string;

  beforeAll(async () => {
    tmp = tempDir("ax-package-");
    const packed = await run("npm", ["pack", "--json", "--pack-destination", tmp.dir], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
    });
    const [info] = JSON.parse(packed.stdout) as { filename: string }[];
    const tarball = join(tmp.dir, (info as { filename: string }).filename);
    const prefix = join(tmp.dir, "prefix");
    const installed = await run(
      "npm",
      [
        "install",
        "--global",
        "--prefix",
        prefix,
        "--no-audit",
        "--no-fund",
        "--allow-scripts=ax,better-sqlite3,esbuild",
        tarball,
      ],
      { cwd: tmp.dir, maxBuffer: 16 * 1024 * 1024 },
    );
    installLog = `${installed.stdout}${installed.stderr}`;
    ax = join(prefix, "bin", "ax");
    elsewhere = join(tmp.dir, "elsewhere");
    await run("mkdir", ["-p", elsewhere]);
  }, 900_000);

  afterAll(() => tmp?.cleanup());

  const axIn = (args: string[], timeout = 60_000) =>
    run(ax, args, { cwd: elsewhere, timeout, maxBuffer: 16 * 1024 * 1024 });

  it("installs its dependencies' install scripts as allowed, and ships no TypeScript loader", () => {
    // npm lists ax's own `prepare` (the checkout's build step) as not run for a tarball: dist/
    // ships built. better-sqlite3's and esbuild's scripts are the ones an install needs.
    expect(installLog).not.toMatch(/install-scripts\s+(better-sqlite3|esbuild)@/);
    expect(existsSync(ax)).toBe(true);
    const pkgDir = join(tmp.dir, "prefix", "lib", "node_modules", "ax");
    expect(existsSync(join(pkgDir, "dist", "ax.js"))).toBe(true);
    expect(existsSync(join(pkgDir, "node_modules", "tsx"))).toBe(false);
    expect(existsSync(join(pkgDir, "coordinator", "coordinator.ts"))).toBe(false);
  });

  it("prints its version and help from any folder", async () => {
    expect((await axIn(["--version"])).stdout.trim()).toBe(`ax ${VERSION}`);
    expect((await axIn(["--help"])).stdout).toContain("Usage:");
  });

  it("builds an agent bundle from the agent sources it ships, and verifies it", async () => {
    const out = join(tmp.dir, "bundles");
    const r = await axIn(
      ["bundle", "build", "--profile", "sensor-hub", "--out", out, "--unsigned"],
      120_000,
    );
    expect(r.stdout).toMatch(/agent\.mjs: \d+ of 153600 budgeted bytes/);
    const archive = join(out, "sensor-hub", "sensor-hub.tar.gz");
    expect(existsSync(archive)).toBe(true);
    const verified = await axIn(["bundle", "verify", archive, "--allow-unsigned"]);
    expect(verified.stdout).toMatch(/^ok: .*profile sensor-hub, ax \d+\.\d+\.\d+.* 7 files match/);
  });

  it("runs the demo: broker, coordinator, SQLite store and agents, every execution succeeded", async () => {
    const r = await axIn(["demo", "--duration", "4"], 120_000);
    expect(r.stdout).toMatch(/demo: ([1-9]\d*) executions, \1 succeeded, 0 failed/);
  });
});
