import { AxError } from "../../shared/errors.js";
import type { AgentList, AgentView } from "../http/schemas.js";
import type { AgentUpdateEntry, AgentUpdatePage } from "../operations/agent-update.js";
import type { AgentRecord } from "../store/port.js";
import { unknownSubcommand } from "./args.js";
import {
  apiClient,
  CLIENT_FLAGS,
  listPages,
  parseCommand,
  print,
  printJson,
  tagsFlag,
} from "./client.js";
import { fields, isoTime, table, tagsText } from "./table.js";

/** `ax fleet list|show|enroll|revoke|identities`. */
export async function fleetCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "list":
      return await fleetList(argv);
    case "show": {
      const { flags, args } = parseCommand("fleet show", argv, CLIENT_FLAGS, ["ID"]);
      const a = await apiClient("fleet show", flags).request<AgentView>(
        "GET",
        `/api/agents/${encodeURIComponent(args[0] as string)}`,
      );
      if (flags.json) printJson(a);
      else
        print(
          fields([
            ["agent", a.agentId],
            ["status", `${a.status}${a.live ? "" : " (not live)"}`],
            ["instance", a.instanceId],
            ["profile", a.profile],
            ["bundle", `${a.bundleVersion} ${a.bundleSha256}`],
            ["target", targetText(a.target)],
            ["handlers", a.handlers.join(", ") || "-"],
            ["tags", tagsText(a.tags)],
            ["capacity", `${a.concurrency} at once, queue ${a.queue}`],
            ["in flight", String(a.inFlight)],
            ["load", String(a.load)],
            ["journal", `${a.journalDepth} held, ${a.outboxDepth} in outbox`],
            [
              "clock offset",
              `${a.clockOffsetMs.toFixed(2)} ms ± ${a.clockUncertaintyMs.toFixed(2)}`,
            ],
            ["connected", isoTime(a.connectedAt)],
            ["last seen", isoTime(a.lastSeenAt)],
          ]),
        );
      return 0;
    }
    case "updates":
      return await fleetUpdates(argv);
    case "enroll":
      return (await import("./enrol.js")).fleetEnroll(argv);
    case "revoke":
      return (await import("./enrol.js")).fleetRevoke(argv);
    case "identities":
      return (await import("./enrol.js")).fleetIdentities(argv);
    default:
      throw unknownSubcommand("fleet", sub, [
        "list",
        "show",
        "updates",
        "enroll",
        "revoke",
        "identities",
      ]);
  }
}

/**
 * `ax fleet list [--status S] [--tag K=V[,K=V]] [--profile P] [--bundle-version V] [--handler H]
 * [--search TEXT] [--limit N] [--cursor C | --all]`: a page of the fleet (by id), or all of it.
 */
async function fleetList(argv: string[]): Promise<number> {
  const c = "fleet list";
  const { flags } = parseCommand(c, argv, {
    ...CLIENT_FLAGS,
    status: { type: "string" },
    tag: { type: "string" },
    profile: { type: "string" },
    "bundle-version": { type: "string" },
    handler: { type: "string" },
    search: { type: "string" },
    limit: { type: "string" },
    cursor: { type: "string" },
    all: { type: "boolean" },
  });
  const query = new URLSearchParams();
  if (flags.status !== undefined) {
    if (flags.status !== "online" && flags.status !== "offline") {
      throw new AxError(
        "AX_CLI_USAGE",
        `${c}: --status must be online or offline, got "${flags.status}"`,
      );
    }
    query.set("status", flags.status);
  }
  if (flags.tag !== undefined) {
    // K=V[,K=V]: each pair checked here, a usage error as every other command's --tag.
    tagsFlag(c, "tag", flags.tag.split(","));
    query.set("tag", flags.tag);
  }
  if (flags.profile !== undefined) query.set("profile", flags.profile);
  if (flags["bundle-version"] !== undefined) query.set("version", flags["bundle-version"]);
  if (flags.handler !== undefined) query.set("handler", flags.handler);
  if (flags.search !== undefined) query.set("q", flags.search);
  const { items, last: page } = await listPages<AgentView, AgentList>(
    c,
    flags,
    "/api/agents",
    query,
    1_000,
  );
  if (flags.json) printJson({ ...page, items, nextCursor: page.nextCursor });
  else {
    print(
      table(
        [
          "agent",
          "status",
          "live",
          "in flight",
          "profile",
          "bundle",
          "target",
          "tags",
          "last seen (UTC)",
        ],
        items.map((a) => [
          a.agentId,
          a.status,
          a.live ? "yes" : "no",
          String(a.inFlight),
          a.profile,
          a.bundleVersion,
          targetText(a.target),
          tagsText(a.tags),
          isoTime(a.lastSeenAt),
        ]),
      ),
    );
    if (page.nextCursor !== null) {
      process.stderr.write(
        `more: ${page.total} agents match; the next page: --cursor ${page.nextCursor}, or --all\n`,
      );
    }
  }
  return 0;
}

/**
 * An agent's native target in one word, `linux-arm64-glibc-abi115`; `-` when it reports none (an
 * agent from before hello.target, offered no update).
 */
function targetText(t: AgentRecord["target"]): string {
  if (t === undefined) return "-";
  return `${t.platform}-${t.arch}-${t.libc}${t.nodeAbi === null ? "" : `-abi${t.nodeAbi}`}`;
}

/**
 * `ax fleet updates ID [--limit N] [--cursor C | --all]`: the agent's agent.update executions,
 * newest first, from which bundle version to which.
 */
async function fleetUpdates(argv: string[]): Promise<number> {
  const c = "fleet updates";
  const { flags, args } = parseCommand(
    c,
    argv,
    {
      ...CLIENT_FLAGS,
      limit: { type: "string" },
      cursor: { type: "string" },
      all: { type: "boolean" },
    },
    ["ID"],
  );
  const { items, last: page } = await listPages<AgentUpdateEntry, AgentUpdatePage>(
    c,
    flags,
    `/api/agents/${encodeURIComponent(args[0] as string)}/updates`,
    new URLSearchParams(),
    100,
  );
  if (flags.json) printJson({ items, nextCursor: page.nextCursor });
  else {
    print(
      table(
        ["created (UTC)", "execution", "from", "to", "state", "rollout", "message"],
        items.map((u) => [
          isoTime(u.createdAt),
          u.executionId,
          u.fromVersion ?? "-",
          u.version ?? "-",
          u.state,
          u.rolloutId ?? "-",
          u.message ?? "",
        ]),
      ),
    );
    if (page.nextCursor !== null) {
      process.stderr.write(`more: the next page: --cursor ${page.nextCursor}, or --all\n`);
    }
  }
  return 0;
}
