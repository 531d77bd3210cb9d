import { AxError } from "../../../shared/errors.js";
import type {
  AgentRecord,
  AlertRecord,
  ApiTokenRecord,
  IdempotencyRecord,
  IdentityRecord,
} from "../port.js";
import { alertColumns, capUtf8 } from "../stored-text.js";
import { sqlLimit } from "./executions.js";
import {
  type AgentRow,
  type AlertRow,
  type ApiTokenRow,
  toAgent,
  toAlert,
  toApiToken,
} from "./rows.js";
import { type Queryable, run } from "./tx.js";

/* Agents, identities, counters, alerts and API tokens: one statement each. */

/**
 * Inserts or replaces agents' records, given as arrays of their columns; the acked seq of the same
 * journal never goes down (Store.putAgent).
 */
const PUT_AGENTS_SQL = `INSERT INTO agents (agent_id, record, instance_id, journal_id, acked_seq, status)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])
    ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record,
      instance_id = excluded.instance_id, journal_id = excluded.journal_id,
      acked_seq = CASE WHEN agents.journal_id = excluded.journal_id
        THEN GREATEST(agents.acked_seq, excluded.acked_seq) ELSE excluded.acked_seq END,
      status = excluded.status`;

/** Writes agents' records, all in one statement (Store.putAgent, Store.putAgents). */
export async function putAgents(q: Queryable, agents: readonly AgentRecord[]): Promise<void> {
  // One INSERT … ON CONFLICT cannot change a row twice: of an agent listed twice, the last
  // record stands, as when they are written one after the other.
  const last = [...new Map(agents.map((a) => [a.agentId, a])).values()];
  await run(q, PUT_AGENTS_SQL, [
    last.map((a) => a.agentId),
    last.map((a) => JSON.stringify(a)),
    last.map((a) => a.instanceId),
    last.map((a) => a.journalId),
    last.map((a) => a.ackedSeq),
    last.map((a) => a.status),
  ]);
}

export async function getAgent(q: Queryable, agentId: string): Promise<AgentRecord | undefined> {
  const r = await run<AgentRow>(q, "SELECT record, acked_seq FROM agents WHERE agent_id = $1", [
    agentId,
  ]);
  const row = r.rows[0];
  return row ? toAgent(row) : undefined;
}

export async function listAgents(q: Queryable): Promise<AgentRecord[]> {
  const r = await run<AgentRow>(q, "SELECT record, acked_seq FROM agents ORDER BY agent_id");
  return r.rows.map(toAgent);
}

/** Raises the agent's acked seq, for its current journal only. */
export async function setAckedSeq(
  q: Queryable,
  agentId: string,
  journalId: string,
  seq: number,
): Promise<void> {
  await run(
    q,
    "UPDATE agents SET acked_seq = $1 WHERE agent_id = $2 AND journal_id = $3 AND acked_seq < $1",
    [seq, agentId, journalId],
  );
}

export async function putIdentity(q: Queryable, identity: IdentityRecord): Promise<void> {
  await run(
    q,
    `INSERT INTO identities (agent_id, record) VALUES ($1, $2)
       ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record`,
    [identity.agentId, JSON.stringify(identity)],
  );
}

export async function listIdentities(q: Queryable): Promise<IdentityRecord[]> {
  const r = await run<{ record: string }>(q, "SELECT record FROM identities ORDER BY agent_id");
  return r.rows.map((row) => JSON.parse(row.record) as IdentityRecord);
}

/** The record of a request made with an Idempotency-Key, inside the caller's transaction. */
export async function putIdempotency(q: Queryable, r: IdempotencyRecord): Promise<void> {
  await run(
    q,
    "INSERT INTO idempotency (scope, request, result, created_at) VALUES ($1, $2, $3, $4)",
    [r.scope, r.request, r.result, r.at],
  );
}

export async function bumpCounter(q: Queryable, name: string, by: number): Promise<void> {
  await run(
    q,
    `INSERT INTO counters (name, value) VALUES ($1, $2)
       ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value`,
    [name, by],
  );
}

export async function counters(q: Queryable): Promise<Record<string, number>> {
  const r = await run<{ name: string; value: number }>(q, "SELECT name, value FROM counters");
  return Object.fromEntries(r.rows.map((row) => [row.name, row.value]));
}

export async function putAlert(q: Queryable, a: AlertRecord, maxTextBytes: number): Promise<void> {
  await run(
    q,
    `INSERT INTO alerts (id, kind, url, payload, status, attempts, last_error, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    alertColumns(a, maxTextBytes),
  );
}

export async function updateAlert(
  q: Queryable,
  id: string,
  p: Pick<AlertRecord, "status" | "attempts" | "lastError" | "updatedAt">,
  maxTextBytes: number,
): Promise<void> {
  await run(
    q,
    "UPDATE alerts SET status = $1, attempts = $2, last_error = $3, updated_at = $4 WHERE id = $5",
    [
      p.status,
      p.attempts,
      p.lastError === null ? null : capUtf8(p.lastError, maxTextBytes).text,
      p.updatedAt,
      id,
    ],
  );
}

/** Alerts, newest first; only pending ones (oldest first) with `pending`. */
export async function listAlerts(
  q: Queryable,
  filter: { pending?: boolean; limit?: number },
): Promise<AlertRecord[]> {
  const sql = filter.pending
    ? "SELECT * FROM alerts WHERE status = 'pending' ORDER BY created_at LIMIT $1"
    : "SELECT * FROM alerts ORDER BY created_at DESC LIMIT $1";
  const r = await run<AlertRow>(q, sql, [sqlLimit(filter.limit ?? 100)]);
  return r.rows.map(toAlert);
}

export async function putApiToken(q: Queryable, t: ApiTokenRecord): Promise<void> {
  await run(
    q,
    `INSERT INTO api_tokens (name, digest, role, created_at, created_by, last_used_at)
       VALUES ($1, $2, $3, $4, $5, $6)`,
    [t.name, t.digest, t.role, t.createdAt, t.createdBy, t.lastUsedAt],
  );
}

/** putApiToken's unique violation (a name, or a digest, taken) as the port names it. */
export function tokenExists(name: string, err: unknown): AxError | undefined {
  if ((err as { code?: unknown } | null)?.code !== "23505") return undefined;
  return new AxError("AX_API_TOKEN_EXISTS", `a token named "${name}" exists already`, {
    context: { name },
    cause: err,
  });
}

export async function touchApiToken(q: Queryable, name: string, at: number): Promise<void> {
  await run(q, "UPDATE api_tokens SET last_used_at = $1 WHERE name = $2", [at, name]);
}

export async function listApiTokens(q: Queryable): Promise<ApiTokenRecord[]> {
  const r = await run<ApiTokenRow>(q, "SELECT * FROM api_tokens ORDER BY name");
  return r.rows.map(toApiToken);
}

export async function deleteApiToken(q: Queryable, name: string): Promise<boolean> {
  const r = await run(q, "DELETE FROM api_tokens WHERE name = $1", [name]);
  return r.rowCount === 1;
}
