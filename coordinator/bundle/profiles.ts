import { readdirSync, readFileSync } from "node:fs";
import { basename, resolve } from "node:path";
import { AxError } from "../../shared/errors.js";
import { parseJsonText } from "../../shared/json-text.js";
import { type FirmwareProfile, parseFirmwareProfile } from "../../shared/profile.js";
import { packageFile } from "../package-files.js";

/** firmware-profiles/ of this checkout. */
export const PROFILES_DIR = `${packageFile("firmware-profiles")}/`;

/** The names of the profiles in `dir`, sorted. */
export function listProfiles(dir = PROFILES_DIR): string[] {
  try {
    return readdirSync(dir)
      .filter((f) => f.endsWith(".json"))
      .map((f) => f.slice(0, -".json".length))
      .sort();
  } catch {
    return [];
  }
}

/**
 * Loads a profile by name (firmware-profiles/NAME.json) or by path (anything with a `/` or
 * ending in `.json`). A missing one is AX_PROFILE_NOT_FOUND; a bad one AX_PROFILE_INVALID
 * naming the file, the field and the problem.
 */
export function loadProfile(
  nameOrPath: string,
  dir = PROFILES_DIR,
): { profile: FirmwareProfile; file: string } {
  const isPath = nameOrPath.includes("/") || nameOrPath.endsWith(".json");
  const file = isPath ? resolve(nameOrPath) : resolve(dir, `${nameOrPath}.json`);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") {
      const known = listProfiles(dir);
      throw new AxError(
        "AX_PROFILE_NOT_FOUND",
        isPath
          ? `${file}: no such profile file`
          : `no firmware profile "${nameOrPath}" in ${dir} (there: ${known.join(", ") || "none"})`,
        { context: { profile: nameOrPath } },
      );
    }
    throw new AxError("AX_CONFIG_READ", `${file}: cannot read: ${(err as Error).message}`, {
      cause: err,
    });
  }
  // Named by line and column, as a config file's or a job file's syntax error is.
  const parsed = parseJsonText(text);
  if (!parsed.ok) {
    throw new AxError(
      "AX_PROFILE_INVALID",
      `${file}:${parsed.line}:${parsed.column}: not valid JSON: ${parsed.reason}`,
      { context: { path: file, line: parsed.line, column: parsed.column } },
    );
  }
  const expected = basename(file, ".json");
  return { profile: parseFirmwareProfile(parsed.value, file, expected), file };
}
