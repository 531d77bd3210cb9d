import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { axFailure } from "../../test/helpers/ax-error.js";
import { parseCoordinatorConfig } from "../config.js";
import { secretsDir } from "../coordinator.js";
import { loadOrCreateSecrets, messageKey, mqttPassword, SECRET_FILES } from "./secrets.js";

const root = mkdtempSync(join(tmpdir(), "ax-secrets-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const mode = (path: string) => statSync(path).mode & 0o777;
describe("coordinator secrets", () => {
  it("creates the folder 0700 and private files 0600 on first start, and reads the same keys after", () => {
    const dir = join(root, "first");
    const a = loadOrCreateSecrets(dir);
    expect(mode(dir)).toBe(0o700);
    expect(mode(join(dir, SECRET_FILES.fleet))).toBe(0o600);
    expect(mode(join(dir, SECRET_FILES.bundleKey))).toBe(0o600);
    expect(a.fleet).toHaveLength(32);
    expect(a.bundleKey.asymmetricKeyType).toBe("ed25519");
    expect(readFileSync(join(dir, SECRET_FILES.bundlePublic), "utf8")).toBe(a.bundlePublicPem);
    const b = loadOrCreateSecrets(dir);
    expect(b.fleet.equals(a.fleet)).toBe(true);
    expect(b.bundlePublicPem).toBe(a.bundlePublicPem);
  });

  it("refuses a folder it cannot make, naming it and the system's reason", () => {
    const file = join(root, "a-file");
    writeFileSync(file, "");
    expect(axFailure(() => loadOrCreateSecrets(join(file, "secrets")))).toBe(
      `AX_SECURITY_KEY: ${join(file, "secrets")}: cannot make the secrets folder: ENOTDIR: not a directory, mkdir '${join(file, "secrets")}'`,
    );
  });

  it("refuses a fleet key others can read, or one that is not 32 bytes, naming the file", () => {
    const dir = join(root, "open");
    loadOrCreateSecrets(dir);
    const file = join(dir, SECRET_FILES.fleet);
    chmodSync(file, 0o644);
    expect(axFailure(() => loadOrCreateSecrets(dir))).toBe(
      `AX_SECURITY_KEY: ${file}: is readable by others (mode 644); run chmod 600 ${file}`,
    );
    writeFileSync(file, "abcd\n", { mode: 0o600 });
    chmodSync(file, 0o600);
    expect(axFailure(() => loadOrCreateSecrets(dir))).toBe(
      `AX_SECURITY_KEY: ${file}: must hold 64 hex digits (32 bytes), has 2 bytes`,
    );
  });

  it("derives a different key and password per agent, per generation, and per purpose", () => {
    const fleet = loadOrCreateSecrets(join(root, "derive")).fleet;
    const keys = new Set(
      ["a", "b"].flatMap((id) => [1, 2].map((g) => messageKey(fleet, id, g).toString("hex"))),
    );
    expect(keys.size).toBe(4);
    expect(messageKey(fleet, "a", 1).equals(messageKey(fleet, "a", 1))).toBe(true);
    expect(mqttPassword(fleet, "a", 1)).not.toBe(messageKey(fleet, "a", 1).toString("base64url"));
    expect(mqttPassword(fleet, "a", 1)).not.toBe(mqttPassword(fleet, "a", 2));
    // Another fleet key, other secrets.
    const other = loadOrCreateSecrets(join(root, "other")).fleet;
    expect(messageKey(other, "a", 1).equals(messageKey(fleet, "a", 1))).toBe(false);
  });

  it("lives beside the store unless security.dir says otherwise; bad security options name the field", () => {
    const base = { mqtt: { url: "mqtt://127.0.0.1:1" } };
    expect(
      secretsDir(parseCoordinatorConfig({ ...base, store: { path: "/var/lib/ax/ax.sqlite" } })),
    ).toBe("/var/lib/ax/ax-secrets");
    expect(secretsDir(parseCoordinatorConfig({ ...base, security: { dir: "/etc/ax/keys" } }))).toBe(
      "/etc/ax/keys",
    );
    const c = parseCoordinatorConfig(base);
    expect(c.security).toEqual({ messages: "required", freshnessMs: 300_000 });
    const message = axFailure(() =>
      parseCoordinatorConfig(
        { ...base, security: { messages: "maybe", freshnessMs: "soon" } },
        "ax.json",
      ),
    );
    expect(message).toContain("ax.json: invalid coordinator config");
    expect(message).toContain("security.messages");
    expect(message).toContain("security.freshnessMs");
  });
});
