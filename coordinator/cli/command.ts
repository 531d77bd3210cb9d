import { AxError } from "../../shared/errors.js";
import { AGENT_UPDATE_HANDLER } from "../../shared/update.js";
import type { CommandResult } from "../http/schemas.js";
import { unknownSubcommand } from "./args.js";
import {
  apiClient,
  CLIENT_FLAGS,
  durationFlag,
  idempotencyHeader,
  instantFlag,
  intFlag,
  jsonObjectFlag,
  parseCommand,
  print,
  printJson,
  tagsFlag,
} from "./client.js";
import { table } from "./table.js";

/**
 * The handler and params of `command send` and `rollout create`: `--handler` and `--params`, or
 * `--bundle SHA256`, which is the handler `agent.update` (a `--handler` must then be that one)
 * with `bundle` added to the params, for the coordinator to fill in from the published bundle.
 * Without either, `--handler NAME is required`.
 */
export function handlerFlags(
  c: string,
  flags: { bundle?: string | undefined; handler?: string | undefined; params?: string | undefined },
): { handler: string; params: Record<string, unknown> | undefined } {
  const params = jsonObjectFlag(c, "params", flags.params);
  const { bundle, handler } = flags;
  if (bundle === undefined) {
    if (!handler) throw new AxError("AX_CLI_USAGE", `${c}: --handler NAME is required`);
    return { handler, params };
  }
  if (handler !== undefined && handler !== AGENT_UPDATE_HANDLER) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${c}: --bundle installs a bundle with the handler ${AGENT_UPDATE_HANDLER}, not --handler ${handler}`,
    );
  }
  if (params?.bundle !== undefined) {
    throw new AxError("AX_CLI_USAGE", `${c}: give the bundle by --bundle or in --params, not both`);
  }
  return { handler: AGENT_UPDATE_HANDLER, params: { ...params, bundle } };
}

/**
 * `ax command send (--handler H | --bundle SHA256) (--agent ID [--queue] | --tag K=V …)
 * [--params JSON] [--at T] [--deadline T] [--timeout D] [--priority N] [--idempotency-key KEY]`. `--queue` creates a command for an agent the
 * coordinator does not know yet (it waits for that agent until its deadline); without it, such a
 * command is refused.
 */
export async function commandCommand(sub: string | undefined, argv: string[]): Promise<number> {
  if (sub !== "send") {
    throw unknownSubcommand("command", sub, ["send"]);
  }
  const c = "command send";
  const { flags } = parseCommand(c, argv, {
    ...CLIENT_FLAGS,
    handler: { type: "string" },
    bundle: { type: "string" },
    agent: { type: "string" },
    tag: { type: "string", multiple: true },
    params: { type: "string" },
    at: { type: "string" },
    deadline: { type: "string" },
    timeout: { type: "string" },
    priority: { type: "string" },
    queue: { type: "boolean" },
    "idempotency-key": { type: "string" },
  });
  const { handler, params } = handlerFlags(c, flags);
  const tags = flags.tag ?? [];
  if ((flags.agent === undefined) === (tags.length === 0)) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${c}: give --agent ID or --tag KEY=VALUE (one or more), not both`,
    );
  }
  if (flags.queue === true && flags.agent === undefined) {
    throw new AxError(
      "AX_CLI_USAGE",
      `${c}: --queue applies to --agent only (a --tag selector matches agents already known)`,
    );
  }
  const selector = tagsFlag(c, "tag", tags);
  const at = instantFlag(c, "at", flags.at);
  // A relative deadline counts from --at: `--at +10s --deadline +2s` is 12 s from now.
  const deadline = instantFlag(c, "deadline", flags.deadline, at ?? Date.now());
  const timeout = durationFlag(c, "timeout", flags.timeout);
  const priority = intFlag(c, "priority", flags.priority, { min: -1000, max: 1000 });
  const body = {
    handler,
    ...(flags.agent === undefined ? { selector: { tags: selector } } : { agentId: flags.agent }),
    ...(flags.queue === true ? { queue: true } : {}),
    ...(params === undefined ? {} : { params }),
    ...(at === undefined ? {} : { at }),
    ...(deadline === undefined ? {} : { deadline }),
    ...(timeout === undefined ? {} : { timeout }),
    ...(priority === undefined ? {} : { priority }),
  };
  const r = await apiClient(c, flags).request<CommandResult>(
    "POST",
    "/api/commands",
    body,
    idempotencyHeader(flags["idempotency-key"]),
  );
  if (flags.json) printJson(r);
  else
    print(
      table(
        ["agent", "execution"],
        r.targets.map((t) => [t.agentId, t.executionId]),
      ),
    );
  return 0;
}
