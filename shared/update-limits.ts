/*
 * Rules of over-the-air updates both ends and the A/B launcher agree on, in a module of their own
 * with no imports: the launcher (agent/launch.ts) and the agent's installer (update.mjs) are
 * built from Node built-ins and modules like this one (shared/update.ts has the schemas).
 */

/** Files of a bundle beside its agent.mjs: the A/B launcher, and the installer `agent.update` loads. */
export const LAUNCHER_FILE = "launch.mjs";
export const INSTALLER_FILE = "update.mjs";

/** Starts a new version gets to register before its device goes back to the previous one. */
export const MAX_TRIAL_STARTS = 3;

/** Default and bounds of the health window: how long a new agent has to register per start. */
export const DEFAULT_HEALTH_WINDOW_MS = 60_000;
export const MIN_HEALTH_WINDOW_MS = 1_000;
export const MAX_HEALTH_WINDOW_MS = 3_600_000;

/** What a native addon runs on, and what a device reports in `hello.target`. */
export interface NativeTarget {
  /** Node's `process.platform`: linux. */
  platform: string;
  /** Node's `process.arch`: x64, arm64, arm, … */
  arch: string;
  /** The C library: glibc, musl, or unknown. */
  libc: string;
  /** NODE_MODULE_VERSION (`process.versions.modules`); null when not known. */
  nodeAbi: number | null;
}

/**
 * Why a bundle built for `bundle` cannot run on a device reporting `device`, or undefined when it
 * can. A device that reports no target (an agent from before `hello.target`) gets no bundle with
 * a native part: what it would load is unknown.
 */
export function targetMismatch(
  bundle: NativeTarget,
  device: NativeTarget | undefined | null,
): string | undefined {
  if (!device) return "the agent reports no native target (hello.target): update it by hand";
  const diffs: string[] = [];
  if (bundle.platform !== device.platform) {
    diffs.push(`platform ${bundle.platform}, the device runs ${device.platform}`);
  }
  if (bundle.arch !== device.arch) diffs.push(`CPU ${bundle.arch}, the device is ${device.arch}`);
  if (bundle.libc !== device.libc) {
    diffs.push(`C library ${bundle.libc}, the device has ${device.libc}`);
  }
  if (bundle.nodeAbi === null) {
    diffs.push("its native addon names no Node ABI");
  } else if (bundle.nodeAbi !== device.nodeAbi) {
    diffs.push(
      `Node ABI ${bundle.nodeAbi}, the device's Node has ${device.nodeAbi ?? "none known"}`,
    );
  }
  return diffs.length === 0 ? undefined : `bundle built for ${diffs.join("; ")}`;
}
