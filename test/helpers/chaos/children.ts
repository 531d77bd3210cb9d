import type { ChildProcess } from "node:child_process";

/** Resolves when `child` has exited (at once if it already has). */
export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

/** Whether `child` is still running. */
export function alive(child: ChildProcess | undefined): child is ChildProcess {
  return child !== undefined && child.exitCode === null && child.signalCode === null;
}

/**
 * Ends `child`: `signal` (SIGTERM unless told), then SIGKILL after `graceMs`. A stopped child
 * (SIGSTOP) is continued first, or it would never act on the signal.
 */
export async function endChild(
  child: ChildProcess | undefined,
  signal: NodeJS.Signals = "SIGTERM",
  graceMs = 5_000,
): Promise<void> {
  if (!alive(child)) return;
  child.kill("SIGCONT");
  child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited(child);
  clearTimeout(timer);
}
