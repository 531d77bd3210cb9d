import { spawnSync } from "node:child_process";
import { appendFileSync, cpSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

function ax(args: string[], timeoutMs = 60_000) {
  const r = spawnSync(process.execPath, [AX, ...args], { encoding: "utf8", timeout: timeoutMs });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("ax bundle", () => {
  const tmp = tempDir("ax-bundle-cli-");
  afterAll(() => tmp.cleanup());

  it.each([
    [["bundle"], 'bundle: unknown subcommand "" (expected build, verify, profiles or fleet)'],
    [["bundle", "build"], "bundle build: --profile NAME is required"],
    [["bundle", "build", "--profile", "x", "--fast"], "bundle build: Unknown option '--fast'"],
    [["bundle", "verify"], "bundle verify: FILE is required (NAME.tar.gz or its folder)"],
    [
      ["bundle", "verify", "/nonexistent.tar.gz"],
      "bundle verify: /nonexistent.tar.gz: no such file",
    ],
    [["bundle", "fleet"], "bundle fleet: --config FILE is required"],
  ])("rejects %j with a usage error naming the problem", (args, message) => {
    const r = ax(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`ax: AX_CLI_USAGE: ${message}`);
  });

  it("lists the profiles", () => {
    const r = ax(["bundle", "profiles"]);
    expect(r.code, r.stderr).toBe(0);
    const names = r.stdout
      .split("\n")
      .slice(1)
      .map((l) => l.split(/\s+/)[0])
      .filter(Boolean);
    expect(names).toEqual(["gateway", "sensor-hub", "server"]);
  });

  it("refuses a profile that does not exist", () => {
    const r = ax(["bundle", "build", "--profile", "toaster", "--out", tmp.dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /^ax: AX_PROFILE_NOT_FOUND: no firmware profile "toaster" in .*firmware-profiles\/? \(there: gateway, sensor-hub, server\)\n$/,
    );
  });

  it("builds a bundle, verifies it, and names the file a changed copy differs in", () => {
    const built = ax(["bundle", "build", "--profile", "sensor-hub", "--out", tmp.dir]);
    expect(built.code, built.stderr).toBe(0);
    expect(built.stdout).toMatch(/^built sensor-hub \(ax [^)]+\) in \d+ ms → /);
    expect(built.stdout).toMatch(
      /agent\.mjs: \d+ of 153600 budgeted bytes; for linux-\w+ \(glibc\), Node >=20\.0\.0 <21\.0\.0/,
    );
    const dir = join(tmp.dir, "sensor-hub");
    const ok = ax(["bundle", "verify", join(dir, "sensor-hub.tar.gz")]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(
      /^ok: .*sensor-hub\.tar\.gz: profile sensor-hub, ax .*; 5 files match/,
    );

    const copy = join(tmp.dir, "copy");
    cpSync(dir, copy, { recursive: true });
    appendFileSync(join(copy, "better_sqlite3.node"), "x");
    const bad = ax(["bundle", "verify", copy]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain(`ax: AX_BUNDLE_VERIFY: ${copy}: does not match its manifest`);
    expect(bad.stderr).toMatch(/\nbetter_sqlite3\.node: \d+ bytes, the manifest says \d+\n/);
    expect(bad.stderr).toMatch(
      /\nbetter_sqlite3\.node: sha256 [0-9a-f]{12}…, the manifest says [0-9a-f]{12}…\n/,
    );
  }, 90_000);
});
