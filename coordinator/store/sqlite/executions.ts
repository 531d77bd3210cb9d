import type { ExecState } from "../../../shared/fsm.js";
import {
  type EventFiring,
  type EventRecorded,
  type ExecutionRecord,
  eventEntryDetail,
  type FireBatch,
  type IdempotencyRecord,
  type NewExecution,
  type TransitionWrite,
} from "../port.js";
import { transitionColumns } from "../stored-text.js";
import { addToCounter, insertAlerts } from "./alerts-counters.js";
import type { StoreContext } from "./context.js";
import { PATCH_COLUMNS } from "./rows.js";
import { applyTransitionSqlFor } from "./statements.js";
import { capUtf8, detailJson, wrap } from "./values.js";

/*
 * The SQLite store's writes of executions: firings (with the fires ledger that makes them
 * exactly-once), new executions, and transitions with their timeline. Functions of the store's
 * context (context.ts), called by SqliteStore.
 */

/** Store.recordFire. */
export function recordFire(
  ctx: StoreContext,
  fire: {
    jobId: string;
    scheduledFor: number;
    nextFireAt: number | null;
    execution: NewExecution;
    at: number;
  },
): boolean {
  const { statements: sql } = ctx;
  return wrap("recordFire", () =>
    ctx.writer.write(() => {
      // Compare-and-set on the job's next fire time: only one writer advances it.
      const advanced = sql
        .prepare(
          "UPDATE jobs SET next_fire_at = ?, updated_at = ? WHERE id = ? AND next_fire_at = ?",
        )
        .run(fire.nextFireAt, fire.at, fire.jobId, fire.scheduledFor);
      if (advanced.changes !== 1) return false;
      const inserted = sql
        .prepare(
          "INSERT OR IGNORE INTO fires (job_id, scheduled_for, fired_at, execution_id) VALUES (?, ?, ?, ?)",
        )
        .run(fire.jobId, fire.scheduledFor, fire.at, fire.execution.id);
      if (inserted.changes !== 1) return false;
      insertExecution(ctx, fire.execution, fire.at, { scheduledFor: fire.scheduledFor });
      return true;
    }),
  );
}

/** Store.recordEvent. */
export function recordEvent(ctx: StoreContext, event: EventFiring): EventRecorded {
  return wrap("recordEvent", () => ctx.writer.write(() => recordEventRows(ctx, event)));
}

/** What a written transition carries into its transaction: its follow-ups, alerts and counts. */
function writeAlong(ctx: StoreContext, w: TransitionWrite): void {
  if (w.followUps) recordEventRows(ctx, w.followUps);
  if (w.alerts) insertAlerts(ctx, w.alerts);
  for (const [name, by] of Object.entries(w.counters ?? {})) addToCounter(ctx, name, by);
}

/** The ledger's rows of an event and the executions it fires, inside the caller's write. */
function recordEventRows(ctx: StoreContext, event: EventFiring): EventRecorded {
  // The ledger's primary key is the guard: per message (job '') and per job it fires.
  const record = ctx.statements.prepare(
    "INSERT OR IGNORE INTO events (name, msg_id, job_id, fired_at, executions) VALUES (?, ?, ?, ?, ?)",
  );
  const total = event.fires.reduce((n, f) => n + f.executions.length, 0);
  const first = record.run(event.name, event.msgId, "", event.at, total).changes === 1;
  const fired: string[] = [];
  for (const f of event.fires) {
    const row = record.run(event.name, event.msgId, f.jobId, event.at, f.executions.length);
    if (row.changes !== 1) continue;
    fired.push(f.jobId);
    for (const e of f.executions) {
      insertExecution(ctx, e, event.at, eventEntryDetail(event, e));
    }
  }
  return { first, fired };
}

/** Store.recordFires. */
export function recordFires(ctx: StoreContext, batch: FireBatch): boolean {
  const { statements: sql } = ctx;
  return wrap("recordFires", () =>
    ctx.writer.write(() => {
      // Compare-and-set on the job's next fire time: only one writer advances it.
      const advanced = sql
        .prepare(
          "UPDATE jobs SET next_fire_at = ?, updated_at = ? WHERE id = ? AND next_fire_at = ?",
        )
        .run(batch.nextFireAt, batch.at, batch.jobId, batch.expectedNext);
      if (advanced.changes !== 1) return false;
      if (batch.alerts) insertAlerts(ctx, batch.alerts);
      if (batch.missedCount) addToCounter(ctx, "missed_fires", batch.missedCount);
      const insertFire = sql.prepare(
        "INSERT OR IGNORE INTO fires (job_id, scheduled_for, fired_at, execution_id, status) VALUES (?, ?, ?, ?, ?)",
      );
      for (const t of batch.missed) insertFire.run(batch.jobId, t, batch.at, "", "missed");
      for (const fire of batch.fires) {
        const first = fire.executions[0];
        if (!first) continue;
        // A nominal time already in the ledger is never fired again.
        if (
          insertFire.run(batch.jobId, fire.scheduledFor, batch.at, first.id, "fired").changes !== 1
        )
          continue;
        for (const e of fire.executions) {
          insertExecution(ctx, { ...e, scheduledFor: fire.scheduledFor }, batch.at, {
            scheduledFor: fire.scheduledFor,
            ...(batch.by === undefined ? {} : { coordinator: batch.by }),
            ...(e.shardTotal ? { shard: `${e.shardIndex}/${e.shardTotal}` } : {}),
          });
        }
      }
      return true;
    }),
  );
}

/** Store.createExecution. */
export function createExecution(
  ctx: StoreContext,
  execution: NewExecution,
  at: number,
  detail: Record<string, unknown> | undefined,
): void {
  wrap("createExecution", () =>
    ctx.writer.write(() => insertExecution(ctx, execution, at, detail ?? null)),
  );
}

/** The record of a request made with an Idempotency-Key, inside the caller's write. */
export function insertIdempotency(ctx: StoreContext, r: IdempotencyRecord): void {
  ctx.statements
    .prepare("INSERT INTO idempotency (scope, request, result, created_at) VALUES (?, ?, ?, ?)")
    .run(r.scope, r.request, r.result, r.at);
}

/** Store.createExecutions. */
export function createExecutions(
  ctx: StoreContext,
  executions: readonly NewExecution[],
  at: number,
  detail: Record<string, unknown> | undefined,
  idempotency?: IdempotencyRecord,
): void {
  if (executions.length === 0) return;
  wrap("createExecutions", () =>
    ctx.writer.write(() => {
      if (idempotency) insertIdempotency(ctx, idempotency);
      // One detail for the batch, serialised once; each execution is new, so its first
      // timeline entry is seq 1 without looking.
      const json = detailJson(detail ?? null, ctx.maxErrorTextBytes);
      if (executions.length >= UNIFORM_BATCH_MIN && isUniform(executions)) {
        insertUniform(ctx, executions, at, json);
        return;
      }
      for (const e of executions) insertExecution(ctx, e, at, detail ?? null, json);
    }),
  );
}

/** Store.getIdempotency. */
export function getIdempotency(ctx: StoreContext, scope: string): IdempotencyRecord | undefined {
  const row = wrap("getIdempotency", () =>
    ctx.statements
      .prepare("SELECT scope, request, result, created_at AS at FROM idempotency WHERE scope = ?")
      .get(scope),
  ) as IdempotencyRecord | undefined;
  return row;
}

/** Below this many, a batch is inserted row by row: one statement each costs no more. */
const UNIFORM_BATCH_MIN = 16;

/**
 * True when the executions differ in id and target agent only, as the commands of one fan-out
 * do: the same params object (or none differs in its JSON), and every other field equal.
 */
function isUniform(executions: readonly NewExecution[]): boolean {
  const first = executions[0] as NewExecution;
  const params = JSON.stringify(first.params);
  const tags = first.tags && Object.keys(first.tags).length > 0 ? JSON.stringify(first.tags) : null;
  for (const e of executions) {
    if (
      e.kind !== first.kind ||
      e.jobId !== first.jobId ||
      e.jobVersion !== first.jobVersion ||
      e.handler !== first.handler ||
      e.maxAttempts !== first.maxAttempts ||
      e.maxDispatches !== first.maxDispatches ||
      e.fireAt !== first.fireAt ||
      e.deadline !== first.deadline ||
      e.timeoutMs !== first.timeoutMs ||
      e.dispatchTimeoutMs !== first.dispatchTimeoutMs ||
      e.priority !== first.priority ||
      e.retryBaseMs !== first.retryBaseMs ||
      e.retryCapMs !== first.retryCapMs ||
      e.createdAt !== first.createdAt ||
      (e.scheduledFor ?? null) !== (first.scheduledFor ?? null) ||
      (e.shardIndex ?? null) !== (first.shardIndex ?? null) ||
      (e.shardTotal ?? null) !== (first.shardTotal ?? null) ||
      (e.groupKey ?? null) !== (first.groupKey ?? null)
    ) {
      return false;
    }
    if (e.params !== first.params && JSON.stringify(e.params) !== params) return false;
    if (e.tags !== first.tags) {
      const t = e.tags && Object.keys(e.tags).length > 0 ? JSON.stringify(e.tags) : null;
      if (t !== tags) return false;
    }
  }
  return true;
}

/**
 * Inserts a uniform batch ({@link isUniform}) with two statements, each over a JSON array of
 * `[id, targetAgentId]`: what the rows share is bound once. A statement run per row cost a
 * quarter of a 10,000-agent command's insert in binding 23 values and crossing into SQLite.
 */
function insertUniform(
  ctx: StoreContext,
  executions: readonly NewExecution[],
  at: number,
  detailText: string | null,
): void {
  const { args, record } = newExecutionRow(executions[0] as NewExecution);
  const pairs = JSON.stringify(executions.map((e) => [e.id, e.targetAgentId]));
  // args: id first and target seventh (see newExecutionRow); what is between and after is shared.
  const shared = [...args.slice(1, 6), ...args.slice(7)];
  ctx.statements
    .prepare(
      `INSERT INTO executions (${EXECUTION_COLUMNS})
         SELECT j.value ->> 0, ?, ?, ?, ?, ?, j.value ->> 1, NULL, 'PENDING', 0, 1, ?, 0, ?, ?, ?,
           ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
         FROM json_each(?) AS j`,
    )
    .run(...shared, pairs);
  ctx.statements
    .prepare(
      `INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
         SELECT j.value ->> 0, 1, ?, 'created', NULL, 'PENDING', 0, NULL, ? FROM json_each(?) AS j`,
    )
    .run(at, detailText, pairs);
  // The cached records share one params and one tags object, frozen: callers never change a
  // cached record, and a copy of each per row was a fifth of a 10,000-agent command's insert.
  const params = deepFreeze(record.params);
  const tags = deepFreeze(record.tags);
  for (const e of executions) {
    ctx.executions.add({ ...record, id: e.id, targetAgentId: e.targetAgentId, params, tags });
  }
}

/** `value`, with every object in it frozen (a JSON value: plain objects and arrays). */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** The columns a new execution's INSERT sets, in the order of its values. */
const EXECUTION_COLUMNS = `id, kind, job_id, job_version, handler, params, target_agent_id, agent_id,
  state, round, attempt, max_attempts, dispatches, max_dispatches, fire_at, deadline, timeout_ms,
  dispatch_timeout_ms, priority, retry_base_ms, retry_cap_ms, created_at, updated_at,
  scheduled_for, shard_index, shard_total, group_key, tags`;

/** Inserts a new execution and its first timeline entry inside the caller's write; caches it. */
export function insertExecution(
  ctx: StoreContext,
  e: NewExecution,
  at: number,
  detail: Record<string, unknown> | null,
  detailText: string | null = detailJson(detail, ctx.maxErrorTextBytes),
): void {
  const { args, record } = newExecutionRow(e);
  // Positional parameters: binding named ones cost a property lookup each, per row.
  ctx.statements
    .prepare(
      `INSERT INTO executions (${EXECUTION_COLUMNS})
         VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 'PENDING', 0, 1, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    )
    .run(...args);
  // A new execution's first entry: seq 1, with no look at the timeline.
  ctx.statements
    .prepare(
      `INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
         VALUES (?, 1, ?, 'created', NULL, 'PENDING', 0, NULL, ?)`,
    )
    .run(e.id, at, detailText);
  ctx.executions.add(record);
}

/**
 * A new execution's INSERT values (the `?` of {@link insertExecution}'s statement, in order: id,
 * kind, job, version, handler, params, target, then the rest) and its record as read back.
 */
function newExecutionRow(e: NewExecution): { args: unknown[]; record: ExecutionRecord } {
  const params = JSON.stringify(e.params);
  const tags = e.tags && Object.keys(e.tags).length > 0 ? JSON.stringify(e.tags) : null;
  // The row as toExecution would read it back (JSON values parsed from what is stored).
  const r: ExecutionRecord = {
    id: e.id,
    kind: e.kind,
    jobId: e.jobId,
    jobVersion: e.jobVersion,
    handler: e.handler,
    params: JSON.parse(params) as Record<string, unknown>,
    targetAgentId: e.targetAgentId,
    agentId: null,
    state: "PENDING",
    round: 0,
    attempt: 1,
    maxAttempts: e.maxAttempts,
    dispatches: 0,
    maxDispatches: e.maxDispatches,
    fireAt: e.fireAt,
    deadline: e.deadline,
    timeoutMs: e.timeoutMs,
    dispatchTimeoutMs: e.dispatchTimeoutMs,
    priority: e.priority,
    retryBaseMs: e.retryBaseMs,
    retryCapMs: e.retryCapMs,
    createdAt: e.createdAt,
    updatedAt: e.createdAt,
    dispatchedAt: null,
    startedAt: null,
    finishedAt: null,
    lateMs: null,
    nextAttemptAt: null,
    result: null,
    message: null,
    messageBytes: null,
    scheduledFor: e.scheduledFor ?? null,
    shardIndex: e.shardIndex ?? null,
    shardTotal: e.shardTotal ?? null,
    groupKey: e.groupKey ?? null,
    tags: tags === null ? {} : (JSON.parse(tags) as Record<string, string>),
  };
  const args = [
    r.id,
    r.kind,
    r.jobId,
    r.jobVersion,
    r.handler,
    params,
    r.targetAgentId,
    r.maxAttempts,
    r.maxDispatches,
    r.fireAt,
    r.deadline,
    r.timeoutMs,
    r.dispatchTimeoutMs,
    r.priority,
    r.retryBaseMs,
    r.retryCapMs,
    r.createdAt,
    r.createdAt,
    r.scheduledFor,
    r.shardIndex,
    r.shardTotal,
    r.groupKey,
    tags,
  ];
  return { args, record: r };
}

/** Store.applyTransition: compare-and-set on (state, round), then the timeline entries. */
export function applyTransition(ctx: StoreContext, w: TransitionWrite): boolean {
  const { statements: sql, executions } = ctx;
  // An UPDATE by key and timeline rows numbered in the same statement break no constraint; what
  // it fires is new rows, undone alone if they fail.
  const guard = w.followUps || w.alerts || w.counters ? "savepoint" : "none";
  return wrap("applyTransition", () =>
    ctx.writer.write(() => {
      const p = w.patch;
      const args = transitionColumns(w);
      const cached = executions.get(w.executionId);
      const updated: Record<string, unknown> | undefined = cached && {
        ...cached,
        ...w.next,
        updatedAt: w.at,
      };
      let shape = 0;
      for (let i = 0; i < PATCH_COLUMNS.length; i++) {
        const key = (PATCH_COLUMNS[i] as (typeof PATCH_COLUMNS)[number])[0];
        if (!(key in p)) continue;
        shape |= 1 << i;
        let value: unknown = p[key] ?? null;
        if (key === "result" && value !== null) {
          value = JSON.stringify(value);
          if (updated) updated.result = JSON.parse(value as string);
        } else if (key === "message") {
          const capped = typeof value === "string" ? capUtf8(value, ctx.maxErrorTextBytes) : null;
          args.push(capped?.text ?? null, capped?.bytes ?? null);
          if (updated) {
            updated.message = capped?.text ?? null;
            updated.messageBytes = capped?.bytes ?? null;
          }
          continue;
        } else if (updated) {
          updated[key] = value;
        }
        args.push(value);
      }
      args.push(w.executionId, w.expected.state, w.expected.round);
      const res = sql.prepare(applyTransitionSqlFor(shape)).run(...args);
      if (res.changes !== 1) {
        // Not as the caller read it: whatever is cached is not to be trusted either.
        executions.delete(w.executionId);
        return false;
      }
      if (updated) executions.set(w.executionId, updated as unknown as ExecutionRecord);
      if (w.steps) {
        for (const st of w.steps) {
          appendTimeline(
            ctx,
            w.executionId,
            st.at,
            st.event,
            st.from,
            st.to,
            st.round,
            st.agentId,
            st.detail ?? null,
          );
        }
        writeAlong(ctx, w);
        return true;
      }
      const agentId =
        p.agentId ??
        (w.agentId !== undefined
          ? w.agentId
          : (
              sql.prepare("SELECT agent_id FROM executions WHERE id = ?").get(w.executionId) as {
                agent_id: string | null;
              }
            ).agent_id);
      appendTimeline(
        ctx,
        w.executionId,
        w.at,
        w.event,
        w.expected.state,
        w.next.state,
        w.next.round,
        agentId,
        w.detail ?? null,
      );
      writeAlong(ctx, w);
      return true;
    }, guard),
  );
}

/** Appends a timeline entry inside the caller's write, numbered after the execution's last. */
function appendTimeline(
  ctx: StoreContext,
  executionId: string,
  at: number,
  event: string,
  from: ExecState | null,
  to: ExecState,
  round: number,
  agentId: string | null,
  detail: Record<string, unknown> | null,
): void {
  ctx.statements
    .prepare(
      `INSERT INTO timeline (execution_id, seq, at, event, from_state, to_state, round, agent_id, detail)
         VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM timeline WHERE execution_id = ?), ?, ?, ?, ?, ?, ?, ?)`,
    )
    .run(
      executionId,
      executionId,
      at,
      event,
      from,
      to,
      round,
      agentId,
      detailJson(detail, ctx.maxErrorTextBytes),
    );
}
