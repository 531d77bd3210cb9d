import type { ChildProcess } from "node:child_process";
import { spawnSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import mqtt from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWebSocketStream, WebSocketServer } from "ws";
import { startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { type MadeBundle, makeBundle } from "../../coordinator/bundle/make.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import {
  type DeviceInstall,
  installBundle,
  startLikeSystemd,
  stopProcess,
} from "../helpers/device.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitFor,
  waitForEnd,
} from "../helpers/env.js";

/**
 * A built bundle on its own: unpacked into an empty folder with no node_modules, started as its
 * systemd unit starts it, against a broker and a real coordinator; device commands run through
 * it, and the coordinator records which build it is.
 */
const VERSION = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
  .version as string;

// Signed as a release is; which key does not matter to a device that only runs the bundle.
const signingKey = generateKeyPairSync("ed25519").privateKey;

const finished = (coordinator: Coordinator, id: string): Promise<ExecutionRecord> =>
  waitForEnd(coordinator, id);

describe("a sensor-hub bundle runs alone", () => {
  const tmp = tempDir("ax-bundle-run-");
  let broker: TestBroker;
  let coordinator: Coordinator;
  let made: MadeBundle;
  let device: DeviceInstall;
  let agent: ChildProcess;
  let stderr = "";
  const agentId = `hub-${process.pid}`;

  beforeAll(async () => {
    made = await makeBundle({ profile: "sensor-hub", outDir: join(tmp.dir, "dist"), signingKey });
    device = installBundle(made.archive, join(tmp.dir, "device"));
    broker = await testBroker();
    coordinator = await startTestCoordinator(broker, tmp.dir, 1000);
    mkdirSync(join(device.state, "out"));
    agent = startLikeSystemd(device, {
      agentId,
      mqtt: { url: broker.url, prefix: broker.prefix },
      journal: { path: join(device.state, "journal.sqlite") },
      handlers: {
        "file.write": { allow: [join(device.state, "out")] },
        "mqtt.publish": { url: broker.url },
      },
    });
    agent.stderr?.setEncoding("utf8");
    agent.stderr?.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-20_000);
    });
    await waitFor(
      "the bundled agent online",
      () => {
        if (agent.exitCode !== null) throw new Error(`agent exited ${agent.exitCode}: ${stderr}`);
        return coordinator.fleet.get(agentId)?.status === "online" ? true : undefined;
      },
      20_000,
    );
  }, 120_000);

  afterAll(async () => {
    if (agent) await stopProcess(agent, 5_000);
    await coordinator?.close();
    await broker?.close();
    tmp.cleanup();
  });

  it("is registered with its profile, its ax version and the sha256 of its agent file", () => {
    const record = coordinator.fleet.get(agentId);
    expect(record).toMatchObject({
      profile: "sensor-hub",
      bundleVersion: VERSION,
      bundleSha256: made.manifest.files["agent.mjs"]?.sha256,
      handlers: ["file.write", "mqtt.publish"],
      concurrency: 2,
      queue: 16,
    });
    expect(record?.bundleSha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it("runs a device command: file.write", async () => {
    const path = join(device.state, "out", "relay");
    const id = await coordinator.sendCommand({
      agentId,
      handler: "file.write",
      params: { path, value: "1" },
      at: Date.now() + 300,
    });
    const done = await finished(coordinator, id);
    expect(done.state, done.message ?? "").toBe("SUCCEEDED");
    expect(readFileSync(path, "utf8")).toBe("1");
  });

  it("runs a device command: mqtt.publish through its own MQTT client", async () => {
    const topic = `${broker.prefix}/zigbee/lamp/set`;
    const watcher = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
    try {
      const got: string[] = [];
      watcher.on("message", (_t, payload) => got.push(payload.toString()));
      await watcher.subscribeAsync(topic, { qos: 1 });
      const id = await coordinator.sendCommand({
        agentId,
        handler: "mqtt.publish",
        params: { topic, payload: { state: "ON" } },
      });
      const done = await finished(coordinator, id);
      expect(done.state, done.message ?? "").toBe("SUCCEEDED");
      await waitFor("the published message", () => (got.length === 1 ? true : undefined));
      expect(JSON.parse(got[0] ?? "")).toEqual({ state: "ON" });
    } finally {
      await watcher.endAsync(true);
    }
  });

  it("checkpoints its journal on a thread that loads better-sqlite3 from its own agent file", async () => {
    // SQLite alone would checkpoint only once the WAL reaches 1,000 pages, which these commands
    // do not write; the journal's thread is asked after 64 commits. So the database file itself
    // grows only if the thread ran: and it can only run if the bundle (no node_modules) could
    // give it better-sqlite3. The commands fall due 5 ms apart, each start its own commit, so
    // they make well over 64 commits however the agent groups the rest.
    const file = join(device.state, "journal.sqlite");
    const before = statSync(file).size;
    const at = Date.now() + 300;
    const ids = await Promise.all(
      Array.from({ length: 120 }, (_, i) =>
        coordinator.sendCommand({
          agentId,
          handler: "file.write",
          params: { path: join(device.state, "out", "counter"), value: String(i) },
          at: at + 5 * i,
        }),
      ),
    );
    for (const id of ids) expect((await finished(coordinator, id)).state).toBe("SUCCEEDED");
    await waitFor("a checkpoint into the journal file", () =>
      statSync(file).size > before ? true : undefined,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; the agent's stderr: ${stderr.slice(-2_000)}`);
    });
    expect(stderr).not.toMatch(/checkpointing inline/);
  });

  it("shows in `ax bundle fleet` as the build its manifest describes", async () => {
    const configFile = join(tmp.dir, "coordinator.json");
    writeFileSync(
      configFile,
      JSON.stringify({ store: { path: join(tmp.dir, "ax.sqlite") }, mqtt: { url: broker.url } }),
    );
    const ax = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));
    const r = spawnSync(
      process.execPath,
      [ax, "bundle", "fleet", "--config", configFile, "--bundles", join(tmp.dir, "dist")],
      { encoding: "utf8" },
    );
    expect(r.status, r.stderr).toBe(0);
    const sha = made.manifest.files["agent.mjs"]?.sha256 ?? "";
    const line = r.stdout.split("\n").find((l) => l.startsWith(agentId));
    expect(line).toMatch(
      new RegExp(
        `^${agentId}\\s+online\\s+sensor-hub\\s+${VERSION.replace(/\./g, "\\.")}\\s+${sha.slice(0, 12)}…\\s+sensor-hub ${VERSION.replace(/\./g, "\\.")} \\(`,
      ),
    );
  });

  it("stops cleanly on SIGTERM, as systemd stops it", async () => {
    expect(await stopProcess(agent, 15_000)).toBe("exit code 0");
    await waitFor("offline", () =>
      coordinator.fleet.get(agentId)?.status === "offline" ? true : undefined,
    );
  });
});

describe("a server bundle", () => {
  const tmp = tempDir("ax-bundle-server-");
  let agent: ChildProcess | undefined;
  let stderr = "";

  afterAll(async () => {
    if (agent) await stopProcess(agent, 5_000);
    tmp.cleanup();
  });

  it("publishes over WebSocket (its websocket feature), with mqtt.js's trimmed transports", async () => {
    const made = await makeBundle({ profile: "server", outDir: join(tmp.dir, "dist"), signingKey });
    const device = installBundle(made.archive, join(tmp.dir, "device"));
    const broker = await testBroker();
    const local = await startEmbeddedBroker(0);
    const http: Server = createServer();
    const wss = new WebSocketServer({ server: http });
    wss.on("connection", (socket) => local.broker.handle(createWebSocketStream(socket) as never));
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
    const port = (http.address() as { port: number }).port;
    const coordinator = await startTestCoordinator(broker, tmp.dir, 1000);
    const watcher = await mqtt.connectAsync(local.url, { reconnectPeriod: 0 });
    try {
      const got: string[] = [];
      watcher.on("message", (_t, payload) => got.push(payload.toString()));
      await watcher.subscribeAsync("lamp/set", { qos: 1 });
      const agentId = `srv-${process.pid}`;
      const child = startLikeSystemd(device, {
        agentId,
        mqtt: { url: broker.url, prefix: broker.prefix },
        journal: { path: join(device.state, "journal.sqlite") },
        handlers: { "mqtt.publish": { url: `ws://127.0.0.1:${port}` } },
      });
      agent = child;
      child.stderr?.setEncoding("utf8");
      child.stderr?.on("data", (c: string) => {
        stderr = (stderr + c).slice(-20_000);
      });
      await waitFor("the server agent online", () => {
        if (child.exitCode !== null) throw new Error(`agent exited: ${stderr}`);
        return coordinator.fleet.get(agentId)?.status === "online" ? true : undefined;
      });
      expect(coordinator.fleet.get(agentId)?.profile).toBe("server");
      const id = await coordinator.sendCommand({
        agentId,
        handler: "mqtt.publish",
        params: { topic: "lamp/set", payload: "ON" },
      });
      const done = await finished(coordinator, id);
      expect(done.state, done.message ?? "").toBe("SUCCEEDED");
      await waitFor("the message over WebSocket", () => (got.length === 1 ? true : undefined));
      expect(got).toEqual(["ON"]);
      expect(await stopProcess(child, 15_000)).toBe("exit code 0");
      agent = undefined;
    } finally {
      await watcher.endAsync(true);
      await coordinator.close();
      wss.close();
      await new Promise<void>((resolve) => http.close(() => resolve()));
      await local.close();
      await broker.close();
    }
  }, 120_000);
});
