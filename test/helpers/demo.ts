import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { waitFor } from "./env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));

/** `ax demo` running as a child process, its output piped (not a terminal). */
export interface RunningDemo {
  /** Everything it printed on stdout so far. */
  output(): string;
  /** The console's URL, from the line the demo prints. */
  url: string;
  /** The admin token file, from the line the demo prints. */
  tokenFile: string;
  /** Resolves with its exit code. */
  exited: Promise<number | null>;
}

/** Starts `ax demo --duration SECONDS --http-port 0` and waits for its URL and token lines. */
export async function startDemo(seconds: number): Promise<RunningDemo> {
  const child = spawn(
    process.execPath,
    [AX, "demo", "--duration", String(seconds), "--http-port", "0"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout.on("data", (c: Buffer) => {
    out += c.toString("utf8");
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  const url = await waitFor(
    "the console URL",
    () => /console (http:\/\/127\.0\.0\.1:\d+)\//.exec(out)?.[1],
  );
  const tokenFile = await waitFor(
    "the admin token line",
    () => /admin token in (\S+) /.exec(out)?.[1],
  );
  return { output: () => out, url, tokenFile, exited };
}
