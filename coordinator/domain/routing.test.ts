import { describe, expect, it } from "vitest";
import { seededRandom } from "../../test/helpers/random.js";
import type { Routing } from "./job.js";
import {
  DEFAULT_VIRTUAL_NODES,
  eligibleAgents,
  HashRing,
  hash32,
  hashKeyValue,
  matchesSelector,
  placeShards,
  type RoutableAgent,
  type RouteRequest,
  Router,
  roundRobin,
  routingMemoryOf,
} from "./routing.js";

interface Agent extends RoutableAgent {
  live: boolean;
}

const agent = (
  agentId: string,
  handlers: string[] = ["echo"],
  live = true,
  more: Partial<RoutableAgent> = {},
): Agent => ({ agentId, handlers, live, tags: {}, load: 0, concurrency: 1, ...more });

const fleet = (ids: readonly string[]): Agent[] => ids.map((id) => agent(id));

const ids = (agents: readonly (RoutableAgent | undefined)[]): (string | undefined)[] =>
  agents.map((a) => a?.agentId);

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

/** `n` choices in a row, one millisecond apart, from `now` on. */
function chooseMany(
  router: Router,
  request: RouteRequest,
  candidates: readonly Agent[],
  n: number,
  now = 1_000,
): (string | undefined)[] {
  const picked: (string | undefined)[] = [];
  for (let i = 0; i < n; i++) picked.push(router.choose(request, candidates, now + i)?.agentId);
  return picked;
}

function tally(picked: readonly (string | undefined)[]): Map<string | undefined, number> {
  const counts = new Map<string | undefined, number>();
  for (const id of picked) counts.set(id, (counts.get(id) ?? 0) + 1);
  return counts;
}

const req = (routing: Routing, more: Partial<RouteRequest> = {}): RouteRequest => ({
  routing,
  key: "job-1",
  ...more,
});

describe("roundRobin", () => {
  // Given out of order on purpose: the rotation follows agentId order, not list order.
  const abc = [agent("c"), agent("a"), agent("b")];

  it("starts at the lowest agentId without a cursor or a key", () => {
    expect(roundRobin(abc, undefined)?.agentId).toBe("a");
  });

  it("starts where the key hashes to: jobs that fire together spread, and stay spread", () => {
    const agents = Array.from({ length: 10 }, (_, i) => agent(`dev-${i}`));
    const jobs = Array.from({ length: 200 }, (_, i) => `job-${i}`);
    const cursors = new Map<string, string | undefined>();
    for (let round = 0; round < 3; round++) {
      const load = new Map<string, number>();
      for (const job of jobs) {
        const chosen = roundRobin(agents, cursors.get(job), job)?.agentId as string;
        cursors.set(job, chosen);
        load.set(chosen, (load.get(chosen) ?? 0) + 1);
      }
      // Every agent gets some of each round, none more than twice its even share (20).
      expect(load.size, `round ${round}`).toBe(10);
      expect(Math.max(...load.values()), `round ${round}`).toBeLessThanOrEqual(40);
    }
    // The same key starts at the same agent in every process.
    expect(roundRobin(agents, undefined, "job-7")).toBe(roundRobin(agents, undefined, "job-7"));
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
    const agents = [agent("agent-2"), agent("agent-10"), agent("agent-1")];
    expect(rotate(agents, 4)).toEqual(["agent-1", "agent-10", "agent-2", "agent-1"]);
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

describe("matchesSelector", () => {
  const tags = { site: "plant-2", "hw.rev": "B" };

  it("an empty selector matches any tags", () => {
    expect(matchesSelector(tags, {})).toBe(true);
    expect(matchesSelector({}, {})).toBe(true);
  });

  it("needs every tag of the selector with the same value", () => {
    expect(matchesSelector(tags, { site: "plant-2" })).toBe(true);
    expect(matchesSelector(tags, { site: "plant-2", "hw.rev": "B" })).toBe(true);
    expect(matchesSelector(tags, { site: "plant-2", "hw.rev": "C" })).toBe(false);
    expect(matchesSelector(tags, { site: "plant-2", zone: "a" })).toBe(false);
  });

  it("compares values exactly", () => {
    expect(matchesSelector(tags, { site: "Plant-2" })).toBe(false);
    expect(matchesSelector(tags, { site: "" })).toBe(false);
    expect(matchesSelector({ site: "" }, { site: "" })).toBe(true);
  });

  it("does not take inherited properties for tags", () => {
    expect(matchesSelector({}, { constructor: "function Object() { [native code] }" })).toBe(false);
    expect(matchesSelector({}, { toString: "x" })).toBe(false);
  });
});

describe("eligibleAgents", () => {
  const agents = [
    agent("a", ["echo", "sleep"]),
    agent("b", ["sleep"]),
    agent("c", ["echo"], false),
    agent("d", ["echo", "mqtt.publish"]),
    agent("e", []),
  ];
  const isLive = (a: Agent) => a.live;

  it("keeps live agents that have the handler, in the order given", () => {
    expect(eligibleAgents(agents, "echo", isLive).map((a) => a.agentId)).toEqual(["a", "d"]);
    expect(eligibleAgents(agents, "sleep", isLive).map((a) => a.agentId)).toEqual(["a", "b"]);
  });

  it("a handler only a dead agent has → none", () => {
    const deadOnly = [agent("x", ["fail"], false), agent("y", ["echo"])];
    expect(eligibleAgents(deadOnly, "fail", isLive)).toEqual([]);
  });

  it("matches handler names exactly", () => {
    expect(eligibleAgents(agents, "mqtt", isLive)).toEqual([]);
    expect(eligibleAgents(agents, "mqtt.publish", isLive).map((a) => a.agentId)).toEqual(["d"]);
  });

  it("keeps only agents whose tags match the job's selector", () => {
    const tagged = [
      agent("a", ["echo"], true, { tags: { site: "x", rev: "B" } }),
      agent("b", ["echo"], true, { tags: { site: "y" } }),
      agent("c", ["echo"], false, { tags: { site: "x" } }),
      agent("d", ["echo"], true, { tags: { site: "x" } }),
    ];
    expect(ids(eligibleAgents(tagged, "echo", isLive, { site: "x" }))).toEqual(["a", "d"]);
    expect(ids(eligibleAgents(tagged, "echo", isLive, { site: "x", rev: "B" }))).toEqual(["a"]);
    expect(ids(eligibleAgents(tagged, "echo", isLive, {}))).toEqual(["a", "b", "d"]);
  });

  it("feeds roundRobin: a dead agent is never chosen", () => {
    const candidates = eligibleAgents(agents, "echo", isLive);
    expect(rotate(candidates, 4)).toEqual(["a", "d", "a", "d"]);
  });
});

describe("hash32", () => {
  it("is fixed across releases: a change would move every consistent-hash key", () => {
    expect([hash32(""), hash32("job-1"), hash32("agent-0"), hash32("é")]).toEqual([
      2872998923, 2094670749, 3641960893, 3136788073,
    ]);
  });

  it("spreads keys that differ only in their last characters evenly over 16 buckets", () => {
    const buckets = new Array<number>(16).fill(0);
    for (let i = 0; i < 160_000; i++) {
      const h = hash32(`job-${i}`);
      // Both the top bits (where a ring compares) and the low bits.
      buckets[h >>> 28] = (buckets[h >>> 28] as number) + 1;
      buckets[h & 15] = (buckets[h & 15] as number) + 1;
    }
    for (const count of buckets) expect(Math.abs(count - 20_000)).toBeLessThan(600);
  });
});

describe("hashKeyValue", () => {
  const params = {
    deviceId: "dev-7",
    device: { id: "dev-8", slot: 3, on: true, none: null, info: { b: 1, a: [2, "x"] } },
    sensors: ["s-1", "s-2"],
    n: 42,
  };

  it("reads a top-level string as it is", () => {
    expect(hashKeyValue(params, "deviceId")).toBe("dev-7");
  });

  it("follows a dotted path, through arrays by index", () => {
    expect(hashKeyValue(params, "device.id")).toBe("dev-8");
    expect(hashKeyValue(params, "sensors.1")).toBe("s-2");
  });

  it("stringifies other values canonically, object keys sorted", () => {
    expect(hashKeyValue(params, "n")).toBe("42");
    expect(hashKeyValue(params, "device.slot")).toBe("3");
    expect(hashKeyValue(params, "device.on")).toBe("true");
    expect(hashKeyValue(params, "device.none")).toBe("null");
    expect(hashKeyValue(params, "device.info")).toBe('{"a":[2,"x"],"b":1}');
    expect(hashKeyValue({ x: { b: { d: 1, c: 2 }, a: undefined } }, "x")).toBe(
      '{"b":{"c":2,"d":1}}',
    );
    expect(hashKeyValue({ x: [undefined, 1] }, "x")).toBe("[null,1]");
  });

  it("a number and its string hash alike; key order does not matter", () => {
    expect(hashKeyValue({ id: 42 }, "id")).toBe(hashKeyValue({ id: "42" }, "id"));
    expect(hashKeyValue({ id: { a: 1, b: 2 } }, "id")).toBe(
      hashKeyValue({ id: { b: 2, a: 1 } }, "id"),
    );
  });

  it("a path that is not there → undefined", () => {
    expect(hashKeyValue(params, "serial")).toBeUndefined();
    expect(hashKeyValue(params, "device.serial")).toBeUndefined();
    expect(hashKeyValue(params, "deviceId.length")).toBeUndefined();
    expect(hashKeyValue(params, "device.none.id")).toBeUndefined();
    expect(hashKeyValue(params, "sensors.2")).toBeUndefined();
    expect(hashKeyValue({ x: undefined }, "x")).toBeUndefined();
    expect(hashKeyValue(undefined, "x")).toBeUndefined();
  });

  it("does not read inherited properties", () => {
    expect(hashKeyValue(params, "constructor")).toBeUndefined();
    expect(hashKeyValue(params, "device.toString")).toBeUndefined();
    expect(hashKeyValue(params, "__proto__")).toBeUndefined();
  });
});

/** Agent id sets of different shapes, so a balance result is not one lucky set. */
function agentIdSets(): { name: string; ids: string[] }[] {
  const hex = (rnd: () => number, digits: number) =>
    Array.from({ length: digits }, () => Math.floor(rnd() * 16).toString(16)).join("");
  const r1 = seededRandom(11);
  const r2 = seededRandom(12);
  const r3 = seededRandom(13);
  return [
    { name: "agent-0..9", ids: Array.from({ length: 10 }, (_, i) => `agent-${i}`) },
    { name: "one letter apart", ids: Array.from("abcdefghij", (c) => `gw-${c}`) },
    { name: "random serials", ids: Array.from({ length: 10 }, () => `rpi-${hex(r1, 12)}`) },
    {
      name: "uuids",
      ids: Array.from(
        { length: 10 },
        () => `${hex(r2, 8)}-${hex(r2, 4)}-${hex(r2, 4)}-${hex(r2, 4)}-${hex(r2, 12)}`,
      ),
    },
    {
      name: "site names",
      ids: Array.from({ length: 10 }, (_, i) => `plant-${i}.line-${hex(r3, 2)}`),
    },
  ];
}

/** 100,000 keys of a few shapes: sequential job-like ids and random device ids. */
function keySet(seed: number): string[] {
  const rnd = seededRandom(seed);
  return Array.from({ length: 100_000 }, (_, i) =>
    seed % 2 === 0 ? `device-${Math.floor(rnd() * 2 ** 40).toString(36)}` : `job-${seed}-${i}`,
  );
}

describe("CONSISTENT_HASH", () => {
  const hashReq = (hashValue: string): RouteRequest =>
    req({ strategy: "CONSISTENT_HASH" }, { hashValue });

  it.each(agentIdSets().map((set, i) => ({ ...set, seed: i + 1 })))(
    "10 agents ($name) × 100,000 keys: every agent within ±10% of the mean, and removing one moves ~1/10 of the keys, all of them its own",
    ({ ids: agentIds, seed }) => {
      const router = new Router();
      const agents = fleet(agentIds);
      const keys = keySet(seed);
      const owner = keys.map((k) => router.choose(hashReq(k), agents, 0)?.agentId);
      const counts = tally(owner);
      expect(counts.size).toBe(10);
      for (const [id, count] of counts) {
        expect(Math.abs(count - 10_000), `${id} has ${count} keys`).toBeLessThanOrEqual(1_000);
      }

      const gone = agentIds[3] as string;
      const rest = agents.filter((a) => a.agentId !== gone);
      let moved = 0;
      let movedFromOthers = 0;
      keys.forEach((k, i) => {
        if (router.choose(hashReq(k), rest, 0)?.agentId === owner[i]) return;
        moved++;
        if (owner[i] !== gone) movedFromOthers++;
      });
      expect(movedFromOthers).toBe(0);
      expect(moved).toBe(counts.get(gone));
      expect(moved / keys.length).toBeGreaterThan(0.07);
      expect(moved / keys.length).toBeLessThan(0.13);
    },
  );

  it("an agent that comes back gets exactly its keys back; a new one takes keys only for itself", () => {
    const router = new Router();
    const agents = fleet(Array.from({ length: 10 }, (_, i) => `agent-${i}`));
    const keys = keySet(7).slice(0, 20_000);
    const before = keys.map((k) => router.choose(hashReq(k), agents, 0)?.agentId);
    const without = agents.slice(1);
    const away = keys.map((k) => router.choose(hashReq(k), without, 0)?.agentId);
    expect(away).not.toContain("agent-0");
    expect(keys.map((k) => router.choose(hashReq(k), agents, 0)?.agentId)).toEqual(before);

    const grown = [...agents, agent("agent-new")];
    let taken = 0;
    keys.forEach((k, i) => {
      const now = router.choose(hashReq(k), grown, 0)?.agentId;
      if (now !== before[i]) {
        taken++;
        expect(now).toBe("agent-new");
      }
    });
    // About 1/11 of the keys.
    expect(taken / keys.length).toBeGreaterThan(0.06);
    expect(taken / keys.length).toBeLessThan(0.12);
  });

  it("depends on the set of candidates, not their order, and returns one of them", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c", "d", "e"]);
    const reversed = [...agents].reverse();
    for (const k of keySet(3).slice(0, 2_000)) {
      const chosen = router.choose(hashReq(k), reversed, 0);
      expect(chosen?.agentId).toBe(router.choose(hashReq(k), agents, 0)?.agentId);
      expect(reversed).toContain(chosen);
    }
  });

  it("agrees with a ring built directly, and the same key always gets the same agent", () => {
    const router = new Router();
    const agentIds = ["n1", "n2", "n3", "n4"];
    const ring = HashRing.build(agentIds, DEFAULT_VIRTUAL_NODES);
    for (const k of keySet(5).slice(0, 2_000)) {
      const chosen = router.choose(hashReq(k), fleet(agentIds), 0)?.agentId;
      expect(chosen).toBe(ring.ownerOf(k));
      expect(router.choose(hashReq(k), fleet(agentIds), 0)?.agentId).toBe(chosen);
    }
  });

  it("without a hash value hashes the request's key", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c", "d", "e", "f"]);
    const ring = HashRing.build(["a", "b", "c", "d", "e", "f"]);
    const chosen = new Set<string | undefined>();
    for (let j = 0; j < 200; j++) {
      const key = `job-${j}`;
      const picked = router.choose(req({ strategy: "CONSISTENT_HASH" }, { key }), agents, 0);
      expect(picked?.agentId).toBe(ring.ownerOf(key));
      chosen.add(picked?.agentId);
    }
    expect(chosen.size).toBe(6);
  });

  it("uses the job's virtualNodes", () => {
    const router = new Router();
    const agentIds = ["a", "b", "c"];
    const few = HashRing.build(agentIds, 4);
    const many = HashRing.build(agentIds, DEFAULT_VIRTUAL_NODES);
    expect([few.size, many.size]).toEqual([12, 3 * DEFAULT_VIRTUAL_NODES]);
    const routing: Routing = { strategy: "CONSISTENT_HASH", virtualNodes: 4 };
    let differs = 0;
    for (const k of keySet(9).slice(0, 1_000)) {
      const chosen = router.choose(req(routing, { hashValue: k }), fleet(agentIds), 0)?.agentId;
      expect(chosen).toBe(few.ownerOf(k));
      if (chosen !== many.ownerOf(k)) differs++;
    }
    expect(differs).toBeGreaterThan(50);
  });

  it("builds a ring once per candidate set and keeps it", () => {
    const router = new Router();
    const agentIds = Array.from({ length: 10 }, (_, i) => `agent-${i}`);
    for (let i = 0; i < 1_000; i++) router.choose(hashReq(`k${i}`), fleet(agentIds), i);
    expect(router.cachedRings).toBe(1);
    router.choose(hashReq("k"), fleet(agentIds.slice(1)), 0);
    expect(router.cachedRings).toBe(2);
    router.choose(hashReq("k"), fleet(agentIds), 0);
    expect(router.cachedRings).toBe(2);
  });

  it("drops the least recently used rings past maxRingPoints, and forgetAgent drops its rings", () => {
    // Room for two 3-agent rings at the default virtual nodes.
    const router = new Router({ maxRingPoints: 2 * 3 * DEFAULT_VIRTUAL_NODES });
    router.choose(hashReq("k"), fleet(["a", "b", "c"]), 0);
    router.choose(hashReq("k"), fleet(["a", "b", "d"]), 0);
    router.choose(hashReq("k"), fleet(["a", "b", "c"]), 0); // used again: the newest
    router.choose(hashReq("k"), fleet(["a", "b", "e"]), 0); // drops a,b,d
    expect(router.cachedRings).toBe(2);
    router.forgetAgent("c");
    expect(router.cachedRings).toBe(1);
    // A ring bigger than the whole budget is still used.
    const tiny = new Router({ maxRingPoints: 10 });
    expect(tiny.choose(hashReq("k"), fleet(["a", "b"]), 0)?.agentId).toMatch(/^[ab]$/);
    expect(tiny.cachedRings).toBe(1);
  });

  it("no candidates → undefined", () => {
    expect(new Router().choose(hashReq("k"), [], 0)).toBeUndefined();
  });
});

describe("FIRST", () => {
  it("the lowest agentId, whatever the order given; the next one when it goes", () => {
    const router = new Router();
    const r = req({ strategy: "FIRST" });
    expect(chooseMany(router, r, fleet(["c", "a", "b"]), 3)).toEqual(["a", "a", "a"]);
    expect(router.choose(r, fleet(["c", "b"]), 0)?.agentId).toBe("b");
  });
});

describe("ROUND_ROBIN", () => {
  it("spreads exactly evenly", () => {
    const router = new Router();
    const counts = tally(
      chooseMany(router, req({ strategy: "ROUND_ROBIN" }), fleet(["c", "a", "b", "d"]), 4_000),
    );
    expect([...counts.entries()].sort()).toEqual([
      ["a", 1_000],
      ["b", 1_000],
      ["c", 1_000],
      ["d", 1_000],
    ]);
  });

  it("keeps one rotation per key", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c"]);
    const one = req({ strategy: "ROUND_ROBIN" }, { key: "job-1" });
    const two = req({ strategy: "ROUND_ROBIN" }, { key: "handler:echo" });
    const picked = [
      router.choose(one, agents, 0),
      router.choose(one, agents, 0),
      router.choose(two, agents, 0),
      router.choose(one, agents, 0),
      router.choose(two, agents, 0),
    ];
    // Each key from the agent it hashes to, then in agentId order.
    const from = (key: string, n: number) => {
      const start = ["a", "b", "c"].indexOf(roundRobin(agents, undefined, key)?.agentId ?? "");
      return Array.from({ length: n }, (_, i) => ["a", "b", "c"][(start + i) % 3]);
    };
    const [o1, o2, o3] = from("job-1", 3);
    const [t1, t2] = from("handler:echo", 2);
    expect(ids(picked)).toEqual([o1, o2, t1, o3, t2]);
  });

  it("ignores a shard: each execution of a sharded job just takes the next agent", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c"]);
    const picked = [0, 1, 2, 3].map((index) =>
      router.choose(req({ strategy: "ROUND_ROBIN" }, { shard: { index, total: 4 } }), agents, 0),
    );
    expect(ids(picked)).toEqual(["a", "b", "c", "a"]);
  });

  it("forgetKey starts the rotation over", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c"]);
    const r = req({ strategy: "ROUND_ROBIN" });
    expect(chooseMany(router, r, agents, 2)).toEqual(["a", "b"]);
    router.forgetKey("job-1");
    expect(router.choose(r, agents, 0)?.agentId).toBe("a");
  });
});

describe("RANDOM", () => {
  it.each([1, 2, 3])("is roughly uniform with a seeded source (seed %i)", (seed) => {
    const router = new Router();
    const random = seededRandom(seed);
    const agents = fleet(["a", "b", "c", "d", "e"]);
    const counts = tally(
      chooseMany(router, req({ strategy: "RANDOM" }, { random }), agents, 50_000),
    );
    expect(counts.size).toBe(5);
    // 10,000 expected each; one standard deviation is about 90.
    for (const count of counts.values()) expect(Math.abs(count - 10_000)).toBeLessThan(400);
  });

  it("maps the source's range onto the candidates in the order given", () => {
    const router = new Router();
    const agents = fleet(["c", "a", "b"]);
    const at = (x: number) =>
      router.choose(req({ strategy: "RANDOM" }, { random: () => x }), agents, 0)?.agentId;
    expect([at(0), at(0.34), at(0.67), at(0.999_999)]).toEqual(["c", "a", "b", "b"]);
    // A source that breaks its contract still gets a candidate.
    expect(at(1)).toBe("b");
  });
});

describe("LEAST_LOADED", () => {
  const r = (inFlight?: (agentId: string) => number) =>
    req({ strategy: "LEAST_LOADED" }, { inFlight });

  it("prefers the lower heartbeat load", () => {
    const agents = [
      agent("a", ["echo"], true, { load: 0.75, concurrency: 4 }),
      agent("b", ["echo"], true, { load: 0.25, concurrency: 4 }),
      agent("c", ["echo"], true, { load: 0.5, concurrency: 4 }),
    ];
    expect(new Router().choose(r(), agents, 0)?.agentId).toBe("b");
  });

  it("adds in-flight executions relative to concurrency", () => {
    // a: 0.5 + 0/4 = 0.5; b: 0 + 2/2 = 1; c: 0.25 + 2/8 = 0.5 → a or c, a by agentId.
    const agents = [
      agent("a", ["echo"], true, { load: 0.5, concurrency: 4 }),
      agent("b", ["echo"], true, { load: 0, concurrency: 2 }),
      agent("c", ["echo"], true, { load: 0.25, concurrency: 8 }),
    ];
    const inFlight = (id: string) => ({ a: 0, b: 2, c: 2 })[id] ?? 0;
    expect(new Router().choose(r(inFlight), agents, 0)?.agentId).toBe("a");
    const more = (id: string) => ({ a: 1, b: 2, c: 2 })[id] ?? 0;
    expect(new Router().choose(r(more), agents, 0)?.agentId).toBe("c");
  });

  it("fills agents in proportion to their concurrency as in-flight counts rise", () => {
    const router = new Router();
    const agents = [
      agent("big", ["echo"], true, { concurrency: 6 }),
      agent("small", ["echo"], true, { concurrency: 2 }),
    ];
    const inFlight = new Map<string, number>();
    const picked: (string | undefined)[] = [];
    for (let i = 0; i < 16; i++) {
      const chosen = router.choose(
        r((id) => inFlight.get(id) ?? 0),
        agents,
        i,
      )?.agentId;
      picked.push(chosen);
      if (chosen) inFlight.set(chosen, (inFlight.get(chosen) ?? 0) + 1);
    }
    expect(tally(picked)).toEqual(
      new Map([
        ["big", 12],
        ["small", 4],
      ]),
    );
  });

  it("breaks ties by least recent use, so an idle fleet is used in turn", () => {
    const router = new Router();
    const agents = fleet(["c", "a", "b"]);
    expect(chooseMany(router, r(), agents, 6)).toEqual(["a", "b", "c", "a", "b", "c"]);
  });
});

describe("LEAST_RECENTLY_USED", () => {
  const r = req({ strategy: "LEAST_RECENTLY_USED" });

  it("cycles through the agents, never-used ones first in agentId order", () => {
    const router = new Router();
    expect(chooseMany(router, r, fleet(["b", "c", "a"]), 7)).toEqual([
      "a",
      "b",
      "c",
      "a",
      "b",
      "c",
      "a",
    ]);
  });

  it("still cycles when every choice happens in the same millisecond", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c"]);
    const picked = [0, 1, 2, 3, 4, 5].map(() => router.choose(r, agents, 5_000)?.agentId);
    expect(picked).toEqual(["a", "b", "c", "a", "b", "c"]);
  });

  it("a new agent is used next; a dispatch noted elsewhere counts as a use", () => {
    const router = new Router();
    const agents = fleet(["a", "b"]);
    expect(chooseMany(router, r, agents, 2, 100)).toEqual(["a", "b"]);
    expect(router.choose(r, [...agents, agent("z")], 200)?.agentId).toBe("z");
    router.noteDispatched("a", 300);
    expect(router.choose(r, [...agents, agent("z")], 400)?.agentId).toBe("b");
  });

  it("is shared across jobs: it balances the agents, not one job", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c"]);
    const picked = ["j1", "j2", "j3", "j1"].map(
      (key, i) => router.choose({ ...r, key }, agents, i)?.agentId,
    );
    expect(picked).toEqual(["a", "b", "c", "a"]);
  });
});

describe("STICKY", () => {
  const sticky = (hashValue?: string) => req({ strategy: "STICKY" }, { hashValue });

  it("without a success yet, routes as CONSISTENT_HASH", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c", "d"]);
    const ring = HashRing.build(["a", "b", "c", "d"]);
    expect(router.choose(sticky(), agents, 0)?.agentId).toBe(ring.ownerOf("job-1"));
    expect(router.choose(sticky("dev-9"), agents, 0)?.agentId).toBe(ring.ownerOf("dev-9"));
  });

  it("sticks to the agent that last succeeded, falls back while it is away, returns to it", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c", "d"]);
    const hashed = HashRing.build(["a", "b", "c", "d"]).ownerOf("job-1");
    const other = agents.find((a) => a.agentId !== hashed)?.agentId as string;
    router.noteSucceeded("job-1", other);
    expect(chooseMany(router, sticky(), agents, 5)).toEqual(Array(5).fill(other));

    const without = agents.filter((a) => a.agentId !== other);
    const fallback = HashRing.build(without.map((a) => a.agentId)).ownerOf("job-1");
    expect(router.choose(sticky(), without, 0)?.agentId).toBe(fallback);
    expect(router.choose(sticky(), agents, 0)?.agentId).toBe(other);

    // A success elsewhere moves it; other keys are not affected.
    router.noteSucceeded("job-1", fallback as string);
    expect(router.choose(sticky(), agents, 0)?.agentId).toBe(fallback);
    expect(router.choose({ ...sticky(), key: "job-2" }, agents, 0)?.agentId).toBe(
      HashRing.build(["a", "b", "c", "d"]).ownerOf("job-2"),
    );
  });

  it("forgetAgent and forgetKey drop what it sticks to", () => {
    const router = new Router();
    const agents = fleet(["a", "b", "c", "d"]);
    const hashed = HashRing.build(["a", "b", "c", "d"]).ownerOf("job-1");
    const other = agents.find((a) => a.agentId !== hashed)?.agentId as string;
    router.noteSucceeded("job-1", other);
    router.forgetAgent(other);
    expect(router.choose(sticky(), agents, 0)?.agentId).toBe(hashed);
    router.noteSucceeded("job-1", other);
    router.forgetKey("job-1");
    expect(router.choose(sticky(), agents, 0)?.agentId).toBe(hashed);
  });
});

describe("FAILOVER", () => {
  it("without agents: the lowest agentId, the next when it goes, back when it returns", () => {
    const router = new Router();
    const r = req({ strategy: "FAILOVER" });
    expect(chooseMany(router, r, fleet(["b", "c", "a"]), 3)).toEqual(["a", "a", "a"]);
    expect(router.choose(r, fleet(["b", "c"]), 0)?.agentId).toBe("b");
    expect(router.choose(r, fleet(["c"]), 0)?.agentId).toBe("c");
    expect(router.choose(r, fleet(["c", "a"]), 0)?.agentId).toBe("a");
  });

  it("with agents: the first live one in that order, never one not listed", () => {
    const router = new Router();
    const r = req({ strategy: "FAILOVER", agents: ["primary", "standby", "last"] });
    const all = fleet(["last", "other", "primary", "standby"]);
    expect(router.choose(r, all, 0)?.agentId).toBe("primary");
    expect(router.choose(r, fleet(["last", "other", "standby"]), 0)?.agentId).toBe("standby");
    expect(router.choose(r, fleet(["last", "other"]), 0)?.agentId).toBe("last");
    expect(router.choose(r, fleet(["other"]), 0)).toBeUndefined();
  });
});

describe("TARGET", () => {
  const tagged = [
    agent("a", ["echo"], true, { tags: { site: "x" } }),
    agent("b", ["echo"], true, { tags: { site: "y" } }),
    agent("c", ["echo"], true, { tags: { site: "x", rev: "B" } }),
    agent("d", ["echo"], true, { tags: {} }),
  ];

  it("only the agents named, in turn", () => {
    const router = new Router();
    const r = req({ strategy: "TARGET", agents: ["d", "b"] }, { key: "handler:echo" });
    expect(chooseMany(router, r, tagged, 4)).toEqual(["b", "d", "b", "d"]);
    expect(router.choose(r, tagged.slice(0, 3), 0)?.agentId).toBe("b");
  });

  it("only the agents whose tags match the selector", () => {
    const router = new Router();
    const matching = chooseMany(
      router,
      req({ strategy: "TARGET", selector: { site: "x" } }),
      tagged,
      4,
    );
    // Both, in turn (from the one the job hashes to).
    expect([...matching.slice(0, 2)].sort()).toEqual(["a", "c"]);
    expect(matching.slice(2)).toEqual(matching.slice(0, 2));
    expect(
      chooseMany(router, req({ strategy: "TARGET", selector: { rev: "B" } }), tagged, 2),
    ).toEqual(["c", "c"]);
  });

  it("none of the targets live → undefined (the execution waits)", () => {
    const router = new Router();
    expect(router.choose(req({ strategy: "TARGET", agents: ["gone"] }), tagged, 0)).toBeUndefined();
    expect(
      router.choose(req({ strategy: "TARGET", selector: { site: "z" } }), tagged, 0),
    ).toBeUndefined();
    expect(router.choose(req({ strategy: "TARGET", agents: ["a"] }), [], 0)).toBeUndefined();
  });
});

/** How many shards each agent holds. */
function shardCounts(placement: readonly string[]): Map<string, number> {
  return tally(placement) as Map<string, number>;
}

const names = (n: number, prefix = "agent-") =>
  Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe("placeShards", () => {
  it.each([
    [1, 1],
    [4, 10],
    [10, 10],
    [7, 64],
  ])("%i shards over %i agents: each shard its own agent", (total, m) => {
    const placement = placeShards("job-1", total, names(m));
    expect(placement).toHaveLength(total);
    expect(new Set(placement).size).toBe(total);
    for (const id of placement) expect(names(m)).toContain(id);
  });

  it.each([
    [11, 10],
    [25, 10],
    [1024, 7],
    [100, 3],
    [64, 64 - 1],
  ])("%i shards over %i agents: each agent ⌊total/M⌋ or ⌈total/M⌉", (total, m) => {
    const counts = shardCounts(placeShards("job-1", total, names(m)));
    expect(counts.size).toBe(m);
    for (const count of counts.values()) {
      expect(count).toBeGreaterThanOrEqual(Math.floor(total / m));
      expect(count).toBeLessThanOrEqual(Math.ceil(total / m));
    }
  });

  it("is deterministic, whatever the order of the agents", () => {
    const agentIds = names(7, "rpi-");
    const once = placeShards("job-1", 20, agentIds);
    expect(placeShards("job-1", 20, [...agentIds].reverse())).toEqual(once);
    expect(placeShards("job-1", 20, [...agentIds, agentIds[0] as string])).toEqual(once);
  });

  it("differs between jobs, so the first shards of every job do not pile on one agent", () => {
    const firsts = new Set(
      Array.from({ length: 50 }, (_, j) => placeShards(`job-${j}`, 3, names(10))[0]),
    );
    expect(firsts.size).toBeGreaterThanOrEqual(6);
  });

  it.each([
    [25, 10],
    [8, 10],
    [9, 10],
    [1024, 7],
  ])(
    "%i shards over %i agents, one goes: only its shards move, the spread stays even",
    (total, m) => {
      const agentIds = names(m);
      const before = placeShards("job-1", total, agentIds);
      for (const gone of agentIds) {
        const rest = agentIds.filter((id) => id !== gone);
        const after = placeShards("job-1", total, rest, before);
        after.forEach((id, shard) => {
          if (before[shard] === gone) expect(id).not.toBe(gone);
          else expect(id).toBe(before[shard]);
        });
        const counts = [...shardCounts(after).values()];
        if (total <= rest.length) expect(new Set(after).size).toBe(total);
        else expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
      }
    },
  );

  it("an agent that joins moves nothing", () => {
    const before = placeShards("job-1", 25, names(10));
    expect(placeShards("job-1", 25, [...names(10), "agent-new"], before)).toEqual(before);
    const few = placeShards("job-1", 3, names(3));
    expect(placeShards("job-1", 3, names(10), few)).toEqual(few);
  });

  it("an agent that came back gets shards first when another one goes", () => {
    const agentIds = names(5);
    const before = placeShards("job-1", 10, agentIds);
    const away = placeShards("job-1", 10, agentIds.slice(1), before);
    const back = placeShards("job-1", 10, agentIds, away);
    expect(back).toEqual(away);
    expect(back).not.toContain("agent-0");
    const gone = back[0] as string;
    const after = placeShards(
      "job-1",
      10,
      agentIds.filter((id) => id !== gone),
      back,
    );
    expect(shardCounts(after).get("agent-0")).toBe(2);
  });

  it("a placement for another total is not kept", () => {
    const five = placeShards("job-1", 5, names(10));
    expect(placeShards("job-1", 8, names(10), five)).toEqual(placeShards("job-1", 8, names(10)));
  });

  it("no agents → no placement", () => {
    expect(placeShards("job-1", 4, [])).toEqual([]);
  });
});

describe("SHARD_BROADCAST", () => {
  const r = (index: number, total: number, key = "job-1") =>
    req({ strategy: "SHARD_BROADCAST" }, { key, shard: { index, total } });
  const route = (router: Router, total: number, agents: readonly Agent[], key = "job-1") =>
    Array.from({ length: total }, (_, i) => router.choose(r(i, total, key), agents, 0)?.agentId);

  it("sends each shard to its placed agent", () => {
    const router = new Router();
    const agents = fleet(names(4));
    const routed = route(router, 10, agents);
    expect(routed).toEqual(placeShards("job-1", 10, names(4)));
    expect(router.shardPlacement("job-1")).toEqual(routed);
  });

  it("keeps the placement: only a lost agent's shards move, and none when one joins", () => {
    const router = new Router();
    const agents = fleet(names(5));
    const before = route(router, 12, agents);
    const lost = before[0] as string;
    const after = route(
      router,
      12,
      agents.filter((a) => a.agentId !== lost),
    );
    after.forEach((id, shard) => {
      expect(id).toBe(before[shard] === lost ? id : before[shard]);
      expect(id).not.toBe(lost);
    });
    expect(route(router, 12, [...agents, agent("agent-new")])).toEqual(after);
  });

  it("with no agents live routes nothing and keeps the placement for their return", () => {
    const router = new Router();
    const agents = fleet(names(3));
    const before = route(router, 6, agents);
    expect(route(router, 6, [])).toEqual(Array(6).fill(undefined));
    expect(route(router, 6, [...agents].reverse())).toEqual(before);
  });

  it("keeps one placement per job; forgetKey drops it", () => {
    const router = new Router();
    const agents = fleet(names(4));
    route(router, 4, agents, "job-a");
    route(router, 2, agents, "job-b");
    expect(router.shardPlacement("job-a")).toHaveLength(4);
    expect(router.shardPlacement("job-b")).toHaveLength(2);
    router.forgetKey("job-a");
    expect(router.shardPlacement("job-a")).toBeUndefined();
  });

  it("an execution without a shard is shard 0 of 1", () => {
    const router = new Router();
    const agents = fleet(names(4));
    const chosen = router.choose(req({ strategy: "SHARD_BROADCAST" }), agents, 0)?.agentId;
    expect(chosen).toBe(placeShards("job-1", 1, names(4))[0]);
  });
});

describe("routing memory: what a key's past executions say, given to a Router that has none", () => {
  const run = (
    agentId: string | null,
    state: string,
    shard?: { index: number; total: number },
  ) => ({
    agentId,
    state,
    shardIndex: shard?.index ?? null,
    shardTotal: shard?.total ?? null,
  });

  it("routingMemoryOf: the latest success, and each shard's latest agent of the same count", () => {
    const recent = [
      run("c", "FAILED"),
      run("b", "SUCCEEDED"),
      run("a", "SUCCEEDED"),
      run(null, "PENDING"),
    ];
    expect(routingMemoryOf(recent, null)).toEqual({ succeeded: "b" });
    expect(routingMemoryOf([run("c", "RUNNING")], null)).toEqual({ succeeded: undefined });

    const shards = [
      run("x", "RUNNING", { index: 1, total: 3 }),
      run("y", "FAILED", { index: 1, total: 3 }),
      run("z", "SUCCEEDED", { index: 0, total: 3 }),
      run("w", "SUCCEEDED", { index: 0, total: 2 }),
      run("v", "SUCCEEDED", { index: 7, total: 3 }),
    ];
    expect(routingMemoryOf(shards, 3).shards).toEqual({
      total: 3,
      placement: ["z", "x", undefined],
    });
    expect(routingMemoryOf(shards, 2).shards).toEqual({ total: 2, placement: ["w", undefined] });
    expect(routingMemoryOf(shards, 5).shards).toBeUndefined();
  });

  it("STICKY goes back to the remembered agent where it would hash elsewhere", () => {
    const agents = fleet(["a", "b", "c", "d"]);
    const hashed = HashRing.build(["a", "b", "c", "d"]).ownerOf("job-1");
    const other = agents.find((a) => a.agentId !== hashed)?.agentId as string;
    const router = new Router();
    expect(router.needsMemory("job-1")).toBe(true);
    router.remember("job-1", { succeeded: other });
    expect(router.needsMemory("job-1")).toBe(false);
    expect(router.choose(req({ strategy: "STICKY" }), agents, 0)?.agentId).toBe(other);

    // What the process learnt itself is newer: a later memory does not overwrite it.
    const fresh = new Router();
    fresh.noteSucceeded("job-1", hashed as string);
    fresh.remember("job-1", { succeeded: other });
    expect(fresh.choose(req({ strategy: "STICKY" }), agents, 0)?.agentId).toBe(hashed);
    fresh.forgetKey("job-1");
    expect(fresh.needsMemory("job-1")).toBe(true);
  });

  it("SHARD_BROADCAST keeps a remembered placement: a shard moves only if its agent is gone", () => {
    const route = (router: Router, agents: readonly Agent[]) =>
      Array.from(
        { length: 4 },
        (_, i) =>
          router.choose(
            req({ strategy: "SHARD_BROADCAST" }, { shard: { index: i, total: 4 } }),
            agents,
            0,
          )?.agentId,
      );
    // Placed when only a and b were there; c and d joined since, and took nothing.
    const before = placeShards("job-1", 4, ["a", "b"]);
    const all = fleet(["a", "b", "c", "d"]);
    expect(placeShards("job-1", 4, ["a", "b", "c", "d"])).not.toEqual(before);
    const router = new Router();
    router.remember("job-1", { shards: { total: 4, placement: before } });
    expect(route(router, all)).toEqual(before);

    // A shard the memory lacks, and one whose agent is gone, are placed on the emptiest.
    const partial = new Router();
    partial.remember("job-1", { shards: { total: 4, placement: ["a", undefined, "b", "e"] } });
    const placed = route(partial, all);
    expect([placed[0], placed[2]]).toEqual(["a", "b"]);
    expect(["c", "d"]).toContain(placed[1]);
    expect(["c", "d"]).toContain(placed[3]);
    expect(placed[1]).not.toBe(placed[3]);
  });
});
