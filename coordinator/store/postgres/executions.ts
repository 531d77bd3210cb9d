import type { ExecState } from "../../../shared/fsm.js";
import type { ExecutionRecord, NewExecution, TimelineStep, TransitionWrite } from "../port.js";
import { capUtf8, type PeerRow, type RoutedRow, transitionColumns } from "../stored-text.js";
import { OPEN_STATES_SQL } from "./migrations.js";
import {
  type ExecutionRow,
  executionColumns,
  NEW_EXECUTION_COLUMNS,
  PATCH_COLUMNS,
  pushRow,
  toExecution,
} from "./rows.js";
import { type Queryable, run, type Statement } from "./tx.js";

/*
 * Creating executions and writing their transitions: the write hot paths, one statement each,
 * prepared by name on every connection.
 */

/** The database clock in whole ms (leases, claims; never the port's `now` parameters). */
export const DB_NOW_MS = "(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint";

const n = NEW_EXECUTION_COLUMNS.length;

/**
 * The INSERT of new executions, PENDING, from one array per column ({@link executionColumns}),
 * parameters from `$first` on, returning their ids; `join` (a JOIN clause on the unnested rows,
 * `t`) keeps only some of them.
 */
export function insertNewExecutions(first: number, join = ""): string {
  const columns = NEW_EXECUTION_COLUMNS.map(([c]) => c).join(", ");
  return `INSERT INTO executions (${columns}, agent_id, state, round, attempt, dispatches, updated_at)
      SELECT ${NEW_EXECUTION_COLUMNS.map(([c]) => `t.${c}`).join(", ")},
        NULL, 'PENDING', 0, 1, 0, t.created_at
      FROM unnest(${NEW_EXECUTION_COLUMNS.map(([, type], i) => `$${i + first}::${type}[]`).join(", ")})
        AS t(${columns})
      ${join}
      RETURNING id`;
}

/**
 * New executions (one array per column, {@link executionColumns}) and their first timeline
 * entries (seq 1, `created`), in one statement: $1…$n the columns, then the entries' time and
 * details. A row whose id exists fails the whole batch, on the executions key: the entries are
 * made from the rows the INSERT returns, so they are never written first.
 */
export const INSERT_EXECUTIONS: Statement = {
  name: "ax_insert_executions",
  text: `WITH created AS (${insertNewExecutions(1)})
    INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
      SELECT d.id, 1, $${n + 1}, 'created', NULL, 'PENDING', 0, NULL, d.detail
      FROM created JOIN unnest($1::text[], $${n + 2}::text[]) AS d(id, detail) ON d.id = created.id`,
};

/** Creates `executions` with their created entries (details as stored JSON, one per execution). */
export async function insertExecutions(
  q: Queryable,
  executions: readonly NewExecution[],
  at: number,
  details: readonly (string | null)[],
): Promise<void> {
  if (executions.length === 0) return;
  await run(q, INSERT_EXECUTIONS, [...executionColumns(executions), at, details]);
}

/** The compare-and-set of each patch shape, made when first needed. */
const transitionStatements: (Statement | undefined)[] = [];

/**
 * A transition's compare-and-set for one patch shape (a bit per PATCH_COLUMNS entry the patch
 * sets), with its timeline entries, in one statement: the UPDATE … WHERE id, state and round,
 * and the entries numbered after the execution's last seq, written only when the UPDATE was;
 * it returns how many rows moved (0 or 1).
 * Parameters: the snapshot (7), the patched values, id, expected state and round, then the
 * entries as arrays and whether their agent is known (else the row's agent after the update).
 */
function transitionStatement(shape: number): Statement {
  let st = transitionStatements[shape];
  if (st === undefined) {
    const set = ["state = $1", "round = $2", "attempt = $3", "max_attempts = $4"];
    set.push("dispatches = $5", "max_dispatches = $6", "updated_at = $7");
    let i = 8;
    PATCH_COLUMNS.forEach(([key, column], bit) => {
      if ((shape & (1 << bit)) === 0) return;
      if (key === "message") {
        set.push(`message = $${i}, message_bytes = $${i + 1}`);
        i += 2;
      } else {
        set.push(`${column} = $${i++}`);
      }
    });
    const [id, state, round] = [i, i + 1, i + 2];
    const e = i + 3;
    st = {
      name: `ax_transition_${shape}`,
      text: `WITH moved AS (
          UPDATE executions SET ${set.join(", ")}
            WHERE id = $${id} AND state = $${state} AND round = $${round}
            RETURNING agent_id),
        entries AS (
          INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id,
              detail)
          SELECT $${id}, last.seq + t.n, t.at, t.event, t.from_state, t.to_state, t.round,
            CASE WHEN $${e + 7}::boolean THEN t.agent_id ELSE moved.agent_id END, t.detail
          FROM moved,
            (SELECT COALESCE(MAX(seq), 0) AS seq FROM timeline WHERE execution_id = $${id}) last,
            unnest($${e}::double precision[], $${e + 1}::text[], $${e + 2}::text[],
              $${e + 3}::text[], $${e + 4}::integer[], $${e + 5}::text[], $${e + 6}::text[])
              WITH ORDINALITY AS t(at, event, from_state, to_state, round, agent_id, detail, n))
        SELECT count(*) AS moved FROM moved`,
    };
    transitionStatements[shape] = st;
  }
  return st;
}

/** A transition's patch: its shape (a bit per PATCH_COLUMNS entry it sets) and values. */
function patchOf(w: TransitionWrite, maxTextBytes: number): { shape: number; values: unknown[] } {
  const p = w.patch;
  const values: unknown[] = [];
  let shape = 0;
  PATCH_COLUMNS.forEach(([key], bit) => {
    if (!(key in p)) return;
    shape |= 1 << bit;
    const value: unknown = p[key] ?? null;
    if (key === "result") {
      values.push(value === null ? null : JSON.stringify(value));
    } else if (key === "message") {
      const capped = typeof value === "string" ? capUtf8(value, maxTextBytes) : null;
      values.push(capped?.text ?? null, capped?.bytes ?? null);
    } else {
      values.push(value);
    }
  });
  return { shape, values };
}

/**
 * A transition's timeline entries: the folded steps as given, or one entry expected → next.
 * Its agent is the patch's, else the caller's, else (`agentKnown` false: not known here) the
 * row's after the update.
 */
function entriesOf(w: TransitionWrite): { steps: TimelineStep[]; agentKnown: boolean } {
  const p = w.patch;
  const steps = w.steps ?? [
    {
      at: w.at,
      event: w.event,
      from: w.expected.state,
      to: w.next.state,
      round: w.next.round,
      agentId: p.agentId ?? w.agentId ?? null,
      ...(w.detail === undefined ? {} : { detail: w.detail }),
    },
  ];
  return {
    steps,
    agentKnown: w.steps !== undefined || p.agentId != null || w.agentId !== undefined,
  };
}

/**
 * Writes a transition if the execution is still in `expected` (Store.applyTransition). True
 * when it was written. Of two writers applying a transition to one execution, the second waits
 * for the first's row lock and then finds the state moved: one wins.
 */
export async function applyTransition(
  q: Queryable,
  w: TransitionWrite,
  maxTextBytes: number,
  detailJson: (detail: Record<string, unknown> | null) => string | null,
): Promise<boolean> {
  const { shape, values } = patchOf(w, maxTextBytes);
  const args = [...transitionColumns(w), ...values, w.executionId, w.expected.state];
  args.push(w.expected.round);
  const { steps, agentKnown } = entriesOf(w);
  args.push(
    steps.map((s) => s.at),
    steps.map((s) => s.event),
    steps.map((s) => s.from),
    steps.map((s) => s.to),
    steps.map((s) => s.round),
    steps.map((s) => s.agentId),
    steps.map((s) => detailJson(s.detail ?? null)),
    agentKnown,
  );
  const r = await run<{ moved: number }>(q, transitionStatement(shape), args);
  return (r.rows[0]?.moved ?? 0) > 0;
}

/** The key under which transitions of one patch shape run together (transitionsOfShape). */
export function transitionShape(w: TransitionWrite): number {
  let shape = 0;
  PATCH_COLUMNS.forEach(([key], bit) => {
    if (key in w.patch) shape |= 1 << bit;
  });
  return shape;
}

/** The array type of each column a transition sets. */
const TRANSITION_TYPES: Record<string, string> = {
  state: "text",
  round: "integer",
  attempt: "integer",
  max_attempts: "integer",
  dispatches: "integer",
  max_dispatches: "integer",
  updated_at: "double precision",
  agent_id: "text",
  dispatched_at: "double precision",
  started_at: "double precision",
  finished_at: "double precision",
  late_ms: "double precision",
  next_attempt_at: "double precision",
  result: "text",
  message: "text",
  message_bytes: "integer",
  fire_at: "double precision",
  deadline: "double precision",
};

/** The columns a transition of `shape` sets, in the order of transitionColumns then the patch. */
function shapeColumns(shape: number): string[] {
  const columns = ["state", "round", "attempt", "max_attempts", "dispatches", "max_dispatches"];
  columns.push("updated_at");
  PATCH_COLUMNS.forEach(([key, column], bit) => {
    if ((shape & (1 << bit)) === 0) return;
    if (key === "message") columns.push("message", "message_bytes");
    else columns.push(column);
  });
  return columns;
}

/** The statement of {@link applyTransitions} for one shape, made when first needed. */
const batchStatements = new Map<number, string>();

/**
 * Many transitions of one patch shape, on distinct executions, in one statement: each row's
 * compare-and-set on (id, state, round) as {@link applyTransition}'s, and the timeline entries
 * of the rows that moved, numbered after each one's last seq. Not prepared by name: planned
 * for the arrays at hand, it looks each row up by its key (a generic plan may not).
 */
function transitionBatchText(shape: number): string {
  let text = batchStatements.get(shape);
  if (text === undefined) {
    const columns = shapeColumns(shape);
    const rows = [...columns, "id", "expected_state", "expected_round", "k"];
    const types = [
      ...columns.map((c) => TRANSITION_TYPES[c] as string),
      "text",
      "text",
      "integer",
      "integer",
    ];
    const e = rows.length + 1;
    text = `WITH t AS (
        SELECT * FROM unnest(${types.map((type, i) => `$${i + 1}::${type}[]`).join(", ")})
          AS t(${rows.join(", ")})),
      moved AS (
        UPDATE executions x SET ${columns.map((c) => `${c} = t.${c}`).join(", ")}
          FROM t
          WHERE x.id = t.id AND x.state = t.expected_state AND x.round = t.expected_round
          RETURNING t.k, x.id, x.agent_id),
      entries AS (
        INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id,
            detail)
        SELECT moved.id, last.seq + s.n, s.at, s.event, s.from_state, s.to_state, s.round,
          CASE WHEN s.agent_known THEN s.agent_id ELSE moved.agent_id END, s.detail
        FROM moved
          JOIN unnest($${e}::integer[], $${e + 1}::integer[], $${e + 2}::double precision[],
            $${e + 3}::text[], $${e + 4}::text[], $${e + 5}::text[], $${e + 6}::integer[],
            $${e + 7}::text[], $${e + 8}::text[], $${e + 9}::boolean[])
            AS s(k, n, at, event, from_state, to_state, round, agent_id, detail, agent_known)
            ON s.k = moved.k
          CROSS JOIN LATERAL (SELECT COALESCE(MAX(seq), 0) AS seq FROM timeline
            WHERE execution_id = moved.id) last)
      SELECT k FROM moved`;
    batchStatements.set(shape, text);
  }
  return text;
}

/**
 * Transitions of one patch shape ({@link transitionShape}), each on a different execution, in
 * one statement; each one's result as {@link applyTransition} would return it.
 */
export async function applyTransitions(
  q: Queryable,
  ws: readonly TransitionWrite[],
  maxTextBytes: number,
  detailJson: (detail: Record<string, unknown> | null) => string | null,
): Promise<boolean[]> {
  const first = ws[0];
  if (first === undefined) return [];
  const shape = transitionShape(first);
  const width = shapeColumns(shape).length + 4;
  const rows: unknown[][] = Array.from({ length: width }, () => []);
  const entries: unknown[][] = Array.from({ length: 10 }, () => []);
  ws.forEach((w, k) => {
    const patch = patchOf(w, maxTextBytes);
    if (patch.shape !== shape) throw new Error("applyTransitions: transitions of one shape only");
    const values = [...transitionColumns(w), ...patch.values, w.executionId, w.expected.state];
    values.push(w.expected.round, k);
    pushRow(rows, values);
    const { steps, agentKnown } = entriesOf(w);
    steps.forEach((s, n) => {
      const entry: unknown[] = [k, n + 1, s.at, s.event, s.from, s.to, s.round, s.agentId];
      entry.push(detailJson(s.detail ?? null), agentKnown);
      pushRow(entries, entry);
    });
  });
  const r = await run<{ k: number }>(q, transitionBatchText(shape), [...rows, ...entries]);
  const moved = new Set(r.rows.map((row) => row.k));
  return ws.map((_, k) => moved.has(k));
}

export const SELECT_EXECUTION: Statement = {
  name: "ax_get_execution",
  text: "SELECT * FROM executions WHERE id = $1",
};

/** The rows of the executions `ids` (unique), in no order; for {@link ReadBatch}. */
export async function getExecutionRows(q: Queryable, ids: string[]): Promise<ExecutionRow[]> {
  return (await run<ExecutionRow>(q, SELECT_EXECUTIONS, [ids])).rows;
}

/**
 * Not prepared by name: a prepared statement's generic plan for `= ANY` of an array of unknown
 * length came to scan the table (1.5 ms a read, against 0.08 ms planned for the array at hand).
 */
const SELECT_EXECUTIONS = "SELECT * FROM executions WHERE id = ANY($1::text[])";

export async function getExecution(q: Queryable, id: string): Promise<ExecutionRecord | undefined> {
  const row = (await run<ExecutionRow>(q, SELECT_EXECUTION, [id])).rows[0];
  return row ? toExecution(row) : undefined;
}

/** The dispatcher's order, and the listing's of open work: priority, then fire time. */
export const DUE_ORDER = "ORDER BY priority DESC, fire_at, created_at, id";

/** Executions in `states`, in dispatch order, at most `limit`. */
export async function listExecutionsInStates(
  q: Queryable,
  states: ExecState[],
  limit: number,
): Promise<ExecutionRecord[]> {
  if (states.length === 0) return [];
  const r = await run<ExecutionRow>(
    q,
    `SELECT * FROM executions WHERE state = ANY($1::text[]) ${DUE_ORDER} LIMIT $2`,
    [states, sqlLimit(limit)],
  );
  return r.rows.map(toExecution);
}

/**
 * A LIMIT value: whole, and NULL (no limit) for a negative one, as SQLite reads a negative LIMIT.
 */
export function sqlLimit(limit: number): number | null {
  return limit < 0 ? null : Math.floor(limit);
}

/** Store.listRecentlyRouted: down the job's (job_id, created_at) index, newest first. */
export async function listRecentlyRouted(
  q: Queryable,
  jobId: string,
  limit: number,
): Promise<RoutedRow[]> {
  const r = await run<RoutedRow>(
    q,
    `SELECT agent_id, state, shard_index, shard_total FROM executions
       WHERE job_id = $1 AND agent_id IS NOT NULL ORDER BY created_at DESC LIMIT $2`,
    [jobId, Math.max(0, Math.floor(limit))],
  );
  return r.rows;
}

/** An open peer's row, with the job id or group key it was read by (`key`). */
export interface KeyedPeerRow extends PeerRow {
  key: string;
}

/** The open peers of several jobs or groups (Store.listOpenPeers), each key's oldest first. */
export async function listOpenPeerRows(
  q: Queryable,
  by: "jobId" | "groupKey",
  keys: string[],
): Promise<KeyedPeerRow[]> {
  const column = by === "jobId" ? "job_id" : "group_key";
  const r = await run<KeyedPeerRow>(
    q,
    `SELECT ${column} AS key, id, state, created_at, job_id, scheduled_for, shard_total
       FROM executions
       WHERE ${column} = ANY($1::text[]) AND state IN ${OPEN_STATES_SQL}
       ORDER BY created_at, id`,
    [keys],
  );
  return r.rows;
}
