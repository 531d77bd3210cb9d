import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { AGENT_FIELD_DOCS, AGENT_PATH_FIELDS } from "../agent/config-docs.js";
import { COORDINATOR_PATH_FIELDS } from "./config.js";
import { agentRows, CONFIG_DOC, coordinatorRows, renderConfigDoc } from "./config-docs.js";

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const operations = readFileSync(new URL("../docs/operations.md", import.meta.url), "utf8");

describe("docs/config.md", () => {
  it("is what the schemas generate (run `npm run docs:config` after changing a config schema)", () => {
    const page = readFileSync(CONFIG_DOC, "utf8");
    const expected = renderConfigDoc(page);
    // Not toBe(expected): a page this long would drown the one line that says what to do.
    expect(
      page === expected,
      "docs/config.md is out of date with the config schemas: run `npm run docs:config`",
    ).toBe(true);
  });

  it("is linked from README.md and docs/operations.md", () => {
    expect(readme.includes("(docs/config.md)"), "README.md links docs/config.md").toBe(true);
    expect(operations.includes("(config.md)"), "docs/operations.md links config.md").toBe(true);
  });
});

describe("config field docs", () => {
  it("say what every coordinator field means", () => {
    const rows = coordinatorRows();
    expect(rows.length).toBeGreaterThan(40);
    expect(rows.filter((r) => !r.doc?.description).map((r) => r.path)).toEqual([]);
  });

  it("say what every agent field means, and name no field the schema lacks", () => {
    const paths = agentRows().map((r) => r.path);
    expect(paths.filter((p) => !AGENT_FIELD_DOCS[p]?.description)).toEqual([]);
    expect(Object.keys(AGENT_FIELD_DOCS).filter((p) => !paths.includes(p))).toEqual([]);
  });

  it("list as paths every field that names a file or folder, on both sides", () => {
    // `path`, `dir`, or a camel-case name ending in File, Dir or Path (`pidFile`, not `profile`).
    const looksLikeAPath = /(^|\.)(path|dir|file)$|[a-z](File|Dir|Path)$/;
    for (const [rows, listed] of [
      [coordinatorRows(), COORDINATOR_PATH_FIELDS],
      [agentRows(), AGENT_PATH_FIELDS],
    ] as const) {
      const strings = rows.filter((r) => r.type === "string" || r.type === "path");
      expect(strings.filter((r) => looksLikeAPath.test(r.path)).map((r) => r.path)).toEqual(
        strings.filter((r) => r.type === "path").map((r) => r.path),
      );
      expect(
        rows
          .filter((r) => r.type === "path")
          .map((r) => r.path)
          .sort(),
      ).toEqual([...listed].sort());
    }
  });

  it("are not imported by the agent (the text would weigh on its bundle)", () => {
    const agentDir = fileURLToPath(new URL("../agent", import.meta.url));
    const files = (dir: string): string[] =>
      readdirSync(dir).flatMap((name) => {
        const path = join(dir, name);
        return statSync(path).isDirectory() ? files(path) : [path];
      });
    const importers = files(agentDir)
      .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"))
      .filter((f) => /from "[^"]*config-docs(\.js)?"/.test(readFileSync(f, "utf8")));
    expect(importers.map((f) => f.slice(agentDir.length + 1))).toEqual([]);
  });
});
