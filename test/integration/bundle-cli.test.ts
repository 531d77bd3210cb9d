import { spawnSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import {
  appendFileSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keyIdOf } from "../../coordinator/bundle/signature.js";
import { loadOrCreateSecrets } from "../../coordinator/security/secrets.js";
import { tempDir } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

function ax(args: string[], timeoutMs = 60_000, cwd?: string) {
  const r = spawnSync(process.execPath, [AX, ...args], {
    encoding: "utf8",
    timeout: timeoutMs,
    ...(cwd === undefined ? {} : { cwd }),
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("ax bundle", () => {
  const tmp = tempDir("ax-bundle-cli-");
  afterAll(() => tmp.cleanup());

  it.each([
    [["bundle"], "bundle: give a subcommand: build, verify, profiles, fleet, publish or published"],
    [["bundle", "build"], "bundle build: --profile NAME is required"],
    [
      ["bundle", "build", "--profile", "x", "--fast"],
      "bundle build: unknown flag --fast (it takes --profile, --out, --native-binding, --signing-key, --config, --unsigned, --identity)",
    ],
    [["bundle", "verify"], "bundle verify: FILE is required (NAME.tar.gz or its folder)"],
    [
      ["bundle", "verify", "/nonexistent.tar.gz"],
      "bundle verify: /nonexistent.tar.gz: no such file",
    ],
    [["bundle", "fleet"], "bundle fleet: --config FILE is required"],
  ])("rejects %j with a usage error naming the problem", (args, message) => {
    const r = ax(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`ax: AX_CLI_USAGE: ${message}`);
  });

  it("lists the profiles", () => {
    const r = ax(["bundle", "profiles"]);
    expect(r.code, r.stderr).toBe(0);
    const names = r.stdout
      .split("\n")
      .slice(1)
      .map((l) => l.split(/\s+/)[0])
      .filter(Boolean);
    expect(names).toEqual(["gateway", "sensor-hub", "server"]);
  });

  it("refuses a profile that does not exist", () => {
    const r = ax(["bundle", "build", "--profile", "toaster", "--out", tmp.dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /^ax: AX_PROFILE_NOT_FOUND: no firmware profile "toaster" in .*firmware-profiles\/? \(there: gateway, sensor-hub, server\)\n$/,
    );
  });

  it("refuses an --out it cannot make a folder in, exit 1, naming the level", () => {
    const file = join(tmp.dir, "a-file");
    writeFileSync(file, "");
    const r = ax(["bundle", "build", "--profile", "sensor-hub", "--unsigned", "--out", file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /^ax: AX_BUNDLE_BUILD: .*a-file\/sensor-hub: cannot make the bundle's folder: ENOTDIR: not a directory, .*\n$/,
    );
    // Under /proc, where Node 20's recursive mkdir spun for ever, it fails at once.
    if (existsSync("/proc/self")) {
      const proc = ax([
        "bundle",
        "build",
        "--profile",
        "sensor-hub",
        "--unsigned",
        "--out",
        "/proc/ax-none",
      ]);
      expect(proc.code).toBe(1);
      expect(proc.stderr).toBe(
        "ax: AX_BUNDLE_BUILD: /proc/ax-none/sensor-hub: cannot make the bundle's folder: ENOENT: no such file or directory, mkdir '/proc/ax-none'\n",
      );
    }
  });
});

describe("ax bundle build and verify: signatures", () => {
  const tmp = tempDir("ax-bundle-sign-");
  const configFile = join(tmp.dir, "coordinator.json");
  const out = join(tmp.dir, "out");
  const dir = join(out, "sensor-hub");
  const archive = join(dir, "sensor-hub.tar.gz");
  const empty = join(tmp.dir, "empty");
  let keyId = "";
  let built: ReturnType<typeof ax>;

  beforeAll(() => {
    mkdirSync(empty);
    writeFileSync(
      configFile,
      JSON.stringify({
        store: { path: join(tmp.dir, "coord", "ax.sqlite") },
        mqtt: { url: "mqtt://127.0.0.1:1883" },
      }),
    );
    // As the coordinator does on its first start: its secrets folder beside the store.
    const secrets = loadOrCreateSecrets(join(tmp.dir, "coord", "ax-secrets"));
    keyId = keyIdOf(secrets.bundleKey);
    built = ax([
      "bundle",
      "build",
      "--profile",
      "sensor-hub",
      "--out",
      out,
      "--config",
      configFile,
    ]);
  }, 90_000);
  afterAll(() => tmp.cleanup());

  it("signs with the bundle key in the coordinator config's secrets folder", () => {
    expect(built.code, built.stderr).toBe(0);
    expect(built.stdout).toMatch(/^built sensor-hub \(ax [^)]+\) in \d+ ms → /);
    expect(built.stdout).toMatch(
      /agent\.mjs: \d+ of 153600 budgeted bytes; for linux-\w+ \(glibc\), Node >=20\.0\.0 <21\.0\.0/,
    );
    expect(built.stdout).toContain(
      `\nsigned: manifest.sig, Ed25519 key ${keyId} (${relative(process.cwd(), join(tmp.dir, "coord", "ax-secrets", "bundle-signing.key"))})\n`,
    );
    expect(existsSync(join(dir, "manifest.sig"))).toBe(true);
  });

  it("verifies with --config, with --public-key, and with ./ax-secrets of the working folder", () => {
    const pub = join(tmp.dir, "coord", "ax-secrets", "bundle-signing.pub");
    const here = join(tmp.dir, "here");
    mkdirSync(join(here, "ax-secrets"), { recursive: true });
    copyFileSync(pub, join(here, "ax-secrets", "bundle-signing.pub"));
    for (const [args, cwd, source] of [
      [["--config", configFile], undefined, pub],
      [["--public-key", pub], undefined, pub],
      [[], here, join(here, "ax-secrets", "bundle-signing.pub")],
    ] as const) {
      const r = ax(["bundle", "verify", archive, ...args], 60_000, cwd);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(
        new RegExp(
          `^ok: .*sensor-hub\\.tar\\.gz: profile sensor-hub, ax .*; signed by key ${keyId} \\(${source}\\); 7 files match`,
        ),
      );
    }
  });

  it("refuses, exit 1, a changed file, a bundle without manifest.sig, and another key", () => {
    const copy = join(tmp.dir, "copy");
    cpSync(dir, copy, { recursive: true });
    appendFileSync(join(copy, "better_sqlite3.node"), "x");
    const bad = ax(["bundle", "verify", copy, "--config", configFile]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain(`ax: AX_BUNDLE_VERIFY: ${copy}: does not match its manifest`);
    expect(bad.stderr).toMatch(/\nbetter_sqlite3\.node: \d+ bytes, the manifest says \d+\n/);
    expect(bad.stderr).toMatch(
      /\nbetter_sqlite3\.node: sha256 [0-9a-f]{12}…, the manifest says [0-9a-f]{12}…\n/,
    );

    const nosig = join(tmp.dir, "nosig");
    cpSync(dir, nosig, { recursive: true });
    unlinkSync(join(nosig, "manifest.sig"));
    const unsigned = ax(["bundle", "verify", nosig, "--config", configFile]);
    expect(unsigned.code).toBe(1);
    expect(unsigned.stderr).toBe(
      `ax: AX_BUNDLE_SIGNATURE: ${nosig}: refused: its signature is missing or does not verify\nmanifest.sig: missing: the bundle is unsigned\n`,
    );
    // --allow-unsigned does not make a signed build whose manifest.sig was taken away a matter of
    // checksums: the files match; its signature is what is missing.
    const stripped = ax(["bundle", "verify", nosig, "--config", configFile, "--allow-unsigned"]);
    expect(stripped.code).toBe(1);
    expect(stripped.stderr).toBe(unsigned.stderr);

    const otherPub = join(tmp.dir, "other.pub");
    const other = generateKeyPairSync("ed25519").publicKey;
    writeFileSync(otherPub, other.export({ type: "spki", format: "pem" }));
    const foreign = ax(["bundle", "verify", archive, "--public-key", otherPub]);
    expect(foreign.code).toBe(1);
    expect(foreign.stderr).toBe(
      `ax: AX_BUNDLE_SIGNATURE: ${archive}: refused: its signature is missing or does not verify\nmanifest.sig: signature does not verify with key ${keyIdOf(other)} (${otherPub}): the bundle was signed with key ${keyId}\n`,
    );
  });

  it("says what to pass when it finds no key, exit 1", () => {
    const build = ax(["bundle", "build", "--profile", "sensor-hub", "--out", out], 60_000, empty);
    expect(build.code).toBe(1);
    expect(build.stderr).toBe(
      "ax: AX_SECURITY_KEY: bundle build: no ax-secrets/bundle-signing.key here; pass --signing-key FILE (the coordinator's bundle-signing.key) or --config COORDINATOR_CONFIG (its secrets folder), or --unsigned for a development build\n",
    );
    const verify = ax(["bundle", "verify", archive], 60_000, empty);
    expect(verify.code).toBe(1);
    expect(verify.stderr).toBe(
      "ax: AX_SECURITY_KEY: bundle verify: no ax-secrets/bundle-signing.pub here; pass --public-key FILE (the coordinator's bundle-signing.pub) or --config COORDINATOR_CONFIG (its secrets folder), or --allow-unsigned to check only the checksums of a development build\n",
    );
    const missing = join(tmp.dir, "missing.key");
    const named = ax(["bundle", "build", "--profile", "sensor-hub", "--signing-key", missing]);
    expect(named.code).toBe(1);
    expect(named.stderr).toBe(
      `ax: AX_SECURITY_KEY: bundle build: --signing-key ${missing}: no such file\n`,
    );
    const usage = ax([
      "bundle",
      "build",
      "--profile",
      "sensor-hub",
      "--unsigned",
      "--config",
      configFile,
    ]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toBe(
      "ax: AX_CLI_USAGE: bundle build: --unsigned takes no --signing-key or --config (nothing is signed)\n",
    );
    // The key file and the config that finds one are alternatives: given both, neither wins.
    const keyAndConfig = ["--signing-key", missing, "--config", configFile];
    const both = ax(["bundle", "build", "--profile", "sensor-hub", ...keyAndConfig]);
    expect(both.code).toBe(2);
    expect(both.stderr).toBe(
      "ax: AX_CLI_USAGE: bundle build: give one of --signing-key and --config (the key file, or the coordinator's config that finds it)\n",
    );
    const bothPublic = ax([
      "bundle",
      "verify",
      archive,
      "--public-key",
      missing,
      "--config",
      configFile,
    ]);
    expect(bothPublic.code).toBe(2);
    expect(bothPublic.stderr).toBe(
      "ax: AX_CLI_USAGE: bundle verify: give one of --public-key and --config (the key file, or the coordinator's config that finds it)\n",
    );
  });

  it("marks an --unsigned build, which verify refuses unless --allow-unsigned", () => {
    const devOut = join(tmp.dir, "dev");
    const dev = ax(["bundle", "build", "--profile", "sensor-hub", "--out", devOut, "--unsigned"]);
    expect(dev.code, dev.stderr).toBe(0);
    expect(dev.stdout).toContain(
      "\nUNSIGNED development build: no manifest.sig; ax bundle verify refuses it without --allow-unsigned\n",
    );
    const devArchive = join(devOut, "sensor-hub", "sensor-hub.tar.gz");
    const refused = ax(["bundle", "verify", devArchive, "--config", configFile]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("\nmanifest.sig: missing: the bundle is unsigned\n");
    // With no key at hand it is refused for the same reason, not for the missing key.
    const keyless = ax(["bundle", "verify", devArchive], 60_000, empty);
    expect(keyless.code).toBe(1);
    expect(keyless.stderr).toMatch(/^ax: AX_BUNDLE_SIGNATURE: /);
    expect(keyless.stderr).toContain("\nmanifest.sig: missing: the bundle is unsigned\n");
    // FILE after the flags reads the same.
    const allowed = ax(["bundle", "verify", "--allow-unsigned", devArchive], 60_000, empty);
    expect(allowed.code, allowed.stderr).toBe(0);
    expect(allowed.stdout).toContain(
      "; UNSIGNED development build (--allow-unsigned): nothing vouches for who built it; 7 files match",
    );
    // --allow-unsigned does not pass a signed bundle it has no key for.
    const signed = ax(["bundle", "verify", archive, "--allow-unsigned"], 60_000, empty);
    expect(signed.code).toBe(1);
    expect(signed.stderr).toContain("\nmanifest.sig: no public key to check it with\n");
  }, 90_000);

  it("refuses an --identity file that is not valid, naming the field, exit 1", () => {
    const bad = join(tmp.dir, "identity.json");
    writeFileSync(bad, JSON.stringify({ ax: "agent-identity/1", agentId: "a/b", generation: 0 }), {
      mode: 0o600,
    });
    const r = ax([
      "bundle",
      "build",
      "--profile",
      "sensor-hub",
      "--out",
      join(tmp.dir, "id"),
      "--config",
      configFile,
      "--identity",
      bad,
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      [
        `ax: AX_SECURITY_KEY: ${bad}: invalid agent identity`,
        "agentId: must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)",
        "generation: must be at least 1",
        "key: is required (string)",
        "mqtt: is required (object)",
        "",
      ].join("\n"),
    );
  });
});
