import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type MadeBundle, makeBundle } from "../../coordinator/bundle/make.js";
import { tempDir, waitFor } from "../helpers/env.js";

/**
 * One meaning per exit code across `ax`, `ax agent start` and a bundled agent (docs/cli.md):
 * 0 success, 1 the operation failed, 2 usage error, 70 internal error (unit-tested in
 * shared/command-line.test.ts: no command has a bug to show it with).
 */
const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));
const VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  }
).version;

function run(argv: string[]) {
  const r = spawnSync(process.execPath, argv, {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, AX_URL: "", AX_TOKEN: "", AX_TOKEN_FILE: "" },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
const ax = (args: string[]) => run([AX, ...args]);

/** Starts `argv`, waits for the agent's "agent started" line, sends SIGTERM; the exit code. */
async function stopsCleanly(argv: string[]): Promise<number | null> {
  const child: ChildProcess = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  child.stderr?.on("data", (c: Buffer) => {
    err += c.toString("utf8");
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  try {
    await waitFor("the agent started", () => {
      if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}: ${err}`);
      return err.includes('"msg":"agent started"') ? true : undefined;
    });
  } finally {
    child.kill("SIGTERM");
  }
  return exited;
}

describe("ax exit codes", () => {
  it.each([["--version"], ["-v"], ["version"]])("prints the version for %s and exits 0", (arg) => {
    expect(ax([arg])).toEqual({ code: 0, stdout: `ax ${VERSION}\n`, stderr: "" });
  });

  it("prints the usage, with the exit codes, for help and after any command", () => {
    for (const args of [["help"], ["--help"], ["job", "list", "--help"]]) {
      const r = ax(args);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain("ax version | --version | -v");
      expect(r.stdout).toContain("70  internal error: an unexpected exception, a bug");
    }
  });

  it.each([
    [["jb"], 'unknown command "jb"; did you mean "job"?'],
    [["fly"], 'unknown command "fly"; run "ax help"'],
    [["--verison"], "unknown flag --verison; did you mean --version?"],
    [["job", "lst"], 'job: unknown subcommand "lst"; did you mean "list"?'],
    [
      ["job"],
      "job: give a subcommand: add, list, show, edit, delete, pause, resume, trigger or preview",
    ],
    [["fleet", "enrol", "x"], 'fleet: unknown subcommand "enrol"; did you mean "enroll"?'],
    [["job", "list", "--jsn"], "job list: unknown flag --jsn; did you mean --json?"],
    [["job", "list", "--url"], "job list: --url needs a value"],
    [["job", "list", "--json=yes"], 'job list: --json takes no value, got "--json=yes"'],
    [["job", "list", "extra"], 'job list: unexpected argument "extra"'],
    [["version", "--bogus"], 'version: unexpected argument "--bogus"'],
    [["--version", "extra"], '--version: unexpected argument "extra"'],
    [["help", "nonsense"], 'help: unexpected argument "nonsense"'],
    [
      ["command", "send", "--handler", "echo", "--agent", "a", "--params", '{"x":1,}'],
      "command send: --params: not valid JSON at column 8: Expected double-quoted property name",
    ],
    [
      ["job", "preview", "--trigger", '{"type":"cron"'],
      "job preview: --trigger: not valid JSON at column 15: unexpected end of the value",
    ],
    [
      ["agent", "start", "--confg", "a.json"],
      "agent start: unknown flag --confg; did you mean --config?",
    ],
    [["agent", "start"], "agent start: --config FILE is required"],
    // The command line is checked before the token is looked for.
    [
      ["job", "preview", "--token-file", "/no/such/token", "--trigger", '{"type":"cron"'],
      "job preview: --trigger: not valid JSON at column 15: unexpected end of the value",
    ],
    [
      ["job", "preview", "backup", "--trigger", "{}", "--token-file", "/no/such/token"],
      "job preview: give a job ID or --trigger, not both",
    ],
    [["fleet", "list", "--tag", "site=n,bad"], 'fleet list: --tag must be KEY=VALUE, got "bad"'],
    // -h as a flag's value is the value, not a request for help.
    [
      ["job", "preview", "--trigger", "-h"],
      "job preview: --trigger: not valid JSON at column 2: No number after minus sign",
    ],
  ])("exits 2 for the usage error %j, word for word", (args, message) => {
    expect(ax(args)).toEqual({ code: 2, stdout: "", stderr: `ax: AX_CLI_USAGE: ${message}\n` });
  });

  it("exits 0, quietly, when its reader stops early (ax help | head)", async () => {
    // The shell's `| head` or `| true`: the read end of stdout is closed before ax writes.
    const child = spawn(process.execPath, [AX, "help"], { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout?.destroy();
    let err = "";
    child.stderr?.on("data", (c: Buffer) => {
      err += c.toString("utf8");
    });
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    expect(err).toBe("");
    expect(code).toBe(0);
  });

  it("exits 1 for a config or job file that is not JSON, naming its line and column", () => {
    const tmp = tempDir();
    try {
      const file = join(tmp.dir, "bad.json");
      writeFileSync(file, '{\n  "id": "x",\n  oops\n}');
      expect(ax(["job", "add", "--file", file])).toEqual({
        code: 1,
        stdout: "",
        stderr: `ax: AX_JOB_INVALID: ${file}:3:3: not valid JSON: Expected double-quoted property name\n`,
      });
      const r = ax(["coordinator", "start", "--config", file]);
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(
        `ax: AX_CONFIG_READ: ${file}:3:3: not valid JSON: Expected double-quoted property name\n`,
      );
    } finally {
      tmp.cleanup();
    }
  });
});

describe("ax agent start and a bundled agent share one command line", () => {
  const tmp = tempDir("ax-exit-codes-");
  let made: MadeBundle;
  let agentFile: string;
  const badConfig = join(tmp.dir, "bad-agent.json");
  const goodConfig = (name: string) => {
    const file = join(tmp.dir, `${name}.json`);
    // No broker listens on port 1: the agent keeps trying to connect until it is stopped.
    writeFileSync(
      file,
      JSON.stringify({
        agentId: name,
        mqtt: { url: "mqtt://127.0.0.1:1" },
        journal: { path: join(tmp.dir, `${name}.journal.sqlite`) },
      }),
    );
    return file;
  };

  beforeAll(async () => {
    made = await makeBundle({
      profile: "sensor-hub",
      outDir: join(tmp.dir, "dist"),
      unsigned: true,
    });
    agentFile = join(made.dir, "agent.mjs");
    writeFileSync(badConfig, JSON.stringify({ agentId: "bad/id", mqtt: { url: "mqtt://x" } }));
  }, 120_000);
  afterAll(() => tmp.cleanup());

  it("prints its version and exits 0", () => {
    expect(run([agentFile, "--version"])).toEqual({
      code: 0,
      stdout: `ax agent ${VERSION} (sensor-hub bundle)\n`,
      stderr: "",
    });
    expect(ax(["agent", "start", "--version"])).toEqual({
      code: 0,
      stdout: `ax agent ${VERSION}\n`,
      stderr: "",
    });
  });

  it("exits 2 for a usage error", () => {
    expect(run([agentFile, "--confg", "a.json"])).toEqual({
      code: 2,
      stdout: "",
      stderr: "agent: AX_CLI_USAGE: agent: unknown flag --confg; did you mean --config?\n",
    });
    expect(run([agentFile])).toEqual({
      code: 2,
      stdout: "",
      stderr: "agent: AX_CLI_USAGE: agent: --config FILE is required\n",
    });
  });

  it("exits 1 for a bad config, before it connects", () => {
    const bundled = run([agentFile, "--config", badConfig]);
    expect(bundled.code).toBe(1);
    expect(bundled.stderr).toContain(
      `agent: AX_CONFIG_INVALID: ${badConfig}: invalid agent config`,
    );
    const fromSource = ax(["agent", "start", "--config", badConfig]);
    expect(fromSource.code).toBe(1);
    expect(fromSource.stderr).toContain(
      `ax: AX_CONFIG_INVALID: ${badConfig}: invalid agent config`,
    );
  });

  it("exits 1 when the coordinator cannot reach its broker at start, leaving nothing running", async () => {
    // A port nothing listens on.
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((r) => server.close(() => r()));
    const dir = tempDir("ax-no-broker-");
    try {
      const config = join(dir.dir, "coordinator.json");
      writeFileSync(
        config,
        JSON.stringify({
          store: { path: join(dir.dir, "ax.sqlite") },
          mqtt: { url: `mqtt://127.0.0.1:${port}` },
          http: { port: 0 },
        }),
      );
      const child = spawn(process.execPath, [AX, "coordinator", "start", "--config", config], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, AX_URL: "", AX_TOKEN: "", AX_TOKEN_FILE: "" },
      });
      let err = "";
      child.stderr?.on("data", (c: Buffer) => {
        err += c.toString("utf8");
      });
      const code = await new Promise<number | null>((resolve) => {
        const t = setTimeout(() => {
          child.kill("SIGKILL");
          resolve(-1);
        }, 20_000);
        child.on("exit", (c) => {
          clearTimeout(t);
          resolve(c);
        });
      });
      expect(code, err).toBe(1);
      expect(err).toContain("AX_LINK_FAILED");
    } finally {
      dir.cleanup();
    }
  }, 30_000);

  it("exits 0 after a clean shutdown on SIGTERM", async () => {
    expect(await stopsCleanly([agentFile, "--config", goodConfig("bundled")])).toBe(0);
    expect(await stopsCleanly([AX, "agent", "start", "--config", goodConfig("source")])).toBe(0);
  }, 60_000);
});
