import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AxError } from "../../shared/errors.js";
import { makeDirs } from "../../shared/make-dirs.js";
import {
  MOSQUITTO_FILES,
  type MosquittoFleet,
  type MosquittoListenOptions,
  mosquittoAcl,
  mosquittoConf,
  mosquittoPasswordFile,
} from "./mosquitto.js";

/** Paths of the files written. */
export interface WrittenFiles {
  passwords: string;
  acl: string;
  conf?: string;
}

/**
 * Replaces `path` by way of a temporary file and a rename, so a Mosquitto reloading at that moment
 * reads the old file or the new one, never half of one.
 */
function replaceFile(path: string, text: string, mode: number): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode });
  renameSync(tmp, path);
}

/**
 * Writes the password file and the ACL of `fleet` into `dir` (both 0600: a password hash is still
 * worth guessing at), and `mosquitto.conf` when `listen` is given.
 */
export function writeMosquittoFiles(
  dir: string,
  fleet: MosquittoFleet,
  listen?: Omit<MosquittoListenOptions, "dir">,
): WrittenFiles {
  // Both computed before either is written: a fleet that cannot be written changes nothing.
  const passwords = mosquittoPasswordFile(fleet);
  const acl = mosquittoAcl(fleet);
  const conf = listen === undefined ? undefined : mosquittoConf({ ...listen, dir });
  makeDirs(dir, 0o700);
  const out: WrittenFiles = {
    passwords: join(dir, MOSQUITTO_FILES.passwords),
    acl: join(dir, MOSQUITTO_FILES.acl),
  };
  replaceFile(out.passwords, passwords, 0o600);
  replaceFile(out.acl, acl, 0o600);
  if (conf !== undefined) {
    out.conf = join(dir, MOSQUITTO_FILES.conf);
    replaceFile(out.conf, conf, 0o644);
  }
  return out;
}

/**
 * Tells the Mosquitto whose pid is in `pidFile` to reload its password file and ACL (SIGHUP).
 * Mosquitto 2.0 then re-checks every connected client against them and disconnects one whose
 * user is gone or whose password no longer matches (docs/operations.md, "Revocation").
 */
export function reloadMosquitto(pidFile: string): number {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, "utf8").trim());
  } catch (err) {
    throw new AxError("AX_BROKER_RELOAD", `${pidFile}: cannot read Mosquitto's pid file`, {
      cause: err,
      retryable: true,
    });
  }
  if (!Number.isInteger(pid) || pid <= 1) {
    throw new AxError("AX_BROKER_RELOAD", `${pidFile}: does not hold a process id`);
  }
  try {
    process.kill(pid, "SIGHUP");
  } catch (err) {
    throw new AxError(
      "AX_BROKER_RELOAD",
      `cannot signal Mosquitto (pid ${pid} from ${pidFile}): ${(err as Error).message}`,
      { cause: err, retryable: true },
    );
  }
  return pid;
}

/** Where a coordinator keeps a Mosquitto in step (`broker.mosquitto` of its config). */
export interface MosquittoSyncOptions {
  dir: string;
  /** @default `dir`/mosquitto.pid */
  pidFile?: string | undefined;
}

/**
 * Rewrites the files in `o.dir` for the fleet as it is now and makes Mosquitto reload them. Never
 * throws: the enrolment change that called it is already stored, and the coordinator refuses a
 * revoked agent's messages itself; a failure is logged (AX_BROKER_RELOAD) for the operator.
 */
export function syncMosquitto(
  o: MosquittoSyncOptions,
  fleet: MosquittoFleet,
  log: (level: "info" | "error", msg: string, fields?: Record<string, unknown>) => void,
): boolean {
  const pidFile = o.pidFile ?? join(o.dir, MOSQUITTO_FILES.pid);
  try {
    writeMosquittoFiles(o.dir, fleet);
    const pid = reloadMosquitto(pidFile);
    log("info", "mosquitto reloaded", { dir: o.dir, pid });
    return true;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    log("error", `mosquitto not updated: ${(err as Error).message}`, {
      code: code === "AX_BROKER_CONFIG" ? code : "AX_BROKER_RELOAD",
      dir: o.dir,
    });
    return false;
  }
}
