import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import mqtt from "mqtt";
import { describe, expect, it } from "vitest";
import { MOSQUITTO_FILES } from "../../coordinator/broker/mosquitto.js";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator, secretsDir } from "../../coordinator/coordinator.js";
import { Identities } from "../../coordinator/security/identities.js";
import { loadOrCreateSecrets } from "../../coordinator/security/secrets.js";
import { SqliteStore } from "../../coordinator/store/sqlite/sqlite-store.js";
import { freePort } from "../helpers/chaos/ports.js";
import { tempDir, waitFor } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));
const MOSQUITTO = "/usr/sbin/mosquitto";

function ax(args: string[]) {
  const r = spawnSync(process.execPath, [AX, ...args], { encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A coordinator config file and two agents enrolled in its store (one then revoked). */
async function enrolledFleet(dir: string, extra: Record<string, unknown> = {}) {
  const input = {
    store: { path: join(dir, "ax.sqlite") },
    mqtt: { url: "mqtt://127.0.0.1:1" },
    ...extra,
  };
  const file = join(dir, "coordinator.json");
  writeFileSync(file, JSON.stringify(input));
  const config = parseCoordinatorConfig(input);
  const store = new SqliteStore({ path: config.store.path });
  const identities = new Identities(store, loadOrCreateSecrets(secretsDir(config)), Date.now);
  await identities.enroll("dev-1", { actor: "t" });
  await identities.enroll("dev-2", { actor: "t" });
  await identities.revoke("dev-2", "t");
  await store.close();
  return { file, input };
}

describe("ax broker config", () => {
  it("writes the password file (0600), the ACL and mosquitto.conf for the enrolled fleet", async () => {
    const { dir, cleanup } = tempDir("ax-broker-cli-");
    try {
      const { file } = await enrolledFleet(dir);
      const out = join(dir, "mq");
      const r = ax(["broker", "config", "--config", file, "--out", out, "--port", "1884"]);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`mosquitto -c ${join(out, MOSQUITTO_FILES.conf)}`);
      expect(r.stdout).toContain("and 1 agents; 1 revoked left out");
      const users = readFileSync(join(out, MOSQUITTO_FILES.passwords), "utf8")
        .trim()
        .split("\n")
        .map((l) => l.split(":")[0]);
      expect(users).toHaveLength(2);
      expect(users[1]).toBe("dev-1");
      expect(users[0]).toMatch(/^ax-c-[0-9a-f]{16}$/);
      expect(statSync(join(out, MOSQUITTO_FILES.passwords)).mode & 0o777).toBe(0o600);
      expect(readFileSync(join(out, MOSQUITTO_FILES.conf), "utf8")).toContain("listener 1884\n");
      expect(readFileSync(join(out, MOSQUITTO_FILES.acl), "utf8")).not.toContain("dev-2");
      // --out naming a file, not a folder: a usage error, not an internal one.
      const aFile = join(dir, "not-a-folder");
      writeFileSync(aFile, "x");
      const onFile = ax(["broker", "config", "--config", file, "--out", aFile]);
      expect(onFile.code).toBe(2);
      expect(onFile.stderr).toBe(
        `ax: AX_CLI_USAGE: broker config: --out DIR: ${aFile} is a file, not a folder\n`,
      );
      // A folder that cannot be made: the operation fails (exit 1, its code), at once, naming
      // the level. (Under /proc, Node 20's recursive mkdir spun for ever.)
      if (existsSync("/proc/self")) {
        const nowhere = ax(["broker", "config", "--config", file, "--out", "/proc/ax-none/mq"]);
        expect(nowhere.code).toBe(1);
        expect(nowhere.stderr).toBe(
          "ax: AX_BROKER_CONFIG: broker config: --out /proc/ax-none/mq: cannot write the broker's files: ENOENT: no such file or directory, mkdir '/proc/ax-none'\n",
        );
      }
    } finally {
      cleanup();
    }
  });

  it.each([
    [["--out", "x"], "broker config: --config FILE (the coordinator's config) is required"],
    [
      ["--config", "c", "--port", "0"],
      'broker config: --port must be a port number from 1 to 65535, got "0"',
    ],
    [["--config", "c", "--tls-key", "k"], "broker config: --tls-key needs --tls-cert"],
    [
      ["--config", "c", "--tls-cert", "c", "--tls-key", "k", "--require-client-cert"],
      "broker config: --require-client-cert needs --tls-ca (the CA that signs the client certificates)",
    ],
  ])("refuses %j as a usage error naming the flag", (args, message) => {
    const r = ax(["broker", "config", ...args]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`ax: AX_CLI_USAGE: ${message}\n`);
  });
});

describe.skipIf(!existsSync(MOSQUITTO))("a coordinator with broker.mosquitto", () => {
  it("logs in to the Mosquitto ax broker config set up, and a revocation ends the agent's connection", async () => {
    const { dir, cleanup } = tempDir("ax-broker-coord-");
    let proc: ChildProcess | undefined;
    let coordinator: Coordinator | undefined;
    const agents: mqtt.MqttClient[] = [];
    try {
      const port = await freePort();
      const mq = join(dir, "mq");
      const { file, input } = await enrolledFleet(dir, {
        mqtt: { url: `mqtt://127.0.0.1:${port}` },
        broker: { mosquitto: { dir: mq } },
      });
      expect(
        ax(["broker", "config", "--config", file, "--port", String(port), "--host", "127.0.0.1"])
          .code,
      ).toBe(0);
      proc = spawn(MOSQUITTO, ["-c", join(mq, MOSQUITTO_FILES.conf)], { stdio: "ignore" });
      const pidFile = join(mq, MOSQUITTO_FILES.pid);
      const pid = String(proc.pid);
      await waitFor("mosquitto", () =>
        existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() === pid ? true : undefined,
      );
      coordinator = new Coordinator(parseCoordinatorConfig(input));
      await coordinator.start();
      expect((await coordinator.readiness()).mqtt).toBe(true);
      // A device enrolled while Mosquitto runs can log in at once: the coordinator reloaded it.
      const { file: identity } = await coordinator.identities.enroll("dev-3", { actor: "t" });
      const agent = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, {
        reconnectPeriod: 0,
        clientId: "dev-3",
        ...identity.mqtt,
      });
      agents.push(agent);
      const closed = new Promise<void>((resolve) => agent.once("close", () => resolve()));
      await coordinator.identities.revoke("dev-3", "t");
      await closed;
      const again = await mqtt
        .connectAsync(`mqtt://127.0.0.1:${port}`, {
          reconnectPeriod: 0,
          clientId: "dev-3",
          ...identity.mqtt,
        })
        .then(
          (c) => {
            agents.push(c);
            return "connected";
          },
          (err: { code?: number }) => err.code,
        );
      expect(again).toBe(5);
    } finally {
      await Promise.all(agents.map((a) => a.endAsync(true)));
      await coordinator?.close();
      if (proc) {
        const exited = new Promise((resolve) => proc?.once("exit", resolve));
        proc.kill("SIGTERM");
        await exited;
      }
      cleanup();
    }
  }, 60_000);
});
