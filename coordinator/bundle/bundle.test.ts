import { spawnSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import {
  appendFileSync,
  cpSync,
  existsSync,
  readdirSync,
  readFileSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../../agent/config.js";
import { isAxError } from "../../shared/errors.js";
import { tempDir } from "../../test/helpers/env.js";
import { FEATURE_MODULES, HANDLER_MODULES } from "./catalog.js";
import { AGENT_FILE, type MadeBundle, makeBundle } from "./make.js";
import { sha256 } from "./manifest.js";
import { inspectBinding, localBindingPath } from "./native-binding.js";
import { listProfiles } from "./profiles.js";
import { verifyBundle } from "./verify.js";

/**
 * Every firmware profile built for real (esbuild, the machine's better-sqlite3 addon), then
 * checked: budgets, what the bundler saw (the metafile), the manifest, the archive, verify.
 */
const tmp = tempDir("ax-bundle-");
const made = new Map<string, MadeBundle>();
const PROFILES = listProfiles();
const keys = generateKeyPairSync("ed25519");
const trusted = { key: keys.publicKey, source: "test key" };

beforeAll(async () => {
  for (const name of PROFILES) {
    made.set(
      name,
      await makeBundle({ profile: name, outDir: tmp.dir, signingKey: keys.privateKey }),
    );
  }
}, 120_000);
afterAll(() => tmp.cleanup());

function bundle(name: string): MadeBundle {
  const b = made.get(name);
  if (!b) throw new Error(`no bundle ${name}`);
  return b;
}

/** Every module the bundler read (the metafile's inputs, paths relative to the working folder). */
function inputs(b: MadeBundle): string[] {
  return Object.keys(b.metafile.inputs);
}

/** The modules that put bytes into agent.mjs (a module read may be tree-shaken to nothing). */
function contributing(b: MadeBundle): string[] {
  const output = Object.values(b.metafile.outputs)[0];
  return Object.entries(output?.inputs ?? {})
    .filter(([, v]) => v.bytesInOutput > 0)
    .map(([path]) => path);
}

/** Packages the agent must never carry (DESIGN §2): scheduling, store, HTTP servers. */
const SERVER_ONLY =
  /(^|\/)node_modules\/(cron-parser|pg|pg-[a-z-]+|express|fastify|@fastify\/[^/]+|koa|hono|@hono\/[^/]+|restify|hapi|@hapi\/[^/]+|aedes|prom-client|pino)\//;

describe("ax bundle build", () => {
  it.each(PROFILES)("keeps %s within its byte budget", (name) => {
    const b = bundle(name);
    expect(b.agentBytes).toBeGreaterThan(10_000);
    expect(b.agentBytes).toBeLessThanOrEqual(b.profile.budgets.bundleBytes);
  });

  it("meets the sensor-hub target: at most 150 KB minified", () => {
    expect(bundle("sensor-hub").agentBytes).toBeLessThanOrEqual(150_000);
  });

  it.each(PROFILES)(
    "bundles for %s nothing from coordinator/, cron-parser, pg or an HTTP framework",
    (name) => {
      const all = inputs(bundle(name));
      expect(all.some((p) => p.startsWith("agent/"))).toBe(true); // guards the test itself
      expect(all.filter((p) => /(^|\/)coordinator\//.test(p))).toEqual([]);
      expect(all.filter((p) => SERVER_ONLY.test(p))).toEqual([]);
      // zod/mini only: none of zod's classic API or its locales ends up in the file.
      expect(
        contributing(bundle(name)).filter((p) =>
          /node_modules\/zod\/.*\/(classic|locales)\//.test(p),
        ),
      ).toEqual([]);
    },
  );

  it("leaves out what a profile leaves out: the bundler never saw those modules", () => {
    const repoPath = (file: string) => file.slice(file.lastIndexOf("/agent/") + 1);
    for (const name of PROFILES) {
      const b = bundle(name);
      const seen = new Set(inputs(b));
      for (const [handler, m] of Object.entries(HANDLER_MODULES)) {
        const included = (b.profile.handlers as readonly string[]).includes(handler);
        expect(seen.has(repoPath(m.file)), `${name}: ${handler}`).toBe(included);
      }
      for (const [feature, m] of Object.entries(FEATURE_MODULES)) {
        const included = (b.profile.features as readonly string[]).includes(feature);
        expect(seen.has(repoPath(m.file)), `${name}: ${feature}`).toBe(included);
      }
    }
    // No WebSocket, SOCKS, browser timers or stream polyfills unless the websocket feature is on;
    // and then mqtt.js rides on Node's own streams.
    const packages = (b: MadeBundle) =>
      new Set(inputs(b).flatMap((p) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(p)?.[1] ?? []));
    for (const name of ["sensor-hub", "gateway"]) {
      expect([...packages(bundle(name))].sort()).toEqual(["better-sqlite3", "zod"]);
    }
    const server = packages(bundle("server"));
    expect(server.has("mqtt")).toBe(true);
    expect(server.has("ws")).toBe(true);
    for (const trimmed of ["socks", "readable-stream", "worker-timers", "bindings", "debug"]) {
      expect(server.has(trimmed), trimmed).toBe(false);
    }
  });

  it("writes the agent, launcher, installer, binding, unit, env file, example config and manifest, and an archive of them", () => {
    const b = bundle("sensor-hub");
    expect(readdirSync(b.dir).sort()).toEqual(
      [
        "agent.env",
        "agent.example.json",
        AGENT_FILE,
        "launch.mjs",
        "update.mjs",
        "ax-agent.service",
        "better_sqlite3.node",
        "manifest.json",
        "manifest.sig",
        "sensor-hub.tar.gz",
      ].sort(),
    );
    const m = JSON.parse(readFileSync(join(b.dir, "manifest.json"), "utf8"));
    const version = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
      .version as string;
    expect(m).toMatchObject({
      format: 1,
      profile: { name: "sensor-hub", handlers: ["mqtt.publish", "file.write"] },
      ax: { version },
      agent: AGENT_FILE,
      node: { engines: ">=20.0.0 <21.0.0", abi: 115 },
      target: { platform: "linux", arch: process.arch, libc: "glibc" },
    });
    expect(Date.parse(m.builtAt)).toBeGreaterThan(Date.now() - 600_000);
    for (const [file, entry] of Object.entries(
      m.files as Record<string, { sha256: string; bytes: number }>,
    )) {
      const data = readFileSync(join(b.dir, file));
      expect(entry).toEqual({ sha256: sha256(data), bytes: data.length });
    }
    // The unit starts Node with the profile's heap cap and the launcher; the env file names the config.
    const unit = readFileSync(join(b.dir, "ax-agent.service"), "utf8");
    expect(unit).toContain(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: systemd's syntax, not JavaScript's
      "ExecStart=/usr/bin/node --max-old-space-size=32 --max-semi-space-size=1 /opt/ax-agent/launch.mjs --config ${AX_AGENT_CONFIG}",
    );
    expect(unit).toContain("EnvironmentFile=/etc/ax-agent/agent.env");
    expect(readFileSync(join(b.dir, "agent.env"), "utf8")).toContain(
      "AX_AGENT_CONFIG=/etc/ax-agent/agent.json",
    );
  });

  it("writes an example config that the bundle's own agent accepts", () => {
    for (const name of PROFILES) {
      const b = bundle(name);
      const example = JSON.parse(readFileSync(join(b.dir, "agent.example.json"), "utf8"));
      expect(Object.keys(example.handlers).sort(), name).toEqual(
        b.profile.handlers.filter((h) => !["echo", "sleep", "fail"].includes(h)).sort(),
      );
      // From source every handler is built in, so this checks the sections' shapes.
      expect(() => parseAgentConfig(example, `${name}/agent.example.json`)).not.toThrow();
    }
  });

  it("records what the native binding was built for, read from the file", () => {
    expect(inspectBinding(localBindingPath())).toEqual({
      platform: "linux",
      arch: process.arch,
      libc: "glibc",
      nodeAbi: Number(process.versions.modules),
      nodeRange: `>=${process.versions.node.split(".")[0]}.0.0 <${Number(process.versions.node.split(".")[0]) + 1}.0.0`,
    });
  });
});

describe("ax bundle verify", () => {
  it("passes an untouched bundle: its archive, its folder, and the folder extracted by tar", () => {
    const b = bundle("gateway");
    for (const target of [b.archive, b.dir, join(b.dir, "manifest.json")]) {
      expect(verifyBundle(target, { trusted }).problems, target).toEqual([]);
    }
    const x = tempDir("ax-extract-");
    try {
      const r = spawnSync("tar", ["-xzf", b.archive, "-C", x.dir], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      expect(verifyBundle(join(x.dir, "gateway"), { trusted }).problems).toEqual([]);
    } finally {
      x.cleanup();
    }
  });

  it("names each file that differs from the manifest, and how", () => {
    const b = bundle("gateway");
    const copy = join(tmp.dir, "tampered");
    cpSync(b.dir, copy, { recursive: true });
    unlinkSync(join(copy, "gateway.tar.gz"));
    appendFileSync(join(copy, AGENT_FILE), "\n");
    writeFileSync(
      join(copy, "agent.env"),
      readFileSync(join(copy, "agent.env"), "utf8").replace("agent.json", "agent.jsox"),
    );
    unlinkSync(join(copy, "ax-agent.service"));
    writeFileSync(join(copy, "extra.js"), "1");
    const m = b.manifest.files;
    const short = (h: string) => `${h.slice(0, 12)}…`;
    const actual = (f: string) => short(sha256(readFileSync(join(copy, f))));
    expect(verifyBundle(copy, { trusted }).problems).toEqual([
      `${AGENT_FILE}: ${m[AGENT_FILE]!.bytes + 1} bytes, the manifest says ${m[AGENT_FILE]!.bytes}`,
      `${AGENT_FILE}: sha256 ${actual(AGENT_FILE)}, the manifest says ${short(m[AGENT_FILE]!.sha256)}`,
      "ax-agent.service: missing",
      `agent.env: sha256 ${actual("agent.env")}, the manifest says ${short(m["agent.env"]!.sha256)}`,
      "extra.js: not in the manifest",
    ]);
  });

  it("finds a change inside the archive, and a damaged archive or manifest", () => {
    const b = bundle("gateway");
    const gz = readFileSync(b.archive);
    const bad = join(tmp.dir, "bad.tar.gz");
    writeFileSync(bad, gz.subarray(0, gz.length - 100));
    expect(verifyBundle(bad, { trusted }).problems[0]).toMatch(/^bad\.tar\.gz: cannot be read: /);

    const noManifest = join(tmp.dir, "no-manifest");
    cpSync(b.dir, noManifest, { recursive: true });
    writeFileSync(join(noManifest, "manifest.json"), '{"format":1,"files":{}}');
    expect(verifyBundle(noManifest, { trusted }).problems).toContain(
      "manifest.json: profile: is required (object)",
    );
  });
});

describe("ax bundle build refuses", () => {
  it("a bundle over its byte budget, with the sizes and what takes the room, leaving nothing", async () => {
    const raw = JSON.parse(
      readFileSync(new URL("../../firmware-profiles/sensor-hub.json", import.meta.url), "utf8"),
    );
    const dir = join(tmp.dir, "profiles");
    cpSync(new URL("../../firmware-profiles/", import.meta.url), dir, { recursive: true });
    writeFileSync(
      join(dir, "tiny.json"),
      JSON.stringify({ ...raw, name: "tiny", budgets: { ...raw.budgets, bundleBytes: 2048 } }),
    );
    const out = join(tmp.dir, "over");
    const err = await makeBundle({
      profile: "tiny",
      outDir: out,
      profilesDir: dir,
      unsigned: true,
    }).catch((e: unknown) => e);
    expect(isAxError(err, "AX_BUNDLE_BUDGET")).toBe(true);
    expect((err as Error).message).toMatch(
      /^profile tiny: agent\.mjs is \d+ bytes, over its budget of 2048 \(budgets\.bundleBytes\); largest: .*zod \d+ B/,
    );
    expect(existsSync(join(out, "tiny"))).toBe(false);
  });

  it("an unknown handler or a bad field, naming the file and the field", async () => {
    const dir = join(tmp.dir, "bad-profiles");
    cpSync(new URL("../../firmware-profiles/", import.meta.url), dir, { recursive: true });
    const raw = JSON.parse(readFileSync(join(dir, "gateway.json"), "utf8"));
    writeFileSync(
      join(dir, "gateway.json"),
      JSON.stringify({ ...raw, handlers: ["echo", "modbus.read"], heartbeatMs: 5 }),
    );
    const err = await makeBundle({
      profile: "gateway",
      outDir: join(tmp.dir, "x"),
      profilesDir: dir,
      unsigned: true,
    }).catch((e: unknown) => e);
    expect(isAxError(err, "AX_PROFILE_INVALID")).toBe(true);
    expect((err as Error).message).toBe(
      [
        `${join(dir, "gateway.json")}: invalid firmware profile`,
        "heartbeatMs: must be at least 100",
        'handlers.1: unknown handler "modbus.read"; known: echo, sleep, fail, mqtt.publish, http.request, file.write, exec',
      ].join("\n"),
    );
    const missing = await makeBundle({
      profile: "toaster",
      profilesDir: dir,
      unsigned: true,
    }).catch((e: unknown) => e);
    expect(isAxError(missing, "AX_PROFILE_NOT_FOUND")).toBe(true);
    expect((missing as Error).message).toBe(
      `no firmware profile "toaster" in ${dir} (there: gateway, sensor-hub, server)`,
    );
    // A profile that is not JSON is named by line and column, as a config file is.
    writeFileSync(join(dir, "server.json"), '{\n  "name": "server",\n  "handlers": [echo]\n}\n');
    const broken = await makeBundle({ profile: "server", profilesDir: dir, unsigned: true }).catch(
      (e: unknown) => e,
    );
    expect(isAxError(broken, "AX_PROFILE_INVALID")).toBe(true);
    expect((broken as Error).message).toBe(
      `${join(dir, "server.json")}:3:16: not valid JSON: unexpected "e"`,
    );
  });
});
