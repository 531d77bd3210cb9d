import { existsSync } from "node:fs";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fitFinished } from "../../runner/fit-report.js";
import type { HandlerContext } from "../registry.js";
import { EXEC_DEFAULT_MAX_OUTPUT_BYTES, EXEC_KILL_GRACE_MS, execHandler } from "./exec.js";
import { testContext as baseContext, failureOf, paramsError } from "./test-context.js";

const ALLOW = ["/bin/echo", "/bin/sh", "/bin/sleep"];
const exec = execHandler({ enabled: true, allow: ALLOW });

let dir: string;
beforeAll(async () => {
  dir = await realpath(await mkdtemp(join(tmpdir(), "ax-exec-")));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/**
 * Set by each run of the suite: with an exit file the child runs under the wrapper that notes
 * its exit status for a restart, and must behave exactly as when started directly.
 */
let exitFile: string | undefined;
let files = 0;
function testContext(overrides: Partial<HandlerContext> = {}) {
  if (exitFile === undefined) return baseContext(overrides);
  const children = overrides.children ?? { spawned: () => {}, exited: () => {} };
  return baseContext({
    ...overrides,
    children: { ...children, exitFile: `${exitFile}-${++files}` },
  });
}

describe.each([
  ["started directly", false],
  ["under its exit-file wrapper", true],
])("exec, %s", (_how, wrapped) => {
  beforeAll(() => {
    exitFile = wrapped ? join(dir, "journal.exit") : undefined;
  });
  it("runs an allow-listed command and returns its exit code and output", async () => {
    expect(exec.name).toBe("exec");
    await expect(
      exec.run(testContext(), { command: "/bin/echo", args: ["hello", "gpio 17"] }),
    ).resolves.toEqual({
      exitCode: 0,
      stdout: "hello gpio 17\n",
      stderr: "",
      stdoutTruncated: false,
      stderrTruncated: false,
    });
  });

  it("tells the child its execution (id, round, attempt, shard), which params cannot override", async () => {
    const result = await exec.run(
      testContext({ executionId: "ex-9", round: 3, attempt: 2, shard: { index: 1, total: 4 } }),
      {
        command: "/bin/sh",
        args: [
          "-c",
          'echo "$AX_EXECUTION_ID $AX_ROUND $AX_ATTEMPT $AX_SHARD_INDEX $AX_SHARD_TOTAL"',
        ],
        env: { AX_EXECUTION_ID: "forged" },
      },
    );
    expect(result).toMatchObject({ stdout: "ex-9 3 2 1 4\n" });
    const unsharded = await exec.run(testContext(), {
      command: "/bin/sh",
      args: ["-c", 'test -z "$AX_SHARD_INDEX$AX_SHARD_TOTAL" && echo none'],
    });
    expect(unsharded).toMatchObject({ stdout: "none\n" });
  });

  it("tells the journal of its child at spawn and of its exit when it exits, in its own group", async () => {
    const events: string[] = [];
    let pgid: number | undefined;
    const result = await exec.run(
      testContext({
        children: {
          spawned: (pid) => {
            events.push("spawned");
            pgid = pid;
          },
          exited: (pid, exit) =>
            events.push(`exited ${pid === pgid} ${exit.code} ${exit.stoppedByAgent}`),
        },
      }),
      // The child prints its process group: its own pid, since it leads its own group.
      { command: "/bin/sh", args: ["-c", "ps -o pgid= -p $$"] },
    );
    expect(events).toEqual(["spawned", "exited true 0 false"]);
    expect(Number(String(result?.stdout).trim())).toBe(pgid);
    // Stopped by the agent (cancel, timeout): the exit says so.
    const ctx = testContext({
      children: {
        spawned: () => {},
        exited: (_p, exit) => events.push(`stopped ${exit.stoppedByAgent}`),
      },
    });
    const run = exec.run(ctx, { command: "/bin/sleep", args: ["5"] });
    setTimeout(() => ctx.abort.abort(), 50);
    await failureOf(run);
    expect(events.at(-1)).toBe("stopped true");
  });

  it("never uses a shell: metacharacters in args are plain text", async () => {
    const result = await exec.run(testContext(), {
      command: "/bin/echo",
      args: ["$HOME", "; rm -rf /", "`id`", "*"],
    });
    expect(result).toMatchObject({ stdout: "$HOME ; rm -rf / `id` *\n" });
  });

  it("passes cwd and env", async () => {
    const result = await exec.run(testContext(), {
      command: "/bin/sh",
      args: ["-c", 'pwd; echo "$AX_PIN"'],
      cwd: dir,
      env: { AX_PIN: "17" },
    });
    expect(result).toMatchObject({ exitCode: 0, stdout: `${dir}\n17\n` });
  });

  it("fails retryable on a non-zero exit, with the code and the end of stderr", async () => {
    expect(
      await failureOf(exec.run(testContext(), { command: "/bin/sh", args: ["-c", "exit 3"] })),
    ).toEqual({
      name: "HandlerFailure",
      message: "exec: /bin/sh exited with code 3",
      retryable: true,
    });
    const noisy = "i=0; while [ $i -lt 200 ]; do echo line $i >&2; i=$((i+1)); done; exit 4";
    const failure = await failureOf(
      exec.run(testContext(), { command: "/bin/sh", args: ["-c", noisy] }),
    );
    expect(failure.retryable).toBe(true);
    expect(failure.message).toMatch(/^exec: \/bin\/sh exited with code 4: …/);
    expect(failure.message.endsWith("line 198\nline 199")).toBe(true);
    expect(failure.message.length).toBeLessThan(600);
  });

  it("refuses a command that is not in the allow-list", async () => {
    expect(await failureOf(exec.run(testContext(), { command: "/bin/ls" }))).toEqual({
      name: "HandlerFailure",
      message: 'exec: "/bin/ls" is not in this agent\'s exec allow-list',
      retryable: false,
    });
    // Exact match: the same binary by another spelling is not on the list.
    expect(await failureOf(exec.run(testContext(), { command: "/bin/../bin/echo" }))).toEqual({
      name: "HandlerFailure",
      message: 'exec: "/bin/../bin/echo" is not in this agent\'s exec allow-list',
      retryable: false,
    });
  });

  it("refuses everything when disabled", async () => {
    const off = execHandler({ enabled: false, allow: ALLOW });
    expect(await failureOf(off.run(testContext(), { command: "/bin/echo" }))).toEqual({
      name: "HandlerFailure",
      message: "exec is disabled in this agent's config",
      retryable: false,
    });
  });

  it("fails for good when an allow-listed command does not exist", async () => {
    const handler = execHandler({ enabled: true, allow: ["/nonexistent/ax-tool"] });
    expect(
      await failureOf(handler.run(testContext(), { command: "/nonexistent/ax-tool" })),
    ).toEqual({
      name: "HandlerFailure",
      message:
        "exec: cannot start /nonexistent/ax-tool: ENOENT (the command or the cwd does not exist)",
      retryable: false,
    });
  });

  it("kills the child promptly when the execution is aborted", async () => {
    const ctx = testContext();
    const started = performance.now();
    const run = exec.run(ctx, { command: "/bin/sleep", args: ["30"] });
    setTimeout(() => ctx.abort.abort(), 100);
    expect(await failureOf(run)).toEqual({
      name: "HandlerFailure",
      message: "exec: /bin/sleep aborted",
      retryable: true,
    });
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  /**
   * Aborts `ctx` once the command has created `ready` (after setting its trap): a fixed delay
   * raced the shell's start on a loaded machine, whose SIGTERM then came before the trap.
   */
  const abortWhenReady = async (ctx: ReturnType<typeof testContext>, ready: string) => {
    for (const until = performance.now() + 10_000; !existsSync(ready); ) {
      if (performance.now() > until) throw new Error(`${ready} never appeared`);
      await new Promise((r) => setTimeout(r, 10));
    }
    ctx.abort.abort();
  };

  it("sends SIGKILL to a child that ignores SIGTERM, after the grace period", async () => {
    const ctx = testContext();
    const ready = join(dir, `ignores-term-${wrapped}.ready`);
    const started = performance.now();
    const run = exec.run(ctx, {
      command: "/bin/sh",
      args: ["-c", `trap "" TERM; : > ${ready}; sleep 30`],
    });
    await abortWhenReady(ctx, ready);
    expect(await failureOf(run)).toMatchObject({ message: "exec: /bin/sh aborted" });
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(EXEC_KILL_GRACE_MS);
    expect(took).toBeLessThan(15_000);
  });

  it("a command that ends with exit 0 as it is stopped succeeded: the record says what it did", async () => {
    const ctx = testContext();
    const ready = join(dir, `exits-0-${wrapped}.ready`);
    // It finishes its work on SIGTERM and exits 0, as a command that had finished would.
    const run = exec.run(ctx, {
      command: "/bin/sh",
      args: ["-c", `trap "echo flushed; exit 0" TERM; : > ${ready}; sleep 30 & wait`],
    });
    await abortWhenReady(ctx, ready);
    expect(await run).toMatchObject({ exitCode: 0, stdout: "flushed\n" });
  });

  it("never lets a command run to its end after a cancel sent the moment it was spawned", async () => {
    // The signal reaches the child at whatever point of its start it is: before the wrapper's
    // trap, before the command exists, or once it runs. In none may the command finish.
    const marker = join(dir, `cancel-at-spawn-${wrapped}`);
    const runs = [];
    for (let i = 0; i < 20; i++) {
      const ctx = testContext();
      const run = exec.run(ctx, {
        command: "/bin/sh",
        args: ["-c", `sleep 0.3; echo done >> ${marker}`],
      });
      ctx.abort.abort();
      runs.push(failureOf(run));
    }
    for (const f of await Promise.all(runs)) expect(f.message).toBe("exec: /bin/sh aborted");
    await new Promise((r) => setTimeout(r, 600));
    expect(existsSync(marker)).toBe(false);
  });

  it("kills the child after its own timeoutMs", async () => {
    expect(
      await failureOf(
        exec.run(testContext(), { command: "/bin/sleep", args: ["30"], timeoutMs: 100 }),
      ),
    ).toEqual({
      name: "HandlerFailure",
      message: "exec: /bin/sleep timed out after 100 ms",
      retryable: true,
    });
  });

  it("does not start when already aborted", async () => {
    const ctx = testContext();
    ctx.abort.abort();
    expect(await failureOf(exec.run(ctx, { command: "/bin/echo" }))).toEqual({
      name: "HandlerFailure",
      message: "exec: aborted before start",
      retryable: true,
    });
  });

  it("keeps the first maxOutputBytes of stdout and the last of stderr", async () => {
    const small = execHandler({ enabled: true, allow: ALLOW, maxOutputBytes: 1000 });
    const script = "i=0; while [ $i -lt 500 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done";
    const result = (await small.run(testContext(), {
      command: "/bin/sh",
      args: ["-c", script],
    })) as Record<string, unknown>;
    const stdout = result.stdout as string;
    const stderr = result.stderr as string;
    // Counted as sent: each newline is 2 bytes of JSON (\n), so a little under 1,000 raw.
    const sent = (t: string) => Buffer.byteLength(JSON.stringify(t)) - 2;
    expect(sent(stdout)).toBeLessThanOrEqual(1000);
    expect(sent(stdout)).toBeGreaterThan(995);
    expect(stdout.startsWith("out0\nout1\n")).toBe(true);
    expect(sent(stderr)).toBeLessThanOrEqual(1000);
    expect(sent(stderr)).toBeGreaterThan(995);
    expect(stderr.endsWith("err498\nerr499\n")).toBe(true);
    expect(result).toMatchObject({ exitCode: 0, stdoutTruncated: true, stderrTruncated: true });
  });

  it("keeps 16 KiB of each stream by default, so the finished report fits 64 KiB", async () => {
    const result = (await exec.run(testContext(), {
      command: "/bin/sh",
      args: ["-c", "i=0; while [ $i -lt 3000 ]; do echo 0123456789; i=$((i+1)); done"],
    })) as { stdout: string; stdoutTruncated: boolean };
    expect(EXEC_DEFAULT_MAX_OUTPUT_BYTES).toBe(16_384);
    // 11 bytes a line, 12 as JSON (the newline is \n): 16,384 bytes as sent hold 1,365 lines.
    expect(result.stdout).toBe(`${"0123456789\n".repeat(1365)}0123`);
    expect(result.stdoutTruncated).toBe(true);
  });

  it("counts its output as it is sent, JSON-escaped, so the exit code always reaches the coordinator", async () => {
    // 12,000 bytes of 0x01 (6 bytes each as \u0001) on stdout, 16,384 quotes (2 each) on stderr:
    // under the cap as raw bytes, 72 KB as JSON, which dropped the whole result.
    const script =
      'head -c 12000 /dev/zero | tr "\\0" "\\001"; head -c 16384 /dev/zero | tr "\\0" "\\042" >&2';
    const result = (await exec.run(testContext(), {
      command: "/bin/sh",
      args: ["-c", script],
    })) as {
      exitCode: number;
      stdout: string;
      stderr: string;
      stdoutTruncated: boolean;
      stderrTruncated: boolean;
    };
    expect(result.exitCode).toBe(0);
    expect(result.stdoutTruncated).toBe(true);
    expect(result.stderrTruncated).toBe(true);
    expect(result.stdout).toBe("\u0001".repeat(Math.floor(EXEC_DEFAULT_MAX_OUTPUT_BYTES / 6)));
    expect(result.stderr).toBe('"'.repeat(EXEC_DEFAULT_MAX_OUTPUT_BYTES / 2));
    const fitted = fitFinished({
      type: "finished",
      executionId: "ex_1",
      round: 1,
      outcome: "succeeded",
      retryable: false,
      message: "ok",
      finishedAt: 1,
      result,
    });
    expect(fitted.result).toEqual(result);
  });

  it("validates params with messages that name the field", () => {
    const check = (input: unknown) => paramsError(exec.params, input);
    expect(
      check({ command: "/bin/echo", args: ["a"], cwd: "/", env: { A_B: "1" }, timeoutMs: 10 }),
    ).toBe("ok");
    expect(check({ command: "echo" })).toBe("params.command: must be an absolute path");
    expect(check({})).toBe("params.command: is required (string)");
    expect(check({ command: "/bin/echo", args: "a b" })).toBe(
      "params.args: expected array, got string",
    );
    expect(check({ command: "/bin/echo", args: [1] })).toBe(
      "params.args.0: expected string, got number",
    );
    expect(check({ command: "/bin/echo", cwd: "tmp" })).toBe(
      "params.cwd: must be an absolute path",
    );
    expect(check({ command: "/bin/echo", env: { LD_PRELOAD: "/tmp/x.so" } })).toBe(
      "params.env.LD_PRELOAD: may not be set (it injects code into the child)",
    );
    expect(check({ command: "/bin/echo", env: { "A=B": "x" } })).toBe(
      "params.env.A=B: must be a variable name",
    );
    expect(check({ command: "/bin/echo", timeoutMs: 0 })).toBe(
      "params.timeoutMs: must be at least 1",
    );
  });
});
