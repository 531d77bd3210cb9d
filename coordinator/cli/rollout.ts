import type { z } from "zod";
import { AxError } from "../../shared/errors.js";
import { parseDuration } from "../domain/duration.js";
import {
  ABORT_ON_STATES,
  ROLLOUT_STATES,
  type RolloutRecord,
  type RolloutSpecInput,
} from "../domain/rollout.js";
import type { rolloutDetailSchema, rolloutSchema } from "../http/schemas.js";
import { unknownSubcommand } from "./args.js";
import {
  apiClient,
  CLIENT_FLAGS,
  durationFlag,
  idempotencyHeader,
  instantFlag,
  intFlag,
  listPages,
  parseCommand,
  print,
  printJson,
  tagsFlag,
} from "./client.js";
import { handlerFlags } from "./command.js";
import { durationText, fields, isoTime, table, tagsText } from "./table.js";

/** Executions by state, as the API counts them. */
type ByState = Record<string, number>;

/**
 * The API's rollout (http/schemas.ts), with the spec's fields typed as the domain types them (the
 * response schema leaves them open).
 */
export type RolloutView = Omit<
  z.output<typeof rolloutSchema>,
  "selector" | "command" | "rate" | "abort"
> &
  Pick<RolloutRecord, "selector" | "command" | "rate" | "abort">;
type RolloutPage = { items: RolloutView[]; nextCursor: string | null };
type RolloutDetail = Omit<z.output<typeof rolloutDetailSchema>, "rollout"> & {
  rollout: RolloutView;
};

/** The end states an abort criterion may count as failures (the API's own list). */
const FAILURE_STATES: readonly string[] = ABORT_ON_STATES;

const NUMBER = /^\d+(?:\.\d+)?$/;

const path = (id: string) => `/api/rollouts/${encodeURIComponent(id)}`;

const usage = (command: string, message: string) =>
  new AxError("AX_CLI_USAGE", `${command}: ${message}`);

/**
 * `--rate N/min` (a fixed rate) or `--rate exp:BASE,FACTOR,STEP[,MAX]` (BASE per minute, times
 * FACTOR for every STEP succeeded, at most MAX per minute), as the spec's `rate`.
 */
export function rateFlag(command: string, value: string | undefined): RolloutSpecInput["rate"] {
  if (value === undefined) return undefined;
  const bad = () =>
    usage(
      command,
      `--rate must be N/min (such as 60/min) or exp:BASE,FACTOR,STEP[,MAX] (such as exp:10,2,10,1000), got "${value}"`,
    );
  const v = value.trim();
  const fixed = /^(\d+(?:\.\d+)?)\/min$/.exec(v);
  if (fixed) {
    const perMinute = Number(fixed[1]);
    if (perMinute <= 0) throw bad();
    return { perMinute };
  }
  if (!v.startsWith("exp:")) throw bad();
  const parts = v.slice(4).split(",");
  if (parts.length < 3 || parts.length > 4 || !parts.every((p) => NUMBER.test(p.trim()))) {
    throw bad();
  }
  const [base, factor, step, max] = parts.map(Number) as [number, number, number, number?];
  if (
    base <= 0 ||
    factor < 1 ||
    !Number.isInteger(step) ||
    step < 1 ||
    (max !== undefined && max <= 0)
  ) {
    throw bad();
  }
  return {
    exponential: {
      basePerMinute: base,
      factor,
      stepSuccesses: step,
      ...(max === undefined ? {} : { maxPerMinute: max }),
    },
  };
}

/**
 * `--waves 1%:10m,10%:10m,100%`: cumulative percents of the matching agents, each with the soak
 * time after it. Their order and the last one's 100 % are the API's to check (the one place the
 * rule lives); this reads the syntax.
 */
export function wavesFlag(command: string, value: string | undefined): RolloutSpecInput["waves"] {
  if (value === undefined) return undefined;
  return value.split(",").map((item) => {
    const m = /^(\d+(?:\.\d+)?)%?(?::(.*))?$/.exec(item.trim());
    if (!m) {
      throw usage(
        command,
        `--waves must be PERCENT%[:SOAK],… (such as 1%:10m,10%:10m,100%), got "${item}" in "${value}"`,
      );
    }
    const percent = Number(m[1]);
    if (!(percent > 0 && percent <= 100)) {
      throw usage(
        command,
        `--waves: each wave is a percent above 0, at most 100, got "${item}" in "${value}"`,
      );
    }
    if (m[2] === undefined) return { percent };
    const soak = parseDuration(m[2]);
    if (soak === undefined) {
      throw usage(
        command,
        `--waves: the soak of "${item}" must be a duration such as 30s, 10m, 1h, got "${m[2]}"`,
      );
    }
    return { percent, soak };
  });
}

/** `--abort-threshold 10` or `10%`: a percent above 0, at most 100. */
function percentFlag(command: string, name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const m = /^(\d+(?:\.\d+)?)%?$/.exec(value.trim());
  const n = m ? Number(m[1]) : Number.NaN;
  if (!(n > 0 && n <= 100)) {
    throw usage(
      command,
      `--${name} must be a percent above 0, at most 100 (such as 10 or 10%), got "${value}"`,
    );
  }
  return n;
}

type FailureStates = NonNullable<RolloutSpecInput["abort"]>["on"];

/** `--abort-on FAILED,TIMED_OUT`: the end states that count as failures. */
function failureStatesFlag(command: string, value: string | undefined): FailureStates {
  if (value === undefined) return undefined;
  const states = value.split(",").map((s) => s.trim().toUpperCase());
  const bad = states.find((s) => !FAILURE_STATES.includes(s));
  if (bad !== undefined) {
    throw usage(
      command,
      `--abort-on "${bad}" is not an end state that can count as a failure; give one or more of ${FAILURE_STATES.join(", ")}`,
    );
  }
  return states as FailureStates;
}

/** `ax rollout create|list|show|pause|resume|abort`. */
export async function rolloutCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "create":
      return rolloutCreate(argv);
    case "list":
      return rolloutList(argv);
    case "show":
      return rolloutShow(argv);
    case "pause":
    case "abort":
    case "resume":
      return rolloutAction(sub, argv);
    default:
      throw unknownSubcommand("rollout", sub, [
        "create",
        "list",
        "show",
        "pause",
        "resume",
        "abort",
      ]);
  }
}

/**
 * `ax rollout create --handler H [selector flags] [command, rate, waves, abort flags]`: the flags
 * become the spec of POST /api/rollouts. The syntax of each flag is checked here (exit 2); what the
 * values must satisfy together is the API's to check, in one place.
 */
async function rolloutCreate(argv: string[]): Promise<number> {
  const c = "rollout create";
  const { flags } = parseCommand(c, argv, {
    ...CLIENT_FLAGS,
    handler: { type: "string" },
    bundle: { type: "string" },
    params: { type: "string" },
    tag: { type: "string", multiple: true },
    agent: { type: "string", multiple: true },
    profile: { type: "string" },
    "agent-version": { type: "string" },
    at: { type: "string" },
    "start-within": { type: "string" },
    timeout: { type: "string" },
    rate: { type: "string" },
    waves: { type: "string" },
    "abort-threshold": { type: "string" },
    "abort-min": { type: "string" },
    "abort-on": { type: "string" },
    "ends-at": { type: "string" },
    paused: { type: "boolean" },
    id: { type: "string" },
    description: { type: "string" },
    "idempotency-key": { type: "string" },
  });
  const { handler, params } = handlerFlags(c, flags);
  const tags = tagsFlag(c, "tag", flags.tag);
  const selector: RolloutSpecInput["selector"] = {
    ...(Object.keys(tags).length === 0 ? {} : { tags }),
    ...(flags.agent === undefined ? {} : { agentIds: flags.agent }),
    ...(flags.profile === undefined ? {} : { profile: flags.profile }),
    ...(flags["agent-version"] === undefined ? {} : { agentVersion: flags["agent-version"] }),
  };
  if (Object.keys(selector).length === 0) {
    throw usage(
      c,
      "give the agents it is for: --tag KEY=VALUE, --agent ID, --profile P or --agent-version V (an agent must match every one given)",
    );
  }
  const at = instantFlag(c, "at", flags.at);
  const startWithin = durationFlag(c, "start-within", flags["start-within"]);
  const timeout = durationFlag(c, "timeout", flags.timeout);
  const rate = rateFlag(c, flags.rate);
  const waves = wavesFlag(c, flags.waves);
  const thresholdPercent = percentFlag(c, "abort-threshold", flags["abort-threshold"]);
  const minExecuted = intFlag(c, "abort-min", flags["abort-min"], { min: 1, max: 1_000_000 });
  const on = failureStatesFlag(c, flags["abort-on"]);
  if (thresholdPercent === undefined && (minExecuted !== undefined || on !== undefined)) {
    throw usage(c, "--abort-min and --abort-on refine --abort-threshold PCT: give it too");
  }
  const endsAt = instantFlag(c, "ends-at", flags["ends-at"]);
  const spec: RolloutSpecInput = {
    ...(flags.id === undefined ? {} : { id: flags.id }),
    ...(flags.description === undefined ? {} : { description: flags.description }),
    selector,
    command: {
      handler,
      ...(params === undefined ? {} : { params }),
      ...(at === undefined ? {} : { at }),
      ...(startWithin === undefined ? {} : { startWithin }),
      ...(timeout === undefined ? {} : { timeout }),
    },
    ...(rate === undefined ? {} : { rate }),
    ...(waves === undefined ? {} : { waves }),
    ...(thresholdPercent === undefined
      ? {}
      : {
          abort: {
            thresholdPercent,
            ...(minExecuted === undefined ? {} : { minExecuted }),
            ...(on === undefined ? {} : { on }),
          },
        }),
    ...(endsAt === undefined ? {} : { endsAt }),
    ...(flags.paused ? { start: false } : {}),
  };
  const r = await apiClient(c, flags).request<RolloutView>(
    "POST",
    "/api/rollouts",
    spec,
    idempotencyHeader(flags["idempotency-key"]),
  );
  if (flags.json) printJson(r);
  else if (r.state === "CREATED") {
    print(`rollout ${r.id}: CREATED; start it with: ax rollout resume ${r.id}`);
  } else print(`rollout ${r.id}: ${r.state}; ${r.progress.matching} agents match now`);
  return 0;
}

/** `ax rollout list [--state S] [--limit N] [--cursor C | --all]`: newest first. */
async function rolloutList(argv: string[]): Promise<number> {
  const c = "rollout list";
  const { flags } = parseCommand(c, argv, {
    ...CLIENT_FLAGS,
    state: { type: "string" },
    limit: { type: "string" },
    cursor: { type: "string" },
    all: { type: "boolean" },
  });
  const query = new URLSearchParams();
  if (flags.state !== undefined) {
    const state = flags.state.trim().toUpperCase();
    if (!(ROLLOUT_STATES as readonly string[]).includes(state)) {
      throw usage(
        c,
        `--state "${flags.state}" is not a rollout state; states are ${ROLLOUT_STATES.join(", ")}`,
      );
    }
    query.set("state", state);
  }
  const { items, last: page } = await listPages<RolloutView, RolloutPage>(
    c,
    flags,
    "/api/rollouts",
    query,
    500,
  );
  if (flags.json) printJson({ items, nextCursor: page.nextCursor });
  else {
    print(
      table(
        ["rollout", "state", "wave", "reached/matching", "succeeded", "failed", "created (UTC)"],
        items.map((r) => [
          r.id,
          r.state,
          waveText(r),
          `${r.progress.reached}/${r.progress.matching}`,
          String(r.progress.succeeded),
          String(r.progress.failed),
          isoTime(r.createdAt),
        ]),
      ),
    );
    if (page.nextCursor !== null) process.stderr.write(`more: --cursor ${page.nextCursor}\n`);
  }
  return 0;
}

/** `ax rollout show ID`: the rollout, its progress by state and by wave, and its timeline. */
async function rolloutShow(argv: string[]): Promise<number> {
  const { flags, args } = parseCommand("rollout show", argv, CLIENT_FLAGS, ["ID"]);
  const d = await apiClient("rollout show", flags).request<RolloutDetail>(
    "GET",
    path(args[0] as string),
  );
  if (flags.json) {
    printJson(d);
    return 0;
  }
  const r = d.rollout;
  const p = r.progress;
  const cmd = r.command;
  print(
    fields([
      ["rollout", r.id],
      ["description", r.description ?? "-"],
      ["state", r.state],
      ["reason", r.reason ?? "-"],
      ["agents", selectorText(r.selector)],
      ["handler", cmd.handler],
      ["params", JSON.stringify(cmd.params ?? {})],
      ["start at", cmd.at === undefined ? "as each agent is reached" : isoTime(cmd.at)],
      ["start within", durationText(cmd.startWithin)],
      ["timeout", durationText(cmd.timeout)],
      ["rate", rateText(r.rate)],
      [
        "waves",
        r.waves
          .map((w) => (w.soak > 0 ? `${w.percent}%:${durationText(w.soak)}` : `${w.percent}%`))
          .join(","),
      ],
      ["abort", abortText(r.abort)],
      ["ends at", isoTime(r.endsAt)],
      ["wave", waveText(r)],
      ["soak until", isoTime(r.soakUntil)],
      ["matching", String(p.matching)],
      ["reached", String(p.reached)],
      ["succeeded", String(p.succeeded)],
      ["failed", String(p.failed)],
      ["open", String(p.open)],
      ["by state", byStateText(p.byState)],
      ["created", `${isoTime(r.createdAt)} by ${r.createdBy}`],
      ["started", isoTime(r.startedAt)],
      ["finished", `${isoTime(r.finishedAt)}${r.settled ? " (settled: no execution open)" : ""}`],
      ["updated", isoTime(r.updatedAt)],
    ]),
  );
  print("");
  print(
    table(
      ["wave", "percent", "soak", "cap", "reached", "executions"],
      p.waves.map((w, i) => [
        String(i + 1),
        `${w.percent}%`,
        w.soak > 0 ? durationText(w.soak) : "-",
        String(w.cap),
        String(w.reached),
        byStateText(w.byState),
      ]),
    ),
  );
  print("");
  print(
    table(
      ["at (UTC)", "event", "from", "to", "by", "reason"],
      d.timeline.map((t) => [
        isoTime(t.at),
        t.event,
        t.fromState ?? "-",
        t.toState,
        t.actor ?? "-",
        t.reason ?? "",
      ]),
    ),
  );
  return 0;
}

/** `ax rollout pause|abort ID [--reason TEXT]`, `ax rollout resume ID`. */
async function rolloutAction(sub: "pause" | "resume" | "abort", argv: string[]): Promise<number> {
  const c = `rollout ${sub}`;
  // The API takes a reason for a pause or an abort; a resume has none.
  const { flags, args } =
    sub === "resume"
      ? parseCommand(c, argv, CLIENT_FLAGS, ["ID"])
      : parseCommand(c, argv, { ...CLIENT_FLAGS, reason: { type: "string" } }, ["ID"]);
  const reason = "reason" in flags ? flags.reason : undefined;
  const r = await apiClient(c, flags).request<RolloutView>(
    "POST",
    `${path(args[0] as string)}/${sub}`,
    reason === undefined ? undefined : { reason },
  );
  if (flags.json) printJson(r);
  // The reason is the last pause's or abort's: news after a pause or an abort, stale after a resume.
  else if (sub === "resume" || r.reason === null) print(`rollout ${r.id}: ${r.state}`);
  else print(`rollout ${r.id}: ${r.state} (${r.reason})`);
  return 0;
}

/** The current wave, as `2/3` (the last one once every wave is done). */
function waveText(r: RolloutView): string {
  return `${Math.min(r.wave + 1, r.waves.length)}/${r.waves.length}`;
}

function selectorText(s: RolloutView["selector"]): string {
  return (
    [
      s.tags === undefined ? undefined : `tags ${tagsText(s.tags)}`,
      s.agentIds === undefined ? undefined : `agents ${s.agentIds.join(",")}`,
      s.profile === undefined ? undefined : `profile ${s.profile}`,
      s.agentVersion === undefined ? undefined : `version ${s.agentVersion}`,
    ]
      .filter((x) => x !== undefined)
      .join("; ") || "-"
  );
}

function rateText(rate: RolloutView["rate"]): string {
  if ("perMinute" in rate) return `${rate.perMinute}/min`;
  const e = rate.exponential;
  const max = e.maxPerMinute === undefined ? "" : `, at most ${e.maxPerMinute}/min`;
  return `${e.basePerMinute}/min, ×${e.factor} for every ${e.stepSuccesses} succeeded${max}`;
}

function abortText(abort: RolloutView["abort"]): string {
  if (abort === null || abort === undefined) return "-";
  return `at ${abort.thresholdPercent}% failed of at least ${abort.minExecuted} ended (failures: ${abort.on.join(", ")})`;
}

function byStateText(byState: ByState): string {
  return (
    Object.entries(byState)
      .filter(([, n]) => n !== undefined && n > 0)
      .map(([s, n]) => `${s} ${n}`)
      .join(", ") || "-"
  );
}
