import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { endChild } from "./children.js";
import { freePort, waitForPort } from "./ports.js";

const EMBEDDED_MAIN = fileURLToPath(new URL("./embedded-broker-main.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** Which broker a chaos run uses. */
export type BrokerKind = "mosquitto" | "embedded";

/**
 * The broker of a chaos run, as a child process on a fixed port so it can be stopped and started
 * again where the clients expect it.
 */
export interface BrokerProcess {
  kind: BrokerKind;
  url: string;
  port: number;
  start(): Promise<void>;
  /** SIGTERM and wait: Mosquitto writes its persistence file on the way out. */
  stop(): Promise<void>;
  /** SIGKILL: nothing is saved. */
  kill(): Promise<void>;
  running(): boolean;
}

/**
 * Mosquitto when `AX_TEST_MQTT_URL` is set (it says Mosquitto is available here; the instance it
 * names is never touched: this one is our own, on a free port, with persistence in `dir`), the
 * embedded aedes broker in a child process otherwise.
 */
export function chaosBrokerKind(): BrokerKind {
  return process.env.AX_TEST_MQTT_URL && mosquittoInstalled() ? "mosquitto" : "embedded";
}

/** Whether a `mosquitto` binary is on the PATH (a CI broker may be remote, with none here). */
export function mosquittoInstalled(): boolean {
  return spawnSync("sh", ["-c", "command -v mosquitto"], { stdio: "ignore" }).status === 0;
}

/** A broker process of `kind` with its files in `dir`; not started yet. */
export async function brokerProcess(
  dir: string,
  kind: BrokerKind = chaosBrokerKind(),
): Promise<BrokerProcess> {
  const port = await freePort();
  const log = join(dir, `broker-${kind}.log`);
  let child: ChildProcess | undefined;
  let argv: string[];
  let command: string;
  if (kind === "mosquitto") {
    const data = join(dir, "mosquitto-data");
    mkdirSync(data, { recursive: true });
    const conf = join(dir, "mosquitto.conf");
    writeFileSync(
      conf,
      [
        `listener ${port} 127.0.0.1`,
        "allow_anonymous true",
        "persistence true",
        `persistence_location ${data}/`,
        // Saved every second as well as on SIGTERM, so even a kill -9 loses at most a second.
        "autosave_interval 1",
        // The coordinator's session may queue thousands of reports while it is down.
        "max_queued_messages 100000",
        "max_inflight_messages 100",
        // Rule 10 holds for the broker too: without it a small publish behind another waits on
        // the agent's delayed ACK (~40 ms), which skews its clock samples and every start.
        "set_tcp_nodelay true",
        `log_dest file ${join(dir, "mosquitto-broker.log")}`,
        "log_type error",
        "log_type warning",
        "log_type notice",
        // Run as root, Mosquitto drops to its own user, which cannot write a private temp dir.
        ...(process.getuid?.() === 0 ? ["user root"] : []),
        "",
      ].join("\n"),
    );
    command = "mosquitto";
    argv = ["-c", conf];
  } else {
    command = process.execPath;
    argv = ["--import", "tsx", EMBEDDED_MAIN, String(port)];
  }
  const self: BrokerProcess = {
    kind,
    port,
    url: `mqtt://127.0.0.1:${port}`,
    async start() {
      if (self.running()) return;
      const fd = openSync(log, "a");
      const started = spawn(command, argv, { cwd: ROOT, stdio: ["ignore", fd, fd] });
      closeSync(fd);
      let failed: Error | undefined;
      // A binary that cannot be started emits "error"; unhandled, it would end the test process.
      started.once("error", (err) => {
        failed = err;
      });
      child = started;
      await waitForPort(port, `${kind} broker`).catch((err: Error) => {
        throw failed ? new Error(`${kind} broker: ${failed.message}; see ${log}`) : err;
      });
    },
    async stop() {
      await endChild(child, "SIGTERM");
      child = undefined;
    },
    async kill() {
      await endChild(child, "SIGKILL");
      child = undefined;
    },
    running: () => child !== undefined && child.exitCode === null && child.signalCode === null,
  };
  return self;
}
