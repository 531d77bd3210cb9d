import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../shared/clock.js";
import { envelope } from "../../shared/message.js";
import type { Finished, Report } from "../../shared/protocol/index.js";
import { testDispatch } from "../../test/helpers/dispatch.js";
import { execArgv } from "../handlers/device/exec.js";
import { HandlerRegistry } from "../handlers/registry.js";
import { Journal, type ReportBody } from "../journal/journal.js";
import { pidExists, processStartTime } from "../process-info.js";
import { Executor } from "./executor.js";

/**
 * What a restart reports for a command found running (issue 15, item 4): before or in its
 * handler, and what became of the child processes it had journaled. Real processes, real files.
 */

const dirs: string[] = [];
const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0).reverse()) c();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const T0 = 1_700_000_000_000;
const envelopeAt = (body: ReportBody, seq: number) => ({ ...envelope(body, T0), seq }) as Report;

function journalAt(path: string): Journal {
  const j = new Journal({ path, maxOpen: 100, now: () => T0 });
  closers.push(() => j.close());
  return j;
}

/** A journal whose command `x` is running, as a process that died would leave it. */
function crashedWithRunning(setup: (j: Journal, id: number) => void = () => {}): { path: string } {
  const dir = mkdtempSync(join(tmpdir(), "ax-children-"));
  dirs.push(dir);
  const path = join(dir, "journal.sqlite");
  const j = new Journal({ path, maxOpen: 100, now: () => T0 });
  const accepted = j.accept(testDispatch("x", T0, "exec"), envelopeAt);
  if (!accepted) throw new Error("not accepted");
  j.transition(accepted.id, "scheduled", "running", undefined, envelopeAt, T0);
  setup(j, accepted.id);
  j.close();
  return { path };
}

/** Restarts on `path` and returns the `finished` report recovery wrote for `x`. */
function recoverX(path: string): Finished {
  const published: Report[] = [];
  const clock = new FakeClock({ wall: T0 + 5_000 });
  const journal = journalAt(path);
  const ex = new Executor({
    journal,
    envelope: (body, seq) => ({ ...envelope(body, clock.wallNow()), seq }) as Report,
    clock,
    handlers: new HandlerRegistry([]),
    coordNow: () => clock.wallNow(),
    toMono: (t) => t - (clock.wallNow() - clock.monoNow()),
    concurrency: 1,
    queue: 1,
    tickMs: 20,
    publish: (r) => published.push(r),
    log: () => {},
  });
  closers.push(() => ex.close());
  ex.recover();
  const f = published.find((r): r is Finished => r.type === "finished");
  if (!f) throw new Error("no finished report");
  return f;
}

const linux = processStartTime(process.pid) !== undefined;

async function poll(done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(done()).toBe(true);
}

describe.runIf(linux)("recovery of a command found running", () => {
  it("says before_handler when its start committed but its handler was never launched", () => {
    const { path } = crashedWithRunning();
    expect(recoverX(path)).toMatchObject({
      outcome: "interrupted",
      interruptedPhase: "before_handler",
      retryable: true,
      startedAt: T0,
    });
  });

  it("says in_handler when its handler was launched and it started no child", () => {
    const { path } = crashedWithRunning((j, id) => j.markBegan([id]));
    expect(recoverX(path)).toMatchObject({
      outcome: "interrupted",
      interruptedPhase: "in_handler",
    });
  });

  it("stops a child group that outlived the agent before it reports interrupted in_handler", async () => {
    // A group leader with a member, as `sh -c 'sleep 30; touch marker'` would be.
    const child = spawn("/bin/sh", ["-c", "sleep 30 & wait"], { detached: true, stdio: "ignore" });
    const pid = child.pid as number;
    closers.push(() => {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {}
    });
    await new Promise((r) => setTimeout(r, 100));
    const { path } = crashedWithRunning((j, id) => {
      j.markBegan([id]);
      j.recordChild(id, pid, processStartTime(pid));
    });
    const exited = new Promise((r) => child.once("exit", r));
    const f = recoverX(path);
    expect(f).toMatchObject({ outcome: "interrupted", interruptedPhase: "in_handler" });
    expect(f.message).toContain(
      `its child process group outlived it and was stopped now (pid ${pid} terminated)`,
    );
    await exited;
    expect(pidExists(pid)).toBe(false);
  });

  it("reports what the child did when its exit was journaled before the agent died", () => {
    const ok = crashedWithRunning((j, id) => {
      j.markBegan([id]);
      j.recordChild(id, 4242, "1");
      j.recordChildExit(id, 4242, { code: 0, signal: null, stoppedByAgent: false });
    });
    expect(recoverX(ok.path)).toMatchObject({
      outcome: "succeeded",
      result: { exitCode: 0, recovered: true },
      message:
        "ok: its child pid 4242 exited with code 0 before the agent stopped (its output is lost)",
    });
    const bad = crashedWithRunning((j, id) => {
      j.recordChild(id, 4242, "1");
      j.recordChildExit(id, 4242, { code: 3, signal: null, stoppedByAgent: false });
    });
    expect(recoverX(bad.path)).toMatchObject({ outcome: "failed", retryable: true });
    const stopped = crashedWithRunning((j, id) => {
      j.recordChild(id, 4242, "1");
      j.recordChildExit(id, 4242, { code: null, signal: "SIGTERM", stoppedByAgent: true });
    });
    expect(recoverX(stopped.path)).toMatchObject({
      outcome: "interrupted",
      interruptedPhase: "in_handler",
      message:
        "the agent stopped its child as it shut down (pid 4242 was killed by SIGTERM); not run again",
    });
  });

  it("reports what a child under exec's wrapper did when it ended while nobody watched", async () => {
    // Spawned as exec spawns it, and left to end with no agent to see it: only the wrapper's
    // exit file can tell the restart how it did.
    const ended = async (script: string) => {
      const dir = mkdtempSync(join(tmpdir(), "ax-children-"));
      dirs.push(dir);
      const path = join(dir, "journal.sqlite");
      const exitFile = `${path}.exit-1`;
      const [file, args] = execArgv("/bin/sh", ["-c", script], exitFile);
      const child = spawn(file, args, { detached: true, stdio: "ignore" });
      const pid = child.pid as number;
      await new Promise((r) => child.once("exit", r));
      const j = new Journal({ path, maxOpen: 100, now: () => T0 });
      const accepted = j.accept(testDispatch("x", T0, "exec"), envelopeAt);
      if (!accepted) throw new Error("not accepted");
      expect(j.exitFile(accepted.id)).toBe(exitFile);
      j.transition(accepted.id, "scheduled", "running", undefined, envelopeAt, T0);
      j.markBegan([accepted.id]);
      j.recordChild(accepted.id, pid, "1");
      j.close();
      return { path, pid, exitFile };
    };
    const ok = await ended("exit 0");
    expect(recoverX(ok.path)).toMatchObject({
      outcome: "succeeded",
      result: { exitCode: 0, recovered: true },
      message: `ok: its child pid ${ok.pid} exited with code 0 before the agent stopped (its output is lost)`,
    });
    // Read once, then gone with the command it was about.
    expect(existsSync(ok.exitFile)).toBe(false);
    const failed = await ended("exit 3");
    expect(recoverX(failed.path)).toMatchObject({
      outcome: "failed",
      retryable: true,
      result: { exitCode: 3, recovered: true },
    });
    // Killed by a signal: the wrapper notes 128 + its number.
    const killed = await ended("kill -KILL $$");
    expect(recoverX(killed.path)).toMatchObject({ outcome: "failed", result: { exitCode: 137 } });
  });

  it("takes a child that ended but was never reaped (a zombie) for ended, not for alive", async () => {
    // Where nothing reaps orphans (a container without an init), the wrapper of a child that
    // ended while the agent was down stays a zombie. Here its parent is a process that never
    // reaps it, as such an init would not.
    const dir = mkdtempSync(join(tmpdir(), "ax-children-"));
    dirs.push(dir);
    const path = join(dir, "journal.sqlite");
    const exitFile = `${path}.exit-1`;
    const [file, args] = execArgv("/bin/sh", ["-c", "exit 0"], exitFile);
    const parent = spawn(
      "/bin/sh",
      ["-c", '"$@" & echo $!; exec sleep 30', "parent", file, ...args],
      {
        detached: true,
        stdio: ["ignore", "pipe", "ignore"],
      },
    );
    closers.push(() => {
      try {
        process.kill(-(parent.pid as number), "SIGKILL");
      } catch {}
    });
    const pid = Number(
      await new Promise<string>((r) => parent.stdout?.once("data", (d) => r(String(d)))),
    );
    const start = processStartTime(pid);
    await poll(() => existsSync(exitFile));
    await poll(() => readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z "));
    expect(pidExists(pid)).toBe(true);
    const j = new Journal({ path, maxOpen: 100, now: () => T0 });
    const accepted = j.accept(testDispatch("x", T0, "exec"), envelopeAt);
    if (!accepted) throw new Error("not accepted");
    j.transition(accepted.id, "scheduled", "running", undefined, envelopeAt, T0);
    j.recordChild(accepted.id, pid, start);
    j.close();
    expect(recoverX(path)).toMatchObject({ outcome: "succeeded", result: { exitCode: 0 } });
  });

  it("says in_handler, unknown how, for a child that died unobserved, and never signals a reused pid", () => {
    const dead = Number(
      spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]).stdout,
    );
    const gone = crashedWithRunning((j, id) => j.recordChild(id, dead, "12345"));
    expect(recoverX(gone.path).message).toContain(
      `its child (pid ${dead}) ended while nobody watched`,
    );
    // This very process under another start time: the recorded child is gone, its pid reused.
    const reused = crashedWithRunning((j, id) => j.recordChild(id, process.pid, "1"));
    const f = recoverX(reused.path);
    expect(f).toMatchObject({ outcome: "interrupted", interruptedPhase: "in_handler" });
    expect(f.message).toContain("ended while nobody watched");
  });
});
