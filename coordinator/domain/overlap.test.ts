import { describe, expect, it } from "vitest";
import {
  decideOverlap,
  type OverlapDecision,
  type OverlapInput,
  type OverlapPolicy,
  type Peer,
} from "./overlap.js";

const POLICIES: readonly OverlapPolicy[] = ["PARALLEL", "SKIP", "QUEUE", "REPLACE"];
const ACTIVE_STATES = ["DISPATCHED", "SCHEDULED", "RUNNING"] as const;
const WAITING_STATES = ["PENDING", "RETRY_WAITING"] as const;

/** The execution decided for is `e`, created at 1000. */
const NOW = 1_000;

const peer = (id: string, state: string, createdAt: number, shardOf?: string): Peer =>
  shardOf === undefined ? { id, state, createdAt } : { id, state, createdAt, shardOf };

function input(
  o: Partial<OverlapInput> & { attempt?: number; shardOf?: string } = {},
): OverlapInput {
  const { attempt = 1, shardOf, ...rest } = o;
  return {
    execution:
      shardOf === undefined
        ? { id: "e", attempt, createdAt: NOW }
        : { id: "e", attempt, createdAt: NOW, shardOf },
    policy: "PARALLEL",
    queueMax: 10,
    sameJob: [],
    sameGroup: [],
    ...rest,
  };
}

const dispatch: OverlapDecision = { action: "dispatch" };
const wait = (reason: string): OverlapDecision => ({ action: "wait", reason });
const skip = (reason: string): OverlapDecision => ({ action: "skip", reason });
const replace = (cancel: string[], reason: string): OverlapDecision => ({
  action: "replace",
  cancel,
  reason,
});

interface Case {
  name: string;
  in: OverlapInput;
  want: OverlapDecision;
}

const cases: Case[] = [
  // Nothing else in flight: every policy dispatches, first attempt or retry.
  ...POLICIES.flatMap((policy): Case[] => [
    { name: `${policy}: no peers`, in: input({ policy }), want: dispatch },
    { name: `${policy}: no peers, retry`, in: input({ policy, attempt: 2 }), want: dispatch },
    {
      name: `${policy}: no peers, concurrency 1`,
      in: input({ policy, concurrency: 1 }),
      want: dispatch,
    },
    {
      name: `${policy}: only a newer PENDING peer`,
      in: input({ policy, sameJob: [peer("n", "PENDING", NOW + 1)] }),
      want: dispatch,
    },
    {
      // A firing waiting for its retry is in flight: its retry would run beside this one.
      name: `${policy}: only a RETRY_WAITING peer (a firing still in flight)`,
      in: input({ policy, sameJob: [peer("r", "RETRY_WAITING", NOW - 500)] }),
      want: {
        PARALLEL: dispatch,
        SKIP: skip("overlap SKIP: r is still running"),
        QUEUE: wait("overlap QUEUE: waiting for r"),
        REPLACE: replace(["r"], "overlap REPLACE: canceling r"),
      }[policy],
    },
    {
      name: `${policy}: only peers in other, non-blocking states`,
      in: input({
        policy,
        sameJob: [peer("x", "SUCCEEDED", NOW - 5), peer("y", "WHATEVER", NOW - 4)],
      }),
      want: dispatch,
    },
  ]),

  // SKIP: a running peer makes a new firing SKIPPED, naming it.
  ...ACTIVE_STATES.map(
    (state): Case => ({
      name: `SKIP: a ${state} peer`,
      in: input({ policy: "SKIP", sameJob: [peer("a1", state, NOW - 100)] }),
      want: skip("overlap SKIP: a1 is still running"),
    }),
  ),
  {
    name: "SKIP: names the first active peer, ignoring waiting ones",
    in: input({
      policy: "SKIP",
      sameJob: [peer("p0", "PENDING", NOW - 300), peer("a1", "RUNNING", NOW - 200)],
    }),
    want: skip("overlap SKIP: a1 is still running"),
  },
  {
    name: "SKIP: a newer active peer counts too",
    in: input({ policy: "SKIP", sameJob: [peer("a9", "DISPATCHED", NOW + 50)] }),
    want: skip("overlap SKIP: a9 is still running"),
  },

  // PARALLEL: runs alongside.
  {
    name: "PARALLEL: active peers, no concurrency limit",
    in: input({
      policy: "PARALLEL",
      sameJob: [peer("a1", "RUNNING", NOW - 200), peer("a2", "SCHEDULED", NOW - 100)],
    }),
    want: dispatch,
  },

  // QUEUE: serial, bounded by queueMax older PENDING ones.
  {
    name: "QUEUE: waits for the running peer",
    in: input({ policy: "QUEUE", sameJob: [peer("a1", "RUNNING", NOW - 200)] }),
    want: wait("overlap QUEUE: waiting for a1"),
  },
  {
    name: "QUEUE: queueMax 2, one older PENDING: waits",
    in: input({
      policy: "QUEUE",
      queueMax: 2,
      sameJob: [peer("a1", "RUNNING", NOW - 300), peer("p1", "PENDING", NOW - 100)],
    }),
    want: wait("overlap QUEUE: waiting for a1"),
  },
  {
    name: "QUEUE: queueMax 2, two older PENDING: skipped",
    in: input({
      policy: "QUEUE",
      queueMax: 2,
      sameJob: [
        peer("a1", "RUNNING", NOW - 300),
        peer("p1", "PENDING", NOW - 200),
        peer("p2", "PENDING", NOW - 100),
      ],
    }),
    want: skip("overlap QUEUE full: 2 already waiting (queueMax 2)"),
  },
  {
    name: "QUEUE: queueMax 2, three older PENDING: skipped, counting all three",
    in: input({
      policy: "QUEUE",
      queueMax: 2,
      sameJob: [
        peer("a1", "RUNNING", NOW - 400),
        peer("p1", "PENDING", NOW - 300),
        peer("p2", "PENDING", NOW - 200),
        peer("p3", "PENDING", NOW - 100),
      ],
    }),
    want: skip("overlap QUEUE full: 3 already waiting (queueMax 2)"),
  },
  {
    name: "QUEUE: queueMax 0 is no queue at all",
    in: input({ policy: "QUEUE", queueMax: 0, sameJob: [peer("a1", "RUNNING", NOW - 200)] }),
    want: skip("overlap QUEUE full: 0 already waiting (queueMax 0)"),
  },
  {
    name: "QUEUE: newer PENDING and RETRY_WAITING peers do not fill the queue",
    in: input({
      policy: "QUEUE",
      queueMax: 1,
      sameJob: [
        peer("a1", "RUNNING", NOW - 300),
        peer("r1", "RETRY_WAITING", NOW - 200),
        peer("n1", "PENDING", NOW + 100),
        peer("n2", "PENDING", NOW + 200),
      ],
    }),
    want: wait("overlap QUEUE: waiting for a1"),
  },
  {
    name: "QUEUE: a PENDING peer created at the same time with a smaller id is ahead",
    in: input({
      policy: "QUEUE",
      queueMax: 1,
      sameJob: [peer("a1", "RUNNING", NOW - 300), peer("d", "PENDING", NOW)],
    }),
    want: skip("overlap QUEUE full: 1 already waiting (queueMax 1)"),
  },
  {
    name: "QUEUE: a PENDING peer created at the same time with a larger id is behind",
    in: input({
      policy: "QUEUE",
      queueMax: 1,
      sameJob: [peer("a1", "RUNNING", NOW - 300), peer("f", "PENDING", NOW)],
    }),
    want: wait("overlap QUEUE: waiting for a1"),
  },
  // QUEUE FIFO with nothing active.
  {
    name: "QUEUE FIFO: an older PENDING peer goes first though nothing is active",
    in: input({ policy: "QUEUE", sameJob: [peer("p1", "PENDING", NOW - 100)] }),
    want: wait("overlap QUEUE: p1 is ahead"),
  },
  {
    name: "QUEUE FIFO: names the first older PENDING peer listed",
    in: input({
      policy: "QUEUE",
      queueMax: 1,
      sameJob: [
        peer("n1", "PENDING", NOW + 100),
        peer("p2", "PENDING", NOW - 100),
        peer("p1", "PENDING", NOW - 200),
      ],
    }),
    want: wait("overlap QUEUE: p2 is ahead"),
  },
  {
    name: "QUEUE FIFO: same createdAt, smaller id is ahead",
    in: input({ policy: "QUEUE", sameJob: [peer("d", "PENDING", NOW)] }),
    want: wait("overlap QUEUE: d is ahead"),
  },
  {
    name: "QUEUE FIFO: same createdAt, larger id is behind",
    in: input({ policy: "QUEUE", sameJob: [peer("f", "PENDING", NOW)] }),
    want: dispatch,
  },
  {
    name: "QUEUE: an older firing waiting for its retry holds a new one back",
    in: input({ policy: "QUEUE", sameJob: [peer("r1", "RETRY_WAITING", NOW - 100)] }),
    want: wait("overlap QUEUE: waiting for r1"),
  },
  ...(["PARALLEL", "SKIP", "REPLACE"] as const).map(
    (policy): Case => ({
      name: `${policy}: an older PENDING peer does not hold it back (FIFO is QUEUE's)`,
      in: input({ policy, sameJob: [peer("p1", "PENDING", NOW - 100)] }),
      want: dispatch,
    }),
  ),

  // REPLACE: cancels every active peer, none of the waiting ones.
  {
    name: "REPLACE: one running peer",
    in: input({ policy: "REPLACE", sameJob: [peer("a1", "RUNNING", NOW - 100)] }),
    want: replace(["a1"], "overlap REPLACE: canceling a1"),
  },
  {
    name: "REPLACE: lists every peer in flight, in order (a retry awaited too), no pending one",
    in: input({
      policy: "REPLACE",
      sameJob: [
        peer("a1", "DISPATCHED", NOW - 400),
        peer("p1", "PENDING", NOW - 300),
        peer("a2", "SCHEDULED", NOW - 200),
        peer("r1", "RETRY_WAITING", NOW - 150),
        peer("a3", "RUNNING", NOW - 100),
      ],
    }),
    want: replace(["a1", "a2", "r1", "a3"], "overlap REPLACE: canceling a1"),
  },
  {
    name: "REPLACE: goes ahead of the concurrency limit",
    in: input({
      policy: "REPLACE",
      concurrency: 1,
      sameJob: [peer("a1", "RUNNING", NOW - 100)],
    }),
    want: replace(["a1"], "overlap REPLACE: canceling a1"),
  },

  // A retry is the same firing: no overlap policy, but concurrency and the group still apply.
  ...(["SKIP", "QUEUE", "REPLACE", "PARALLEL"] as const).flatMap((policy): Case[] => [
    {
      name: `${policy}: retry with an active peer dispatches`,
      in: input({
        policy,
        attempt: 2,
        queueMax: 0,
        sameJob: [peer("a1", "RUNNING", NOW - 200), peer("p1", "PENDING", NOW - 100)],
      }),
      want: dispatch,
    },
    {
      name: `${policy}: retry at the concurrency limit waits`,
      in: input({
        policy,
        attempt: 2,
        concurrency: 1,
        sameJob: [peer("a1", "RUNNING", NOW - 200)],
      }),
      want: wait("job concurrency 1 reached"),
    },
    {
      name: `${policy}: retry with the group busy waits`,
      in: input({ policy, attempt: 3, sameGroup: [peer("g1", "RUNNING", NOW - 200)] }),
      want: wait("group busy with g1"),
    },
    {
      name: `${policy}: retry behind an older waiting one in the group waits`,
      in: input({ policy, attempt: 2, sameGroup: [peer("g1", "PENDING", NOW - 200)] }),
      want: wait("group: g1 is ahead"),
    },
  ]),

  // Concurrency.
  {
    name: "concurrency 2, one active: dispatches",
    in: input({ concurrency: 2, sameJob: [peer("a1", "RUNNING", NOW - 100)] }),
    want: dispatch,
  },
  {
    name: "concurrency 2, two active: waits",
    in: input({
      concurrency: 2,
      sameJob: [peer("a1", "RUNNING", NOW - 200), peer("a2", "DISPATCHED", NOW - 100)],
    }),
    want: wait("job concurrency 2 reached"),
  },
  {
    name: "concurrency 2, three active: waits",
    in: input({
      concurrency: 2,
      sameJob: [
        peer("a1", "RUNNING", NOW - 300),
        peer("a2", "RUNNING", NOW - 200),
        peer("a3", "SCHEDULED", NOW - 100),
      ],
    }),
    want: wait("job concurrency 2 reached"),
  },
  {
    name: "concurrency 1: waiting peers do not count",
    in: input({
      concurrency: 1,
      sameJob: [peer("p1", "PENDING", NOW - 200), peer("r1", "RETRY_WAITING", NOW - 100)],
    }),
    want: dispatch,
  },
  {
    name: "concurrency undefined: no limit",
    in: input({
      concurrency: undefined,
      sameJob: [peer("a1", "RUNNING", NOW - 200), peer("a2", "RUNNING", NOW - 100)],
    }),
    want: dispatch,
  },
  {
    name: "QUEUE FIFO comes before the concurrency limit",
    in: input({
      policy: "QUEUE",
      concurrency: 5,
      sameJob: [peer("p1", "PENDING", NOW - 100)],
    }),
    want: wait("overlap QUEUE: p1 is ahead"),
  },

  // Groups: one active at a time across jobs, FIFO.
  ...ACTIVE_STATES.map(
    (state): Case => ({
      name: `group: a ${state} execution of another job: waits`,
      in: input({ sameGroup: [peer("g1", state, NOW - 100)] }),
      want: wait("group busy with g1"),
    }),
  ),
  {
    name: "group: a newer active one still blocks",
    in: input({ sameGroup: [peer("g9", "RUNNING", NOW + 100)] }),
    want: wait("group busy with g9"),
  },
  {
    name: "group: names the first active one listed",
    in: input({
      sameGroup: [
        peer("g0", "PENDING", NOW - 300),
        peer("g2", "RUNNING", NOW - 100),
        peer("g1", "SCHEDULED", NOW - 200),
      ],
    }),
    want: wait("group busy with g2"),
  },
  ...WAITING_STATES.map(
    (state): Case => ({
      name: `group: an older ${state} one is ahead`,
      in: input({ sameGroup: [peer("g1", state, NOW - 100)] }),
      want: wait("group: g1 is ahead"),
    }),
  ),
  ...WAITING_STATES.map(
    (state): Case => ({
      name: `group: a newer ${state} one is behind`,
      in: input({ sameGroup: [peer("g1", state, NOW + 100)] }),
      want: dispatch,
    }),
  ),
  {
    name: "group: same createdAt, smaller id is ahead",
    in: input({ sameGroup: [peer("d", "PENDING", NOW)] }),
    want: wait("group: d is ahead"),
  },
  {
    name: "group: same createdAt, larger id is behind",
    in: input({ sameGroup: [peer("f", "PENDING", NOW)] }),
    want: dispatch,
  },
  {
    name: 'group: ids compare as strings ("e" < "e10")',
    in: input({ sameGroup: [peer("e10", "PENDING", NOW)] }),
    want: dispatch,
  },
  {
    name: "group: terminal or unknown states neither block nor queue",
    in: input({
      sameGroup: [peer("g1", "SUCCEEDED", NOW - 200), peer("g2", "CANCELED", NOW - 100)],
    }),
    want: dispatch,
  },
  {
    name: "group comes before the overlap policy (SKIP would skip)",
    in: input({
      policy: "SKIP",
      sameJob: [peer("a1", "RUNNING", NOW - 200)],
      sameGroup: [peer("a1", "RUNNING", NOW - 200)],
    }),
    want: wait("group busy with a1"),
  },
  {
    name: "group ahead comes before REPLACE",
    in: input({
      policy: "REPLACE",
      sameJob: [peer("a1", "RUNNING", NOW - 300)],
      sameGroup: [peer("g1", "PENDING", NOW - 200)],
    }),
    want: wait("group: g1 is ahead"),
  },
  {
    name: "group clear, then the job's policy applies",
    in: input({
      policy: "SKIP",
      sameJob: [peer("a1", "RUNNING", NOW - 200)],
      sameGroup: [peer("g1", "PENDING", NOW + 100)],
    }),
    want: skip("overlap SKIP: a1 is still running"),
  },

  // Shards of one firing are one firing: the overlap policy looks past sibling shards,
  // while the concurrency limit and the group still count them.
  {
    name: "shards: SKIP does not skip a sibling shard of the running one",
    in: input({
      policy: "SKIP",
      shardOf: "f1",
      sameJob: [peer("s0", "RUNNING", NOW, "f1")],
    }),
    want: dispatch,
  },
  {
    name: "shards: SKIP still skips when another firing's shard runs",
    in: input({
      policy: "SKIP",
      shardOf: "f2",
      sameJob: [peer("s0", "RUNNING", NOW - 100, "f1"), peer("t0", "RUNNING", NOW, "f2")],
    }),
    want: skip("overlap SKIP: s0 is still running"),
  },
  {
    name: "shards: REPLACE cancels the older firing's shards, not its siblings",
    in: input({
      policy: "REPLACE",
      shardOf: "f2",
      sameJob: [
        peer("s0", "RUNNING", NOW - 100, "f1"),
        peer("s1", "RUNNING", NOW - 100, "f1"),
        peer("t0", "DISPATCHED", NOW, "f2"),
      ],
    }),
    want: replace(["s0", "s1"], "overlap REPLACE: canceling s0"),
  },
  {
    name: "shards: QUEUE neither waits for nor counts sibling shards",
    in: input({
      policy: "QUEUE",
      queueMax: 1,
      shardOf: "f1",
      sameJob: [peer("s0", "RUNNING", NOW, "f1"), peer("a", "PENDING", NOW, "f1")],
    }),
    want: dispatch,
  },
  {
    name: "shards: QUEUE waits for the older firing, sibling shards not counted as queued",
    in: input({
      policy: "QUEUE",
      queueMax: 1,
      shardOf: "f2",
      sameJob: [peer("s0", "RUNNING", NOW - 100, "f1"), peer("a", "PENDING", NOW, "f2")],
    }),
    want: wait("overlap QUEUE: waiting for s0"),
  },
  {
    name: "shards: peers without shardOf are not siblings",
    in: input({ policy: "SKIP", shardOf: "f1", sameJob: [peer("a1", "RUNNING", NOW - 100)] }),
    want: skip("overlap SKIP: a1 is still running"),
  },
  {
    name: "shards: an execution without shardOf has no siblings",
    in: input({ policy: "SKIP", sameJob: [peer("s0", "RUNNING", NOW, "f1")] }),
    want: skip("overlap SKIP: s0 is still running"),
  },
  {
    name: "shards: sibling shards count toward the concurrency limit",
    in: input({
      policy: "SKIP",
      shardOf: "f1",
      concurrency: 1,
      sameJob: [peer("s0", "RUNNING", NOW, "f1")],
    }),
    want: wait("job concurrency 1 reached"),
  },
  {
    name: "shards: sibling shards in a group still run one at a time",
    in: input({ shardOf: "f1", sameGroup: [peer("s0", "RUNNING", NOW, "f1")] }),
    want: wait("group busy with s0"),
  },
];

describe("decideOverlap", () => {
  it.each(cases)("$name", ({ in: i, want }) => {
    expect(decideOverlap(i)).toEqual(want);
  });

  it("does not mutate its input", () => {
    const i = input({
      policy: "REPLACE",
      sameJob: [peer("a1", "RUNNING", NOW - 100), peer("a2", "RUNNING", NOW - 50)],
      sameGroup: [peer("g1", "PENDING", NOW + 5)],
    });
    const copy = structuredClone(i);
    decideOverlap(i);
    expect(i).toEqual(copy);
  });

  it("QUEUE drains one at a time, oldest first", () => {
    // Four firings of a QUEUE job; a1 runs. Each step dispatches whatever decideOverlap allows.
    const states = new Map<string, string>([
      ["a1", "RUNNING"],
      ["p1", "PENDING"],
      ["p2", "PENDING"],
      ["p3", "PENDING"],
    ]);
    const createdAt: Record<string, number> = { a1: 1, p1: 2, p2: 3, p3: 4 };
    const order: string[] = [];
    const decide = (id: string): OverlapDecision =>
      decideOverlap({
        execution: { id, attempt: 1, createdAt: createdAt[id] ?? 0 },
        policy: "QUEUE",
        queueMax: 5,
        sameJob: [...states]
          .filter(([other]) => other !== id)
          .map(([other, state]) => peer(other, state, createdAt[other] ?? 0)),
        sameGroup: [],
      });
    for (let step = 0; step < 4; step++) {
      // The running one finishes; every pending one asks, in reverse to show order is not luck.
      for (const [id, state] of states) if (state === "RUNNING") states.delete(id);
      const pending = [...states].filter(([, s]) => s === "PENDING").map(([id]) => id);
      const go = pending.reverse().filter((id) => decide(id).action === "dispatch");
      expect(go.length).toBeLessThanOrEqual(1);
      for (const id of go) {
        states.set(id, "RUNNING");
        order.push(id);
      }
    }
    expect(order).toEqual(["p1", "p2", "p3"]);
  });
});
