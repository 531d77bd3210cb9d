/**
 * Overlap, per-job concurrency and groups, decided when a pending execution is about to be
 * dispatched (DESIGN §3). Pure: the engine passes what is in flight and acts on the decision.
 */

export type OverlapPolicy = "PARALLEL" | "SKIP" | "QUEUE" | "REPLACE";

/** What the decision needs to know of another execution. */
export interface Peer {
  id: string;
  /** PENDING or RETRY_WAITING count as waiting; DISPATCHED, SCHEDULED, RUNNING as active. */
  state: string;
  createdAt: number;
  /** The firing this execution is a shard of, as in `OverlapInput.execution`. */
  shardOf?: string | null;
}

export interface OverlapInput {
  /** The execution to decide for. */
  execution: { id: string; attempt: number; createdAt: number; shardOf?: string | null };
  policy: OverlapPolicy;
  queueMax: number;
  concurrency?: number | undefined;
  /** Other non-terminal executions of the same job. */
  sameJob: readonly Peer[];
  /** Other non-terminal executions of the same group, across jobs (empty when no group). */
  sameGroup: readonly Peer[];
}

export type OverlapDecision =
  | { action: "dispatch" }
  | { action: "wait"; reason: string }
  | { action: "skip"; reason: string }
  | { action: "replace"; cancel: string[]; reason: string };

const ACTIVE = new Set(["DISPATCHED", "SCHEDULED", "RUNNING"]);
const WAITING = new Set(["PENDING", "RETRY_WAITING"]);

function earlier(a: Peer, b: { id: string; createdAt: number }): boolean {
  return a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a.id < b.id);
}

/**
 * Decides for one pending execution. Order: the group (one active at a time, FIFO), then the
 * overlap policy (only for a first attempt: a retry is the same firing, not a new one), then the
 * job's concurrency limit.
 */
export function decideOverlap(input: OverlapInput): OverlapDecision {
  const e = input.execution;
  const groupActive = input.sameGroup.filter((p) => ACTIVE.has(p.state));
  if (groupActive.length > 0)
    return { action: "wait", reason: `group busy with ${groupActive[0]?.id}` };
  const groupAhead = input.sameGroup.find((p) => WAITING.has(p.state) && earlier(p, e));
  if (groupAhead) return { action: "wait", reason: `group: ${groupAhead.id} is ahead` };

  const active = input.sameJob.filter((p) => ACTIVE.has(p.state));
  // Sibling shards are the same firing, not an overlap: the policy looks past them (concurrency
  // and the group still count them).
  const others = input.sameJob.filter((p) => e.shardOf == null || p.shardOf !== e.shardOf);
  // A firing waiting for its retry is still in flight: a later one would run beside its retry.
  const othersActive = others.filter((p) => ACTIVE.has(p.state) || p.state === "RETRY_WAITING");
  if (e.attempt === 1 && othersActive.length > 0) {
    const first = othersActive[0]?.id;
    switch (input.policy) {
      case "PARALLEL":
        break;
      case "SKIP":
        return { action: "skip", reason: `overlap SKIP: ${first} is still running` };
      case "QUEUE": {
        const ahead = others.filter((p) => p.state === "PENDING" && earlier(p, e)).length;
        if (ahead >= input.queueMax) {
          return {
            action: "skip",
            reason: `overlap QUEUE full: ${ahead} already waiting (queueMax ${input.queueMax})`,
          };
        }
        return { action: "wait", reason: `overlap QUEUE: waiting for ${first}` };
      }
      case "REPLACE":
        return {
          action: "replace",
          cancel: othersActive.map((p) => p.id),
          reason: `overlap REPLACE: canceling ${first}`,
        };
    }
  }
  if (e.attempt === 1 && input.policy === "QUEUE") {
    // FIFO: an older pending one of the same job goes first.
    const older = others.find((p) => p.state === "PENDING" && earlier(p, e));
    if (older) return { action: "wait", reason: `overlap QUEUE: ${older.id} is ahead` };
  }
  if (input.concurrency !== undefined && active.length >= input.concurrency) {
    return { action: "wait", reason: `job concurrency ${input.concurrency} reached` };
  }
  return { action: "dispatch" };
}
