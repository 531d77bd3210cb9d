import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "./chaos/ports.js";

/**
 * A PostgreSQL server of a test's own, on a free port with its data in `dir`, for the tests that
 * stop or restart the database (the machine's server is never touched). It uses the installed
 * server's binaries (Debian: /usr/lib/postgresql/N/bin); as root it runs them as the `postgres`
 * user, which initdb requires.
 */
export interface PostgresProcess {
  url: string;
  port: number;
  start(): void;
  /** `pg_ctl stop -m fast`: the connections are cut, as in a restart for maintenance. */
  stop(): void;
  /** Stops it, waits `pauseMs`, starts it again; resolves with how long it was away (ms). */
  restart(pauseMs?: number): Promise<number>;
  close(): void;
}

/** The folder of the newest installed server's binaries, or undefined. */
export function postgresBinDir(): string | undefined {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? undefined : join(root, versions[0], "bin");
}

/** Why a PostgreSQL of the test's own cannot be started here, or undefined when it can. */
export function postgresProcessUnavailable(): string | undefined {
  if (postgresBinDir() === undefined) return "no PostgreSQL server binaries (initdb, pg_ctl)";
  if (process.getuid?.() === 0 && spawnSync("id", ["postgres"]).status !== 0) {
    return "running as root without a postgres user to run the server as";
  }
  return undefined;
}

export async function postgresProcess(dir: string): Promise<PostgresProcess> {
  const bin = postgresBinDir();
  if (bin === undefined) throw new Error("no PostgreSQL server binaries");
  const port = await freePort();
  const data = join(dir, "pgdata");
  const log = join(dir, "postgres.log");
  const asRoot = process.getuid?.() === 0;
  mkdirSync(dir, { recursive: true });
  if (asRoot) {
    execFileSync("chown", ["postgres", dir]);
    chmodSync(dir, 0o700);
  }
  const run = (tool: string, args: string[]) =>
    asRoot
      ? execFileSync("runuser", ["-u", "postgres", "--", join(bin, tool), ...args], {
          stdio: "pipe",
          cwd: dir,
        })
      : execFileSync(join(bin, tool), args, { stdio: "pipe", cwd: dir });
  run("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
  const self: PostgresProcess = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start: () => {
      run("pg_ctl", ["-D", data, "-o", options, "-l", log, "-w", "-t", "30", "start"]);
    },
    stop: () => {
      run("pg_ctl", ["-D", data, "-m", "fast", "-w", "-t", "30", "stop"]);
    },
    restart: async (pauseMs = 0) => {
      const at = Date.now();
      self.stop();
      await new Promise((r) => setTimeout(r, pauseMs));
      self.start();
      return Date.now() - at;
    },
    close: () => {
      try {
        run("pg_ctl", ["-D", data, "-m", "immediate", "-w", "-t", "30", "stop"]);
      } catch {
        // not running
      }
    },
  };
  self.start();
  return self;
}
