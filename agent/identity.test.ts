import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { axFailure } from "../test/helpers/ax-error.js";
import { loadAgentConfig, parseAgentConfig } from "./config.js";

const dir = mkdtempSync(join(tmpdir(), "ax-identity-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const identity = (agentId = "pump-7") => ({
  ax: "agent-identity/1",
  agentId,
  generation: 1,
  key: Buffer.alloc(32, 7).toString("base64url"),
  mqtt: { username: agentId, password: "a-long-enough-password" },
});

const write = (name: string, value: unknown, mode = 0o600) => {
  const path = join(dir, name);
  writeFileSync(path, typeof value === "string" ? value : JSON.stringify(value), { mode });
  chmodSync(path, mode);
  return path;
};

describe("agent identity in its config", () => {
  const base = { agentId: "pump-7", mqtt: { url: "mqtt://127.0.0.1:1883" } };

  it("reads identityFile relative to the config file, and takes its broker login", () => {
    write("pump.identity.json", identity());
    const configFile = write("agent.json", { ...base, identityFile: "pump.identity.json" });
    const c = loadAgentConfig(configFile);
    expect(c.identity?.generation).toBe(1);
    expect(c.identity?.mqtt.username).toBe("pump-7");
  });

  it("picks up ax-identity.json beside the config when the config names none", () => {
    const sub = mkdtempSync(join(dir, "beside-"));
    writeFileSync(join(sub, "ax-identity.json"), JSON.stringify(identity()), { mode: 0o600 });
    writeFileSync(join(sub, "agent.json"), JSON.stringify(base));
    expect(loadAgentConfig(join(sub, "agent.json")).identity?.agentId).toBe("pump-7");
    // Without one, no identity: the agent speaks unsigned (and an authenticating coordinator
    // does not hear it).
    const none = mkdtempSync(join(dir, "none-"));
    writeFileSync(join(none, "agent.json"), JSON.stringify(base));
    expect(loadAgentConfig(join(none, "agent.json")).identity).toBeUndefined();
  });

  it("refuses an identity file others can read, naming it", () => {
    const path = write("open.identity.json", identity(), 0o644);
    expect(axFailure(() => parseAgentConfig({ ...base, identityFile: path }))).toBe(
      `AX_SECURITY_KEY: ${path}: identity file is readable by others (mode 644); run chmod 600 ${path}`,
    );
  });

  it("refuses another agent's identity", () => {
    const path = write("other.identity.json", identity("valve-2"));
    expect(axFailure(() => parseAgentConfig({ ...base, identityFile: path }))).toBe(
      `AX_CONFIG_INVALID: ${path}: is the identity of agent "valve-2", not of "pump-7"`,
    );
  });

  it("names the bad field of a broken identity file", () => {
    const path = write("bad.identity.json", { ...identity(), key: "short", generation: 0 });
    const message = axFailure(() => parseAgentConfig({ ...base, identityFile: path }));
    expect(message).toContain(`AX_SECURITY_KEY: ${path}: invalid agent identity`);
    expect(message).toContain("generation: must be at least 1");
    expect(message).toContain("key: must be 32 bytes in unpadded base64url");
    const notJson = write("nojson.identity.json", "{");
    expect(axFailure(() => parseAgentConfig({ ...base, identityFile: notJson }))).toMatch(
      /^AX_SECURITY_KEY: .*nojson\.identity\.json: invalid agent identity\nnot valid JSON/,
    );
  });
});
