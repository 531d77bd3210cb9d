import { existsSync } from "node:fs";
import { AxError } from "../../shared/errors.js";
import { type IdentityFile, parseIdentityText } from "../../shared/identity.js";
import { readPrivate } from "../security/secrets.js";

/**
 * The agent identity's file name in a bundle. The agent looks for it beside its config file
 * (docs/bundles.md, "An identity in the bundle").
 */
export const IDENTITY_FILE = "ax-identity.json";

/** The problems of an identity file's text, one a line as `field: problem`; none when valid. */
export const identityProblems = parseIdentityText;

/**
 * Reads an agent identity file written by `ax fleet enroll` for `ax bundle build --identity`.
 * Returns its bytes as they are (the bundle ships the file unchanged) and what it says. Throws
 * AX_SECURITY_KEY naming the file and each bad field, or when others can read it: it is the
 * agent's secret.
 */
export function readIdentityFile(path: string): { data: Buffer; identity: IdentityFile } {
  if (!existsSync(path)) throw new AxError("AX_SECURITY_KEY", `${path}: no such identity file`);
  const text = readPrivate(path);
  const r = identityProblems(text);
  if (!r.ok) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${path}: invalid agent identity\n${r.problems.join("\n")}`,
      { context: { file: path, problems: r.problems } },
    );
  }
  return { data: Buffer.from(text, "utf8"), identity: r.identity };
}
