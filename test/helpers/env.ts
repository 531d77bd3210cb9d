import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { afterAll, beforeAll, expect } from "vitest";
import { type EmbeddedBroker, startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import type { ExecutionRecord } from "../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import { newId } from "../../shared/ids.js";

/**
 * A broker for a test: Mosquitto (or any broker) when AX_TEST_MQTT_URL is set, as CI does;
 * otherwise an embedded aedes broker on a free port. Each test gets its own topic prefix, so
 * tests sharing one broker never see each other's messages or retained presence.
 */
export interface TestBroker {
  url: string;
  prefix: string;
  embedded: EmbeddedBroker | undefined;
  close(): Promise<void>;
}

export async function testBroker(): Promise<TestBroker> {
  const prefix = `axt${newId().slice(-10)}`;
  const external = process.env.AX_TEST_MQTT_URL;
  if (external) return { url: external, prefix, embedded: undefined, close: async () => {} };
  const embedded = await startEmbeddedBroker(0);
  return { url: embedded.url, prefix, embedded, close: () => embedded.close() };
}

/**
 * A second connection to the SQLite store of a coordinator running in this process, to bring a
 * fault into it (a trigger that refuses or skips a row). The coordinator commits its writes from
 * this thread's event loop, so a statement here must not wait for its lock in SQLite's busy
 * handler, which would block that loop: `exec` finds the store busy at once, and tries again
 * once the loop has turned.
 */
export function storeBeside(path: string): { exec(sql: string): Promise<void>; close(): void } {
  const db = new Database(path, { timeout: 0 });
  return {
    async exec(sql) {
      const until = Date.now() + 10_000;
      for (;;) {
        try {
          db.exec(sql);
          return;
        } catch (err) {
          const code = (err as { code?: string }).code ?? "";
          if (!code.startsWith("SQLITE_BUSY") || Date.now() > until) throw err;
          await new Promise((r) => setTimeout(r, 5));
        }
      }
    },
    close: () => db.close(),
  };
}

/** A fresh temp folder, removed by the returned cleanup. */
export function tempDir(label = "ax-test-"): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), label));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Polls `check` every `everyMs` until it returns a value that is not undefined, or throws after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * A started coordinator for a test: its store a SQLite file in `dir`, on the test's broker and
 * topic prefix, with `heartbeatMs` (short, so liveness moves quickly).
 */
export async function startTestCoordinator(
  broker: TestBroker,
  dir: string,
  heartbeatMs: number,
  more: { idleHeartbeatMs?: number } = {},
): Promise<Coordinator> {
  const coordinator = new Coordinator(
    parseCoordinatorConfig({
      store: { path: join(dir, "ax.sqlite") },
      mqtt: { url: broker.url, prefix: broker.prefix },
      // Unsigned agents: this test is not about authentication (test/integration/security*.test.ts are).
      security: { messages: "off" },
      heartbeatMs,
      ...more,
    }),
  );
  await coordinator.start();
  return coordinator;
}

/** Waits until `count` agents are online in the coordinator's fleet. */
export async function waitForAgentsOnline(coordinator: Coordinator, count: number): Promise<void> {
  await waitFor(`${count} agents online`, () =>
    coordinator.fleet.list().filter((a) => a.status === "online").length === count
      ? true
      : undefined,
  );
}

/** Waits until execution `id` is in a terminal state, and returns it. */
export async function waitForEnd(
  coordinator: Coordinator,
  id: string,
  timeoutMs = 20_000,
): Promise<ExecutionRecord> {
  return waitFor(
    `execution ${id} to end`,
    async () => {
      const e = await coordinator.store.getExecution(id);
      return e && TERMINAL_STATES.has(e.state) ? e : undefined;
    },
    timeoutMs,
  );
}

export { helloBody } from "./hello.js";

/** The body of an idle agent's heartbeat (nothing running, nothing held), for tests that fake one. */
export function idleHeartbeat(instanceId: string, load = 0) {
  return {
    type: "heartbeat" as const,
    instanceId,
    running: [],
    queued: 0,
    scheduled: 0,
    load,
    clockOffset: { offsetMs: 0, uncertaintyMs: 0 },
    journal: { depth: 0, outboxDepth: 0 },
  };
}

/** What a test of the operator CLI runs `ax` against (see {@link useCliTarget}). */
export interface CliTarget {
  dir: string;
  coordinator: Coordinator;
  http: HttpServer;
  /** AX_URL and AX_TOKEN of the coordinator's HTTP API. */
  env: Record<string, string>;
}

/**
 * A started coordinator (a test broker, a SQLite file in a temp folder) with its HTTP API behind
 * one operator `token`, set up in the calling suite's beforeAll and closed in its afterAll. The
 * object is filled in when beforeAll has run.
 */
export function useCliTarget(token: string): CliTarget {
  const target = {} as CliTarget;
  let broker: TestBroker | undefined;
  let tmp: ReturnType<typeof tempDir> | undefined;
  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    target.dir = tmp.dir;
    target.coordinator = await startTestCoordinator(broker, tmp.dir, 1_000);
    target.http = await startHttpServer(target.coordinator, {
      port: 0,
      auth: { tokens: [{ token, role: "operator" }] },
    });
    target.env = { AX_URL: target.http.url, AX_TOKEN: token };
  });
  afterAll(async () => {
    await target.http?.close();
    await target.coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });
  return target;
}

const AX_BIN = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

/**
 * Runs `ax` as a child process, asynchronously (the API it calls may run in this process), with
 * the test's environment but no AX_URL or AX_TOKEN of its own unless `env` gives them.
 */
export function runAx(args: string[], env: Record<string, string> = {}): Promise<AxRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [AX_BIN, ...args],
      {
        encoding: "utf8",
        timeout: 60_000,
        env: { ...process.env, AX_URL: "", AX_TOKEN: "", ...env },
      },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? 1) : 0;
        resolve({ code: typeof code === "number" ? code : 1, stdout, stderr });
      },
    );
  });
}

/**
 * Runs the same `ax` command line twice (a request with an idempotency key sent again): both
 * must exit 0. Returns both runs, for the caller to compare what each printed.
 */
export async function runAxTwice(
  args: string[],
  env: Record<string, string> = {},
): Promise<[AxRun, AxRun]> {
  const first = await runAx(args, env);
  expect(first.code, first.stderr).toBe(0);
  const again = await runAx(args, env);
  expect(again.code, again.stderr).toBe(0);
  return [first, again];
}

/** What {@link runAx} answers. */
export interface AxRun {
  code: number;
  stdout: string;
  stderr: string;
}
