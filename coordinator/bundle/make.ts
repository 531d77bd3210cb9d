import { createPublicKey, type KeyObject } from "node:crypto";
import { chmodSync, copyFileSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Metafile } from "esbuild";
import type { BundleFacts } from "../../agent/parts/types.js";
import { AxError } from "../../shared/errors.js";
import { makeDirs } from "../../shared/make-dirs.js";
import { type FirmwareProfile, profileAgentDefaults } from "../../shared/profile.js";
import { type TarEntry, tarGz } from "../../shared/tar.js";
import { packageJson } from "../package-files.js";
import { buildAgentBundle, buildUpdateFiles, INSTALLER_FILE, LAUNCHER_FILE } from "./build.js";
import { IDENTITY_FILE, readIdentityFile } from "./identity.js";
import {
  ENV_FILE,
  EXAMPLE_CONFIG_FILE,
  envFile,
  exampleConfig,
  systemdUnit,
  UNIT_FILE,
} from "./install-files.js";
import { fileEntryOf, MANIFEST_FILE, type Manifest } from "./manifest.js";
import { inspectBinding, localBindingPath, NATIVE_BINDING_FILE } from "./native-binding.js";
import { loadProfile, PROFILES_DIR } from "./profiles.js";
import { keyIdOf, SIGNATURE_FILE, signManifest } from "./signature.js";

/** The agent's file name in a bundle. */
export const AGENT_FILE = "agent.mjs";

export interface MakeBundleOptions {
  /** A profile name (firmware-profiles/NAME.json) or the path of a profile file. */
  profile: string;
  /** The folder that receives NAME/ and NAME.meta.json. @default "dist/bundles" */
  outDir?: string | undefined;
  /**
   * better-sqlite3's addon to ship: one built for the target device's CPU, C library and Node
   * (docs/bundles.md, "Cross-building"). @default the one installed for this machine's Node
   */
  nativeBinding?: string | undefined;
  /** @default firmware-profiles/ of this checkout */
  profilesDir?: string | undefined;
  /** @default the current time */
  now?: (() => Date) | undefined;
  /**
   * The coordinator's bundle signing key (Ed25519, `bundle-signing.key` in its secrets folder):
   * signs manifest.json into manifest.sig. Required unless `unsigned`.
   */
  signingKey?: KeyObject | undefined;
  /** Build without manifest.sig, for development; the manifest says so. @default false */
  unsigned?: boolean | undefined;
  /**
   * An agent identity file (`ax fleet enroll`'s output) to ship as ax-identity.json, mode 0600;
   * the bundle, and its archive, then hold that agent's secret.
   */
  identity?: string | undefined;
  /**
   * The version the bundle says it is (manifest `ax.version`, what its agent reports in hello).
   * @default package.json's version
   */
  version?: string | undefined;
}

export interface MadeBundle {
  profile: FirmwareProfile;
  /** dist/bundles/NAME */
  dir: string;
  /** dist/bundles/NAME/NAME.tar.gz */
  archive: string;
  /** dist/bundles/NAME.meta.json: esbuild's metafile, for what takes the room. */
  metafilePath: string;
  metafile: Metafile;
  manifest: Manifest;
  /** The signing key's id (manifest.sig's `keyId`); undefined for an unsigned build. */
  keyId: string | undefined;
  /** The agent whose identity the bundle holds, if any. */
  identityAgentId: string | undefined;
  agentBytes: number;
  archiveBytes: number;
  buildMs: number;
}

function packageInfo(): { version: string; engines: string } {
  const pkg = packageJson();
  return { version: pkg.version, engines: pkg.engines?.node ?? ">=20" };
}

/** The inputs that put most bytes into the output, for a budget error. */
function largestInputs(metafile: Metafile, top = 5): string {
  const output = Object.values(metafile.outputs)[0];
  if (!output) return "";
  const byPackage = new Map<string, number>();
  for (const [path, { bytesInOutput }] of Object.entries(output.inputs)) {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
    const key = m ? (m[1] as string) : path.replace(/^.*?((agent|shared)\/)/, "$1");
    byPackage.set(key, (byPackage.get(key) ?? 0) + bytesInOutput);
  }
  return [...byPackage]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([k, v]) => `${k} ${v} B`)
    .join(", ");
}

/**
 * `ax bundle build`: builds the profile's agent and writes dist/bundles/NAME/ — the agent, the
 * native binding, a systemd unit, an env file template, an example device config, manifest.json
 * (sizes and sha256 of every file), manifest.sig (its Ed25519 signature), an agent identity if
 * given — and NAME.tar.gz of all of it. Fails with AX_BUNDLE_BUDGET, leaving nothing behind,
 * when the agent is larger than the profile's byte budget; with AX_SECURITY_KEY, before building,
 * when there is no signing key and no `unsigned`, or the identity file is not valid.
 */
export async function makeBundle(options: MakeBundleOptions): Promise<MadeBundle> {
  const started = performance.now();
  const { profile } = loadProfile(options.profile, options.profilesDir ?? PROFILES_DIR);
  const signingKey = signingKeyOf(options);
  const identity = options.identity === undefined ? undefined : readIdentityFile(options.identity);
  if (identity && signingKey)
    checkIdentityKey(options.identity as string, identity.identity.bundlePublicKey, signingKey);
  const pkg = { ...packageInfo(), ...(options.version ? { version: options.version } : {}) };
  const bindingPath = resolve(options.nativeBinding ?? localBindingPath());
  const binding = inspectBinding(bindingPath);
  const outDir = resolve(options.outDir ?? join("dist", "bundles"));
  const dir = join(outDir, profile.name);
  const builtAt = (options.now ?? (() => new Date()))();

  const facts: BundleFacts = {
    profile: profile.name,
    version: pkg.version,
    defaults: profileAgentDefaults(profile),
    nativeBinding: NATIVE_BINDING_FILE,
  };
  try {
    rmSync(dir, { recursive: true, force: true });
    makeDirs(dir);
  } catch (err) {
    throw new AxError(
      "AX_BUNDLE_BUILD",
      `${dir}: cannot make the bundle's folder: ${(err as Error).message}`,
      { cause: err },
    );
  }
  let metafile: Metafile;
  try {
    ({ metafile } = await buildAgentBundle({
      outfile: join(dir, AGENT_FILE),
      profile: { profile, facts },
    }));
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new AxError("AX_BUNDLE_BUILD", `profile ${profile.name}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const metafilePath = join(outDir, `${profile.name}.meta.json`);
  writeFileSync(metafilePath, JSON.stringify(metafile));
  const agentBytes = statSync(join(dir, AGENT_FILE)).size;
  if (agentBytes > profile.budgets.bundleBytes) {
    rmSync(dir, { recursive: true, force: true });
    throw new AxError(
      "AX_BUNDLE_BUDGET",
      `profile ${profile.name}: ${AGENT_FILE} is ${agentBytes} bytes, over its budget of ${profile.budgets.bundleBytes} (budgets.bundleBytes); largest: ${largestInputs(metafile)}; details in ${metafilePath}`,
      {
        context: { profile: profile.name, bytes: agentBytes, budget: profile.budgets.bundleBytes },
      },
    );
  }

  await buildUpdateFiles(dir);
  copyFileSync(bindingPath, join(dir, NATIVE_BINDING_FILE));
  writeFileSync(join(dir, UNIT_FILE), systemdUnit(profile, LAUNCHER_FILE, pkg.version));
  writeFileSync(join(dir, ENV_FILE), envFile(profile));
  writeFileSync(join(dir, EXAMPLE_CONFIG_FILE), exampleConfig(profile));

  const names = [
    AGENT_FILE,
    LAUNCHER_FILE,
    INSTALLER_FILE,
    NATIVE_BINDING_FILE,
    UNIT_FILE,
    ENV_FILE,
    EXAMPLE_CONFIG_FILE,
  ];
  if (identity) {
    const path = join(dir, IDENTITY_FILE);
    writeFileSync(path, identity.data, { mode: 0o600 });
    chmodSync(path, 0o600);
    names.push(IDENTITY_FILE);
  }
  const contents = new Map(names.map((n) => [n, readFileSync(join(dir, n))]));
  const manifest: Manifest = {
    format: 1,
    profile: { ...profile },
    ax: { version: pkg.version },
    builtAt: builtAt.toISOString(),
    node: { engines: binding.nodeRange ?? pkg.engines, abi: binding.nodeAbi },
    target: { platform: binding.platform, arch: binding.arch, libc: binding.libc },
    agent: AGENT_FILE,
    files: Object.fromEntries(names.map((n) => [n, fileEntryOf(contents.get(n) as Buffer)])),
    ...(signingKey ? {} : { unsigned: true as const }),
  };
  const manifestBytes = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
  writeFileSync(join(dir, MANIFEST_FILE), manifestBytes);
  const signature = signingKey ? Buffer.from(signManifest(manifestBytes, signingKey)) : undefined;
  if (signature) writeFileSync(join(dir, SIGNATURE_FILE), signature);

  const entries: TarEntry[] = [
    { name: `${profile.name}/`, data: Buffer.alloc(0) },
    { name: `${profile.name}/${MANIFEST_FILE}`, data: manifestBytes },
    ...(signature ? [{ name: `${profile.name}/${SIGNATURE_FILE}`, data: signature }] : []),
    ...names.map((n) => ({
      name: `${profile.name}/${n}`,
      data: contents.get(n) as Buffer,
      ...(n === IDENTITY_FILE ? { mode: 0o600 } : {}),
    })),
  ];
  const archive = join(dir, `${profile.name}.tar.gz`);
  const gz = tarGz(entries, builtAt);
  // An archive holding an identity holds the agent's secret: as private as the file itself.
  writeFileSync(archive, gz, { mode: identity ? 0o600 : 0o644 });
  return {
    profile,
    dir,
    archive,
    metafilePath,
    metafile,
    manifest,
    keyId: signingKey ? keyIdOf(signingKey) : undefined,
    identityAgentId: identity?.identity.agentId,
    agentBytes,
    archiveBytes: gz.length,
    buildMs: performance.now() - started,
  };
}

function signingKeyOf(options: MakeBundleOptions): KeyObject | undefined {
  if (options.signingKey && options.unsigned) {
    throw new AxError("AX_CLI_USAGE", "bundle build: give a signing key or unsigned, not both");
  }
  if (!options.signingKey && !options.unsigned) {
    throw new AxError(
      "AX_SECURITY_KEY",
      "bundle build: no signing key; pass the coordinator's bundle signing key, or build unsigned for development",
    );
  }
  if (options.signingKey && options.signingKey.asymmetricKeyType !== "ed25519") {
    throw new AxError(
      "AX_SECURITY_KEY",
      "bundle build: the signing key must be an Ed25519 private key",
    );
  }
  return options.signingKey;
}

/**
 * An identity names the coordinator key its device trusts; a bundle signed with another key
 * would be refused by that device, so the mix-up is caught here, where it is cheap.
 */
function checkIdentityKey(file: string, trusted: string | undefined, signingKey: KeyObject): void {
  if (trusted === undefined) return;
  let trustedId: string;
  try {
    trustedId = keyIdOf(createPublicKey(trusted));
  } catch (err) {
    throw new AxError("AX_SECURITY_KEY", `${file}: bundlePublicKey: not a public key (PEM)`, {
      cause: err,
    });
  }
  const signingId = keyIdOf(signingKey);
  if (trustedId !== signingId) {
    throw new AxError(
      "AX_SECURITY_KEY",
      `${file}: bundlePublicKey is key ${trustedId}, but the bundle is signed with key ${signingId}: the identity was enrolled by another coordinator`,
      { context: { file, trustedKeyId: trustedId, signingKeyId: signingId } },
    );
  }
}
