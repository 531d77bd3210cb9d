import type { ExecutionRecord, TimelineEntry } from "../../../coordinator/store/port.js";
import { TERMINAL_STATES } from "../../../shared/fsm.js";
import { tagOf } from "./effects.js";
import type { JournalRow } from "./journals.js";
import type { RecordedExecution } from "./record.js";

/** The agent's wheel tick: a start later than this after `fireAt` is late. */
export const TICK_MS = 20;

/** Journal outcomes the coordinator may record for them (a retry shows as a later round). */
const OUTCOME_STATES: Readonly<Record<string, readonly string[]>> = {
  succeeded: ["SUCCEEDED"],
  failed: ["FAILED"],
  timed_out: ["TIMED_OUT"],
  expired: ["EXPIRED"],
  canceled: ["CANCELED"],
  interrupted: ["FAILED"],
};

/** States that say an execution ran. */
const RAN_STATES = new Set(["SUCCEEDED", "TIMED_OUT"]);
const RAN_OUTCOMES = new Set(["succeeded", "failed", "timed_out", "interrupted"]);
/** Local outcomes of a handler that ran to its end. */
const COMPLETED = new Set(["succeeded", "failed", "timed_out"]);
const OPEN_LOCAL = new Set(["scheduled", "queued", "running"]);

/** What a scenario tells the truth check beside the journals, the record and the effects. */
export interface TruthInput {
  scenario: string;
  journals: JournalRow[];
  record: RecordedExecution[];
  effects: { done: Map<string, number>; begun: Map<string, number> };
  /**
   * Executions that must not start late: by the issue, commands whose lead (fireAt − createdAt)
   * exceeded the outage. Undefined: none is held to it.
   */
  mustBeOnTime?: (e: ExecutionRecord) => boolean;
  /** Milliseconds from the end of the fault until the record caught up with the journals. */
  convergeMs?: number | null;
}

/** One execution the check found untrue, and why. */
export interface Finding {
  executionId: string;
  kind: string;
  state: string;
  problems: string[];
}

/** The structured result of a truth check: what the tests assert and the bench prints. */
export interface TruthResult {
  scenario: string;
  /** Executions the coordinator recorded. */
  total: number;
  /** Of those, recorded exactly as the journals say they happened, effects included. */
  truthful: number;
  /** Executions that never ran anywhere and ended FAILED or EXPIRED. */
  lost: number;
  /**
   * Executions whose handler ran to its end twice where once was asked: two rounds of one
   * attempt, two successes, or the effect twice. A retry after a failure is not counted.
   */
  twice: number;
  /** Executions that started more than one tick after their fireAt. */
  late: number;
  /** The largest such lateness, ms (0 when none). */
  maxLateMs: number;
  /** Executions held to being on time ({@link TruthInput.mustBeOnTime}) … */
  onTimeRequired: number;
  /** … and how many of those started late, and by how much at most. */
  lateRequired: number;
  maxLateRequiredMs: number;
  /** The lateness (ms, rounded, ascending) of every execution held to time that ran. */
  requiredLateMs: number[];
  /** Executions held to time that never ran at all (also counted in {@link lateRequired}). */
  requiredNeverRan: number;
  /** Executions left in a non-terminal state. */
  nonTerminal: number;
  convergeMs: number | null;
  /** Untrue executions, at most 25, for the report. */
  findings: Finding[];
  /** Executions counted lost, at most 25: id, kind, state and the record's message. */
  lostFindings: string[];
  /** Effect tags whose count disagrees with the record. */
  effectFindings: string[];
  /** What a scenario checks beyond the truth (such as: nothing started after SIGTERM). */
  violations: string[];
  /** What a scenario observed on the way, for the report (such as the states at a kill). */
  notes: string[];
}

/** The round's rows in the journals, one per agent that held it (normally one). */
function byExecution(rows: JournalRow[]): Map<string, JournalRow[]> {
  const m = new Map<string, JournalRow[]>();
  for (const r of rows) {
    const list = m.get(r.executionId) ?? [];
    list.push(r);
    m.set(r.executionId, list);
  }
  for (const list of m.values()) list.sort((a, b) => a.round - b.round);
  return m;
}

/**
 * The round a timeline entry is about: its `detail.round` when it has one (a `fact` entry about an
 * older round, written while the execution is at a later one), else the entry's round.
 */
function roundOf(t: TimelineEntry): number {
  const r = t.detail?.round;
  return typeof r === "number" ? r : t.round;
}

/** Rounds the record says started, from its timeline (and its final state). */
export function recordedRuns(rec: RecordedExecution): Set<number> {
  const rounds = new Set<number>();
  for (const t of rec.timeline) {
    const outcome = t.detail?.outcome;
    const phase = t.detail?.interruptedPhase;
    if (t.event === "started" || t.toState === "RUNNING" || t.detail?.started === true) {
      rounds.add(roundOf(t));
    } else if (typeof outcome === "string" && RAN_OUTCOMES.has(outcome)) {
      if (!(outcome === "interrupted" && phase === "before_handler")) rounds.add(roundOf(t));
    }
  }
  if (rounds.size === 0 && RAN_STATES.has(rec.execution.state)) rounds.add(rec.execution.round);
  return rounds;
}

/** Rounds the record says ran to success. */
function recordedSuccesses(rec: RecordedExecution): number {
  const rounds = new Set<number>();
  for (const t of rec.timeline) if (t.detail?.outcome === "succeeded") rounds.add(roundOf(t));
  if (rounds.size === 0 && rec.execution.state === "SUCCEEDED") return 1;
  return rounds.size;
}

/**
 * The journal rows whose outcome the execution's final state must follow: the last round that
 * ran, unless a later *attempt* (a retry) came after it. Rounds of the same attempt that came
 * after a round that ran were fenced off and never started: facts outrank fences. When no round
 * ran, the highest round held.
 */
export function decisiveRows(rows: JournalRow[]): JournalRow[] {
  const ran = rows.filter((r) => r.startedAt !== null);
  const last = ran.at(-1);
  if (!last) return rows.length > 0 ? [rows.at(-1) as JournalRow] : [];
  const later = rows.filter((r) => r.attempt > last.attempt);
  if (later.length > 0) return [later.at(-1) as JournalRow];
  // Two rounds of one attempt ran (a partitioned old holder): either outcome may stand, as long
  // as the timeline keeps both (checked separately).
  return ran.filter((r) => r.attempt === last.attempt);
}

/** The problems of one execution, comparing its record with its journal rows. */
function problemsOf(rec: RecordedExecution, rows: JournalRow[]): string[] {
  const e = rec.execution;
  const p: string[] = [];
  if (!TERMINAL_STATES.has(e.state)) p.push(`left ${e.state} (round ${e.round})`);
  const ran = rows.filter((r) => r.startedAt !== null);
  const ranRounds = new Set(ran.map((r) => r.round));
  const said = recordedRuns(rec);
  for (const r of ran) {
    if (!said.has(r.round)) {
      p.push(
        `round ${r.round} ran on ${r.agentId} (journal: ${r.state}) but the record never says it started`,
      );
    }
  }
  for (const round of said) {
    if (!ranRounds.has(round))
      p.push(`the record says round ${round} ran, but no journal started it`);
  }
  for (const r of rows) {
    if (OPEN_LOCAL.has(r.state) && TERMINAL_STATES.has(e.state)) {
      p.push(`recorded ${e.state}, but ${r.agentId} still holds round ${r.round} ${r.state}`);
    }
  }
  const decisive = decisiveRows(rows);
  if (TERMINAL_STATES.has(e.state)) {
    if (decisive.length === 0) {
      if (RAN_STATES.has(e.state)) p.push(`recorded ${e.state}, but no journal holds it`);
    } else {
      const allowed = new Set(decisive.flatMap((r) => OUTCOME_STATES[r.state] ?? []));
      if (allowed.size > 0 && !allowed.has(e.state)) {
        const said = decisive.map((r) => `round ${r.round} ${r.state} on ${r.agentId}`).join(", ");
        p.push(`recorded ${e.state}, the journal says ${said}`);
      }
    }
  }
  // Both rounds ran: the timeline must keep each one's outcome.
  if (ranRounds.size > 1) {
    for (const r of ran) {
      if (!(r.state in OUTCOME_STATES)) continue;
      const kept = rec.timeline.some(
        (t: TimelineEntry) => roundOf(t) === r.round && t.detail?.outcome === r.state,
      );
      if (!kept) p.push(`two rounds ran; the timeline lacks round ${r.round}'s outcome ${r.state}`);
    }
  }
  return p;
}

/**
 * The truth check of issue 15: for every execution, the coordinator's final state and outcome
 * equal what the agents' journals say happened; every side effect happened exactly as often as
 * the record says the handler succeeded; nothing is left non-terminal. Run it once the system has
 * converged.
 */
export function checkTruth(input: TruthInput): TruthResult {
  const rows = byExecution(input.journals);
  const findings: Finding[] = [];
  const bad = new Set<string>();
  let lost = 0;
  let twice = 0;
  let late = 0;
  let maxLateMs = 0;
  let onTimeRequired = 0;
  let lateRequired = 0;
  let requiredNeverRan = 0;
  let maxLateRequiredMs = 0;
  let nonTerminal = 0;
  const countedTwice = new Set<string>();
  const lostFindings: string[] = [];
  const requiredLateMs: number[] = [];
  const groups = new Map<string, RecordedExecution[]>();
  for (const rec of input.record) {
    const e = rec.execution;
    const mine = rows.get(e.id) ?? [];
    const problems = problemsOf(rec, mine);
    if (!TERMINAL_STATES.has(e.state)) nonTerminal++;
    const ran = mine.filter((r) => r.startedAt !== null);
    if (ran.length === 0 && (e.state === "FAILED" || e.state === "EXPIRED")) {
      lost++;
      if (lostFindings.length < 25) {
        const held = mine.map((r) => `round ${r.round} ${r.state} on ${r.agentId}`).join(", ");
        lostFindings.push(
          `${e.id} (${e.kind}, ${e.state}, round ${e.round}): ${e.message ?? ""}${held ? ` — journal: ${held}` : " — in no journal"}`,
        );
      }
    }
    // Twice: the handler ran to its end more often than asked. A round cut off (interrupted,
    // canceled) before its effect, then retried, ran once.
    // A retry after a real failure runs again on purpose; two ends within one attempt, or two
    // successes, do not.
    const completed = ran.filter((r) => COMPLETED.has(r.state));
    const attempts = new Set(completed.map((r) => r.attempt));
    const successes = completed.filter((r) => r.state === "succeeded").length;
    if (attempts.size < completed.length || successes > 1) {
      twice++;
      countedTwice.add(e.id);
    }
    const first = ran[0];
    if (first && first.startedAt !== null) {
      const lateMs = Math.max(0, first.startedAt - first.fireAt);
      const required = input.mustBeOnTime?.(e) ?? false;
      if (required) {
        onTimeRequired++;
        requiredLateMs.push(Math.round(lateMs));
      }
      if (lateMs > TICK_MS) {
        late++;
        maxLateMs = Math.max(maxLateMs, lateMs);
        if (required) {
          lateRequired++;
          maxLateRequiredMs = Math.max(maxLateRequiredMs, lateMs);
        }
      }
    } else if (input.mustBeOnTime?.(e)) {
      onTimeRequired++;
      // Required on time and never ran at all: lost, and as late as it gets.
      lateRequired++;
      requiredNeverRan++;
    }
    if (problems.length > 0) {
      bad.add(e.id);
      findings.push({ executionId: e.id, kind: e.kind, state: e.state, problems });
    }
    const tag = tagOf(e.handler, e.params);
    if (tag !== undefined) groups.set(tag, [...(groups.get(tag) ?? []), rec]);
  }
  // Effects, per tag: as often as the record says the handler succeeded, and never begun in a
  // round no journal started.
  const effectFindings: string[] = [];
  let effectBad = 0;
  for (const [tag, recs] of groups) {
    const recorded = recs.reduce((n, r) => n + recordedSuccesses(r), 0);
    const done = input.effects.done.get(tag) ?? 0;
    const started = recs.reduce(
      (n, r) => n + (rows.get(r.execution.id) ?? []).filter((row) => row.startedAt !== null).length,
      0,
    );
    const begun = input.effects.begun.get(tag) ?? 0;
    const diff = Math.abs(done - recorded) + Math.max(0, begun - started);
    if (diff === 0) continue;
    effectFindings.push(
      `${tag}: effect done ${done}×, begun ${begun}×; the record says succeeded ${recorded}×, the journals started ${started}×`,
    );
    if (recs.length === 1) {
      const only = recs[0] as RecordedExecution;
      if (done > 1 && !countedTwice.has(only.execution.id)) twice++;
      if (!bad.has(only.execution.id)) {
        bad.add(only.execution.id);
        findings.push({
          executionId: only.execution.id,
          kind: only.execution.kind,
          state: only.execution.state,
          problems: [effectFindings.at(-1) as string],
        });
      }
    } else {
      // Executions of the tag already found untrue explain part of the difference.
      const explained = recs.filter((r) => bad.has(r.execution.id)).length;
      const clean = recs.length - explained;
      effectBad += Math.min(Math.max(0, diff - explained), clean);
    }
  }
  const total = input.record.length;
  return {
    scenario: input.scenario,
    total,
    truthful: total - bad.size - effectBad,
    lost,
    twice,
    late,
    maxLateMs: Math.round(maxLateMs),
    onTimeRequired,
    lateRequired,
    maxLateRequiredMs: Math.round(maxLateRequiredMs),
    requiredLateMs: requiredLateMs.sort((a, b) => a - b),
    requiredNeverRan,
    nonTerminal,
    convergeMs: input.convergeMs ?? null,
    findings: findings.slice(0, 25),
    lostFindings,
    effectFindings: effectFindings.slice(0, 25),
    violations: [],
    notes: [],
  };
}

/**
 * Whether the record has caught up with the journals: every execution whose decisive journal
 * rows are final is recorded final with a state they allow (or has moved on to a later round).
 * The convergence probe polls this after a fault ends.
 */
export function caughtUp(executions: ExecutionRecord[], journals: JournalRow[]): boolean {
  const rows = byExecution(journals);
  const byId = new Map(executions.map((e) => [e.id, e]));
  for (const [id, mine] of rows) {
    const decisive = decisiveRows(mine);
    if (decisive.some((r) => OPEN_LOCAL.has(r.state))) continue;
    const e = byId.get(id);
    if (!e) return false;
    const top = Math.max(...decisive.map((r) => r.round));
    if (e.round > top) continue;
    const allowed = new Set(decisive.flatMap((r) => OUTCOME_STATES[r.state] ?? []));
    if (e.state === "RETRY_WAITING") continue;
    if (!allowed.has(e.state)) return false;
  }
  return true;
}
