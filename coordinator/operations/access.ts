import { AxError } from "../../shared/errors.js";
import type { IdentityFile } from "../../shared/identity.js";
import type { ApiRole } from "../config.js";
import type { ApiTokens, ApiTokenView } from "../security/api-tokens.js";
import type { Identities } from "../security/identities.js";
import type { IdentityRecord } from "../store/port.js";

/** API tokens and agent enrolments: the admin's operations. */
export class AccessOperations {
  constructor(
    private readonly tokens: ApiTokens,
    private readonly identities: Identities,
    /**
     * The names an agent may not take: the coordinator's own broker user name and client id
     * (an agent by either would share the coordinator's login or session).
     */
    private readonly ownNames: () => (string | undefined)[],
  ) {}

  /** Makes an API token; returns it (the only time it is shown) with its record. */
  async createToken(
    name: string,
    role: ApiRole,
    actor: string,
  ): Promise<{ token: string } & ApiTokenView> {
    const { token, record } = await this.tokens.create(name, role, actor);
    return { token, ...record };
  }

  /** The tokens made through the API, by name: never a token or its digest. */
  listTokens(): ApiTokenView[] {
    return this.tokens.list();
  }

  /** Revokes an API token; AX_API_TOKEN_NOT_FOUND when there is none by that name. */
  async revokeToken(name: string): Promise<void> {
    await this.tokens.revoke(name);
  }

  /**
   * Enrols an agent (docs/security.md), refusing the coordinator's own broker user name and
   * client id, whether or not messages are authenticated now.
   */
  async enrol(
    agentId: string,
    options: { tags?: Record<string, string>; rotate?: boolean; actor: string },
  ): Promise<{ identity: IdentityRecord; file: IdentityFile }> {
    if (this.ownNames().includes(agentId)) {
      throw new AxError(
        "AX_API_INVALID_REQUEST",
        `agent id "${agentId}" is the coordinator's own MQTT user name or client id`,
        {
          context: {
            issues: [
              {
                path: ["body", "agentId"],
                message: "is the coordinator's MQTT user name or client id",
              },
            ],
          },
        },
      );
    }
    return this.identities.enroll(agentId, options);
  }

  /** Enrolled and revoked agents, by id (never a key). */
  listIdentities(): IdentityRecord[] {
    return this.identities.list();
  }

  /** Revokes an agent's enrolment; AX_AGENT_NOT_FOUND when it was never enrolled. */
  async revokeAgent(agentId: string, actor: string): Promise<IdentityRecord> {
    return this.identities.revoke(agentId, actor);
  }
}
