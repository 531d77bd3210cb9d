import {
  createHmac,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from "node:crypto";
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AxError } from "../../shared/errors.js";
import { makeDirs } from "../../shared/make-dirs.js";

/*
 * The coordinator's secrets (docs/security.md, "Keys"). One 32-byte fleet secret, from which every
 * agent's message key and MQTT password are derived with HMAC-SHA256 (so the store holds no
 * key, and a copied database gives an attacker nothing), and one Ed25519 key pair that signs
 * agent bundles. They live in one folder readable only by the coordinator's user.
 */

/** File names inside the secrets folder. */
export const SECRET_FILES = {
  fleet: "fleet.key",
  bundleKey: "bundle-signing.key",
  bundlePublic: "bundle-signing.pub",
  adminToken: "admin.token",
} as const;

/** What the coordinator holds. */
export interface Secrets {
  readonly dir: string;
  /** 32 random bytes; every agent key and broker password derives from it. */
  readonly fleet: Buffer;
  /** Signs bundle manifests (Ed25519). */
  readonly bundleKey: KeyObject;
  /** The public half, as a PEM text (SPKI), for `ax bundle verify` and the device. */
  readonly bundlePublicPem: string;
}

/**
 * Reads the secrets in `dir`, creating whichever is missing (the folder 0700, private files
 * 0600). A private file that others can read is refused, as ssh refuses a private key: whoever
 * could read it can command the fleet.
 */
export function loadOrCreateSecrets(dir: string): Secrets {
  try {
    makeDirs(dir, 0o700);
  } catch (err) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${dir}: cannot make the secrets folder: ${(err as Error).message}`,
      { cause: err },
    );
  }
  const fleetFile = join(dir, SECRET_FILES.fleet);
  if (!existsSync(fleetFile)) {
    writeFileSync(fleetFile, `${randomBytes(32).toString("hex")}\n`, { mode: 0o600, flag: "wx" });
  }
  const fleet = Buffer.from(readPrivate(fleetFile).trim(), "hex");
  if (fleet.length !== 32) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${fleetFile}: must hold 64 hex digits (32 bytes), has ${fleet.length} bytes`,
    );
  }
  const keyFile = join(dir, SECRET_FILES.bundleKey);
  const pubFile = join(dir, SECRET_FILES.bundlePublic);
  if (!existsSync(keyFile)) {
    const pair = generateKeyPairSync("ed25519");
    writeFileSync(keyFile, pair.privateKey.export({ type: "pkcs8", format: "pem" }), {
      mode: 0o600,
      flag: "wx",
    });
  }
  let bundleKey: KeyObject;
  try {
    bundleKey = createPrivateKey(readPrivate(keyFile));
  } catch (err) {
    throw new AxError("AX_SECURITY_KEY", `${keyFile}: not an Ed25519 private key (PEM)`, {
      cause: err,
    });
  }
  if (bundleKey.asymmetricKeyType !== "ed25519") {
    throw new AxError("AX_SECURITY_KEY", `${keyFile}: must be an Ed25519 key`);
  }
  const bundlePublicPem = createPublicKey(bundleKey).export({
    type: "spki",
    format: "pem",
  }) as string;
  if (!existsSync(pubFile) || readFileSync(pubFile, "utf8") !== bundlePublicPem) {
    writeFileSync(pubFile, bundlePublicPem, { mode: 0o644 });
  }
  return Object.freeze({ dir, fleet, bundleKey, bundlePublicPem });
}

/**
 * Reads the secrets in `dir` for a command that only reads them (`ax broker config`): a folder
 * without a fleet key is refused (AX_SECURITY_KEY, naming the folder and `source`) instead of
 * made, since a new fleet key would match no agent and no broker login.
 */
export function loadSecrets(dir: string, source: string, command: string): Secrets {
  if (
    !existsSync(join(dir, SECRET_FILES.fleet)) ||
    !existsSync(join(dir, SECRET_FILES.bundleKey))
  ) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${command}: ${dir}: holds no coordinator secrets (${SECRET_FILES.fleet}, ${SECRET_FILES.bundleKey}; security.dir of ${source}, else ax-secrets beside the store). ${command} only reads them: fix security.dir, or start the coordinator once, which creates them`,
      { context: { path: dir, source } },
    );
  }
  return loadOrCreateSecrets(dir);
}

/** Reads a file that must be private to this user. */
export function readPrivate(path: string): string {
  const mode = statSync(path).mode;
  if (process.platform !== "win32" && (mode & 0o077) !== 0) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${path}: is readable by others (mode ${(mode & 0o777).toString(8)}); run chmod 600 ${path}`,
    );
  }
  return readFileSync(path, "utf8");
}

/** Creates `path` with `text`, readable only by this user (an existing file is left as it is). */
export function writePrivate(path: string, text: string): void {
  writeFileSync(path, text, { mode: 0o600, flag: "wx" });
  chmodSync(path, 0o600);
}

/** Labels that keep each derived secret apart. */
const LABEL = {
  message: "ax/v1/message-key",
  mqtt: "ax/v1/mqtt-password",
} as const;

function derive(fleet: Buffer, label: string, name: string, generation: number): Buffer {
  return createHmac("sha256", fleet).update(`${label}\0${name}\0${generation}`, "utf8").digest();
}

/** An agent's message key for key generation `generation` (32 bytes). */
export function messageKey(fleet: Buffer, agentId: string, generation: number): Buffer {
  return derive(fleet, LABEL.message, agentId, generation);
}

/** The MQTT password of broker user `username` (an agent id, or the coordinator's name). */
export function mqttPassword(fleet: Buffer, username: string, generation: number): string {
  return derive(fleet, LABEL.mqtt, username, generation).toString("base64url");
}
