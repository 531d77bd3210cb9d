import { createHash } from "node:crypto";
import { appendFileSync, mkdirSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../test/helpers/env.js";
import { bundleRuntime } from "./bundle-runtime.js";
import { PARTS } from "./parts/included.js";
import type { AgentParts } from "./parts/types.js";
import { ROOT_ENV } from "./update/state.js";

const tmp = tempDir("ax-runtime-");
afterAll(() => tmp.cleanup());

const bundled: AgentParts = {
  ...PARTS,
  bundle: { profile: "p", version: "1.2.3", defaults: {}, nativeBinding: "better_sqlite3.node" },
};

const sha = (text: string) => createHash("sha256").update(text).digest("hex");

describe("bundleRuntime", () => {
  const agent = join(tmp.dir, "agent.mjs");
  const url = pathToFileURL(agent).href;
  writeFileSync(agent, "console.log(1);\n");
  const recorded = "ab".repeat(32);

  it("takes the sha256 its manifest records for a file of the recorded size", () => {
    writeFileSync(
      join(tmp.dir, "manifest.json"),
      JSON.stringify({ files: { "agent.mjs": { sha256: recorded, bytes: 16 } } }),
    );
    expect(bundleRuntime(bundled, url)).toEqual({
      bundle: { version: "1.2.3", sha256: recorded },
      nativeBinding: join(tmp.dir, "better_sqlite3.node"),
      // The journal's checkpoint thread imports better-sqlite3 from the agent file itself.
      sqliteModule: url,
    });
  });

  it("hashes the file itself when it is not the size the manifest records, or there is none", () => {
    appendFileSync(agent, "// changed\n");
    const actual = sha("console.log(1);\n// changed\n");
    expect(bundleRuntime(bundled, url).bundle?.sha256).toBe(actual);
    unlinkSync(join(tmp.dir, "manifest.json"));
    expect(bundleRuntime(bundled, url).bundle?.sha256).toBe(actual);
  });

  it("offers updates only from an A/B slot the launcher started it in, not from a flat install", () => {
    const root = join(tmp.dir, "root");
    mkdirSync(join(root, "a"), { recursive: true });
    writeFileSync(join(root, "a", "agent.mjs"), "console.log(1);\n");
    writeFileSync(join(root, "agent.mjs"), "console.log(1);\n");
    symlinkSync("a", join(root, "current"));
    const before = process.env[ROOT_ENV];
    process.env[ROOT_ENV] = root;
    try {
      const viaCurrent = pathToFileURL(join(root, "current", "agent.mjs")).href;
      expect(bundleRuntime(bundled, viaCurrent).update?.root).toBe(root);
      const flat = pathToFileURL(join(root, "agent.mjs")).href;
      expect(bundleRuntime(bundled, flat).update).toBeUndefined();
      delete process.env[ROOT_ENV];
      expect(bundleRuntime(bundled, viaCurrent).update).toBeUndefined();
    } finally {
      if (before === undefined) delete process.env[ROOT_ENV];
      else process.env[ROOT_ENV] = before;
    }
  });

  it("says nothing for an agent run from source", () => {
    expect(bundleRuntime(PARTS, url)).toEqual({});
  });
});
