import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ENV_FILE, UNIT_FILE, unitCommand } from "../../coordinator/bundle/install-files.js";

/** A bundle installed as on a device, under `root` instead of /. */
export interface DeviceInstall {
  /** The bundle's files (/opt/ax-agent on a device). */
  dir: string;
  /** The config and env file (/etc/ax-agent). */
  etc: string;
  /** The working directory and journal (/var/lib/ax-agent). */
  state: string;
}

/**
 * Unpacks NAME.tar.gz with the system's tar into `root`, as an engineer flashing a device would.
 * Fails if any folder above the bundle holds a node_modules: the bundle must run without one.
 */
export function installBundle(archive: string, root: string): DeviceInstall {
  const opt = join(root, "opt");
  mkdirSync(opt, { recursive: true });
  const r = spawnSync("tar", ["-xzf", archive, "-C", opt], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`tar -xzf ${archive}: ${r.stderr}`);
  const name = archive.replace(/^.*\//, "").replace(/\.tar\.gz$/, "");
  const dir = join(opt, name);
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, "node_modules"))) throw new Error(`${d} has a node_modules`);
    if (dirname(d) === d) break;
  }
  const etc = join(root, "etc");
  const state = join(root, "state");
  mkdirSync(etc, { recursive: true });
  mkdirSync(state, { recursive: true });
  writeFileSync(join(etc, ENV_FILE), readFileSync(join(dir, ENV_FILE)));
  return { dir, etc, state };
}

/**
 * Writes the device's config to etc/agent.json and starts the agent exactly as the bundle's
 * systemd unit would: its ExecStart (Node with the profile's heap cap), its env file, its
 * working directory, and no other environment than PATH.
 */
export function startLikeSystemd(
  install: DeviceInstall,
  config: Record<string, unknown>,
  stdio: "ignore" | "pipe" = "pipe",
): ChildProcess {
  writeFileSync(join(install.etc, "agent.json"), JSON.stringify(config, null, 2));
  const { command, args } = unitCommand(
    readFileSync(join(install.dir, UNIT_FILE), "utf8"),
    readFileSync(join(install.etc, ENV_FILE), "utf8"),
    { node: process.execPath, dir: install.dir, etc: install.etc },
  );
  return spawn(command, args, {
    cwd: install.state,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    stdio: ["ignore", stdio, stdio],
  });
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves with how the process ended. */
export function stopProcess(child: ChildProcess, graceMs = 15_000): Promise<string> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve(`already ended (${child.exitCode ?? child.signalCode})`);
  }
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), graceMs);
    child.once("exit", (code, signal) => {
      clearTimeout(kill);
      resolve(signal ? `signal ${signal}` : `exit code ${code}`);
    });
    child.kill("SIGTERM");
  });
}
