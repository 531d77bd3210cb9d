import { describe, expect, it } from "vitest";
import { eligibleAgents, type RoutableAgent, roundRobin } from "./routing.js";

interface Agent extends RoutableAgent {
  live: boolean;
}

const agent = (agentId: string, handlers: string[] = ["echo"], live = true): Agent => ({
  agentId,
  handlers,
  live,
});

/** Picks `n` times in a row, remembering the cursor as the dispatcher does. */
function rotate(candidates: readonly Agent[], n: number, cursor?: string): string[] {
  const picked: string[] = [];
  let last = cursor;
  for (let i = 0; i < n; i++) {
    const chosen = roundRobin(candidates, last);
    if (!chosen) throw new Error("no agent chosen");
    picked.push(chosen.agentId);
    last = chosen.agentId;
  }
  return picked;
}

describe("roundRobin", () => {
  // Given out of order on purpose: the rotation follows agentId order, not list order.
  const abc = [agent("c"), agent("a"), agent("b")];

  it("starts at the lowest agentId without a cursor", () => {
    expect(roundRobin(abc, undefined)?.agentId).toBe("a");
  });

  it("rotates in agentId order and wraps", () => {
    expect(rotate(abc, 7)).toEqual(["a", "b", "c", "a", "b", "c", "a"]);
  });

  it("continues after the cursor", () => {
    expect(roundRobin(abc, "a")?.agentId).toBe("b");
    expect(roundRobin(abc, "b")?.agentId).toBe("c");
    expect(roundRobin(abc, "c")?.agentId).toBe("a");
  });

  it("returns the candidate object itself", () => {
    const chosen = roundRobin(abc, "a");
    expect(chosen).toBe(abc[2]);
  });

  it("does not reorder the candidates it was given", () => {
    const list = [agent("c"), agent("a"), agent("b")];
    roundRobin(list, undefined);
    expect(list.map((a) => a.agentId)).toEqual(["c", "a", "b"]);
  });

  it("the last chosen agent disappeared: the next one after it in order", () => {
    expect(roundRobin([agent("a"), agent("c")], "b")?.agentId).toBe("c");
  });

  it("the last chosen agent was the highest and disappeared: wraps to the first", () => {
    expect(roundRobin([agent("a"), agent("b")], "c")?.agentId).toBe("a");
  });

  it("a single candidate is chosen every time, whatever the cursor", () => {
    expect(rotate([agent("only")], 3, "zzz")).toEqual(["only", "only", "only"]);
  });

  it("orders by code unit, so agent-10 comes before agent-2", () => {
    const fleet = [agent("agent-2"), agent("agent-10"), agent("agent-1")];
    expect(rotate(fleet, 4)).toEqual(["agent-1", "agent-10", "agent-2", "agent-1"]);
  });

  it("no candidates → undefined", () => {
    expect(roundRobin([], undefined)).toBeUndefined();
    expect(roundRobin([], "a")).toBeUndefined();
  });

  it("an agent joining mid-rotation gets its turn in order", () => {
    const first = rotate(abc, 2); // a, b
    expect(first).toEqual(["a", "b"]);
    expect(rotate([...abc, agent("bb")], 3, "b")).toEqual(["bb", "c", "a"]);
  });
});

describe("eligibleAgents", () => {
  const fleet = [
    agent("a", ["echo", "sleep"]),
    agent("b", ["sleep"]),
    agent("c", ["echo"], false),
    agent("d", ["echo", "mqtt.publish"]),
    agent("e", []),
  ];
  const isLive = (a: Agent) => a.live;

  it("keeps live agents that have the handler, in the order given", () => {
    expect(eligibleAgents(fleet, "echo", isLive).map((a) => a.agentId)).toEqual(["a", "d"]);
    expect(eligibleAgents(fleet, "sleep", isLive).map((a) => a.agentId)).toEqual(["a", "b"]);
  });

  it("a handler only a dead agent has → none", () => {
    const deadOnly = [agent("x", ["fail"], false), agent("y", ["echo"])];
    expect(eligibleAgents(deadOnly, "fail", isLive)).toEqual([]);
  });

  it("matches handler names exactly", () => {
    expect(eligibleAgents(fleet, "mqtt", isLive)).toEqual([]);
    expect(eligibleAgents(fleet, "mqtt.publish", isLive).map((a) => a.agentId)).toEqual(["d"]);
  });

  it("feeds roundRobin: a dead agent is never chosen", () => {
    const candidates = eligibleAgents(fleet, "echo", isLive);
    expect(rotate(candidates, 4)).toEqual(["a", "d", "a", "d"]);
  });
});
