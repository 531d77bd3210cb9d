import { EXIT } from "../../shared/command-line.js";
import { AxError } from "../../shared/errors.js";
import { loadCoordinatorConfig } from "../config.js";
import { Coordinator, openStore } from "../coordinator.js";
import { resolveAuth } from "../http/auth.js";
import { type HttpServer, startHttpServer } from "../http/server.js";
import { applyJobsFile, readJobsFile } from "../jobs-file.js";
import { flags } from "./args.js";
import { jsonLogger } from "./log.js";

/**
 * `ax coordinator start --config FILE`: runs the coordinator and serves its HTTP API (the config's
 * `http` section) until SIGTERM or SIGINT. The config's `jobsFile` is read and checked before
 * anything starts (a missing or invalid one refuses the start), then applied by id
 * (coordinator/jobs-file.ts).
 */
export async function coordinatorStart(argv: string[]): Promise<number> {
  const f = flags("coordinator start", argv, { config: { type: "string" } });
  if (!f.config) throw new AxError("AX_CLI_USAGE", "coordinator start: --config FILE is required");
  const warnings: string[] = [];
  const config = loadCoordinatorConfig(f.config, { warn: (w) => warnings.push(w) });
  const jobsFile = config.jobsFile;
  const jobs = jobsFile === undefined ? undefined : readJobsFile(jobsFile, f.config);
  // The API's token files are checked before anything starts, as the jobs file is: a token file
  // others can read refuses the start with AX_SECURITY_KEY, broker or no broker.
  resolveAuth(config.http.auth);
  const log = jsonLogger();
  for (const w of warnings) log("warn", w);
  // Listened for from the first moment: a SIGTERM while the store opens or the jobs file applies
  // stops the coordinator cleanly once it is up, instead of killing it halfway.
  const stopSignal = new Promise<undefined>((resolve) => {
    process.once("SIGTERM", () => resolve(undefined));
    process.once("SIGINT", () => resolve(undefined));
  });
  const coordinator = new Coordinator(config, { log, store: await openStore(config) });
  let fenced: ((reason: string) => void) | undefined;
  const fencedReason = new Promise<string>((resolve) => {
    fenced = resolve;
  });
  coordinator.onFenced = (reason) => fenced?.(reason);
  try {
    await coordinator.start();
  } catch (err) {
    // A broker out of reach or refusing the login at start: stop what started and exit 1, for
    // the supervisor to start it again (Restart=always), rather than hang half started.
    await coordinator.close().catch(() => {});
    throw err;
  }
  let http: HttpServer;
  try {
    // Before the API is served, so no API edit races the file's.
    if (jobsFile !== undefined && jobs !== undefined) {
      await applyJobsFile(coordinator, jobsFile, jobs, log);
    }
    http = await startHttpServer(coordinator, { ...config.http, log });
  } catch (err) {
    await coordinator.close();
    throw err;
  }
  const stop = await Promise.race([stopSignal, fencedReason]);
  log(
    stop === undefined ? "info" : "error",
    stop === undefined ? "stopping" : `stopping: fenced: ${stop}`,
  );
  if (stop !== undefined) {
    // Cut off from the database, a clean close can wait on it for ever: give it a moment, then
    // exit whatever still hangs (nothing of it acts on the world: the loops stopped at the fence).
    setTimeout(() => process.exit(EXIT.fenced), FENCED_CLOSE_MS).unref();
  }
  await http.close();
  await coordinator.close();
  // Fenced (several coordinators on one store): another one holds the work now. Exit 75
  // (EX_TEMPFAIL) so that the supervisor starts this one again, as a standby with a new epoch.
  return stop === undefined ? EXIT.ok : EXIT.fenced;
}

/** How long a fenced coordinator's close may take before the process exits anyway. */
const FENCED_CLOSE_MS = 2_000;
