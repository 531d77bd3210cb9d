import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { Logger } from "../../coordinator/engine/context.js";
import { applyJobsFile, JOBS_FILE_ACTOR, readJobsFile } from "../../coordinator/jobs-file.js";
import { SqliteStore } from "../../coordinator/store/sqlite/sqlite-store.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

const job = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  handler: "echo",
  trigger: { type: "every", every: "1h" },
  ...over,
});

/** `ax coordinator start` on a config it must refuse: it exits at once, so it is run to the end. */
function startRefused(file: string, cwd: string) {
  return spawnSync(process.execPath, [AX, "coordinator", "start", "--config", file], {
    cwd,
    encoding: "utf8",
    timeout: 60_000,
  });
}

describe("the jobs file, applied by id at each start", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let lines: { level: string; msg: string }[] = [];
  const log: Logger = (level, msg) => lines.push({ level, msg });
  const open: Coordinator[] = [];

  beforeAll(async () => {
    broker = await testBroker();
  });
  afterAll(async () => {
    await broker.close();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.close()));
    tmp?.cleanup();
  });

  /** A coordinator on the test's store, as a fresh start; closes the one before. */
  async function restart(): Promise<Coordinator> {
    await Promise.all(open.splice(0).map((c) => c.close()));
    lines = [];
    const c = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.sqlite") },
        mqtt: { url: broker.url, prefix: broker.prefix },
        security: { messages: "off" },
      }),
    );
    await c.start();
    open.push(c);
    return c;
  }
  const apply = (c: Coordinator, defs: unknown[]) => applyJobsFile(c, "jobs.json", defs, log);
  const warnings = () => lines.filter((l) => l.level === "warn").map((l) => l.msg);
  const summary = () => lines.filter((l) => l.level === "info").map((l) => l.msg);

  it("adds new ids; a changed definition is a new version by jobsFile; an identical one is none", async () => {
    tmp = tempDir();
    let c = await restart();
    expect(await apply(c, [job("a"), job("b")])).toEqual({
      added: ["a", "b"],
      updated: [],
      unchanged: [],
    });
    expect(summary()).toEqual(["jobs file jobs.json: 2 added, 0 updated, 0 unchanged"]);
    expect((await c.store.listJobHistory("a")).map((h) => [h.action, h.actor])).toEqual([
      ["created", JOBS_FILE_ACTOR],
    ]);

    c = await restart();
    expect(await apply(c, [job("a", { priority: 5 }), job("b")])).toEqual({
      added: [],
      updated: ["a"],
      unchanged: ["b"],
    });
    expect(summary()).toEqual(["jobs file jobs.json: 0 added, 1 updated, 1 unchanged"]);
    const a = await c.store.getJob("a");
    expect([a?.version, a?.updatedBy, a?.definition.priority]).toEqual([2, "jobsFile", 5]);
    expect(warnings()).toEqual([]);

    // The same file again: no version, no history.
    c = await restart();
    expect(await apply(c, [job("a", { priority: 5 }), job("b")])).toMatchObject({
      unchanged: ["a", "b"],
    });
    expect((await c.store.getJob("a"))?.version).toBe(2);
    expect((await c.store.getJob("b"))?.version).toBe(1);
    expect(await c.store.listJobHistory("b")).toHaveLength(1);
  });

  it("wins over an API edit of a job it lists, and says so", async () => {
    tmp = tempDir();
    let c = await restart();
    await apply(c, [job("a")]);
    await c.putJob(job("a", { priority: 9 }), "alice");
    c = await restart();
    expect(await apply(c, [job("a")])).toMatchObject({ updated: ["a"] });
    const a = await c.store.getJob("a");
    expect([a?.version, a?.updatedBy, a?.definition.priority]).toEqual([3, "jobsFile", 0]);
    expect(warnings()).toEqual([
      `jobs file jobs.json: job "a": the file's definition replaced what was changed through the API (version 2 by alice); the file wins for the jobs it lists`,
    ]);
  });

  it("creates again a job deleted through the API, and says so", async () => {
    tmp = tempDir();
    let c = await restart();
    await apply(c, [job("a")]);
    await c.deleteJob("a", "bob");
    c = await restart();
    expect(await apply(c, [job("a")])).toMatchObject({ added: ["a"] });
    expect(warnings()).toEqual([
      'jobs file jobs.json: job "a", deleted by bob, is created again: the file lists it',
    ]);
  });

  it("keeps a job's paused state, and never touches jobs it does not list", async () => {
    tmp = tempDir();
    let c = await restart();
    await apply(c, [job("a")]);
    await c.putJob(job("api-only", { priority: 3 }), "alice");
    await c.pauseJob("a", "alice");
    const paused = await c.store.getJob("a");

    c = await restart();
    expect(await apply(c, [job("a")])).toMatchObject({ unchanged: ["a"] });
    expect((await c.store.getJob("a"))?.version).toBe(paused?.version);

    c = await restart();
    expect(await apply(c, [job("a", { priority: 1 })])).toMatchObject({ updated: ["a"] });
    const a = await c.store.getJob("a");
    expect([a?.definition.paused, a?.definition.priority]).toEqual([true, 1]);
    // Pausing is not an edit the file undoes: no warning.
    expect(warnings()).toEqual([]);
    const other = await c.store.getJob("api-only");
    expect([other?.version, other?.updatedBy, other?.definition.priority]).toEqual([1, "alice", 3]);
  });

  it("reads the shapes ax job add reads: one definition, a list, or { jobs: [...] }", () => {
    tmp = tempDir();
    const file = join(tmp.dir, "jobs.json");
    for (const [shape, ids] of [
      [job("one"), ["one"]],
      [
        [job("x"), job("y")],
        ["x", "y"],
      ],
      [{ jobs: [job("p"), job("q")] }, ["p", "q"]],
    ] as const) {
      writeFileSync(file, JSON.stringify(shape));
      expect(readJobsFile(file, "c.json").map((d) => (d as { id: string }).id)).toEqual(ids);
    }
  });
});

describe("ax coordinator start with a jobsFile", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let child: ChildProcess | undefined;

  beforeAll(async () => {
    broker = await testBroker();
  });
  afterAll(async () => {
    await broker.close();
  });
  afterEach(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child?.once("exit", r));
      child.kill("SIGKILL");
      await exited;
    }
    child = undefined;
    tmp?.cleanup();
  });

  /** etc/coordinator.json (relative paths in it) and an empty working folder elsewhere. */
  function layout(config: Record<string, unknown>) {
    tmp = tempDir();
    const etc = join(tmp.dir, "etc");
    const cwd = join(tmp.dir, "work");
    mkdirSync(etc);
    mkdirSync(cwd);
    const file = join(etc, "coordinator.json");
    writeFileSync(
      file,
      JSON.stringify({
        mqtt: { url: broker.url, prefix: broker.prefix },
        security: { messages: "off" },
        http: { port: 0 },
        jobsFile: "jobs.json",
        ...config,
      }),
    );
    return { etc, cwd, file };
  }

  /** Starts the coordinator, waits for its jobs-file summary line, stops it; returns its log. */
  async function startOnce(file: string, cwd: string): Promise<string> {
    let log = "";
    const proc = spawn(process.execPath, [AX, "coordinator", "start", "--config", file], {
      cwd,
      stdio: ["ignore", "ignore", "pipe"],
    });
    child = proc;
    proc.stderr?.on("data", (b: Buffer) => {
      log += b.toString();
    });
    await waitFor(
      "the jobs file's summary",
      () => (/jobs file .*unchanged/.test(log) ? true : undefined),
      30_000,
    );
    const exited = new Promise((r) => proc.once("exit", r));
    proc.kill("SIGTERM");
    await exited;
    return log;
  }

  const messages = (log: string) =>
    log
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: number | string; msg: string });

  it("reads it (a list) from the config's folder, then applies a changed file by id", async () => {
    const { etc, cwd, file } = layout({ heartbeat: "1s" });
    writeFileSync(join(etc, "jobs.json"), JSON.stringify([job("a"), job("b")]));
    const first = messages(await startOnce(file, cwd)).map((m) => m.msg);
    expect(first).toContain(`jobs file ${join(etc, "jobs.json")}: 2 added, 0 updated, 0 unchanged`);
    expect(first).toContain(
      `${file}: heartbeat is deprecated: name it heartbeatMs (the value is read as before)`,
    );
    // The store is beside the config (its default, ax.sqlite), not in the working folder.
    expect(existsSync(join(etc, "ax.sqlite"))).toBe(true);
    expect(existsSync(join(cwd, "ax.sqlite"))).toBe(false);

    writeFileSync(
      join(etc, "jobs.json"),
      JSON.stringify({ jobs: [job("a", { priority: 2 }), job("b")] }),
    );
    const second = messages(await startOnce(file, cwd)).map((m) => m.msg);
    expect(second).toContain(
      `jobs file ${join(etc, "jobs.json")}: 0 added, 1 updated, 1 unchanged`,
    );
    const store = new SqliteStore({ path: join(etc, "ax.sqlite") });
    try {
      expect((await store.listJobHistory("a")).map((h) => [h.action, h.version, h.actor])).toEqual([
        ["created", 1, "jobsFile"],
        ["updated", 2, "jobsFile"],
      ]);
    } finally {
      await store.close();
    }
  });

  it("refuses to start on a jobsFile that does not exist, naming the path it looked at", () => {
    const { etc, cwd, file } = layout({ jobsFile: "jobz.json" });
    writeFileSync(join(etc, "jobs.json"), JSON.stringify([job("a")]));
    const r = startRefused(file, cwd);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_CONFIG_INVALID: ${file}: jobsFile: ${join(etc, "jobz.json")}: no such file (a relative jobsFile is read from the config file's folder); fix jobsFile or create the file\n`,
    );
    expect(existsSync(join(etc, "ax.sqlite"))).toBe(false);
  });

  it("refuses an invalid file, naming the file, the job's index and the field, and applies nothing", () => {
    const { etc, cwd, file } = layout({});
    const jobs = join(etc, "jobs.json");
    writeFileSync(
      jobs,
      JSON.stringify([job("a"), { id: "b", handler: "echo", triger: { type: "manual" } }]),
    );
    const r = startRefused(file, cwd);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(
      `ax: AX_JOB_INVALID: ${jobs}: invalid job definitions\n[1].triger: unknown key; did you mean "trigger"? ([1].trigger is required)\n`,
    );
    // Nothing applied, nothing created: not even the store.
    expect(existsSync(join(etc, "ax.sqlite"))).toBe(false);
    // A job of agent.update, which the API refuses, is refused with the file too: before, the
    // jobs ahead of it were stored, then the start failed on it without naming the file.
    writeFileSync(
      jobs,
      JSON.stringify({ jobs: [job("a"), { ...job("u"), handler: "agent.update" }] }),
    );
    const u = startRefused(file, cwd);
    expect(u.status).toBe(1);
    expect(u.stderr).toBe(
      `ax: AX_JOB_INVALID: ${jobs}: invalid job definitions\njobs.1.handler: agent.update installs a bundle: send it as a command (ax command send --bundle) or a rollout (ax rollout create --bundle), not a job\n`,
    );
    expect(existsSync(join(etc, "ax.sqlite"))).toBe(false);
  });
});
