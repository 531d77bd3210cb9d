import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, join, relative, resolve } from "node:path";
import { parseFlags } from "../../shared/command-line.js";
import { AxError, isAxError } from "../../shared/errors.js";
import { MAX_BUNDLE_BYTES } from "../../shared/update.js";
import { MANIFEST_FILE, parseManifest } from "../bundle/manifest.js";
import { listProfiles, loadProfile } from "../bundle/profiles.js";
import type { TrustedKey } from "../bundle/signature.js";
import { loadCoordinatorConfig, requireStore } from "../config.js";
import type { BundleRecord } from "../domain/bundle.js";
import { flags, unknownSubcommand } from "./args.js";
import { apiClient, CLIENT_FLAGS, listPages, parseCommand, print, printJson } from "./client.js";
import { isoTime, table } from "./table.js";

const out = (text: string) => process.stdout.write(`${text}\n`);

/** `ax bundle build|verify|profiles|fleet|publish|published …`. Returns the exit code. */
export async function bundleCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "build":
      return build(argv);
    case "verify":
      return verify(argv);
    case "profiles":
      return profiles(argv);
    case "fleet":
      return fleet(argv);
    case "publish":
      return publish(argv);
    case "published":
      return published(argv);
    default:
      throw unknownSubcommand("bundle", sub, [
        "build",
        "verify",
        "profiles",
        "fleet",
        "publish",
        "published",
      ]);
  }
}

async function build(argv: string[]): Promise<number> {
  const f = flags("bundle build", argv, {
    profile: { type: "string" },
    out: { type: "string" },
    "native-binding": { type: "string" },
    "signing-key": { type: "string" },
    config: { type: "string" },
    unsigned: { type: "boolean" },
    identity: { type: "string" },
  });
  if (!f.profile) throw new AxError("AX_CLI_USAGE", "bundle build: --profile NAME is required");
  if (f.unsigned && (f["signing-key"] !== undefined || f.config !== undefined)) {
    throw new AxError(
      "AX_CLI_USAGE",
      "bundle build: --unsigned takes no --signing-key or --config (nothing is signed)",
    );
  }
  if (f["signing-key"] !== undefined && f.config !== undefined) {
    throw new AxError(
      "AX_CLI_USAGE",
      "bundle build: give one of --signing-key and --config (the key file, or the coordinator's config that finds it)",
    );
  }
  // The profile, then the key, are checked before the build starts: a typo or a missing key
  // costs no esbuild run, and the profile's error, the more basic one, comes first.
  loadProfile(f.profile);
  const { findSigningKey } = await import("../bundle/key-lookup.js");
  const signing = f.unsigned
    ? undefined
    : findSigningKey({ file: f["signing-key"], config: f.config });
  const { makeBundle } = await import("../bundle/make.js");
  const made = await makeBundle({
    profile: f.profile,
    outDir: f.out,
    nativeBinding: f["native-binding"],
    ...(signing ? { signingKey: signing.key } : { unsigned: true }),
    identity: f.identity,
  });
  const m = made.manifest;
  const rel = (p: string) => relative(process.cwd(), p) || ".";
  out(
    `built ${m.profile.name} (ax ${m.ax.version}) in ${Math.round(made.buildMs)} ms → ${rel(made.dir)}/`,
  );
  out(
    table(
      ["file", "bytes", "sha256"],
      Object.entries(m.files).map(([name, e]) => [name, String(e.bytes), e.sha256]),
    ),
  );
  out(
    `${made.manifest.agent}: ${made.agentBytes} of ${made.profile.budgets.bundleBytes} budgeted bytes; ` +
      `for ${m.target.platform}-${m.target.arch} (${m.target.libc}), Node ${m.node.engines}`,
  );
  out(
    signing
      ? `signed: manifest.sig, Ed25519 key ${made.keyId} (${rel(signing.path)})`
      : "UNSIGNED development build: no manifest.sig; ax bundle verify refuses it without --allow-unsigned",
  );
  if (made.identityAgentId !== undefined) {
    out(
      `identity: agent ${made.identityAgentId} in ax-identity.json (mode 600): the bundle and its archive hold the agent's secret`,
    );
  }
  out(
    `archive: ${rel(made.archive)} (${made.archiveBytes} bytes); metafile: ${rel(made.metafilePath)}`,
  );
  return 0;
}

async function verify(argv: string[]): Promise<number> {
  // FILE may come before or after the flags, as every command's arguments may.
  const { values: f, positionals } = parseFlags("bundle verify", argv, {
    "public-key": { type: "string" },
    config: { type: "string" },
    "allow-unsigned": { type: "boolean" },
  });
  const [file, extra] = positionals;
  if (file === undefined) {
    throw new AxError(
      "AX_CLI_USAGE",
      "bundle verify: FILE is required (NAME.tar.gz or its folder)",
    );
  }
  if (extra !== undefined) {
    throw new AxError("AX_CLI_USAGE", `bundle verify: unexpected argument "${extra}"`);
  }
  if (f["public-key"] !== undefined && f.config !== undefined) {
    throw new AxError(
      "AX_CLI_USAGE",
      "bundle verify: give one of --public-key and --config (the key file, or the coordinator's config that finds it)",
    );
  }
  if (!existsSync(file)) throw new AxError("AX_CLI_USAGE", `bundle verify: ${file}: no such file`);
  // Loaded here: verifying needs neither esbuild nor the store.
  const { verifyBundle } = await import("../bundle/verify.js");
  const { findPublicKey } = await import("../bundle/key-lookup.js");
  const { keyIdOf } = await import("../bundle/signature.js");
  const named = f["public-key"] !== undefined || f.config !== undefined;
  let trusted: TrustedKey | undefined;
  let noKey: unknown;
  try {
    trusted = findPublicKey({ file: f["public-key"], config: f.config });
  } catch (err) {
    // With no key at hand, an unsigned bundle is still refused for what it is (unsigned), and
    // --allow-unsigned still checks the checksums of an unsigned build; a signed one needs the
    // key, and the missing key is the error.
    if (named || !isAxError(err, "AX_SECURITY_KEY")) throw err;
    if (!f["allow-unsigned"]) noKey = err;
  }
  const r = verifyBundle(file, { trusted, allowUnsigned: f["allow-unsigned"] });
  if (noKey !== undefined && r.signature !== "unsigned") throw noKey;
  if (r.problems.length > 0) {
    // A missing manifest.sig is a checksum matter only for a build made unsigned (its manifest
    // says so) and let through by --allow-unsigned; on a signed build it is the signature's.
    const allowedUnsigned = f["allow-unsigned"] && r.manifest?.unsigned === true;
    const badSignature =
      r.signature === "invalid" || (r.signature === "unsigned" && !allowedUnsigned);
    throw new AxError(
      badSignature ? "AX_BUNDLE_SIGNATURE" : "AX_BUNDLE_VERIFY",
      `${r.source}: ${badSignature ? "refused: its signature is missing or does not verify" : "does not match its manifest"}\n${r.problems.join("\n")}`,
      { context: { problems: r.problems } },
    );
  }
  const m = r.manifest;
  if (m) {
    const signed =
      r.signature === "valid" && trusted
        ? `signed by key ${keyIdOf(trusted.key)} (${trusted.source})`
        : "UNSIGNED development build (--allow-unsigned): nothing vouches for who built it";
    const identity =
      r.identityAgentId === undefined ? "" : `; identity of agent ${r.identityAgentId}`;
    out(
      `ok: ${r.source}: profile ${m.profile.name}, ax ${m.ax.version}, built ${m.builtAt}; ${signed}; ` +
        `${Object.keys(m.files).length} files match their sha256 and size; ${m.agent} ${m.files[m.agent]?.sha256}${identity}`,
    );
  }
  return 0;
}

function profiles(argv: string[]): number {
  flags("bundle profiles", argv, {});
  const rows = listProfiles().map((name) => {
    const { profile: p } = loadProfile(name);
    return [
      p.name,
      p.handlers.join(","),
      p.features.join(",") || "-",
      String(p.capacity.concurrency),
      String(p.node.maxOldSpaceMb),
      String(p.budgets.bundleBytes),
      p.description,
    ];
  });
  out(table(["profile", "handlers", "features", "conc.", "heap MiB", "budget B", "for"], rows));
  return 0;
}

/** sha256 of each agent file built under `dir` (NAME/manifest.json), to name known builds. */
function knownBuilds(dir: string): Map<string, string> {
  const known = new Map<string, string>();
  if (!existsSync(dir)) return known;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name, MANIFEST_FILE);
    if (!existsSync(path)) continue;
    const parsed = parseManifest(readFileSync(path, "utf8"));
    if (!parsed.ok) continue;
    const m = parsed.manifest;
    const sha = m.files[m.agent]?.sha256;
    if (sha) known.set(sha, `${m.profile.name} ${m.ax.version} (${m.builtAt.slice(0, 16)}Z)`);
  }
  return known;
}

/** `ax bundle fleet --config FILE`: which agent runs which build, from the coordinator's store. */
async function fleet(argv: string[]): Promise<number> {
  const f = flags("bundle fleet", argv, {
    config: { type: "string" },
    bundles: { type: "string" },
  });
  if (!f.config) throw new AxError("AX_CLI_USAGE", "bundle fleet: --config FILE is required");
  const config = loadCoordinatorConfig(f.config);
  // Opening a missing store would create an empty one, and show an empty fleet.
  requireStore(config, f.config, "bundle fleet");
  const { openStore } = await import("../coordinator.js");
  const store = await openStore(config);
  try {
    const known = knownBuilds(resolve(f.bundles ?? join("dist", "bundles")));
    const agents = await store.listAgents();
    out(
      table(
        ["agent", "status", "profile", "version", "sha256", "build"],
        agents.map((a) => [
          a.agentId,
          a.status,
          a.profile,
          a.bundleVersion,
          a.bundleSha256 === "dev" ? "dev" : `${a.bundleSha256.slice(0, 12)}…`,
          a.bundleSha256 === "dev"
            ? "from source"
            : (known.get(a.bundleSha256) ?? "not a known build"),
        ]),
      ),
    );
    return 0;
  } finally {
    await store.close();
  }
}

/**
 * The archive `path` names: NAME.tar.gz itself, or the bundle folder holding it (its own name's
 * archive, else its only .tar.gz).
 */
export function archiveOf(command: string, path: string): string {
  if (!existsSync(path)) {
    throw new AxError("AX_CLI_USAGE", `${command}: ${path}: no such file or folder`);
  }
  if (!statSync(path).isDirectory()) return path;
  const own = join(path, `${basename(resolve(path))}.tar.gz`);
  if (existsSync(own)) return own;
  const archives = readdirSync(path).filter((n) => n.endsWith(".tar.gz"));
  if (archives.length === 1) return join(path, archives[0] as string);
  throw new AxError(
    "AX_CLI_USAGE",
    archives.length === 0
      ? `${command}: ${path}: no NAME.tar.gz in this folder (ax bundle build writes it there); give the archive itself`
      : `${command}: ${path}: holds several archives (${archives.join(", ")}); give the one to publish`,
  );
}

/** A published bundle's target as one word: linux-arm64 (glibc), Node ABI 115. */
function targetText(b: BundleRecord): string {
  const abi = b.target.nodeAbi === null ? "no Node ABI" : `Node ABI ${b.target.nodeAbi}`;
  return `${b.target.platform}-${b.target.arch} (${b.target.libc}), ${abi}`;
}

/**
 * `ax bundle publish PATH`: sends NAME.tar.gz, as it is, to `POST /api/bundles`. The API client
 * speaks JSON; this one request sends the archive's bytes, with the same URL, token and errors.
 */
async function publish(argv: string[]): Promise<number> {
  const c = "bundle publish";
  const { flags: f, args } = parseCommand(c, argv, CLIENT_FLAGS, ["PATH"]);
  const file = archiveOf(c, args[0] as string);
  const size = statSync(file).size;
  if (size > MAX_BUNDLE_BYTES) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${c}: ${file}: ${size} bytes, more than the ${MAX_BUNDLE_BYTES} a bundle may have`,
    );
  }
  let status: number;
  let b: BundleRecord;
  try {
    ({ status, value: b } = await apiClient(c, f).send<BundleRecord>("POST", "/api/bundles", {
      bytes: readFileSync(file),
      contentType: "application/gzip",
      timeoutMs: 300_000,
    }));
  } catch (err) {
    if (!(err instanceof AxError) || err.code === "AX_API_UNREACHABLE") throw err;
    throw new AxError(err.code, `${c}: ${file}: ${err.message}`, {
      cause: err,
      context: err.context,
    });
  }
  if (f.json) {
    printJson(b);
    return 0;
  }
  print(
    `${status === 201 ? "published" : "already published"}: ${b.sha256}\n` +
      `profile ${b.profile}, ax ${b.version}, for ${targetText(b)}; ${b.bytes} bytes, ` +
      `signed by key ${b.keyId}; published ${isoTime(b.publishedAt)} by ${b.publishedBy}`,
  );
  return 0;
}

/** `ax bundle published [--profile P] [--limit N] [--cursor C | --all]`: newest first. */
async function published(argv: string[]): Promise<number> {
  const c = "bundle published";
  const { flags: f } = parseCommand(c, argv, {
    ...CLIENT_FLAGS,
    profile: { type: "string" },
    limit: { type: "string" },
    cursor: { type: "string" },
    all: { type: "boolean" },
  });
  const query = new URLSearchParams();
  if (f.profile !== undefined) {
    if (f.profile.trim() === "")
      throw new AxError("AX_CLI_USAGE", `${c}: --profile must not be empty`);
    query.set("profile", f.profile);
  }
  const { items, last } = await listPages<
    BundleRecord,
    { items: BundleRecord[]; nextCursor: string | null }
  >(c, f, "/api/bundles", query, 500);
  if (f.json) {
    printJson({ items, nextCursor: last.nextCursor });
    return 0;
  }
  print(
    table(
      ["sha256", "profile", "version", "target", "bytes", "published (UTC)", "by"],
      items.map((b) => [
        b.sha256,
        b.profile,
        b.version,
        targetText(b),
        String(b.bytes),
        isoTime(b.publishedAt),
        b.publishedBy,
      ]),
    ),
  );
  if (last.nextCursor !== null) process.stderr.write(`more: --cursor ${last.nextCursor}\n`);
  return 0;
}
