import { spawn } from "node:child_process";
import { accessSync, constants, existsSync, rmSync, statSync } from "node:fs";
import * as z from "zod/mini";
import type { HandlerPart } from "../../parts/types.js";
import { defineHandler, type Handler, type HandlerContext, HandlerFailure } from "../registry.js";
import { absolutePath, tail } from "./common.js";
import { fitJsonText } from "./json-text.js";

/** Options of `exec`, resolved from the agent config's `exec` section. */
export interface ExecOptions {
  /** Nothing runs unless this is true. */
  enabled: boolean;
  /** Absolute paths of the executables that may run, compared exactly. */
  allow: readonly string[];
  /**
   * Bytes kept of stdout (its start) and of stderr (its end), each. Both travel in the `finished`
   * report, which must fit the protocol's 64 KiB message limit. @default 16384
   */
  maxOutputBytes?: number | undefined;
}

/**
 * Variables that make a dynamic loader or an interpreter run code of the caller's choosing, which
 * would turn any allow-listed executable into an arbitrary one.
 */
const INJECTING_ENV = /^(LD_|DYLD_)|^(BASH_ENV|ENV|NODE_OPTIONS|PERL5OPT|PYTHONSTARTUP)$/;

/** The params of one `exec` execution. */
export const execParamsSchema = z.object({
  command: absolutePath,
  args: z.optional(z.array(z.string().check(z.refine((a) => !a.includes("\0"), "contains NUL")))),
  cwd: z.optional(absolutePath),
  /** Added to the agent's own environment. */
  env: z.optional(
    z
      .record(z.string(), z.string().check(z.refine((v) => !v.includes("\0"), "contains NUL")))
      .check(
        // Checked here rather than on the record's key schema, so the issue names the variable.
        z.superRefine((env, ctx) => {
          for (const key of Object.keys(env)) {
            const problem = !/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)
              ? "must be a variable name"
              : INJECTING_ENV.test(key)
                ? "may not be set (it injects code into the child)"
                : undefined;
            if (problem)
              ctx.issues.push({ code: "custom", message: problem, path: [key], input: key });
          }
        }),
      ),
  ),
  /** Kills the child after this long. @default none: the execution's own timeout applies */
  timeoutMs: z.optional(z.int().check(z.gte(1), z.lte(86_400_000))),
});

export type ExecParams = z.infer<typeof execParamsSchema>;

const NAME = "exec";

/**
 * Default of {@link ExecOptions.maxOutputBytes}. Twice this, JSON-escaped, plus the envelope must
 * stay under the protocol's 64 KiB message limit, or the `finished` report could not be delivered.
 */
export const EXEC_DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024;

/** After SIGTERM, how long a child has to exit before SIGKILL. */
export const EXEC_KILL_GRACE_MS = 2_000;

/** Bytes of the stderr tail quoted in a failure's message. */
const STDERR_IN_MESSAGE = 500;

/** Keeps the first `max` bytes of a stream, or the last `max` bytes. */
class Capture {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  constructor(
    private readonly max: number,
    private readonly keep: "head" | "tail",
  ) {}

  add(chunk: Buffer): void {
    if (this.keep === "head") {
      const room = this.max - this.size;
      if (chunk.byteLength > room) this.truncated = true;
      if (room <= 0) return;
      const kept = chunk.byteLength > room ? chunk.subarray(0, room) : chunk;
      this.chunks.push(kept);
      this.size += kept.byteLength;
      return;
    }
    this.chunks.push(chunk);
    this.size += chunk.byteLength;
    while (this.size > this.max) {
      this.truncated = true;
      const first = this.chunks[0]!;
      const over = this.size - this.max;
      if (first.byteLength <= over) {
        this.chunks.shift();
        this.size -= first.byteLength;
      } else {
        this.chunks[0] = first.subarray(over);
        this.size -= over;
      }
    }
  }

  /** What was kept, cut further where JSON escaping would make it longer than `max` bytes. */
  text(): string {
    const fitted = fitJsonText(Buffer.concat(this.chunks).toString("utf8"), this.max, this.keep);
    if (fitted.cut) this.truncated = true;
    return fitted.text;
  }
}

/**
 * `exec`: runs one allow-listed executable; no shell interprets anything (args are passed as they
 * are: `;`, `$( )` and `*` mean nothing; under the agent's journal a fixed wrapper runs it as
 * `"$@"` to note its exit status, see {@link WRAPPER}). Off unless enabled. Cancel and timeout
 * send SIGTERM to the child's process group, then SIGKILL after {@link EXEC_KILL_GRACE_MS}.
 *
 * Exit 0 succeeds with `{ exitCode, stdout, stderr }`; any other exit fails retryable, quoting the
 * end of stderr; a command that cannot be started (missing, not executable, bad cwd) fails for good.
 */
export function execHandler(opts: ExecOptions): Handler<ExecParams> {
  const allow = new Set(opts.allow);
  const maxOutputBytes = opts.maxOutputBytes ?? EXEC_DEFAULT_MAX_OUTPUT_BYTES;

  return defineHandler(NAME, execParamsSchema, async (ctx, params) => {
    if (!opts.enabled) {
      throw new HandlerFailure("exec is disabled in this agent's config", { retryable: false });
    }
    if (!allow.has(params.command)) {
      throw new HandlerFailure(
        `${NAME}: ${JSON.stringify(params.command)} is not in this agent's exec allow-list`,
        { retryable: false },
      );
    }
    if (ctx.signal.aborted) throw new HandlerFailure(`${NAME}: aborted before start`);
    return run(params, ctx, maxOutputBytes);
  });
}

/**
 * The variables every child gets, naming the execution it runs for: the idempotency key a script
 * passes to what it changes outside the device (docs/handlers.md, "Side effects"). Set last, so
 * params cannot make a child lie about which execution it is.
 */
export function executionEnv(ctx: HandlerContext): Record<string, string> {
  return {
    AX_EXECUTION_ID: ctx.executionId,
    AX_ROUND: String(ctx.round),
    AX_ATTEMPT: String(ctx.attempt),
    ...(ctx.shard === undefined
      ? {}
      : { AX_SHARD_INDEX: String(ctx.shard.index), AX_SHARD_TOTAL: String(ctx.shard.total) }),
  };
}

/**
 * Runs the command (`"$@"`, nothing interpreted) and appends `pid status` to the exit file as it
 * ends, so that a restart of an agent that died meanwhile knows what the child did. Once the
 * command exists, the shell waits out SIGHUP, SIGINT and SIGTERM (they reach the command too:
 * the shell leads its group) until the command has ended, then ends by the command's signal, so
 * the agent sees what it would have seen without it. The trap is set only after the command is
 * started (in the background, so the shell goes on): set before, it would have the shell survive
 * a signal that came before the command existed, and the command run to its end after a cancel.
 * A background command starts with SIGINT and SIGQUIT ignored (POSIX); the agent stops a child
 * with SIGTERM and SIGKILL. `wait` is asked again only when a trapped signal cut it short (over
 * 128) with the command still there; never on a plain exit, whose pid may already be another's.
 */
const WRAPPER =
  'f=$1;shift;"$@"& p=$!;trap : HUP INT TERM;while :;do wait $p;s=$?;[ $s -gt 128 ]&&kill -0 $p 2>/dev/null||break;done;echo "$$ $s" 2>/dev/null >>"$f";[ $s -gt 128 ]&&[ $s -lt 160 ]&&trap - HUP INT TERM&&kill -$((s-128)) $$;exit $s';
const SH = "/bin/sh";

/** What is spawned for `command args`, under the wrapper when there is an exit file. */
export function execArgv(
  command: string,
  args: readonly string[],
  exitFile: string | undefined,
): [string, string[]] {
  return exitFile === undefined
    ? [command, [...args]]
    : [SH, ["-c", WRAPPER, NAME, exitFile, command, ...args]];
}

function run(
  params: ExecParams,
  ctx: HandlerContext,
  maxOutputBytes: number,
): Promise<Record<string, unknown>> {
  const { command } = params;
  const signal = ctx.signal;
  const exitFile = ctx.children?.exitFile;
  const wrapped = exitFile !== undefined && existsSync(SH);
  if (wrapped) {
    // What the spawn itself would refuse, refused as before: for good, not as the shell's 127.
    try {
      accessSync(command, constants.X_OK);
      if (!statSync(command).isFile()) throw Object.assign(new Error(), { code: "EACCES" });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new HandlerFailure(
        `${NAME}: cannot start ${command}: ${code}${code === "ENOENT" ? " (the command or the cwd does not exist)" : ""}`,
        { retryable: false, cause: err },
      );
    }
  }
  return new Promise((resolve, reject) => {
    const [file, argv] = execArgv(command, params.args ?? [], wrapped ? exitFile : undefined);
    const child = spawn(file, argv, {
      shell: false,
      // Its own process group, so a kill also reaches what it started (`sh -c 'a | b'`), and a
      // restart after a crash can stop all of it by the pid journaled below.
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...params.env, ...executionEnv(ctx) },
      ...(params.cwd === undefined ? {} : { cwd: params.cwd }),
    });
    // Journaled before anything else can happen: if the agent dies from here on, its restart
    // finds this child and stops it before reporting (issue 15, item 4).
    if (child.pid !== undefined) ctx.children?.spawned(child.pid);
    const stdout = new Capture(maxOutputBytes, "head");
    const stderr = new Capture(maxOutputBytes, "tail");
    child.stdout.on("data", (chunk: Buffer) => stdout.add(chunk));
    child.stderr.on("data", (chunk: Buffer) => stderr.add(chunk));

    let stopping: string | undefined;
    let killTimer: NodeJS.Timeout | undefined;
    let exitTimer: NodeJS.Timeout | undefined;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let settled = false;

    const kill = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        // The group is already gone.
      }
    };
    const stop = (why: string) => {
      if (stopping !== undefined || exit !== undefined) return;
      stopping = why;
      kill("SIGTERM");
      killTimer = setTimeout(() => kill("SIGKILL"), EXEC_KILL_GRACE_MS);
    };
    const onAbort = () => stop("aborted");
    signal.addEventListener("abort", onAbort, { once: true });
    const timeout =
      params.timeoutMs === undefined
        ? undefined
        : setTimeout(() => stop(`timed out after ${params.timeoutMs} ms`), params.timeoutMs);

    const settle = (outcome: { ok: Record<string, unknown> } | { err: HandlerFailure }) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener("abort", onAbort);
      clearTimeout(timeout);
      clearTimeout(exitTimer);
      // When stopping, the SIGKILL still goes out on time to whatever of the group is left.
      if (stopping === undefined) clearTimeout(killTimer);
      else killTimer?.unref();
      if ("ok" in outcome) resolve(outcome.ok);
      else reject(outcome.err);
    };

    const finish = () => {
      if (exit === undefined) return;
      const err = stderr.text();
      // Exit 0 is success even as it was being stopped: it ended before the signal reached it,
      // or ended well on it. The record says what the command did (docs/handlers.md).
      if (stopping !== undefined && exit.code !== 0) {
        settle({ err: new HandlerFailure(`${NAME}: ${command} ${stopping}`) });
      } else if (exit.code === 0) {
        settle({
          ok: {
            exitCode: 0,
            stdout: stdout.text(),
            stderr: err,
            stdoutTruncated: stdout.truncated,
            stderrTruncated: stderr.truncated,
          },
        });
      } else {
        const how =
          exit.code === null ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
        const quoted = err.trim() === "" ? "" : `: ${tail(err.trim(), STDERR_IN_MESSAGE)}`;
        settle({ err: new HandlerFailure(`${NAME}: ${command} ${how}${quoted}`) });
      }
    };

    child.on("error", (err: NodeJS.ErrnoException) => {
      // Only spawn failures land here (kill errors are caught above); the child never ran.
      settle({
        err: new HandlerFailure(
          `${NAME}: cannot start ${command}: ${err.code ?? err.message}${err.code === "ENOENT" ? " (the command or the cwd does not exist)" : ""}`,
          { retryable: false, cause: err },
        ),
      });
    });
    child.on("exit", (code, sig) => {
      exit = { code, signal: sig };
      // Journaled at once, before the report: a crash before that commits still knows this.
      if (child.pid !== undefined) {
        ctx.children?.exited(child.pid, {
          code,
          signal: sig,
          stoppedByAgent: stopping !== undefined,
        });
        // Journaled: the wrapper's note of it is no longer needed.
        if (wrapped) rmSync(exitFile, { force: true });
      }
      // Normally "close" follows at once. A background grandchild holding the pipes open must
      // not keep the execution running after the command itself has exited.
      exitTimer = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, 1_000);
    });
    child.on("close", finish);
  });
}

/** The config section of `exec`. */
export const execConfigSchema = z.strictObject({
  /** @default false */
  enabled: z._default(z.boolean(), false),
  /** Absolute paths of the executables that may run. @default [] */
  allow: z._default(z.array(absolutePath), []),
  /**
   * Bytes kept of stdout and of stderr, each; at most 24 KiB so that both fit a `finished`
   * report (64 KiB message limit). @default 16384
   */
  maxOutputBytes: z._default(z.int().check(z.gte(1), z.lte(24_576)), EXEC_DEFAULT_MAX_OUTPUT_BYTES),
});

/** `exec` as a part an agent is built with; offered only when its section says `enabled: true`. */
export const execPart: HandlerPart = {
  name: "exec",
  config: () => execConfigSchema,
  build: (section) => {
    const config = section as z.output<typeof execConfigSchema>;
    return config.enabled ? { handler: execHandler(config) as never } : undefined;
  },
};
