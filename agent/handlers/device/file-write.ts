import { constants } from "node:fs";
import { appendFile, lstat, readlink, realpath, statfs, writeFile } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import * as z from "zod/mini";
import type { HandlerPart } from "../../parts/types.js";
import { defineHandler, type Handler, HandlerFailure } from "../registry.js";
import { absolutePath } from "./common.js";

/** Options of `file.write`, resolved from the agent config's `"file.write"` section. */
export interface FileWriteOptions {
  /**
   * Where writes may go, such as `"/sys/class/gpio/"` or `"/var/lib/ax/out/"`. Each entry allows
   * itself and everything below it, on path-segment boundaries: `/var/out` does not allow
   * `/var/outside`.
   */
  allow: readonly string[];
}

/** The params of one `file.write` execution. */
export const fileWriteParamsSchema = z.object({
  path: absolutePath,
  value: z.string(),
  /** @default false (the file is replaced) */
  append: z.optional(z.boolean()),
});

export type FileWriteParams = z.infer<typeof fileWriteParamsSchema>;

const NAME = "file.write";

/** statfs(2) f_type of sysfs (linux/magic.h). */
const SYSFS_MAGIC = 0x62656572;

/**
 * Errors that the same write will meet again: a directory, a bad value for a sysfs attribute
 * (EINVAL), a read-only file system. Others (ENOENT, EACCES, EBUSY) are often a race with the
 * kernel or udev, e.g. a GPIO's `value` that appears, or becomes writable, just after `export`.
 */
const PERMANENT_CODES = new Set(["EISDIR", "ENOTDIR", "EINVAL", "ELOOP", "EROFS", "ENAMETOOLONG"]);

function within(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(prefix.endsWith(sep) ? prefix : prefix + sep);
}

function fsFailure(err: unknown, doing: string): HandlerFailure {
  const code = (err as { code?: unknown }).code;
  return new HandlerFailure(`${NAME}: cannot ${doing}: ${(err as Error).message}`, {
    retryable: !(typeof code === "string" && PERMANENT_CODES.has(code)),
    cause: err,
  });
}

/**
 * Where an allow entry really is: its real path, or for an entry that names a file not created
 * yet, its directory's real path and its name. Undefined when even the directory is missing.
 */
async function realEntry(entry: string): Promise<string | undefined> {
  try {
    return await realpath(entry);
  } catch {
    try {
      return join(await realpath(dirname(entry)), basename(entry));
    } catch {
      return undefined;
    }
  }
}

/**
 * True when every symbolic link met going from `entry` down to `path` lies on sysfs. Nobody can
 * create a link there but the kernel, so such links (`/sys/class/gpio/gpio17` →
 * `/sys/devices/…/gpio17`) cannot be planted to lead a write astray.
 */
async function onlyKernelLinks(entry: string, path: string): Promise<boolean> {
  let cur = await realEntry(entry);
  if (cur === undefined) return false;
  for (const part of relative(entry, path)
    .split(sep)
    .filter((p) => p !== "")) {
    const next = join(cur, part);
    const st = await lstat(next).catch(() => undefined);
    if (st?.isSymbolicLink()) {
      if ((await statfs(cur)).type !== SYSFS_MAGIC) return false;
      cur = await realpath(next);
    } else {
      cur = next;
    }
  }
  return true;
}

/**
 * Checks `raw` against the allow-list and returns the real path to write (no symbolic links in
 * it). `..` is resolved before the check; then the real location, after symbolic links, must also
 * be under an allowed entry's real path, unless the only links on the way are sysfs's own.
 * Throws a non-retryable HandlerFailure naming the path when it is not allowed.
 */
export async function resolveWritePath(allowed: readonly string[], raw: string): Promise<string> {
  const allow = allowed.map((e) => resolve(e));
  const path = resolve(raw);
  const entry = allow.find((e) => within(path, e));
  const shown = path === raw ? JSON.stringify(raw) : `${JSON.stringify(raw)} (${path})`;
  if (entry === undefined) {
    throw new HandlerFailure(
      `${NAME}: ${shown} is not under an allowed prefix (${allow.join(", ") || "none"})`,
      { retryable: false },
    );
  }
  let real: string;
  try {
    real = join(await realpath(dirname(path)), basename(path));
    const st = await lstat(real).catch(() => undefined);
    if (st?.isSymbolicLink()) {
      const link = real;
      real = await realpath(link).catch(async (err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw err;
        // A dangling link: judged by where it points, as any link at the file is.
        const target = resolve(dirname(link), await readlink(link));
        const dir = await realpath(dirname(target)).catch(() => dirname(target));
        return join(dir, basename(target));
      });
    }
  } catch (err) {
    throw fsFailure(err, `resolve ${shown}`);
  }
  const realEntries = await Promise.all(allow.map(realEntry));
  if (realEntries.some((e) => e !== undefined && within(real, e))) return real;
  if (await onlyKernelLinks(entry, path).catch(() => false)) return real;
  throw new HandlerFailure(
    `${NAME}: ${shown} leads through a symbolic link to ${real}, outside the allowed prefixes`,
    { retryable: false },
  );
}

/**
 * `file.write`: writes (or appends) a string to a file under an allowed prefix. This is how a
 * sysfs attribute is driven: `{ "path": "/sys/class/gpio/gpio17/value", "value": "1" }`.
 */
export function fileWriteHandler(opts: FileWriteOptions): Handler<FileWriteParams> {
  const allow = opts.allow.map((e) => {
    if (!isAbsolute(e)) throw new TypeError(`allow: ${JSON.stringify(e)} is not an absolute path`);
    return resolve(e);
  });

  return defineHandler(NAME, fileWriteParamsSchema, async (_ctx, params) => {
    const real = await resolveWritePath(allow, params.path);
    // O_NOFOLLOW: if a link was swapped in at the last component since the check, fail (ELOOP)
    // rather than follow it.
    const flag =
      constants.O_WRONLY |
      constants.O_CREAT |
      constants.O_NOFOLLOW |
      (params.append ? constants.O_APPEND : constants.O_TRUNC);
    try {
      if (params.append) await appendFile(real, params.value, { flag });
      else await writeFile(real, params.value, { flag });
    } catch (err) {
      throw fsFailure(err, `write ${JSON.stringify(params.path)}`);
    }
    return { path: resolve(params.path), bytes: Buffer.byteLength(params.value) };
  });
}

/** The config section of `file.write`. */
export const fileWriteConfigSchema = z.strictObject({
  /** Path prefixes writes may go to, such as "/sys/class/gpio/". */
  allow: z.array(absolutePath),
});

/** `file.write` as a part an agent is built with. */
export const fileWritePart: HandlerPart = {
  name: "file.write",
  config: () => fileWriteConfigSchema,
  build: (section) => ({
    handler: fileWriteHandler(section as z.output<typeof fileWriteConfigSchema>) as never,
  }),
};
