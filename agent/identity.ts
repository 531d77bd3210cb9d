import { readFileSync, statSync } from "node:fs";
import { AxError } from "../shared/errors.js";
import { type IdentityFile, parseIdentityText } from "../shared/identity.js";

/** The identity file an agent picks up beside its config when its config names none. */
export const DEFAULT_IDENTITY_FILE = "ax-identity.json";

/**
 * Reads an agent's identity file (written by `ax fleet enroll`). Refused, naming the file: one
 * that others can read (as ssh refuses such a private key), one that is not JSON, or one whose
 * fields are wrong (each named).
 */
export function readIdentityFile(path: string): IdentityFile {
  let text: string;
  try {
    const mode = statSync(path).mode;
    if (process.platform !== "win32" && (mode & 0o077) !== 0) {
      throw new AxError(
        "AX_SECURITY_KEY",
        `${path}: identity file is readable by others (mode ${(mode & 0o777).toString(8)}); run chmod 600 ${path}`,
      );
    }
    text = readFileSync(path, "utf8");
  } catch (err) {
    if (err instanceof AxError) throw err;
    throw new AxError(
      "AX_SECURITY_KEY",
      `${path}: cannot read identity file: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const r = parseIdentityText(text);
  if (!r.ok) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${path}: invalid agent identity\n${r.problems.join("\n")}`,
    );
  }
  return r.identity;
}
