import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import { readTarGz, type TarEntry, tarGz } from "./tar.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const entries: TarEntry[] = [
  { name: "b/", data: Buffer.alloc(0) },
  { name: "b/empty.txt", data: Buffer.alloc(0) },
  { name: "b/one-block.bin", data: Buffer.alloc(512, 1) },
  { name: "b/odd.txt", data: Buffer.from("hello\n") },
  { name: "b/run.sh", data: Buffer.from("#!/bin/sh\n"), mode: 0o755 },
];

describe("tar.gz", () => {
  it("reads back what it wrote, and the same input gives the same bytes", () => {
    const at = new Date("2025-01-02T03:04:05Z");
    const gz = tarGz(entries, at);
    expect(tarGz(entries, at)).toEqual(gz);
    expect(readTarGz(gz)).toEqual(
      entries.map((e) => ({ ...e, mode: e.mode ?? (e.name.endsWith("/") ? 0o755 : 0o644) })),
    );
  });

  it("is an archive the system's tar extracts, with contents, modes and times", () => {
    const dir = mkdtempSync(join(tmpdir(), "ax-tar-"));
    dirs.push(dir);
    writeFileSync(join(dir, "b.tar.gz"), tarGz(entries, new Date("2025-01-02T03:04:05Z")));
    const list = spawnSync("tar", ["-tvzf", "b.tar.gz"], { cwd: dir, encoding: "utf8" });
    expect(list.status, list.stderr).toBe(0);
    expect(list.stdout).toContain("2025-01-02");
    const x = spawnSync("tar", ["-xzf", "b.tar.gz"], { cwd: dir, encoding: "utf8" });
    expect(x.status, x.stderr).toBe(0);
    expect(readFileSync(join(dir, "b/odd.txt"), "utf8")).toBe("hello\n");
    expect(readFileSync(join(dir, "b/one-block.bin"))).toEqual(Buffer.alloc(512, 1));
    expect(spawnSync("test", ["-x", join(dir, "b/run.sh")]).status).toBe(0);
    expect(spawnSync("test", ["-x", join(dir, "b/odd.txt")]).status).toBe(1);
  });

  it("refuses a damaged archive", () => {
    const gz = tarGz(entries, new Date(0));
    expect(() => readTarGz(gz.subarray(0, gz.length - 8))).toThrow();
    const tar = Buffer.alloc(1024);
    tar.write("x", 0);
    tar.write("0000000\0", 148);
    expect(() => readTarGz(gzipSync(tar))).toThrow("tar: bad header checksum at byte 0");
  });
});
