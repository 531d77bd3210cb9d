import { describe, expect, it } from "vitest";
import {
  AGENT_UPDATE_HANDLER,
  DEFAULT_HEALTH_WINDOW_MS,
  updateHoldMs,
} from "../../shared/update.js";
import { Leases } from "./leases.js";

const exec = { id: "ex-1", round: 1, startedAt: 0, updatedAt: 0 };

describe("leases", () => {
  it("an offline agent's lease lapses at once: queried, then failed over", () => {
    const l = new Leases(3_000, 2_000);
    expect(l.check(exec, false, 1_000).action).toBe("query");
    expect(l.check(exec, false, 2_500).action).toBe("ok");
    expect(l.check(exec, false, 3_100)).toMatchObject({ action: "fail_over" });
  });

  it("a hold (an update restarting its agent) keeps the lease through the agent's silence", () => {
    const l = new Leases(3_000, 2_000);
    l.renew("ex-1", 1, 0);
    // Offline for 19 s of a 20 s hold: nothing is guessed.
    expect(l.check(exec, false, 19_000, Number.NEGATIVE_INFINITY, 20_000).action).toBe("ok");
    // Past it, the usual: a query, then the fail-over.
    expect(l.check(exec, false, 20_100, Number.NEGATIVE_INFINITY, 20_000).action).toBe("query");
    expect(l.check(exec, false, 22_200, Number.NEGATIVE_INFINITY, 20_000)).toMatchObject({
      action: "fail_over",
    });
  });

  it("an online agent that stops listing it: lapses after lease + hold", () => {
    const l = new Leases(3_000, 2_000);
    l.renew("ex-1", 1, 0);
    expect(l.check(exec, true, 22_000, Number.NEGATIVE_INFINITY, 20_000).action).toBe("ok");
    expect(l.check(exec, true, 23_100, Number.NEGATIVE_INFINITY, 20_000).action).toBe("query");
  });

  it("the hold is four health windows for agent.update, none for anything else", () => {
    expect(updateHoldMs({ handler: "echo", params: {} })).toBe(0);
    expect(updateHoldMs({ handler: AGENT_UPDATE_HANDLER, params: { healthWindowMs: 5_000 } })).toBe(
      20_000,
    );
    expect(updateHoldMs({ handler: AGENT_UPDATE_HANDLER, params: {} })).toBe(
      4 * DEFAULT_HEALTH_WINDOW_MS,
    );
  });

  it("prune forgets the leases not renewed since a time, and only those", () => {
    const l = new Leases(1_500, 2_000);
    l.renew("moved-away", 1, 1_000);
    l.renew("renewed", 1, 1_000);
    l.renew("renewed", 1, 9_000);
    l.renew("recent", 1, 8_000);
    expect(l.size).toBe(3);
    expect(l.prune(5_000)).toBe(1);
    expect(l.size).toBe(2);
    // The one pruned starts fresh if it is checked again: from its record, not from the past.
    expect(
      l.check({ id: "moved-away", round: 1, startedAt: 1_000, updatedAt: 9_500 }, true, 10_000)
        .action,
    ).toBe("ok");
  });
});
