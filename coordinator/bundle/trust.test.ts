import { generateKeyPairSync, verify as verifySignature } from "node:crypto";
import {
  chmodSync,
  cpSync,
  existsSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isAxError } from "../../shared/errors.js";
import { readTarGz, tarGz } from "../../shared/tar.js";
import { tempDir } from "../../test/helpers/env.js";
import { IDENTITY_FILE } from "./identity.js";
import { AGENT_FILE, type MadeBundle, makeBundle } from "./make.js";
import { sha256 } from "./manifest.js";
import { keyIdOf, SIGNATURE_FILE, signatureSchema } from "./signature.js";
import { verifyBundle } from "./verify.js";

/**
 * Signed bundles, for real: one sensor-hub build signed with a fresh key pair and carrying an
 * agent identity, then copies of it tampered with one way each, and verify's verdict on each.
 */
const tmp = tempDir("ax-bundle-trust-");
const keys = generateKeyPairSync("ed25519");
const other = generateKeyPairSync("ed25519");
const trusted = { key: keys.publicKey, source: "test.pub" };
const keyId = keyIdOf(keys.publicKey);
const pem = (k: typeof keys.publicKey) => k.export({ type: "spki", format: "pem" }) as string;

const identity = {
  ax: "agent-identity/1",
  agentId: "hub-0017",
  generation: 1,
  key: "q".repeat(43),
  mqtt: { username: "hub-0017", password: "p".repeat(43) },
  bundlePublicKey: pem(keys.publicKey),
};

/** Writes an identity file (mode 0600, as `ax fleet enroll` does) and returns its path. */
function identityFile(name: string, content: unknown, mode = 0o600): string {
  const path = join(tmp.dir, name);
  writeFileSync(path, typeof content === "string" ? content : JSON.stringify(content), { mode });
  chmodSync(path, mode);
  return path;
}

let made: MadeBundle;
let unsigned: MadeBundle;

beforeAll(async () => {
  made = await makeBundle({
    profile: "sensor-hub",
    outDir: join(tmp.dir, "signed"),
    signingKey: keys.privateKey,
    identity: identityFile("identity.json", identity),
  });
  unsigned = await makeBundle({
    profile: "sensor-hub",
    outDir: join(tmp.dir, "unsigned"),
    unsigned: true,
  });
}, 120_000);
afterAll(() => tmp.cleanup());

/** A copy of the signed bundle's folder, without its archive (so only the folder is checked). */
function copy(name: string): string {
  const dir = join(tmp.dir, name);
  cpSync(made.dir, dir, { recursive: true });
  unlinkSync(join(dir, "sensor-hub.tar.gz"));
  return dir;
}

const changedAfterSigning = `manifest.sig: signature does not verify with key ${keyId} (test.pub): manifest.json or manifest.sig was changed after signing`;

describe("ax bundle build signs", () => {
  it("writes manifest.sig: Ed25519 over manifest.json's exact bytes, with the key's id", () => {
    const manifest = readFileSync(join(made.dir, "manifest.json"));
    const sig = signatureSchema.parse(
      JSON.parse(readFileSync(join(made.dir, SIGNATURE_FILE), "utf8")),
    );
    expect(sig.alg).toBe("ed25519");
    expect(sig.keyId).toBe(keyId);
    expect(made.keyId).toBe(keyId);
    // The key id as a verifier elsewhere computes it: sha256 of the SPKI DER, 16 hex digits.
    const der = keys.publicKey.export({ type: "spki", format: "der" });
    expect(keyId).toBe(sha256(der).slice(0, 16));
    expect(verifySignature(null, manifest, keys.publicKey, Buffer.from(sig.sig, "base64"))).toBe(
      true,
    );
    expect(made.manifest.unsigned).toBeUndefined();
    // The signature is not listed in the manifest it signs; the archive carries both.
    expect(Object.keys(made.manifest.files)).not.toContain(SIGNATURE_FILE);
    const entries = readTarGz(readFileSync(made.archive));
    expect(entries.find((e) => e.name === "sensor-hub/manifest.json")?.data).toEqual(manifest);
    expect(entries.find((e) => e.name === `sensor-hub/${SIGNATURE_FILE}`)?.data).toEqual(
      readFileSync(join(made.dir, SIGNATURE_FILE)),
    );
  });

  it("ships the identity as ax-identity.json, mode 600, listed, and keeps the archive private", () => {
    const path = join(made.dir, IDENTITY_FILE);
    expect(readFileSync(path, "utf8")).toBe(JSON.stringify(identity));
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(made.manifest.files[IDENTITY_FILE]).toEqual({
      sha256: sha256(readFileSync(path)),
      bytes: statSync(path).size,
    });
    const entry = readTarGz(readFileSync(made.archive)).find(
      (e) => e.name === `sensor-hub/${IDENTITY_FILE}`,
    );
    expect(entry?.mode).toBe(0o600);
    expect(statSync(made.archive).mode & 0o777).toBe(0o600);
    expect(made.identityAgentId).toBe("hub-0017");
    // Without an identity the archive is an ordinary public artifact.
    expect(existsSync(join(unsigned.dir, IDENTITY_FILE))).toBe(false);
    expect(statSync(unsigned.archive).mode & 0o777).toBe(0o644);
  });

  it("marks an --unsigned build in its manifest and writes no manifest.sig", () => {
    expect(unsigned.manifest.unsigned).toBe(true);
    expect(unsigned.keyId).toBeUndefined();
    expect(existsSync(join(unsigned.dir, SIGNATURE_FILE))).toBe(false);
    expect(readTarGz(readFileSync(unsigned.archive)).map((e) => e.name)).not.toContain(
      `sensor-hub/${SIGNATURE_FILE}`,
    );
  });
});

describe("ax bundle verify checks the signature", () => {
  it("passes the signed bundle: its archive and its folder", () => {
    for (const target of [made.archive, made.dir]) {
      const r = verifyBundle(target, { trusted });
      expect(r.problems, target).toEqual([]);
      expect(r.signature).toBe("valid");
      expect(r.identityAgentId).toBe("hub-0017");
    }
  });

  it("refuses a bundled file with one byte changed, naming it, though the signature holds", () => {
    const dir = copy("byte");
    const agent = readFileSync(join(dir, AGENT_FILE));
    agent[1000] = (agent[1000] as number) ^ 1;
    writeFileSync(join(dir, AGENT_FILE), agent);
    const r = verifyBundle(dir, { trusted });
    expect(r.signature).toBe("valid");
    expect(r.problems).toEqual([
      `${AGENT_FILE}: sha256 ${sha256(agent).slice(0, 12)}…, the manifest says ${made.manifest.files[AGENT_FILE]?.sha256.slice(0, 12)}…`,
    ]);
  });

  it("refuses a forged manifest that lists the changed file's new sha256", () => {
    const dir = copy("forged");
    const agent = readFileSync(join(dir, AGENT_FILE));
    agent[1000] = (agent[1000] as number) ^ 1;
    writeFileSync(join(dir, AGENT_FILE), agent);
    const text = readFileSync(join(dir, "manifest.json"), "utf8");
    const original = made.manifest.files[AGENT_FILE]?.sha256 as string;
    writeFileSync(join(dir, "manifest.json"), text.replace(original, sha256(agent)));
    const r = verifyBundle(dir, { trusted });
    expect(r.signature).toBe("invalid");
    expect(r.problems).toEqual([changedAfterSigning]);
  });

  it("refuses a manifest.json with one byte changed, even one JSON ignores", () => {
    const dir = copy("manifest-byte");
    writeFileSync(join(dir, "manifest.json"), `${readFileSync(join(dir, "manifest.json"))} `);
    expect(verifyBundle(dir, { trusted }).problems).toEqual([changedAfterSigning]);
  });

  it("refuses a changed signature, and a malformed one naming its fields", () => {
    const dir = copy("sig");
    const sigPath = join(dir, SIGNATURE_FILE);
    const sig = JSON.parse(readFileSync(sigPath, "utf8"));
    const bytes = Buffer.from(sig.sig, "base64");
    bytes[10] = (bytes[10] as number) ^ 0x80;
    writeFileSync(sigPath, JSON.stringify({ ...sig, sig: bytes.toString("base64") }));
    expect(verifyBundle(dir, { trusted }).problems).toEqual([changedAfterSigning]);

    writeFileSync(sigPath, JSON.stringify({ alg: "rsa", keyId: keyId.toUpperCase(), sig: "x" }));
    const r = verifyBundle(dir, { trusted });
    expect(r.signature).toBe("invalid");
    expect(r.problems).toEqual([
      'manifest.sig: alg: Invalid input: expected "ed25519"',
      "manifest.sig: keyId: must be 16 lowercase hex digits",
      "manifest.sig: sig: must be 64 bytes in padded base64",
    ]);
    writeFileSync(sigPath, "{");
    expect(verifyBundle(dir, { trusted }).problems[0]).toMatch(/^manifest\.sig: not valid JSON: /);
  });

  it("refuses a bundle whose manifest.sig was deleted: unsigned", () => {
    const dir = copy("nosig");
    unlinkSync(join(dir, SIGNATURE_FILE));
    const r = verifyBundle(dir, { trusted });
    expect(r.signature).toBe("unsigned");
    expect(r.problems).toEqual(["manifest.sig: missing: the bundle is unsigned"]);
  });

  it("refuses a bundle checked with another key pair's public key, naming both keys", () => {
    const r = verifyBundle(made.archive, {
      trusted: { key: other.publicKey, source: "other.pub" },
    });
    expect(r.signature).toBe("invalid");
    expect(r.problems).toEqual([
      `manifest.sig: signature does not verify with key ${keyIdOf(other.publicKey)} (other.pub): the bundle was signed with key ${keyId}`,
    ]);
    expect(verifyBundle(made.archive, {}).problems).toEqual([
      "manifest.sig: no public key to check it with",
    ]);
  });

  it("refuses an archive whose manifest was changed inside it", () => {
    const entries = readTarGz(readFileSync(made.archive)).map((e) =>
      e.name === "sensor-hub/manifest.json"
        ? { ...e, data: Buffer.from(e.data.toString("utf8").replace('"format": 1', '"format":1')) }
        : e,
    );
    const path = join(tmp.dir, "repacked.tar.gz");
    writeFileSync(path, tarGz(entries, new Date()));
    expect(verifyBundle(path, { trusted }).problems).toEqual([changedAfterSigning]);
  });

  it("refuses an unsigned build unless unsigned builds are allowed", () => {
    expect(verifyBundle(unsigned.archive, { trusted }).problems).toEqual([
      "manifest.sig: missing: the bundle is unsigned",
    ]);
    const r = verifyBundle(unsigned.archive, { allowUnsigned: true });
    expect(r.problems).toEqual([]);
    expect(r.signature).toBe("unsigned");
    // Allowed unsigned still means the checksums must match.
    const dir = join(tmp.dir, "unsigned-copy");
    cpSync(unsigned.dir, dir, { recursive: true });
    writeFileSync(join(dir, "agent.env"), "AX_AGENT_CONFIG=/tmp/evil.json\n");
    expect(verifyBundle(dir, { allowUnsigned: true }).problems).toEqual([
      expect.stringMatching(/^agent\.env: \d+ bytes, the manifest says \d+$/),
      expect.stringMatching(/^agent\.env: sha256 /),
    ]);
    // A signed build whose manifest.sig was taken away is not a development build.
    const stripped = join(tmp.dir, "stripped-copy");
    cpSync(made.dir, stripped, { recursive: true });
    unlinkSync(join(stripped, "manifest.sig"));
    const r2 = verifyBundle(stripped, { allowUnsigned: true });
    expect(r2.problems).toEqual(["manifest.sig: missing: the bundle is unsigned"]);
    expect(r2.signature).toBe("unsigned");
  });
});

describe("ax bundle build refuses, before building", () => {
  const build = (options: Partial<Parameters<typeof makeBundle>[0]>) =>
    makeBundle({
      profile: "sensor-hub",
      outDir: join(tmp.dir, "refused"),
      ...options,
    }).catch((e: unknown) => e);

  it("no signing key and no unsigned", async () => {
    const err = await build({});
    expect(isAxError(err, "AX_SECURITY_KEY")).toBe(true);
    expect((err as Error).message).toBe(
      "bundle build: no signing key; pass the coordinator's bundle signing key, or build unsigned for development",
    );
    expect(existsSync(join(tmp.dir, "refused"))).toBe(false);
  });

  it("an identity file that is not valid, naming each bad field", async () => {
    const path = identityFile("bad-identity.json", {
      ...identity,
      key: "too-short",
      mqtt: { username: "hub-0017" },
    });
    const err = await build({ signingKey: keys.privateKey, identity: path });
    expect(isAxError(err, "AX_SECURITY_KEY")).toBe(true);
    expect((err as Error).message).toBe(
      [
        `${path}: invalid agent identity`,
        "key: must be 32 bytes in unpadded base64url",
        "mqtt.password: is required (string)",
      ].join("\n"),
    );
    const notJson = identityFile("not-json.json", "{ agentId");
    expect(((await build({ unsigned: true, identity: notJson })) as Error).message).toMatch(
      new RegExp(`^${notJson}: invalid agent identity\\nnot valid JSON: `),
    );
    expect(existsSync(join(tmp.dir, "refused"))).toBe(false);
  });

  it("an identity file others can read, or one that does not exist", async () => {
    const path = identityFile("open-identity.json", identity, 0o644);
    const err = await build({ signingKey: keys.privateKey, identity: path });
    expect(isAxError(err, "AX_SECURITY_KEY")).toBe(true);
    expect((err as Error).message).toBe(
      `${path}: is readable by others (mode 644); run chmod 600 ${path}`,
    );
    const missing = join(tmp.dir, "nope.json");
    expect(((await build({ unsigned: true, identity: missing })) as Error).message).toBe(
      `${missing}: no such identity file`,
    );
  });

  it("an identity enrolled by another coordinator than the signing key's", async () => {
    const path = identityFile("foreign-identity.json", {
      ...identity,
      bundlePublicKey: pem(other.publicKey),
    });
    const err = await build({ signingKey: keys.privateKey, identity: path });
    expect(isAxError(err, "AX_SECURITY_KEY")).toBe(true);
    expect((err as Error).message).toBe(
      `${path}: bundlePublicKey is key ${keyIdOf(other.publicKey)}, but the bundle is signed with key ${keyId}: the identity was enrolled by another coordinator`,
    );
  });
});
