import { execFile } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import { startTestCoordinator, type TestBroker, tempDir, testBroker } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

/** Runs `ax` in `cwd` with only the environment given (no AX_* from the test's own). */
function ax(
  args: string[],
  cwd: string,
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [AX, ...args],
      {
        cwd,
        encoding: "utf8",
        timeout: 60_000,
        env: { ...process.env, AX_URL: "", AX_TOKEN: "", AX_TOKEN_FILE: "", ...env },
      },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? 1) : 0;
        resolve({ code: typeof code === "number" ? code : 1, stdout, stderr });
      },
    );
  });
}

describe("ax and the admin token, API tokens and enrolment", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let elsewhere: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let env: Record<string, string>;

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    elsewhere = tempDir();
    // The store in tmp.dir: the secrets folder is tmp.dir/ax-secrets, as for a coordinator
    // started there with the default store path.
    coordinator = await startTestCoordinator(broker, tmp.dir, 1_000);
    http = await startHttpServer(coordinator, { port: 0 });
    env = { AX_URL: http.url };
  });

  afterAll(async () => {
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
    elsewhere?.cleanup();
  });

  it("finds ./ax-secrets/admin.token without flags; elsewhere says where it looked", async () => {
    const here = await ax(["job", "list", "--json"], tmp.dir, env);
    expect(here.stderr).toBe("");
    expect(here.code).toBe(0);
    expect(JSON.parse(here.stdout)).toEqual({ items: [] });

    const there = await ax(["job", "list"], elsewhere.dir, env);
    expect(there.code).toBe(1);
    expect(there.stderr).toContain("ax: AX_API_UNAUTHORIZED: this route needs a bearer token");
    expect(there.stderr).toContain(
      "(token: none: no --token, AX_TOKEN, --token-file, AX_TOKEN_FILE or --config, and no ./ax-secrets/admin.token)",
    );
  });

  it("takes --token, AX_TOKEN, --token-file, AX_TOKEN_FILE and --config, in that order", async () => {
    const file = join(tmp.dir, "ax-secrets", "admin.token");
    const admin = readFileSync(file, "utf8").trim();
    const ok = async (args: string[], e: Record<string, string>) => {
      const r = await ax(["job", "list", "--json", ...args], elsewhere.dir, { ...env, ...e });
      return r.code === 0 ? "ok" : r.stderr.trim();
    };
    expect(await ok(["--token", admin], {})).toBe("ok");
    expect(await ok([], { AX_TOKEN: admin })).toBe("ok");
    expect(await ok(["--token-file", file], {})).toBe("ok");
    expect(await ok([], { AX_TOKEN_FILE: file })).toBe("ok");
    const config = join(elsewhere.dir, "coordinator.json");
    writeFileSync(
      config,
      JSON.stringify({ store: { path: join(tmp.dir, "ax.sqlite") }, mqtt: { url: broker.url } }),
    );
    expect(await ok(["--config", config], {})).toBe("ok");
    // The first source wins: a wrong --token is not rescued by a good AX_TOKEN.
    expect(await ok(["--token", "wrong-token-0123456789"], { AX_TOKEN: admin })).toContain(
      "AX_API_UNAUTHORIZED: unknown or revoked bearer token (token: --token)",
    );
    // A token file others can read is refused, as ssh refuses such a key.
    const loose = join(elsewhere.dir, "loose.token");
    writeFileSync(loose, `${admin}\n`);
    chmodSync(loose, 0o644);
    expect(await ok(["--token-file", loose], {})).toContain(
      `AX_SECURITY_KEY: job list: the token file of --token-file: ${loose}: is readable by others (mode 644)`,
    );
    // Each source's error says which source named the file and where it looked.
    expect(await ok(["--token-file", "none"], {})).toBe(
      "ax: AX_SECURITY_KEY: job list: the token file of --token-file: cannot read ./none: ENOENT: no such file or directory",
    );
    expect(await ok([], { AX_TOKEN_FILE: "none" })).toBe(
      "ax: AX_SECURITY_KEY: job list: the token file of AX_TOKEN_FILE: cannot read ./none: ENOENT: no such file or directory",
    );
    const bare = join(elsewhere.dir, "bare.json");
    writeFileSync(
      bare,
      JSON.stringify({
        store: { path: join(elsewhere.dir, "ax.sqlite") },
        mqtt: { url: broker.url },
      }),
    );
    expect(await ok(["--config", "bare.json"], {})).toBe(
      "ax: AX_SECURITY_KEY: job list: the admin token of --config bare.json (its secrets folder ./ax-secrets): cannot read ./ax-secrets/admin.token: ENOENT: no such file or directory",
    );
  });

  it("creates, lists and revokes tokens; the new token works until revoked", async () => {
    const made = await ax(["token", "create", "ci", "--role", "viewer"], tmp.dir, env);
    expect(made.code, made.stderr).toBe(0);
    const token = made.stdout.trim();
    expect(token).toMatch(/^axt_/);
    expect(made.stderr).toContain('token "ci" (viewer) created; it is shown only this once');
    const list = await ax(["token", "list"], tmp.dir, env);
    expect(list.stdout).toMatch(/^ci\s+viewer\s+\S+\s+admin\s+-$/m);
    expect(list.stdout).not.toContain(token);
    expect((await ax(["job", "list"], elsewhere.dir, { ...env, AX_TOKEN: token })).code).toBe(0);
    const denied = await ax(["token", "list"], elsewhere.dir, { ...env, AX_TOKEN: token });
    expect(denied.stderr).toContain(
      "AX_API_FORBIDDEN: this operation needs a token with the admin role",
    );
    const bad = await ax(["token", "create", "x", "--role", "root"], tmp.dir, env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(
      'token create: --role must be one of viewer, operator, admin, got "root"',
    );
    const revoked = await ax(["token", "revoke", "ci"], tmp.dir, env);
    expect(revoked.stdout.trim()).toBe('token "ci" revoked');
    const after = await ax(["job", "list"], elsewhere.dir, { ...env, AX_TOKEN: token });
    expect(after.stderr).toContain("AX_API_UNAUTHORIZED: unknown or revoked bearer token");
  });

  it("enrols an agent into a 0600 identity file, refuses to overwrite it, revokes it", async () => {
    const r = await ax(["fleet", "enroll", "dev-7", "--tag", "site=north"], elsewhere.dir, {
      ...env,
      AX_TOKEN_FILE: join(tmp.dir, "ax-secrets", "admin.token"),
    });
    expect(r.code, r.stderr).toBe(0);
    const file = join(elsewhere.dir, "dev-7.identity.json");
    expect(r.stdout).toContain(`its identity file is ${file} (mode 0600)`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const identity = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
    expect(identity).toMatchObject({ ax: "agent-identity/1", agentId: "dev-7", generation: 1 });
    expect(coordinator.identities.get("dev-7")?.tags).toEqual({ site: "north" });

    const again = await ax(["fleet", "enroll", "dev-7", "--rotate"], elsewhere.dir, {
      ...env,
      AX_TOKEN_FILE: join(tmp.dir, "ax-secrets", "admin.token"),
    });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`AX_CLI_FILE_EXISTS: fleet enroll: ${file} exists`);
    // Refused before the coordinator was asked: still generation 1.
    expect(coordinator.identities.get("dev-7")?.generation).toBe(1);

    const out = join(tmp.dir, "dev-7.json");
    const rotated = await ax(["fleet", "enroll", "dev-7", "--rotate", "--out", out], tmp.dir, env);
    expect(rotated.code, rotated.stderr).toBe(0);
    expect(JSON.parse(readFileSync(out, "utf8")).generation).toBe(2);
    // A file others could read, overwritten with --force, holds the key only at 0600.
    chmodSync(out, 0o644);
    const forced = await ax(
      ["fleet", "enroll", "dev-7", "--rotate", "--out", out, "--force"],
      tmp.dir,
      env,
    );
    expect(forced.code, forced.stderr).toBe(0);
    expect(JSON.parse(readFileSync(out, "utf8")).generation).toBe(3);
    expect(statSync(out).mode & 0o777).toBe(0o600);

    const list = await ax(["fleet", "identities"], tmp.dir, env);
    expect(list.stdout).toMatch(/^dev-7\s+enrolled\s+3\s+site=north\s+\S+\s+admin$/m);
    const rev = await ax(["fleet", "revoke", "dev-7"], tmp.dir, env);
    expect(rev.stdout).toContain('agent "dev-7" revoked');
    expect(coordinator.identities.get("dev-7")?.status).toBe("revoked");
    // --out into a folder that is not there: refused before the coordinator is asked.
    const nowhere = join(tmp.dir, "no-such-folder", "dev-8.json");
    const noFolder = await ax(["fleet", "enroll", "dev-8", "--out", nowhere], tmp.dir, env);
    expect(noFolder.code, noFolder.stderr).toBe(2);
    expect(noFolder.stderr).toContain(
      `ax: AX_CLI_USAGE: fleet enroll: cannot write ${nowhere}: its folder ${join(tmp.dir, "no-such-folder")} does not exist or is not writable`,
    );
    expect(coordinator.identities.get("dev-8")).toBeUndefined();
    // --out naming a folder, with --force: refused too, not enrolled (it was, then failed, exit 70).
    const asFolder = join(tmp.dir, "a-folder");
    mkdirSync(asFolder);
    const folderOut = await ax(
      ["fleet", "enroll", "dev-9", "--out", asFolder, "--force"],
      tmp.dir,
      env,
    );
    expect(folderOut.code, folderOut.stderr).toBe(2);
    expect(folderOut.stderr).toContain(
      `ax: AX_CLI_USAGE: fleet enroll: cannot write ${asFolder}: it is a folder`,
    );
    expect(coordinator.identities.get("dev-9")).toBeUndefined();
    // Without --force the same: a folder is no place for the file, whatever --force says.
    const folderNoForce = await ax(["fleet", "enroll", "dev-9", "--out", asFolder], tmp.dir, env);
    expect(folderNoForce.code, folderNoForce.stderr).toBe(2);
    expect(folderNoForce.stderr).toContain(
      `ax: AX_CLI_USAGE: fleet enroll: cannot write ${asFolder}: it is a folder`,
    );
    expect(coordinator.identities.get("dev-9")).toBeUndefined();
    const none = await ax(["fleet", "enroll", "a/b"], tmp.dir, env);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("body.agentId: must be 1-128 of");
    expect(existsSync(join(tmp.dir, "a/b.identity.json"))).toBe(false);
  });
});
