import type { ExecState } from "../../shared/fsm.js";
import type { JobDefinition } from "../domain/job.js";
import type {
  AlertRecord,
  CoordinatorRecord,
  PeerRecord,
  RoutedRecord,
  TransitionWrite,
} from "./port.js";

/*
 * How the store adapters turn values into stored text, the same for each: SQLite and PostgreSQL
 * must cap, compare and serialise alike for the contract suite to hold for both.
 */

/**
 * What every transition writes whatever its patch, in the order both stores' compare-and-set
 * statements take it: the new snapshot's counters, then the time.
 */
export function transitionColumns(w: TransitionWrite): unknown[] {
  return [
    w.next.state,
    w.next.round,
    w.next.attempt,
    w.next.maxAttempts,
    w.next.dispatches,
    w.next.maxDispatches,
    w.at,
  ];
}

/**
 * Stored error text (an execution's message, a timeline entry's detail) is capped at this many
 * UTF-8 bytes by default, so one bad handler cannot bloat the store (DESIGN §6).
 */
export const DEFAULT_MAX_ERROR_TEXT_BYTES = 2048;

/** JSON with every object's keys sorted: key order alone never makes a new job version. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** A definition as versions compare it: `paused` is the job's state, not part of a version. */
export function versionedJson(definition: JobDefinition): string {
  const { paused: _state, ...rest } = definition;
  return canonicalJson(rest);
}

/**
 * Cuts `text` to at most `maxBytes` UTF-8 bytes, never inside a character, and returns it with the
 * full size in bytes. (A lone surrogate counts as U+FFFD, three bytes, which is how it is stored.)
 */
export function capUtf8(text: string, maxBytes: number): { text: string; bytes: number } {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes <= maxBytes) return { text, bytes };
  const buf = Buffer.from(text, "utf8");
  let end = Math.max(0, maxBytes);
  // The first byte left out is a continuation byte (10xxxxxx) when the cap falls inside a
  // character: back up to that character's lead byte and leave it out whole.
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return { text: buf.toString("utf8", 0, end), bytes };
}

/** A timeline detail's JSON, or a marker with its size when it is over `maxBytes`. */
export function cappedDetailJson(
  detail: Record<string, unknown> | null,
  maxBytes: number,
): string | null {
  if (detail === null) return null;
  const json = JSON.stringify(detail);
  const bytes = Buffer.byteLength(json, "utf8");
  return bytes <= maxBytes ? json : JSON.stringify({ truncated: true, bytes });
}

/** A `coordinators` row as both stores keep it (times in ms by the store's clock, info as JSON). */
export interface CoordinatorRow {
  id: string;
  epoch: number;
  joined_at: number;
  renewed_at: number;
  lease_until: number;
  info: string;
}

export function toCoordinator(r: CoordinatorRow): CoordinatorRecord {
  return {
    id: r.id,
    epoch: r.epoch,
    joinedAt: r.joined_at,
    renewedAt: r.renewed_at,
    leaseUntil: r.lease_until,
    info: JSON.parse(r.info) as Record<string, unknown>,
  };
}

/** An open peer as both stores select it (Store.listOpenPeers). */
export interface PeerRow {
  id: string;
  state: ExecState;
  created_at: number;
  job_id: string | null;
  scheduled_for: number | null;
  shard_total: number | null;
}

/** A row of Store.listRecentlyRouted. */
export interface RoutedRow {
  agent_id: string;
  state: ExecState;
  shard_index: number | null;
  shard_total: number | null;
}

export function toRouted(r: RoutedRow): RoutedRecord {
  return {
    agentId: r.agent_id,
    state: r.state,
    shardIndex: r.shard_index,
    shardTotal: r.shard_total,
  };
}

export function toPeer(r: PeerRow): PeerRecord {
  return {
    id: r.id,
    state: r.state,
    createdAt: r.created_at,
    jobId: r.job_id,
    scheduledFor: r.scheduled_for,
    shardTotal: r.shard_total,
  };
}

/**
 * An alert's row in both stores' column order (id, kind, url, payload, status, attempts,
 * last_error, created_at, updated_at): the last error capped like every stored error text.
 */
export function alertColumns(a: AlertRecord, maxTextBytes: number): unknown[] {
  return [
    a.id,
    a.kind,
    a.url,
    JSON.stringify(a.payload),
    a.status,
    a.attempts,
    a.lastError === null ? null : capUtf8(a.lastError, maxTextBytes).text,
    a.createdAt,
    a.updatedAt,
  ];
}
