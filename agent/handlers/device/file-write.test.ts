import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fileWriteHandler, resolveWritePath } from "./file-write.js";
import { failureOf, paramsError, testContext } from "./test-context.js";

let root: string;
let out: string;
let outside: string;

beforeEach(async () => {
  root = await realpath(await mkdtemp(join(tmpdir(), "ax-file-write-")));
  out = join(root, "out");
  outside = join(root, "outside");
  await mkdir(out);
  await mkdir(outside);
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("file.write", () => {
  it("writes a file under an allowed prefix, replacing what was there", async () => {
    const handler = fileWriteHandler({ allow: [`${out}/`] });
    expect(handler.name).toBe("file.write");
    const path = join(out, "value");
    await expect(handler.run(testContext(), { path, value: "1" })).resolves.toEqual({
      path,
      bytes: 1,
    });
    await expect(handler.run(testContext(), { path, value: "0\n" })).resolves.toEqual({
      path,
      bytes: 2,
    });
    expect(await readFile(path, "utf8")).toBe("0\n");
  });

  it("appends when asked, counting bytes not characters", async () => {
    const handler = fileWriteHandler({ allow: [out] });
    const path = join(out, "log.txt");
    await handler.run(testContext(), { path, value: "a\n" });
    await expect(handler.run(testContext(), { path, value: "ü\n", append: true })).resolves.toEqual(
      { path, bytes: 3 },
    );
    expect(await readFile(path, "utf8")).toBe("a\nü\n");
  });

  it("allows an entry that names a file exactly", async () => {
    const path = join(out, "export");
    const handler = fileWriteHandler({ allow: [path] });
    await expect(handler.run(testContext(), { path, value: "17" })).resolves.toEqual({
      path,
      bytes: 2,
    });
  });

  it("refuses a path that escapes the prefix with ..", async () => {
    const handler = fileWriteHandler({ allow: [`${out}/`] });
    const path = `${out}/../outside/x`;
    expect(await failureOf(handler.run(testContext(), { path, value: "1" }))).toEqual({
      name: "HandlerFailure",
      message: `file.write: "${path}" (${outside}/x) is not under an allowed prefix (${out})`,
      retryable: false,
    });
    expect(existsSync(join(outside, "x"))).toBe(false);
  });

  it("refuses a path under no allowed prefix, including a sibling that shares its start", async () => {
    const handler = fileWriteHandler({ allow: [out] });
    await mkdir(`${out}back`);
    for (const path of [join(outside, "x"), `${out}back/x`]) {
      expect(await failureOf(handler.run(testContext(), { path, value: "1" }))).toEqual({
        name: "HandlerFailure",
        message: `file.write: "${path}" is not under an allowed prefix (${out})`,
        retryable: false,
      });
    }
    const none = fileWriteHandler({ allow: [] });
    expect(
      await failureOf(none.run(testContext(), { path: join(out, "x"), value: "1" })),
    ).toMatchObject({
      message: `file.write: "${join(out, "x")}" is not under an allowed prefix (none)`,
    });
  });

  it("refuses a symbolic link to a directory outside the prefixes", async () => {
    await symlink(outside, join(out, "link"));
    const handler = fileWriteHandler({ allow: [out] });
    const path = join(out, "link", "x");
    expect(await failureOf(handler.run(testContext(), { path, value: "1" }))).toEqual({
      name: "HandlerFailure",
      message: `file.write: "${path}" leads through a symbolic link to ${outside}/x, outside the allowed prefixes`,
      retryable: false,
    });
    expect(existsSync(join(outside, "x"))).toBe(false);
  });

  it("refuses a symbolic link at the file itself, leaving its target alone", async () => {
    const target = join(outside, "passwd");
    await writeFile(target, "root:x:0:0\n");
    await symlink(target, join(out, "value"));
    await symlink(join(outside, "missing"), join(out, "dangling"));
    const handler = fileWriteHandler({ allow: [out] });
    const path = join(out, "value");
    expect(await failureOf(handler.run(testContext(), { path, value: "owned" }))).toEqual({
      name: "HandlerFailure",
      message: `file.write: "${path}" leads through a symbolic link to ${target}, outside the allowed prefixes`,
      retryable: false,
    });
    expect(await readFile(target, "utf8")).toBe("root:x:0:0\n");
    const dangling = await failureOf(
      handler.run(testContext(), { path: join(out, "dangling"), value: "x" }),
    );
    // A link to nothing outside is refused for where it points, for good (not "retry later").
    expect(dangling).toEqual({
      name: "HandlerFailure",
      message: `file.write: "${join(out, "dangling")}" leads through a symbolic link to ${join(outside, "missing")}, outside the allowed prefixes`,
      retryable: false,
    });
    expect(existsSync(join(outside, "missing"))).toBe(false);
  });

  it("follows a symbolic link that stays within the allowed prefixes", async () => {
    await mkdir(join(out, "real"));
    await symlink(join(out, "real"), join(out, "alias"));
    await writeFile(join(outside, "y"), "");
    await symlink(join(outside, "y"), join(out, "to-other"));
    const handler = fileWriteHandler({ allow: [out, join(outside, "y")] });
    await handler.run(testContext(), { path: join(out, "alias", "v"), value: "1" });
    expect(await readFile(join(out, "real", "v"), "utf8")).toBe("1");
    await handler.run(testContext(), { path: join(out, "to-other"), value: "2" });
    expect(await readFile(join(outside, "y"), "utf8")).toBe("2");
  });

  it("fails retryable when the directory is missing, for good on a directory", async () => {
    const handler = fileWriteHandler({ allow: [out] });
    const missing = join(out, "gpio17", "value");
    expect(await failureOf(handler.run(testContext(), { path: missing, value: "1" }))).toEqual({
      name: "HandlerFailure",
      message: `file.write: cannot resolve "${missing}": ENOENT: no such file or directory, realpath '${join(out, "gpio17")}'`,
      retryable: true,
    });
    await mkdir(join(out, "dir"));
    expect(
      await failureOf(handler.run(testContext(), { path: join(out, "dir"), value: "1" })),
    ).toEqual({
      name: "HandlerFailure",
      message: `file.write: cannot write "${join(out, "dir")}": EISDIR: illegal operation on a directory, open '${join(out, "dir")}'`,
      retryable: false,
    });
  });

  it.skipIf(!existsSync("/sys/class/net/lo"))(
    "trusts sysfs's own links (/sys/class/net/lo → /sys/devices/…)",
    async () => {
      const real = await resolveWritePath(["/sys/class/net/"], "/sys/class/net/lo/mtu");
      expect(real).toBe(join(await realpath("/sys/class/net/lo"), "mtu"));
      expect(real.startsWith("/sys/devices/")).toBe(true);
    },
  );

  it("refuses a relative allow entry", () => {
    expect(() => fileWriteHandler({ allow: ["var/out"] })).toThrow(
      new TypeError('allow: "var/out" is not an absolute path'),
    );
  });

  it("validates params with messages that name the field", () => {
    const { params } = fileWriteHandler({ allow: [out] });
    const check = (input: unknown) => paramsError(params, input);
    expect(check({ path: "/sys/class/gpio/gpio17/value", value: "1", append: false })).toBe("ok");
    expect(check({ path: "gpio17/value", value: "1" })).toBe(
      "params.path: must be an absolute path",
    );
    expect(check({ path: "/a\0b", value: "1" })).toBe("params.path: must be an absolute path");
    expect(check({ path: "/a", value: 1 })).toBe("params.value: expected string, got number");
    expect(check({ value: "1" })).toBe("params.path: is required (string)");
    expect(check({ path: "/a", value: "1", append: "yes" })).toBe(
      "params.append: expected boolean, got string",
    );
  });
});
