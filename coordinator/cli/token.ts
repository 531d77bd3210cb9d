import { AxError } from "../../shared/errors.js";
import { API_ROLES } from "../config.js";
import type { TokenView } from "../http/schemas.js";
import { unknownSubcommand } from "./args.js";
import { apiClient, CLIENT_FLAGS, parseCommand, print, printJson } from "./client.js";
import { isoTime, table } from "./table.js";

/** `ax token create NAME --role R | list | revoke NAME` (an admin token's business). */
export async function tokenCommand(sub: string | undefined, argv: string[]): Promise<number> {
  switch (sub) {
    case "create": {
      const { flags, args } = parseCommand(
        "token create",
        argv,
        { ...CLIENT_FLAGS, role: { type: "string" } },
        ["NAME"],
      );
      const role = flags.role;
      if (role === undefined || !(API_ROLES as readonly string[]).includes(role)) {
        throw new AxError(
          "AX_CLI_USAGE",
          `token create: --role must be one of ${API_ROLES.join(", ")}${role === undefined ? "" : `, got "${role}"`}`,
        );
      }
      const r = await apiClient("token create", flags).request<TokenView & { token: string }>(
        "POST",
        "/api/tokens",
        { name: args[0], role },
      );
      if (flags.json) printJson(r);
      else {
        print(r.token);
        process.stderr.write(
          `ax: token "${r.name}" (${r.role}) created; it is shown only this once\n`,
        );
      }
      return 0;
    }
    case "list": {
      const { flags } = parseCommand("token list", argv, CLIENT_FLAGS);
      const r = await apiClient("token list", flags).request<{ items: TokenView[] }>(
        "GET",
        "/api/tokens",
      );
      if (flags.json) printJson(r);
      else
        print(
          table(
            ["name", "role", "created (UTC)", "by", "last used (UTC)"],
            r.items.map((t) => [
              t.name,
              t.role,
              isoTime(t.createdAt),
              t.createdBy,
              t.lastUsedAt === null ? "-" : isoTime(t.lastUsedAt),
            ]),
          ),
        );
      return 0;
    }
    case "revoke": {
      const { flags, args } = parseCommand("token revoke", argv, CLIENT_FLAGS, ["NAME"]);
      await apiClient("token revoke", flags).request(
        "DELETE",
        `/api/tokens/${encodeURIComponent(args[0] as string)}`,
      );
      if (flags.json) printJson({ revoked: args[0] });
      else print(`token "${args[0]}" revoked`);
      return 0;
    }
    default:
      throw unknownSubcommand("token", sub, ["create", "list", "revoke"]);
  }
}
