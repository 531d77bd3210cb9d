import { parseFlags } from "../../shared/command-line.js";
import { AxError } from "../../shared/errors.js";
import { utcOffsetMs } from "../domain/dst.js";
import type { Trigger } from "../domain/job.js";
import type { JobView } from "../http/schemas.js";
// The one parser of job files, shared with the coordinator config's jobsFile.
import { readJobFile } from "../jobs-file.js";
import { unknownSubcommand } from "./args.js";
import {
  apiClient,
  CLIENT_FLAGS,
  idempotencyHeader,
  instantFlag,
  intFlag,
  jsonObjectFlag,
  parseCommand,
  print,
  printJson,
} from "./client.js";
import { fields, isoTime, table } from "./table.js";

/** A trigger in a few words, for tables. */
export function describeTrigger(t: Trigger): string {
  switch (t.type) {
    case "cron":
      return `cron "${t.expr}" ${t.tz}`;
    case "every":
      return `every ${t.everyMs}ms`;
    case "at":
      return `at ${isoTime(t.at)}`;
    case "delay":
      return `delay ${t.delayMs}ms`;
    case "event":
      return `event ${t.name}`;
    case "after":
      return `after ${t.job} ${t.states.join("|")}`;
    case "manual":
      return "manual";
  }
}

/** A job's next fire time for people: a paused job has none until it is resumed. */
const nextFire = (j: JobView) => (j.paused ? "paused" : isoTime(j.nextFireAt));

const jobRow = (j: JobView) => [
  j.id,
  String(j.version),
  j.definition.handler,
  describeTrigger(j.definition.trigger),
  j.paused ? "paused" : "active",
  nextFire(j),
];
const JOB_HEADER = ["job", "version", "handler", "trigger", "status", "next fire (UTC)"];

const path = (id: string) => `/api/jobs/${encodeURIComponent(id)}`;

/** `ax job add|list|show|edit|delete|pause|resume|trigger|preview`. */
export async function jobCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "add": {
      const { flags } = parseCommand("job add", argv, {
        ...CLIENT_FLAGS,
        file: { type: "string" },
      });
      if (!flags.file) throw new AxError("AX_CLI_USAGE", "job add: --file FILE is required");
      const defs = readJobFile(flags.file);
      const api = apiClient("job add", flags);
      // All or nothing where the CLI can see it: a job that exists already is refused before
      // any is added (the file's own duplicates were refused when it was read).
      for (const def of defs) {
        const id = (def as { id: string }).id;
        const exists = await api.request<JobView>("GET", path(id)).then(
          () => true,
          (err: unknown) => {
            if (err instanceof AxError && err.code === "AX_JOB_NOT_FOUND") return false;
            throw err;
          },
        );
        if (exists) {
          throw new AxError(
            "AX_JOB_EXISTS",
            `job "${id}" already exists; update it instead (ax job edit ${id} --file FILE); no job of ${flags.file} was added`,
            { context: { jobId: id } },
          );
        }
      }
      const added: JobView[] = [];
      for (const def of defs) {
        try {
          added.push(await api.request<JobView>("POST", "/api/jobs", def));
        } catch (err) {
          // What the coordinator refused partway (another writer, a limit): say what went in.
          if (added.length > 0 && err instanceof AxError) {
            const ids = added.map((j) => j.id).join(", ");
            err.message = `${err.message} (added before it: ${ids}; none after it was sent)`;
          }
          throw err;
        }
      }
      if (flags.json) printJson(added);
      else print(table(JOB_HEADER, added.map(jobRow)));
      return 0;
    }
    case "edit": {
      const { flags, args } = parseCommand(
        "job edit",
        argv,
        { ...CLIENT_FLAGS, file: { type: "string" } },
        ["ID"],
      );
      if (!flags.file) throw new AxError("AX_CLI_USAGE", "job edit: --file FILE is required");
      const [def] = readJobFile(flags.file, true);
      const job = await apiClient("job edit", flags).request<JobView>(
        "PUT",
        path(args[0] as string),
        def,
      );
      if (flags.json) printJson(job);
      else print(`job ${job.id}: version ${job.version}`);
      return 0;
    }
    case "list": {
      const { flags } = parseCommand("job list", argv, CLIENT_FLAGS);
      // Every job, a page at a time (the API pages the listing).
      const api = apiClient("job list", flags);
      const items: JobView[] = [];
      let cursor: string | null = null;
      do {
        const page: { items: JobView[]; nextCursor: string | null } = await api.request(
          "GET",
          `/api/jobs?limit=1000${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`,
        );
        items.push(...page.items);
        cursor = page.nextCursor;
      } while (cursor !== null);
      if (flags.json) printJson({ items });
      else print(table(JOB_HEADER, items.map(jobRow)));
      return 0;
    }
    case "show": {
      const { flags, args } = parseCommand("job show", argv, CLIENT_FLAGS, ["ID"]);
      const job = await apiClient("job show", flags).request<JobView>(
        "GET",
        path(args[0] as string),
      );
      if (flags.json) printJson(job);
      else {
        print(
          fields([
            ["job", job.id],
            ["version", String(job.version)],
            ["status", job.paused ? "paused" : "active"],
            ["trigger", describeTrigger(job.definition.trigger)],
            ["next fire", nextFire(job)],
            ["updated", isoTime(job.updatedAt)],
          ]),
        );
        print(`definition\n${JSON.stringify(job.definition, null, 2)}`);
      }
      return 0;
    }
    case "delete": {
      const { flags, args } = parseCommand("job delete", argv, CLIENT_FLAGS, ["ID"]);
      await apiClient("job delete", flags).request("DELETE", path(args[0] as string));
      if (flags.json) printJson({ deleted: args[0] });
      else print(`job ${args[0]}: deleted`);
      return 0;
    }
    case "pause":
    case "resume": {
      const { flags, args } = parseCommand(`job ${sub}`, argv, CLIENT_FLAGS, ["ID"]);
      const job = await apiClient(`job ${sub}`, flags).request<JobView>(
        "POST",
        `${path(args[0] as string)}/${sub}`,
      );
      if (flags.json) printJson(job);
      // Pausing is state, not a definition: the version is unchanged, so it is not shown as news.
      else if (job.paused) print(`job ${job.id}: paused; it fires nothing until resumed`);
      else {
        const next = job.nextFireAt === null ? "none" : isoTime(job.nextFireAt);
        print(`job ${job.id}: resumed; next fire ${next}`);
      }
      return 0;
    }
    case "trigger": {
      const { flags, args } = parseCommand(
        "job trigger",
        argv,
        { ...CLIENT_FLAGS, "idempotency-key": { type: "string" } },
        ["ID"],
      );
      const r = await apiClient("job trigger", flags).request<{ executionIds: string[] }>(
        "POST",
        `${path(args[0] as string)}/trigger`,
        undefined,
        idempotencyHeader(flags["idempotency-key"]),
      );
      if (flags.json) printJson(r);
      else print(r.executionIds.join("\n"));
      return 0;
    }
    case "preview":
      return jobPreview(argv);
    default:
      throw unknownSubcommand("job", sub, [
        "add",
        "list",
        "show",
        "edit",
        "delete",
        "pause",
        "resume",
        "trigger",
        "preview",
      ]);
  }
}

/** `ax job preview ID [--count N] [--after T]`, or `ax job preview --trigger JSON …`. */
async function jobPreview(argv: string[]): Promise<number> {
  const options = {
    ...CLIENT_FLAGS,
    count: { type: "string" },
    after: { type: "string" },
    trigger: { type: "string" },
  } as const;
  // An ID anywhere among the flags, as every command's arguments may be.
  const withId = parseFlags("job preview", argv, options).positionals.length > 0;
  const { flags, args } = parseCommand("job preview", argv, options, withId ? ["ID"] : []);
  const n = intFlag("job preview", "count", flags.count, { min: 1, max: 1000 }) ?? 10;
  const after = instantFlag("job preview", "after", flags.after);
  // The command line is checked whole before the token is looked for (cli.md, "Usage errors").
  if (withId && flags.trigger !== undefined) {
    throw new AxError("AX_CLI_USAGE", "job preview: give a job ID or --trigger, not both");
  }
  const trigger = withId ? undefined : jsonObjectFlag("job preview", "trigger", flags.trigger);
  if (!withId && !trigger) {
    throw new AxError("AX_CLI_USAGE", "job preview: give a job ID or --trigger JSON");
  }
  const api = apiClient("job preview", flags);
  let r: { times: number[]; tz?: string };
  if (withId) {
    const query = new URLSearchParams({
      n: String(n),
      ...(after === undefined ? {} : { after: String(after) }),
    });
    r = await api.request("GET", `${path(args[0] as string)}/preview?${query}`);
  } else {
    r = await api.request("POST", "/api/preview", {
      trigger,
      n,
      ...(after === undefined ? {} : { after }),
    });
  }
  if (flags.json) printJson(r);
  else {
    // A cron trigger's times are its zone's wall-clock times: shown there too, beside UTC.
    const tz = r.tz !== undefined && r.tz !== "UTC" ? r.tz : undefined;
    print(
      table(
        ["#", "fire time (UTC)", ...(tz ? [`fire time (${tz})`] : [])],
        r.times.map((t, i) => [String(i + 1), isoTime(t), ...(tz ? [zonedTime(t, tz)] : [])]),
      ),
    );
  }
  return 0;
}

/** UTC milliseconds as an ISO 8601 time in `tz`, with its offset: `2026-03-29T03:00:00.000+02:00`. */
export function zonedTime(ms: number, tz: string): string {
  // The offset the schedule itself uses (domain/dst.ts), so what is shown is what fires.
  const offset = utcOffsetMs(tz, ms);
  const minutes = Math.round(Math.abs(offset) / 60_000);
  const hh = String(Math.floor(minutes / 60)).padStart(2, "0");
  const mm = String(minutes % 60).padStart(2, "0");
  return `${new Date(ms + offset).toISOString().slice(0, -1)}${offset < 0 ? "-" : "+"}${hh}:${mm}`;
}
