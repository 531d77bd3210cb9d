import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * DESIGN §2: the agent imports shared/ only; shared/ imports neither side. Enforced here by
 * reading every import of every source file, so a violation fails CI instead of bloating a
 * device bundle.
 */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path));
    // Tests beside the code may use test parts (the embedded broker); they never ship.
    else if (/\.(ts|js|mjs)$/.test(name) && !/\.test\.ts$/.test(name)) out.push(path);
  }
  return out;
}

const IMPORT =
  /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)|^\s*import\s*["']([^"']+)["']/gm;

/** Every module specifier a file imports or re-exports. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const out: string[] = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2] ?? m[3];
    if (spec) out.push(spec);
  }
  return out;
}

interface Violation {
  file: string;
  spec: string;
}

function violations(
  area: "agent" | "shared",
  forbidden: (target: string, spec: string) => boolean,
): Violation[] {
  const found: Violation[] = [];
  for (const file of sourceFiles(join(ROOT, area))) {
    for (const spec of importsOf(file)) {
      const target = spec.startsWith(".") ? relative(ROOT, resolve(dirname(file), spec)) : spec;
      if (forbidden(target, spec)) found.push({ file: relative(ROOT, file), spec });
    }
  }
  return found;
}

/** Packages that must never reach a device: the coordinator's scheduling, store and HTTP stack. */
const SERVER_ONLY = /^(cron-parser|pg|express|fastify|koa|hono|aedes|prom-client|pino)(\/|$)/;

describe("module boundaries", () => {
  it("finds imports in every form the codebase uses", () => {
    const specs = importsOf(join(ROOT, "agent", "agent.ts"));
    expect(specs).toContain("../shared/protocol/index.js");
    expect(specs.length).toBeGreaterThan(5);
  });

  it("agent/ imports nothing from coordinator/", () => {
    expect(violations("agent", (t) => t === "coordinator" || t.startsWith("coordinator/"))).toEqual(
      [],
    );
  });

  it("shared/ imports nothing from agent/ or coordinator/", () => {
    expect(violations("shared", (t) => /^(agent|coordinator)(\/|$)/.test(t))).toEqual([]);
  });

  it("agent/ and shared/ use zod/mini and no server-only package", () => {
    const bad = (t: string, spec: string) =>
      !spec.startsWith(".") && (t === "zod" || SERVER_ONLY.test(t));
    expect([...violations("agent", bad), ...violations("shared", bad)]).toEqual([]);
  });
});
