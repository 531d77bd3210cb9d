import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PREFIX_RULE } from "../shared/protocol/topics.js";
import { axFailure } from "../test/helpers/ax-error.js";
import { tempDir } from "../test/helpers/env.js";
import { journalPath, loadAgentConfig, parseAgentConfig } from "./config.js";

const base = { agentId: "pump-7", mqtt: { url: "mqtt://127.0.0.1:1883" } };
const problems = (input: unknown) =>
  axFailure(() => parseAgentConfig(input, "agent.json"))
    .split("\n")
    .slice(1);

describe("agent config: unknown keys", () => {
  it("refuses a misspelt key instead of ignoring it, with the closest key", () => {
    expect(problems({ ...base, tagz: { site: "north" } })).toEqual([
      'tagz: unknown key; did you mean "tags"?',
    ]);
  });

  it("says that the required key is missing when its near miss is given", () => {
    expect(problems({ agentID: "pump-7", mqtt: base.mqtt })).toEqual([
      'agentID: unknown key; did you mean "agentId"? (agentId is required)',
    ]);
  });

  it("refuses unknown keys at every level, each at its full path", () => {
    expect(
      problems({
        ...base,
        mqtt: { ...base.mqtt, reconnect: { basems: 100 } },
        journal: { synchronus: "FULL" },
        capacity: { concurency: 2 },
        security: { freshness: 1000 },
        handlers: { "file.write": { allow: ["/tmp/"], alow: [] } },
      }),
    ).toEqual([
      'mqtt.reconnect.basems: unknown key; did you mean "baseMs"?',
      'security.freshness: unknown key; did you mean "freshnessMs"?',
      'capacity.concurency: unknown key; did you mean "concurrency"?',
      'journal.synchronus: unknown key; did you mean "synchronous"?',
      'handlers.file.write.alow: unknown key; did you mean "allow"?',
    ]);
  });

  it("refuses an unknown key in an identity given inline", () => {
    const identity = {
      ax: "agent-identity/1",
      agentId: "pump-7",
      generation: 1,
      key: Buffer.alloc(32, 7).toString("base64url"),
      mqtt: { username: "pump-7", password: "a-long-enough-password", pasword: "x" },
      generaton: 2,
    };
    expect(problems({ ...base, identity })).toEqual([
      'identity.mqtt.pasword: unknown key; did you mean "password"?',
      'identity.generaton: unknown key; did you mean "generation"?',
    ]);
  });
});

describe("agent config: mqtt.prefix", () => {
  it("takes one or more topic levels, like the coordinator's", () => {
    const c = parseAgentConfig({ ...base, mqtt: { ...base.mqtt, prefix: "plant-3/ax" } });
    expect(c.mqtt.prefix).toBe("plant-3/ax");
    expect(problems({ ...base, mqtt: { ...base.mqtt, prefix: "ax/#" } })).toEqual([
      `mqtt.prefix: ${PREFIX_RULE}`,
    ]);
  });
});

describe("agent config: paths", () => {
  const tmp = tempDir("ax-agent-config-");
  afterAll(() => tmp.cleanup());

  it("reads a relative journal.path from the config file's folder", () => {
    const dir = join(tmp.dir, "etc");
    mkdirSync(dir);
    const file = join(dir, "agent.json");
    writeFileSync(file, JSON.stringify({ ...base, journal: { path: "state/j.sqlite" } }));
    expect(journalPath(loadAgentConfig(file))).toBe(join(dir, "state/j.sqlite"));
    writeFileSync(file, JSON.stringify({ ...base, journal: { path: "/var/lib/ax/j.sqlite" } }));
    expect(journalPath(loadAgentConfig(file))).toBe("/var/lib/ax/j.sqlite");
  });

  it("keeps the default journal in the working directory, and a config made in code as it is", () => {
    const dir = join(tmp.dir, "default");
    mkdirSync(dir);
    writeFileSync(join(dir, "agent.json"), JSON.stringify(base));
    expect(journalPath(loadAgentConfig(join(dir, "agent.json")))).toBe("ax-journal-pump-7.sqlite");
    expect(journalPath(parseAgentConfig({ ...base, journal: { path: "j.sqlite" } }))).toBe(
      "j.sqlite",
    );
  });

  it("refuses to start a new journal when the old reading of a relative path finds one", () => {
    const work = join(tmp.dir, "work");
    const etc = join(tmp.dir, "moved");
    mkdirSync(work);
    mkdirSync(etc);
    writeFileSync(join(work, "j.sqlite"), "");
    const file = join(etc, "agent.json");
    writeFileSync(file, JSON.stringify({ ...base, journal: { path: "j.sqlite" } }));
    const cwd = process.cwd();
    process.chdir(work);
    try {
      expect(axFailure(() => loadAgentConfig(file))).toBe(
        `AX_CONFIG_INVALID: ${file}: journal.path: "j.sqlite" is read from the config file's folder (${join(etc, "j.sqlite")}, no journal there), but ${join(work, "j.sqlite")} is a journal in the working directory, where earlier versions read it: move it, or give journal.path as an absolute path`,
      );
    } finally {
      process.chdir(cwd);
    }
  });
});

describe("agent config: a file that is not JSON", () => {
  const tmp = tempDir("ax-agent-config-json-");
  afterAll(() => tmp.cleanup());

  it("names the file, the line and the column of the syntax error", () => {
    const file = join(tmp.dir, "agent.json");
    writeFileSync(file, '{\n  "agentId": "pump-7",\n}\n');
    expect(axFailure(() => loadAgentConfig(file))).toBe(
      `AX_CONFIG_READ: ${file}:3:1: not valid JSON: Expected double-quoted property name`,
    );
  });
});
