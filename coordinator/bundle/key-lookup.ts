import type { KeyObject } from "node:crypto";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { AxError } from "../../shared/errors.js";
import { loadCoordinatorConfig, secretsDir } from "../config.js";
import { SECRET_FILES } from "../security/secrets.js";
import { readPublicKey, readSigningKey, type TrustedKey } from "./signature.js";

/*
 * Where `ax bundle build` finds the key it signs with and `ax bundle verify` the key it trusts
 * (docs/bundles.md, "Which key"): the file named by a flag, else the secrets folder of the
 * coordinator config named by --config, else ./ax-secrets/ (the default secrets folder of a
 * coordinator whose store is in the working folder). Nothing is created: a key made up here would
 * be one no coordinator or device knows.
 */

/** The flags that say where a key is. */
export interface KeyFlags {
  /** The key file itself (`--signing-key` / `--public-key`). */
  file?: string | undefined;
  /** A coordinator config file (`--config`): the key is in its secrets folder. */
  config?: string | undefined;
  /** @default process.cwd() */
  cwd?: string | undefined;
}

function locate(
  command: string,
  flag: string,
  secretFile: string,
  flags: KeyFlags,
  otherwise: string,
): string {
  if (flags.file !== undefined) {
    const path = resolve(flags.cwd ?? process.cwd(), flags.file);
    if (!existsSync(path))
      throw new AxError("AX_SECURITY_KEY", `${command}: ${flag} ${flags.file}: no such file`);
    return path;
  }
  if (flags.config !== undefined) {
    const config = loadCoordinatorConfig(flags.config);
    const path = join(secretsDir(config), secretFile);
    if (!existsSync(path)) {
      throw new AxError(
        "AX_SECURITY_KEY",
        `${command}: ${path}: no such file (the secrets folder of ${flags.config}: security.dir, or ax-secrets beside the store; the coordinator creates it on its first start); or pass ${flag} FILE`,
      );
    }
    return path;
  }
  const path = resolve(flags.cwd ?? process.cwd(), "ax-secrets", secretFile);
  if (!existsSync(path)) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${command}: no ${join("ax-secrets", secretFile)} here; pass ${flag} FILE (the coordinator's ${secretFile}) or --config COORDINATOR_CONFIG (its secrets folder)${otherwise}`,
    );
  }
  return path;
}

/** The coordinator's bundle signing key (Ed25519 private), for `ax bundle build`. */
export function findSigningKey(flags: KeyFlags): { key: KeyObject; path: string } {
  const path = locate(
    "bundle build",
    "--signing-key",
    SECRET_FILES.bundleKey,
    flags,
    ", or --unsigned for a development build",
  );
  return { key: readSigningKey(path), path };
}

/** The coordinator's bundle signing public key, for `ax bundle verify`. */
export function findPublicKey(flags: KeyFlags): TrustedKey {
  const path = locate(
    "bundle verify",
    "--public-key",
    SECRET_FILES.bundlePublic,
    flags,
    ", or --allow-unsigned to check only the checksums of a development build",
  );
  return { key: readPublicKey(path), source: path };
}
