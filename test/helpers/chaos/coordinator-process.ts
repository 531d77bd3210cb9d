import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { CoordinatorConfigInput } from "../../../coordinator/config.js";
import { type Answer, call } from "../http.js";
import { alive, endChild, exited } from "./children.js";
import { freePort } from "./ports.js";

const AX_BIN = fileURLToPath(new URL("../../../bin/ax.js", import.meta.url));

/** The operate token of a chaos run's HTTP API. */
export const CHAOS_TOKEN = "chaos-operator-token-0123456789";

/**
 * `ax coordinator start --config FILE` as a child process: its store a SQLite file in `dir`, its
 * HTTP API on a fixed free port (so a restart answers where the test expects it), closed by a token.
 */
export interface CoordinatorProcess {
  url: string;
  storePath: string;
  configFile: string;
  /** Its log (JSON lines). */
  logFile: string;
  /** The config written to `configFile`. */
  config: CoordinatorConfigInput;
  /**
   * Starts it and waits until `/api/ready` says ready; with `standby`, until it answers as a
   * standby (several coordinators on one store).
   */
  start(options?: { standby?: boolean }): Promise<void>;
  /** Its exit code once it exited by itself (75: fenced); null while it runs or after a kill. */
  exitCode(): number | null;
  /** Resolves when the process exits, with its code (null when killed by a signal). */
  exited(): Promise<number | null>;
  /** kill -9. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after 5 s. */
  stop(): Promise<void>;
  running(): boolean;
  /** One call of the HTTP API with the operate token; throws on a non-2xx answer. */
  api<T>(method: string, path: string, body?: unknown): Promise<T>;
  /** The same, returning the answer whatever its status. */
  raw<T>(method: string, path: string, body?: unknown): Promise<Answer<T>>;
}

/** A coordinator among several on one PostgreSQL store: its name, the store, the shared secrets. */
export interface SharedStore {
  /** Its `cluster.id`, and the name of its files in `dir`. */
  name: string;
  url: string;
  schema: string;
  /** Every coordinator of a fleet holds the same fleet key and tokens. */
  securityDir: string;
  leaseMs?: number;
  /** `cluster.firing`. */
  firing?: "active" | "shared";
  /** `cluster.dispatch` (`shared` needs `firing` `shared`). */
  dispatch?: "active" | "shared";
}

/**
 * A coordinator process on `brokerUrl` and `prefix`. `settings` are laid over the store, MQTT and
 * HTTP sections (heartbeat, poll, misfire threshold …).
 */
export async function coordinatorProcess(
  dir: string,
  brokerUrl: string,
  prefix: string,
  settings: Omit<CoordinatorConfigInput, "store" | "mqtt" | "http"> = {},
  shared?: SharedStore,
): Promise<CoordinatorProcess> {
  const port = await freePort();
  const name = shared?.name ?? "coordinator";
  const storePath = join(dir, `${name}.sqlite`);
  const configFile = join(dir, `${name}.json`);
  const config: CoordinatorConfigInput = {
    store:
      shared === undefined
        ? { path: storePath }
        : { url: shared.url, schema: shared.schema, path: storePath },
    mqtt: {
      url: brokerUrl,
      prefix,
      ...(shared === undefined ? {} : { clientId: `${prefix}-${name}` }),
    },
    http: { host: "127.0.0.1", port, auth: { tokens: [{ token: CHAOS_TOKEN, role: "operator" }] } },
    ...settings,
    ...(shared === undefined
      ? {}
      : {
          cluster: {
            id: name,
            ...(shared.leaseMs === undefined ? {} : { leaseMs: shared.leaseMs }),
            ...(shared.firing === undefined ? {} : { firing: shared.firing }),
            ...(shared.dispatch === undefined ? {} : { dispatch: shared.dispatch }),
          },
          security: { ...settings.security, dir: shared.securityDir },
        }),
  };
  writeFileSync(configFile, JSON.stringify(config, null, 2));
  const url = `http://127.0.0.1:${port}`;
  const logFile = join(dir, `${name}.log`);
  let lastExit: Promise<number | null> = Promise.resolve(null);
  let child: ChildProcess | undefined;
  const raw = <T>(method: string, path: string, body?: unknown) =>
    call<T>(url, method, path, { token: CHAOS_TOKEN, ...(body === undefined ? {} : { body }) });
  const self: CoordinatorProcess = {
    url,
    storePath,
    configFile,
    logFile,
    config,
    async start(options = {}) {
      if (alive(child)) return;
      const fd = openSync(logFile, "a");
      child = spawn(process.execPath, [AX_BIN, "coordinator", "start", "--config", configFile], {
        stdio: ["ignore", fd, fd],
      });
      closeSync(fd);
      const started: ChildProcess = child;
      lastExit = new Promise((resolve) => started.once("exit", (code) => resolve(code)));
      const until = Date.now() + 20_000;
      for (;;) {
        if (started.exitCode !== null || started.signalCode !== null) {
          throw new Error(
            `the coordinator exited with ${started.exitCode} at start; see ${logFile}`,
          );
        }
        const ready = await raw<{ ready: boolean; role?: string }>("GET", "/api/ready").catch(
          () => undefined,
        );
        if (!options.standby && ready?.status === 200 && ready.body.ready) return;
        if (options.standby && ready?.body.role === "standby") return;
        // With dispatch shared none stands by: each is active for its share from its start.
        if (options.standby && shared?.dispatch === "shared" && ready?.body.ready) return;
        if (Date.now() > until)
          throw new Error(`the coordinator was not ready within 20 s; see ${logFile}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async kill() {
      if (alive(child)) {
        child.kill("SIGKILL");
        await exited(child);
      }
      child = undefined;
    },
    async stop() {
      await endChild(child, "SIGTERM");
      child = undefined;
    },
    running: () => alive(child),
    exitCode: () => child?.exitCode ?? null,
    exited: () => lastExit,
    raw,
    async api<T>(method: string, path: string, body?: unknown): Promise<T> {
      const a = await raw<T>(method, path, body);
      if (a.status < 200 || a.status > 299) {
        throw new Error(`${method} ${path}: ${a.status} ${a.text.slice(0, 500)}`);
      }
      return a.body;
    },
  };
  return self;
}
