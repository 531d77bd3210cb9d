import { AxError } from "../../../shared/errors.js";
import type { AgentRecord, AlertRecord, ApiTokenRecord, IdentityRecord } from "../port.js";
import { insertAlerts } from "./alerts-counters.js";
import type { StoreContext } from "./context.js";
import { type AgentRow, type ApiTokenRow, toAgent, toApiToken } from "./rows.js";
import { PUT_AGENT_SQL } from "./statements.js";
import { wrap } from "./values.js";

/*
 * Who talks to the coordinator, as the SQLite store keeps it: agents (their last hello and
 * heartbeat, and how far their journal is acknowledged), enrolled identities, API tokens.
 */

/** Store.getAgent. */
export function getAgent(ctx: StoreContext, agentId: string): AgentRecord | undefined {
  const row = wrap("getAgent", () =>
    ctx.statements.prepare("SELECT record, acked_seq FROM agents WHERE agent_id = ?").get(agentId),
  ) as AgentRow | undefined;
  return row ? toAgent(row) : undefined;
}

/** Store.listAgents. */
export function listAgents(ctx: StoreContext): AgentRecord[] {
  const rows = wrap("listAgents", () =>
    ctx.statements.prepare("SELECT record, acked_seq FROM agents ORDER BY agent_id").all(),
  ) as AgentRow[];
  return rows.map(toAgent);
}

/** Store.putAgent. */
export function putAgent(
  ctx: StoreContext,
  agent: AgentRecord,
  alerts?: readonly AlertRecord[],
): void {
  if (alerts?.length) {
    wrap("putAgent", () =>
      ctx.writer.write(() => {
        ctx.statements.prepare(PUT_AGENT_SQL).run({ ...agent, record: JSON.stringify(agent) });
        insertAlerts(ctx, alerts);
      }),
    );
    return;
  }
  wrap("putAgent", () =>
    ctx.writer.writeOne(PUT_AGENT_SQL).run({ ...agent, record: JSON.stringify(agent) }),
  );
}

/** Store.putAgents: one write for the batch. */
export function putAgents(ctx: StoreContext, agents: readonly AgentRecord[]): void {
  if (agents.length === 0) return;
  wrap("putAgents", () =>
    ctx.writer.write(() => {
      const put = ctx.statements.prepare(PUT_AGENT_SQL);
      for (const agent of agents) put.run({ ...agent, record: JSON.stringify(agent) });
    }),
  );
}

/** Store.setAckedSeq: only ever forward, and only for the agent's current journal. */
export function setAckedSeq(
  ctx: StoreContext,
  agentId: string,
  journalId: string,
  seq: number,
): void {
  wrap("setAckedSeq", () =>
    ctx.writer
      .writeOne(
        "UPDATE agents SET acked_seq = ? WHERE agent_id = ? AND journal_id = ? AND acked_seq < ?",
      )
      .run(seq, agentId, journalId, seq),
  );
}

/** Store.putIdentity. */
export function putIdentity(ctx: StoreContext, identity: IdentityRecord): void {
  wrap("putIdentity", () =>
    ctx.writer
      .writeOne(
        `INSERT INTO identities (agent_id, record) VALUES (?, ?)
           ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record`,
      )
      .run(identity.agentId, JSON.stringify(identity)),
  );
}

/** Store.listIdentities. */
export function listIdentities(ctx: StoreContext): IdentityRecord[] {
  const rows = wrap("listIdentities", () =>
    ctx.statements.prepare("SELECT record FROM identities ORDER BY agent_id").pluck().all(),
  ) as string[];
  return rows.map((r) => JSON.parse(r) as IdentityRecord);
}

/** Store.putApiToken: AX_API_TOKEN_EXISTS when the name is taken. */
export function putApiToken(ctx: StoreContext, t: ApiTokenRecord): void {
  wrap("putApiToken", () => {
    try {
      ctx.writer
        .writeOne(
          `INSERT INTO api_tokens (name, digest, role, created_at, created_by, last_used_at)
             VALUES (?, ?, ?, ?, ?, ?)`,
        )
        .run(t.name, t.digest, t.role, t.createdAt, t.createdBy, t.lastUsedAt);
    } catch (err) {
      if ((err as { code?: string }).code?.startsWith("SQLITE_CONSTRAINT")) {
        throw new AxError("AX_API_TOKEN_EXISTS", `a token named "${t.name}" exists already`, {
          context: { name: t.name },
        });
      }
      throw err;
    }
  });
}

/** Store.touchApiToken. */
export function touchApiToken(ctx: StoreContext, name: string, at: number): void {
  wrap("touchApiToken", () =>
    ctx.writer.writeOne("UPDATE api_tokens SET last_used_at = ? WHERE name = ?").run(at, name),
  );
}

/** Store.listApiTokens. */
export function listApiTokens(ctx: StoreContext): ApiTokenRecord[] {
  const rows = wrap("listApiTokens", () =>
    ctx.statements.prepare("SELECT * FROM api_tokens ORDER BY name").all(),
  ) as ApiTokenRow[];
  return rows.map(toApiToken);
}

/** Store.deleteApiToken. */
export function deleteApiToken(ctx: StoreContext, name: string): boolean {
  return wrap(
    "deleteApiToken",
    () => ctx.writer.writeOne("DELETE FROM api_tokens WHERE name = ?").run(name).changes === 1,
  );
}
