import { AxError } from "../../shared/errors.js";
import { EXEC_STATES } from "../../shared/fsm.js";
import type {
  ExecutionDetail,
  ExecutionPageView,
  ExecutionView,
  RetryResult,
} from "../http/schemas.js";
import { unknownSubcommand } from "./args.js";
import {
  apiClient,
  CLIENT_FLAGS,
  idempotencyHeader,
  instantFlag,
  listPages,
  parseCommand,
  print,
  printJson,
} from "./client.js";
import { fields, isoTime, table } from "./table.js";

const path = (id: string) => `/api/executions/${encodeURIComponent(id)}`;

const EXEC_HEADER = ["execution", "job", "state", "agent", "attempt", "fire at (UTC)", "late"];

const execRow = (e: ExecutionView) => [
  e.id,
  e.jobId ?? `command→${e.targetAgentId ?? "?"}`,
  e.state,
  e.agentId ?? "-",
  `${e.attempt}/${e.maxAttempts}`,
  isoTime(e.fireAt),
  e.lateMs === null ? "-" : `${e.lateMs.toFixed(1)} ms`,
];

/** `ax exec list|show|cancel|retry`. */
export async function execCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "list":
      return execList(argv);
    case "show": {
      const { flags, args } = parseCommand("exec show", argv, CLIENT_FLAGS, ["ID"]);
      const r = await apiClient("exec show", flags).request<ExecutionDetail>(
        "GET",
        path(args[0] as string),
      );
      if (flags.json) {
        printJson(r);
        return 0;
      }
      const e = r.execution;
      print(
        fields([
          ["execution", e.id],
          ["job", e.jobId === null ? "-" : `${e.jobId} (version ${e.jobVersion})`],
          ["kind", e.kind],
          ["handler", e.handler],
          ["state", e.state],
          ["agent", e.agentId ?? (e.targetAgentId ? `(for ${e.targetAgentId})` : "-")],
          ["attempt", `${e.attempt} of ${e.maxAttempts}, round ${e.round}`],
          ["fire at", isoTime(e.fireAt)],
          ["deadline", isoTime(e.deadline)],
          ["started", isoTime(e.startedAt)],
          ["finished", isoTime(e.finishedAt)],
          ["late", e.lateMs === null ? "-" : `${e.lateMs.toFixed(1)} ms`],
          ["message", e.message ?? "-"],
          ["result", e.result === null ? "-" : JSON.stringify(e.result)],
        ]),
      );
      print("");
      print(
        table(
          ["at (UTC)", "event", "from", "to", "round", "agent", "reason"],
          r.timeline.map((t) => [
            isoTime(t.at),
            t.event,
            t.fromState ?? "-",
            t.toState,
            String(t.round),
            t.agentId ?? "-",
            t.reason ?? "",
          ]),
        ),
      );
      return 0;
    }
    case "cancel": {
      const { flags, args } = parseCommand("exec cancel", argv, CLIENT_FLAGS, ["ID"]);
      const e = await apiClient("exec cancel", flags).request<ExecutionView>(
        "POST",
        `${path(args[0] as string)}/cancel`,
      );
      if (flags.json) printJson(e);
      else
        print(
          e.state === "CANCELED"
            ? `execution ${e.id}: CANCELED`
            : `execution ${e.id}: cancel sent to ${e.agentId ?? "its agent"} (${e.state} until it answers)`,
        );
      return 0;
    }
    case "retry": {
      const { flags, args } = parseCommand(
        "exec retry",
        argv,
        { ...CLIENT_FLAGS, "idempotency-key": { type: "string" } },
        ["ID"],
      );
      const r = await apiClient("exec retry", flags).request<RetryResult>(
        "POST",
        `${path(args[0] as string)}/retry`,
        undefined,
        idempotencyHeader(flags["idempotency-key"]),
      );
      if (flags.json) printJson(r);
      else print(`execution ${r.retryOf}: retried as ${r.executionId}`);
      return 0;
    }
    default:
      throw unknownSubcommand("exec", sub, ["list", "show", "cancel", "retry"]);
  }
}

/** `ax exec list [filters] [--limit N] [--cursor C | --all]`. */
async function execList(argv: string[]): Promise<number> {
  const c = "exec list";
  const { flags } = parseCommand(c, argv, {
    ...CLIENT_FLAGS,
    job: { type: "string" },
    state: { type: "string" },
    agent: { type: "string" },
    kind: { type: "string" },
    from: { type: "string" },
    to: { type: "string" },
    limit: { type: "string" },
    cursor: { type: "string" },
    all: { type: "boolean" },
  });
  const query = new URLSearchParams();
  if (flags.job !== undefined) query.set("job", flags.job);
  if (flags.agent !== undefined) query.set("agent", flags.agent);
  if (flags.state !== undefined) {
    const states = flags.state.split(",").map((s) => s.trim().toUpperCase());
    const bad = states.find((s) => !(EXEC_STATES as readonly string[]).includes(s));
    if (bad !== undefined) {
      throw new AxError(
        "AX_CLI_USAGE",
        `${c}: --state "${bad}" is not a state; states are ${EXEC_STATES.join(", ")}`,
      );
    }
    query.set("state", states.join(","));
  }
  if (flags.kind !== undefined) {
    if (flags.kind !== "job" && flags.kind !== "command") {
      throw new AxError("AX_CLI_USAGE", `${c}: --kind must be job or command, got "${flags.kind}"`);
    }
    query.set("kind", flags.kind);
  }
  const from = instantFlag(c, "from", flags.from);
  const to = instantFlag(c, "to", flags.to);
  if (from !== undefined) query.set("from", String(from));
  if (to !== undefined) query.set("to", String(to));
  const { items, last: page } = await listPages<ExecutionView, ExecutionPageView>(
    c,
    flags,
    "/api/executions",
    query,
    500,
  );
  if (flags.json) printJson({ items, nextCursor: page.nextCursor });
  else {
    print(table(EXEC_HEADER, items.map(execRow)));
    if (page.nextCursor !== null) process.stderr.write(`more: --cursor ${page.nextCursor}\n`);
  }
  return 0;
}
