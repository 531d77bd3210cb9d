import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { startDemo } from "../helpers/demo.js";
import { tempDir, waitFor } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

function ax(args: string[], timeoutMs = 60_000) {
  const r = spawnSync(process.execPath, [AX, ...args], { encoding: "utf8", timeout: timeoutMs });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("the ax command", () => {
  it("runs the demo for a fixed duration and prints its summary line", () => {
    const r = ax(["demo", "--duration", "7"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const summary = r.stdout.trim().split("\n").at(-1) ?? "";
    const m = /^demo: (\d+) executions, (\d+) succeeded, (\d+) failed$/.exec(summary);
    expect(m, r.stdout).not.toBeNull();
    // A job every 2 s for ~7 s plus one command: at least 3 runs, all succeeded.
    expect(Number(m?.[2])).toBeGreaterThanOrEqual(3);
    expect(Number(m?.[3])).toBe(0);
    expect(r.stdout).toContain("command→demo-agent-2");
  }, 90_000);

  it("serves the console, the API and metrics while the demo runs, at the URL it prints", async () => {
    const demo = await startDemo(8);
    const { url, tokenFile } = demo;
    try {
      const page = await fetch(`${url}/`);
      expect(page.status).toBe(200);
      expect(await page.text()).toContain("/assets/app.js");
      // Auth is on in the demo too: the API needs the admin token whose file the demo prints.
      expect((await fetch(`${url}/api/executions`)).status).toBe(401);
      const headers = { authorization: `Bearer ${readFileSync(tokenFile, "utf8").trim()}` };
      // The demo's job fires every 2 s: its executions show in the API while it runs.
      const items = await waitFor("executions in the API", async () => {
        const r = (await (await fetch(`${url}/api/executions`, { headers })).json()) as {
          items: unknown[];
        };
        return r.items.length > 0 ? r.items : undefined;
      });
      expect(items.length).toBeGreaterThan(0);
      expect(await (await fetch(`${url}/metrics`, { headers })).text()).toContain("ax_fires_total");
    } finally {
      expect(await demo.exited).toBe(0);
    }
  }, 60_000);

  it.each([
    [
      ["demo", "--duration", "abc"],
      'demo: --duration must be a positive number of seconds, got "abc"',
    ],
    [["demo", "--duration=-3"], 'demo: --duration must be a positive number of seconds, got "-3"'],
    [["demo", "--speed", "2"], "demo: unknown flag --speed (it takes --duration, --http-port)"],
    [
      ["demo", "--http-port", "99999"],
      'demo: --http-port must be a port number from 0 to 65535, got "99999"',
    ],
    [["coordinator", "stop"], 'coordinator: unknown subcommand "stop" (expected start)'],
    [["agent", "start"], "agent start: --config FILE is required"],
    [["fly"], 'unknown command "fly"; run "ax help"'],
  ])("rejects %j with a usage error naming the problem", (args, message) => {
    const r = ax(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`ax: AX_CLI_USAGE: ${message}`);
  });

  it("names the file, the field and the problem for a bad agent config", () => {
    const tmp = tempDir();
    try {
      const file = `${tmp.dir}/agent.json`;
      writeFileSync(file, JSON.stringify({ agentId: "bad/id", mqtt: { url: "http://x" } }));
      const r = ax(["agent", "start", "--config", file]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`ax: AX_CONFIG_INVALID: ${file}: invalid agent config`);
      expect(r.stderr).toContain("agentId: must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)");
      expect(r.stderr).toContain("mqtt.url: must be an mqtt:// or mqtts:// URL");
    } finally {
      tmp.cleanup();
    }
  });

  it("names the file, the field and the problem for a bad coordinator config", () => {
    const tmp = tempDir();
    try {
      const file = `${tmp.dir}/coordinator.json`;
      writeFileSync(
        file,
        JSON.stringify({ mqtt: { url: "mqtt://127.0.0.1:1" }, heartbeatMs: "fast" }),
      );
      const r = ax(["coordinator", "start", "--config", file]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`ax: AX_CONFIG_INVALID: ${file}: invalid coordinator config`);
      expect(r.stderr).toContain(
        'heartbeatMs: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "fast")',
      );
      writeFileSync(file, "{ not json");
      const r2 = ax(["coordinator", "start", "--config", file]);
      expect(r2.code).toBe(1);
      expect(r2.stderr).toContain(
        `ax: AX_CONFIG_READ: ${file}:1:3: not valid JSON: Expected property name or '}'`,
      );
    } finally {
      tmp.cleanup();
    }
  });
});
