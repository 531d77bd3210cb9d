import { AxError } from "../../shared/errors.js";
import { parseCoordinatorConfig, readJsonFile } from "../config.js";
import { Coordinator } from "../coordinator.js";
import { formatIssues, jobsFileSchema } from "../domain/job.js";
import { type HttpServer, startHttpServer } from "../http/server.js";
import { flags } from "./args.js";
import { jsonLogger } from "./log.js";

/**
 * `ax coordinator start --config FILE`: runs the coordinator and serves its HTTP API (the config's
 * `http` section) until SIGTERM or SIGINT.
 */
export async function coordinatorStart(argv: string[]): Promise<number> {
  const f = flags("coordinator start", argv, { config: { type: "string" } });
  if (!f.config) throw new AxError("AX_CLI_USAGE", "coordinator start: --config FILE is required");
  const config = parseCoordinatorConfig(readJsonFile(f.config), f.config);
  let jobs: unknown[] = [];
  if (config.jobsFile) {
    const parsed = jobsFileSchema.safeParse(readJsonFile(config.jobsFile));
    if (!parsed.success) {
      throw new AxError(
        "AX_JOB_INVALID",
        `${config.jobsFile}: invalid jobs file\n${formatIssues(parsed.error)}`,
      );
    }
    jobs = (readJsonFile(config.jobsFile) as { jobs: unknown[] }).jobs;
  }
  const log = jsonLogger();
  const coordinator = new Coordinator(config, { log });
  await coordinator.start();
  let http: HttpServer;
  try {
    http = await startHttpServer(coordinator, { ...config.http, log });
  } catch (err) {
    await coordinator.close();
    throw err;
  }
  for (const job of jobs) await coordinator.putJob(job, "jobs-file");
  await new Promise<void>((resolve) => {
    process.once("SIGTERM", () => resolve());
    process.once("SIGINT", () => resolve());
  });
  log("info", "stopping");
  await http.close();
  await coordinator.close();
  return 0;
}
