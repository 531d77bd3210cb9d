import type { AgentList, AgentView } from "../http/schemas.js";
import { unknownSubcommand } from "./args.js";
import { apiClient, CLIENT_FLAGS, parseCommand, print, printJson } from "./client.js";
import { fields, isoTime, table } from "./table.js";

const tagsText = (tags: Record<string, string>) =>
  Object.entries(tags)
    .map(([k, v]) => `${k}=${v}`)
    .join(",") || "-";

/** `ax fleet list|show|enroll|revoke|identities`. */
export async function fleetCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "list": {
      const { flags } = parseCommand("fleet list", argv, CLIENT_FLAGS);
      const r = await apiClient("fleet list", flags).request<AgentList>("GET", "/api/agents");
      if (flags.json) printJson(r);
      else
        print(
          table(
            [
              "agent",
              "status",
              "live",
              "in flight",
              "profile",
              "bundle",
              "tags",
              "last seen (UTC)",
            ],
            r.items.map((a) => [
              a.agentId,
              a.status,
              a.live ? "yes" : "no",
              String(a.inFlight),
              a.profile,
              a.bundleVersion,
              tagsText(a.tags),
              isoTime(a.lastSeenAt),
            ]),
          ),
        );
      return 0;
    }
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
    case "enroll":
      return (await import("./enrol.js")).fleetEnroll(argv);
    case "revoke":
      return (await import("./enrol.js")).fleetRevoke(argv);
    case "identities":
      return (await import("./enrol.js")).fleetIdentities(argv);
    default:
      throw unknownSubcommand("fleet", sub, ["list", "show", "enroll", "revoke", "identities"]);
  }
}
