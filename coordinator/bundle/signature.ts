import {
  createHash,
  createPrivateKey,
  createPublicKey,
  type KeyObject,
  sign,
  verify,
} from "node:crypto";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { AxError } from "../../shared/errors.js";
import { readPrivate } from "../security/secrets.js";
import { MANIFEST_FILE } from "./manifest.js";

/*
 * A bundle's signature (docs/bundles.md, "Signature format"): manifest.sig beside manifest.json,
 * a JSON object holding an Ed25519 signature (RFC 8032, pure Ed25519: no pre-hash, no context)
 * over the exact bytes of manifest.json. The manifest lists every other file's sha256, so the
 * signature covers them all; signing the bytes, not a canonical form, lets a device-side
 * verifier in any language check it without a JSON canonicaliser.
 */

/** The signature's file name, beside manifest.json. */
export const SIGNATURE_FILE = "manifest.sig";

/** manifest.sig. */
export const signatureSchema = z.strictObject({
  alg: z.literal("ed25519"),
  /** {@link keyIdOf} the public key that checks it. */
  keyId: z.string().regex(/^[0-9a-f]{16}$/, "must be 16 lowercase hex digits"),
  /** The 64-byte signature, base64 (RFC 4648 §4, padded). */
  sig: z.string().regex(/^[A-Za-z0-9+/]{86}==$/, "must be 64 bytes in padded base64"),
});
export type BundleSignature = z.infer<typeof signatureSchema>;

/**
 * A key's id: the first 16 hex digits of the sha256 of its public key's SPKI DER encoding (the
 * bytes inside the PEM's base64). Names a key in messages; it is not what is trusted.
 */
export function keyIdOf(key: KeyObject): string {
  const pub = key.type === "private" ? createPublicKey(key) : key;
  const der = pub.export({ type: "spki", format: "der" });
  return createHash("sha256").update(der).digest("hex").slice(0, 16);
}

/** manifest.sig's text for `manifest` (the bytes written as manifest.json), signed with `key`. */
export function signManifest(manifest: Buffer, key: KeyObject): string {
  const signature: BundleSignature = {
    alg: "ed25519",
    keyId: keyIdOf(key),
    sig: sign(null, manifest, key).toString("base64"),
  };
  return `${JSON.stringify(signature, null, 2)}\n`;
}

/** A public key and where it came from, to check a signature with and to name in messages. */
export interface TrustedKey {
  key: KeyObject;
  /** The file it was read from. */
  source: string;
}

/**
 * Checks manifest.sig against manifest.json's bytes with `trusted`. Returns the problems, one a
 * line, naming the file; none when the signature is valid. `sig` undefined: the bundle is
 * unsigned, a problem of its own.
 */
export function checkSignature(
  manifest: Buffer,
  sig: Buffer | undefined,
  trusted: TrustedKey | undefined,
): string[] {
  if (sig === undefined) return [`${SIGNATURE_FILE}: missing: the bundle is unsigned`];
  let raw: unknown;
  try {
    raw = JSON.parse(sig.toString("utf8"));
  } catch (err) {
    return [`${SIGNATURE_FILE}: not valid JSON: ${(err as Error).message}`];
  }
  const parsed = signatureSchema.safeParse(raw);
  if (!parsed.success) {
    return parsed.error.issues.map(
      (i) => `${SIGNATURE_FILE}: ${i.path.map(String).join(".") || "(root)"}: ${i.message}`,
    );
  }
  if (trusted === undefined) return [`${SIGNATURE_FILE}: no public key to check it with`];
  const keyId = keyIdOf(trusted.key);
  const ok = verify(null, manifest, trusted.key, Buffer.from(parsed.data.sig, "base64"));
  if (ok) return [];
  const why =
    parsed.data.keyId === keyId
      ? `${MANIFEST_FILE} or ${SIGNATURE_FILE} was changed after signing`
      : `the bundle was signed with key ${parsed.data.keyId}`;
  return [
    `${SIGNATURE_FILE}: signature does not verify with key ${keyId} (${trusted.source}): ${why}`,
  ];
}

/** Reads an Ed25519 private key (PKCS#8 PEM) that must be private to this user. */
export function readSigningKey(path: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey(readPrivate(path));
  } catch (err) {
    if (err instanceof AxError) throw err;
    throw new AxError("AX_SECURITY_KEY", `${path}: not a private key (PEM)`, { cause: err });
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${path}: must be an Ed25519 key, is ${key.asymmetricKeyType}`,
    );
  }
  return key;
}

/** Reads an Ed25519 public key (SPKI PEM). */
export function readPublicKey(path: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPublicKey(readFileSync(path, "utf8"));
  } catch (err) {
    throw new AxError("AX_SECURITY_KEY", `${path}: not a public key (PEM)`, { cause: err });
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${path}: must be an Ed25519 key, is ${key.asymmetricKeyType}`,
    );
  }
  return key;
}
