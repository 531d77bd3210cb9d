import { existsSync } from "node:fs";
import { type IssueLike, issueLines, unknownKeys } from "../shared/config-issues.js";
import { AxError } from "../shared/errors.js";
import { AGENT_UPDATE_HANDLER } from "../shared/update.js";
import { readJsonFile } from "./config.js";
import { AGENT_UPDATE_NOT_A_JOB, jobDefinitionSchema } from "./domain/job.js";
import type { Logger } from "./engine/context.js";
import type { JobHistoryEntry, StoredJob } from "./store/port.js";

/*
 * Job files: what `ax job add --file` reads and what the coordinator config's `jobsFile` names.
 * One parser for both, so a file that one accepts the other accepts too (docs/config.md,
 * "jobsFile", and docs/scheduling.md, "Jobs from a file").
 */

/** The actor the job history records for what the jobs file does. */
export const JOBS_FILE_ACTOR = "jobsFile";
/** What versions before 0.x recorded for the jobs file. */
const FILE_ACTORS: ReadonlySet<string> = new Set([JOBS_FILE_ACTOR, "jobs-file"]);

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Job definitions from a file's parsed JSON — one definition, an array of them, or
 * `{ "jobs": [ … ] }` — each checked with the schema the coordinator stores jobs with. Every
 * problem is reported at once, naming the file, the job's index and the field's path
 * (`jobs.json: invalid job definitions` then `jobs.1.trigger: unknown key; did you mean …`).
 * `single`: only one definition is accepted (`ax job edit`).
 */
export function parseJobFile(value: unknown, file: string, single = false): unknown[] {
  let items: unknown[];
  let root: (i: number) => string;
  if (Array.isArray(value) && !single) {
    items = value;
    root = (i) => `[${i}]`;
  } else if (!single && isObject(value) && "jobs" in value && !("id" in value)) {
    const jobs = value.jobs;
    if (!Array.isArray(jobs)) {
      throw new AxError(
        "AX_JOB_INVALID",
        `${file}: invalid job definitions\njobs: must be an array`,
        { context: { file } },
      );
    }
    const others = Object.keys(value).filter((k) => k !== "jobs");
    if (others.length > 0) {
      throw new AxError(
        "AX_JOB_INVALID",
        `${file}: invalid job definitions\n${others.map((k) => `${k}: unknown key (a jobs file has only "jobs")`).join("\n")}`,
        { context: { file } },
      );
    }
    items = jobs;
    root = (i) => `jobs.${i}`;
  } else {
    items = [value];
    root = () => "";
  }
  const problems: string[] = [];
  const seen = new Map<string, number>();
  const at = (i: number, ...path: string[]) => [root(i), ...path].filter(Boolean).join(".");
  items.forEach((item, i) => {
    const r = jobDefinitionSchema.safeParse(item, { error: unknownKeys });
    if (!r.success) {
      const prefix = root(i);
      const issues: IssueLike[] = r.error.issues.map((issue) => ({
        ...issue,
        path: prefix ? [prefix, ...issue.path] : issue.path,
      }));
      problems.push(...issueLines(issues, prefix ? { [prefix]: item } : item));
      return;
    }
    const def = r.data;
    if (def.trigger.type === "after" && def.trigger.job === def.id) {
      problems.push(`${at(i, "trigger", "job")}: a job cannot fire after itself`);
    }
    // Every check the API makes, so that a file refused at start has stored none of its jobs.
    if (def.handler === AGENT_UPDATE_HANDLER)
      problems.push(`${at(i, "handler")}: ${AGENT_UPDATE_NOT_A_JOB}`);
    const first = seen.get(def.id);
    if (first !== undefined) {
      problems.push(
        `${at(i, "id")}: duplicate job id "${def.id}" (also at ${root(first) || "(root)"})`,
      );
    }
    seen.set(def.id, i);
  });
  if (items.length === 0) problems.push("(root): no job definitions");
  if (problems.length > 0) {
    throw new AxError(
      "AX_JOB_INVALID",
      `${file}: invalid job definition${items.length > 1 ? "s" : ""}\n${problems.join("\n")}`,
      { context: { file } },
    );
  }
  return items;
}

/**
 * Reads a job file (see {@link parseJobFile}); a JSON error names the file, line and column. A
 * file that cannot be read or is not JSON is AX_JOB_INVALID, as one that fails the schema is: the
 * job file's own problem, not a config file's (issue 17).
 */
export function readJobFile(file: string, single = false): unknown[] {
  return parseJobFile(readJsonFile(file, "AX_JOB_INVALID"), file, single);
}

/**
 * The definitions of the coordinator's `jobsFile`, read and checked before the coordinator starts:
 * a file that is missing or invalid refuses the start and nothing of it is applied. `configFile`
 * is the config that names it (relative paths in it are read from its folder).
 */
export function readJobsFile(file: string, configFile: string): unknown[] {
  if (!existsSync(file)) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      `${configFile}: jobsFile: ${file}: no such file (a relative jobsFile is read from the config file's folder); fix jobsFile or create the file`,
      { context: { source: configFile, path: file } },
    );
  }
  return readJobFile(file);
}

/** What applying a jobs file did, by job id. */
export interface JobsFileOutcome {
  added: string[];
  updated: string[];
  unchanged: string[];
}

/** What the jobs file needs of the coordinator. */
export interface JobsFileTarget {
  putJob(input: unknown, actor: string): Promise<StoredJob>;
  readonly store: {
    getJob(id: string): Promise<StoredJob | undefined>;
    listJobHistory(jobId: string, limit?: number): Promise<JobHistoryEntry[]>;
  };
}

/** Versions written through the API (or anyone but the file) since the file last wrote the job. */
function othersSinceFile(history: readonly JobHistoryEntry[]): JobHistoryEntry[] {
  const writes = history.filter((h) => h.action === "created" || h.action === "updated");
  let last = -1;
  writes.forEach((h, i) => {
    if (FILE_ACTORS.has(h.actor)) last = i;
  });
  return writes.slice(last + 1).filter((h) => !FILE_ACTORS.has(h.actor));
}

/**
 * Applies the jobs file's definitions (already read by {@link readJobsFile}) by id: a new id is
 * added; a stored job whose definition differs gets the file's as a new version (actor
 * `jobsFile`), and a warning names each one whose current definition was made through the API;
 * an identical one is left as it is (no new version). A stored job keeps its paused state. Jobs
 * the file does not list are never touched. Logs one summary line.
 */
export async function applyJobsFile(
  target: JobsFileTarget,
  file: string,
  definitions: readonly unknown[],
  log: Logger,
): Promise<JobsFileOutcome> {
  const outcome: JobsFileOutcome = { added: [], updated: [], unchanged: [] };
  for (const item of definitions) {
    const def = item as { id: string; paused?: boolean };
    const before = await target.store.getJob(def.id);
    if (before === undefined) {
      const history = await target.store.listJobHistory(def.id, 1);
      const last = history.at(-1);
      if (last?.action === "deleted" && !FILE_ACTORS.has(last.actor)) {
        log(
          "warn",
          `jobs file ${file}: job "${def.id}", deleted by ${last.actor}, is created again: the file lists it`,
          { file, jobId: def.id, deletedBy: last.actor },
        );
      }
      await target.putJob(def, JOBS_FILE_ACTOR);
      outcome.added.push(def.id);
      continue;
    }
    // The paused state is the operator's: pausing through the API lasts across restarts.
    const after = await target.putJob(
      { ...def, paused: before.definition.paused },
      JOBS_FILE_ACTOR,
    );
    if (after.version === before.version) {
      outcome.unchanged.push(def.id);
      continue;
    }
    outcome.updated.push(def.id);
    const history = await target.store.listJobHistory(def.id, 1_000);
    const replaced = othersSinceFile(history.slice(0, -1));
    if (replaced.length > 0) {
      const by = replaced.map((h) => `version ${h.version} by ${h.actor}`).join(", ");
      log(
        "warn",
        `jobs file ${file}: job "${def.id}": the file's definition replaced what was changed through the API (${by}); the file wins for the jobs it lists`,
        {
          file,
          jobId: def.id,
          version: after.version,
          replaced: replaced.map((h) => ({ version: h.version, actor: h.actor })),
        },
      );
    }
  }
  log(
    "info",
    `jobs file ${file}: ${outcome.added.length} added, ${outcome.updated.length} updated, ${outcome.unchanged.length} unchanged`,
    {
      file,
      added: outcome.added,
      updated: outcome.updated,
      unchanged: outcome.unchanged.length,
    },
  );
  return outcome;
}
