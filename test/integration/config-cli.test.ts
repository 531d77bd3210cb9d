import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { SqliteStore } from "../../coordinator/store/sqlite/sqlite-store.js";
import { tempDir } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

function ax(args: string[], cwd: string) {
  const r = spawnSync(process.execPath, [AX, ...args], { cwd, encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * The report of issue 17: `ax bundle fleet --config ../real/coordinator.json` made an empty
 * ax.sqlite in the working folder and printed an empty table. Now relative paths are read from the
 * config's folder, and a command that only reads the store refuses a missing one.
 */
describe("config files given to the CLI from another folder", () => {
  let tmp: ReturnType<typeof tempDir>;
  afterEach(() => tmp?.cleanup());

  function layout(config: Record<string, unknown> = {}) {
    tmp = tempDir();
    const real = join(tmp.dir, "real");
    const here = join(tmp.dir, "here");
    mkdirSync(real);
    mkdirSync(here);
    writeFileSync(
      join(real, "coordinator.json"),
      JSON.stringify({ mqtt: { url: "mqtt://127.0.0.1:1" }, ...config }),
    );
    return { real, here, config: "../real/coordinator.json" };
  }

  it("ax bundle fleet reads the store beside the config", async () => {
    const { real, here, config } = layout({ store: { path: "ax.sqlite" } });
    await new SqliteStore({ path: join(real, "ax.sqlite") }).close();
    const r = ax(["bundle", "fleet", "--config", config], here);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^agent\s+status\s+profile/);
    expect(readdirSync(here)).toEqual([]);
  });

  it.each([
    ["bundle fleet", ["bundle", "fleet"]],
    ["broker config", ["broker", "config", "--out", "mq"]],
  ])("%s refuses a missing store, naming it and the config, and creates nothing", (name, args) => {
    const { real, here, config } = layout();
    const r = ax([...args, "--config", config], here);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_STORE_MISSING: ${name}: ${join(real, "ax.sqlite")}: no such store (store.path of ${config}; a relative path is read from the config file's folder). ${name} only reads a store: fix store.path, or start the coordinator once, which creates it\n`,
    );
    expect(readdirSync(here)).toEqual([]);
    expect(readdirSync(real)).toEqual(["coordinator.json"]);
  });

  it("ax coordinator start refuses to begin again on an empty store when 0.x's store is in the working folder", async () => {
    const { real, here, config } = layout({ store: { path: "ax.sqlite" } });
    await new SqliteStore({ path: join(here, "ax.sqlite") }).close();
    const r = ax(["coordinator", "start", "--config", config], here);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_CONFIG_INVALID: ${config}: store.path: "ax.sqlite" is read from the config file's folder, so it is ${join(real, "ax.sqlite")}, which does not exist; ${join(here, "ax.sqlite")} does (earlier versions read relative paths from the working folder). Move it beside the config, or give store.path as an absolute path\n`,
    );
    expect(existsSync(join(real, "ax.sqlite"))).toBe(false);
  });

  it("ax store migrate refuses the same case, and creates no empty store beside the config", () => {
    const { real, here, config } = layout({ store: { path: "ax.sqlite" } });
    const old = new SqliteStore({ path: join(here, "ax.sqlite") });
    return old.close().then(() => {
      const r = ax(["store", "migrate", "--config", config], here);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        `ax: AX_CONFIG_INVALID: ${config}: store.path: "ax.sqlite" is read from the config file's folder, so it is ${join(real, "ax.sqlite")}, which does not exist; ${join(here, "ax.sqlite")} does`,
      );
      expect(readdirSync(real)).toEqual(["coordinator.json"]);
    });
  });

  it("a store on PostgreSQL is not refused for a SQLite file in the working folder", async () => {
    // Nothing listens on port 1: the command gets as far as connecting, past the config checks.
    const { real, here, config } = layout({
      store: { url: "postgres://ax@127.0.0.1:1/ax" },
    });
    await new SqliteStore({ path: join(here, "ax.sqlite") }).close();
    const r = ax(["store", "migrate", "--config", config], here);
    expect(r.code).toBe(1);
    expect(r.stderr).not.toContain("AX_CONFIG_INVALID");
    expect(r.stderr).toMatch(/^ax: AX_STORE_\w+: .*127\.0\.0\.1:1/);
    expect(readdirSync(real)).toEqual(["coordinator.json"]);
  });

  it("a store on PostgreSQL with 0.x's secrets in the working folder is refused, not given new keys", () => {
    // No security.dir: the secrets are ax-secrets beside the store's path, the config's folder
    // now; 0.x read that from the working folder, where they are. Refused before it connects.
    const { real, here, config } = layout({ store: { url: "postgres://ax@127.0.0.1:1/ax" } });
    mkdirSync(join(here, "ax-secrets"));
    writeFileSync(join(here, "ax-secrets", "admin.token"), "x\n");
    const r = ax(["store", "migrate", "--config", config], here);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_CONFIG_INVALID: ${config}: security.dir: not given, so "ax-secrets" (its default), is read from the config file's folder, so it is ${join(real, "ax-secrets")}, which does not exist; ${join(here, "ax-secrets")} does (earlier versions read relative paths from the working folder). Move it beside the config, or give security.dir as an absolute path\n`,
    );
    expect(readdirSync(real)).toEqual(["coordinator.json"]);
  });

  it("ax broker config refuses a secrets folder that holds no keys, and makes none", async () => {
    const { real, here, config } = layout({
      store: { path: "ax.sqlite" },
      security: { dir: "secretz" },
    });
    await new SqliteStore({ path: join(real, "ax.sqlite") }).close();
    const r = ax(["broker", "config", "--out", "mq", "--config", config], here);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_SECURITY_KEY: broker config: ${join(real, "secretz")}: holds no coordinator secrets (fleet.key, bundle-signing.key; security.dir of ${config}, else ax-secrets beside the store). broker config only reads them: fix security.dir, or start the coordinator once, which creates them\n`,
    );
    expect(existsSync(join(real, "secretz"))).toBe(false);
    expect(readdirSync(here)).toEqual([]);
  });

  it("ax coordinator start refuses a token file others can read before it connects", () => {
    const { real, here, config } = layout({
      http: { auth: { tokens: [{ tokenFile: "viewer.token", role: "viewer" }] } },
    });
    writeFileSync(join(real, "viewer.token"), "a-viewer-token-of-some-length\n", { mode: 0o644 });
    chmodSync(join(real, "viewer.token"), 0o644);
    // No broker listens on port 1: the refusal must come first, not AX_LINK_FAILED.
    const r = ax(["coordinator", "start", "--config", config], here);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_SECURITY_KEY: http.auth.tokens.0.tokenFile: ${join(real, "viewer.token")}: is readable by others (mode 644); run chmod 600 ${join(real, "viewer.token")}\n`,
    );
    expect(readdirSync(real).sort()).toEqual(["coordinator.json", "viewer.token"]);
  });

  it("ax agent start refuses a misspelt key, with the closest one", () => {
    tmp = tempDir();
    const file = join(tmp.dir, "agent.json");
    writeFileSync(
      file,
      JSON.stringify({ agentID: "a1", mqtt: { url: "mqtt://127.0.0.1:1" }, tagz: {} }),
    );
    const r = ax(["agent", "start", "--config", file], tmp.dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_CONFIG_INVALID: ${file}: invalid agent config\nagentID: unknown key; did you mean "agentId"? (agentId is required)\ntagz: unknown key; did you mean "tags"?\n`,
    );
    expect(existsSync(join(tmp.dir, "ax-journal-a1.sqlite"))).toBe(false);
  });
});
