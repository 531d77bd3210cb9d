import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * Issue 17: an HTTP route translates HTTP and calls one coordinator operation, which validates,
 * applies defaults with the coordinator's clock, and writes. So no route reaches into the store
 * or reads the wall clock itself.
 */
const ROUTES = join(
  resolve(dirname(fileURLToPath(import.meta.url)), ".."),
  "coordinator/http/routes",
);

const FORBIDDEN: { pattern: RegExp; why: string }[] = [
  { pattern: /\.store\b/, why: "reaches into the store: call a coordinator operation" },
  {
    pattern: /\bDate\.now\s*\(/,
    why: "reads the wall clock: the operation takes the coordinator's",
  },
];

/** `file:line: text — why` for every forbidden use in a route file's text. */
function findings(file: string, text: string): string[] {
  const out: string[] = [];
  text.split("\n").forEach((line, i) => {
    for (const f of FORBIDDEN) {
      if (f.pattern.test(line)) out.push(`${file}:${i + 1}: ${line.trim()} — ${f.why}`);
    }
  });
  return out;
}

describe("HTTP routes call coordinator operations only", () => {
  it("finds a store call and a wall-clock read in a route's text", () => {
    const text = "const job = await coordinator.store.getJob(id);\nconst now = Date.now();\n";
    expect(findings("x.ts", text)).toEqual([
      "x.ts:1: const job = await coordinator.store.getJob(id); — reaches into the store: call a coordinator operation",
      "x.ts:2: const now = Date.now(); — reads the wall clock: the operation takes the coordinator's",
    ]);
  });

  it("no route file mentions .store or Date.now()", () => {
    const files = readdirSync(ROUTES).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"));
    expect(files.length).toBeGreaterThanOrEqual(5);
    const found = files.flatMap((f) => findings(f, readFileSync(join(ROUTES, f), "utf8")));
    expect(found).toEqual([]);
  });
});
