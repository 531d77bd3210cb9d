import { readFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { systemClock } from "../shared/clock.js";
import type { ExecState } from "../shared/fsm.js";
import { newExecution } from "../test/contract/store.contract.js";
import { series } from "../test/helpers/http.js";
import type { EngineContext } from "./engine/context.js";
import { EngineEventBus, type EngineEvents } from "./engine/events.js";
import { Fleet } from "./engine/fleet.js";
import { CoordinatorMetrics } from "./metrics.js";
import type { AgentRecord } from "./store/port.js";
import { SqliteStore } from "./store/sqlite/sqlite-store.js";

function agent(agentId: string, over: Partial<AgentRecord> = {}): AgentRecord {
  return {
    agentId,
    instanceId: `${agentId}-i`,
    journalId: `${agentId}-j`,
    ackedSeq: 0,
    status: "online",
    profile: "dev",
    bundleVersion: "dev",
    bundleSha256: "dev",
    handlers: ["echo"],
    concurrency: 4,
    queue: 16,
    tags: {},
    connectedAt: 1,
    lastSeenAt: 1,
    clockOffsetMs: 0,
    clockUncertaintyMs: 0,
    load: 0,
    journalDepth: 0,
    outboxDepth: 0,
    ...over,
  };
}

/** The metrics over a real store and fleet, fed engine events by hand. */
describe("CoordinatorMetrics", () => {
  let store: SqliteStore;
  let events: EngineEventBus;
  let fleet: Fleet;
  let metrics: CoordinatorMetrics;

  const transition = (
    from: ExecState,
    to: ExecState,
    over: Partial<EngineEvents["transition"]> = {},
  ): void =>
    events.emit("transition", {
      executionId: "ex-1",
      jobId: "job-a",
      agentId: "ag-1",
      event: "test",
      from,
      to,
      round: 1,
      at: 10_000,
      fireAt: 10_000,
      scheduledFor: 10_000,
      ...over,
    });

  beforeEach(async () => {
    store = new SqliteStore({ path: ":memory:" });
    events = new EngineEventBus((err) => {
      throw err;
    });
    fleet = new Fleet({
      store,
      events,
      clock: systemClock,
      config: { heartbeatMs: 5_000, idleHeartbeatMs: 60_000 },
    } as unknown as EngineContext);
    metrics = new CoordinatorMetrics({ events, fleet, store });
  });

  afterEach(async () => {
    metrics.close();
    await store.close();
  });

  it("counts fires by outcome, skips, retries and terminal states", async () => {
    events.emit("fired", { jobId: "j", scheduledFor: 1, executionId: "e", at: 1, late: false });
    events.emit("fired", { jobId: "j", scheduledFor: 2, executionId: "e", at: 2, late: true });
    events.emit("fired", { jobId: "j", scheduledFor: 3, executionId: "e", at: 3, late: true });
    transition("RUNNING", "RETRY_WAITING");
    transition("PENDING", "SKIPPED");
    transition("RUNNING", "SUCCEEDED", { jobId: null });
    // An event recorded without a change of state counts as nothing.
    transition("SUCCEEDED", "SUCCEEDED");
    metrics.operatorRetry();
    const text = await metrics.render();
    expect(series(text, "ax_fires_total", { outcome: "on_time" })).toBe(1);
    expect(series(text, "ax_fires_total", { outcome: "late" })).toBe(2);
    expect(series(text, "ax_fires_skipped_total")).toBe(1);
    expect(series(text, "ax_retries_total", { by: "policy" })).toBe(1);
    expect(series(text, "ax_retries_total", { by: "operator" })).toBe(1);
    expect(series(text, "ax_executions_finished_total", { state: "SKIPPED", kind: "job" })).toBe(1);
    expect(
      series(text, "ax_executions_finished_total", { state: "SUCCEEDED", kind: "command" }),
    ).toBe(1);
    expect(series(text, "ax_executions_finished_total", { state: "SUCCEEDED", kind: "job" })).toBe(
      undefined,
    );
  });

  it("measures lateness from the nominal time at the first dispatch only, in seconds", async () => {
    // A job execution fired for 10 000, dispatched 0.5 s ahead; its fire time moved by a retry
    // does not matter, the nominal time does.
    transition("PENDING", "DISPATCHED", { at: 9_500, fireAt: 20_000 });
    // A command (no nominal time): measured from its fire time, here 2 s late.
    transition("PENDING", "DISPATCHED", { jobId: null, scheduledFor: null, at: 12_000 });
    // A redispatch and a retry's dispatch are not first dispatches.
    transition("DISPATCHED", "DISPATCHED", { round: 2, at: 99_000 });
    transition("PENDING", "DISPATCHED", { round: 3, at: 99_000 });
    transition("RUNNING", "FAILED", { at: 13_000 });
    const text = await metrics.render();
    expect(series(text, "ax_trigger_lateness_seconds_count", { kind: "job" })).toBe(1);
    expect(series(text, "ax_trigger_lateness_seconds_sum", { kind: "job" })).toBe(-0.5);
    expect(series(text, "ax_trigger_lateness_seconds_bucket", { kind: "job", le: "-0.5" })).toBe(1);
    expect(series(text, "ax_trigger_lateness_seconds_bucket", { kind: "job", le: "-1" })).toBe(0);
    expect(series(text, "ax_trigger_lateness_seconds_sum", { kind: "command" })).toBe(2);
    expect(series(text, "ax_end_to_end_seconds_sum", { state: "FAILED", kind: "job" })).toBe(3);
    expect(series(text, "ax_end_to_end_seconds_count", { state: "FAILED", kind: "job" })).toBe(1);
  });

  it("reads the store's persistent totals and open executions, the same on every render", async () => {
    await store.bumpCounter("missed_fires", 3);
    await store.bumpCounter("stale_reports", 2);
    await store.bumpCounter("superseded_messages");
    await store.bumpCounter("unreadable_reports", 5);
    await store.bumpCounter("invalid_messages", 4);
    for (const id of ["a", "b"]) {
      await store.createExecution(
        newExecution(id, { kind: "command", jobId: null, jobVersion: null, targetAgentId: "ag-1" }),
        1,
      );
    }
    for (let i = 0; i < 2; i++) {
      const text = await metrics.render();
      expect(series(text, "ax_fires_missed_total")).toBe(3);
      expect(series(text, "ax_reports_dropped_total", { reason: "stale_round" })).toBe(2);
      expect(series(text, "ax_reports_dropped_total", { reason: "superseded" })).toBe(1);
      expect(series(text, "ax_reports_dropped_total", { reason: "duplicate" })).toBe(0);
      expect(series(text, "ax_reports_dropped_total", { reason: "unreadable" })).toBe(5);
      expect(series(text, "ax_invalid_messages_total")).toBe(4);
      expect(series(text, "ax_executions", { state: "PENDING" })).toBe(2);
      expect(series(text, "ax_executions", { state: "RUNNING" })).toBe(0);
    }
    await store.bumpCounter("missed_fires", 1);
    expect(series(await metrics.render(), "ax_fires_missed_total")).toBe(4);
  });

  it("reports the fleet, with journal and outbox depth for online agents only", async () => {
    await store.putAgent(agent("ag-1", { journalDepth: 7, outboxDepth: 2 }));
    await store.putAgent(agent("ag-2", { status: "offline", journalDepth: 9, outboxDepth: 9 }));
    await fleet.load();
    const text = await metrics.render();
    expect(series(text, "ax_agents_known")).toBe(2);
    expect(series(text, "ax_agents_online")).toBe(1);
    expect(series(text, "ax_agent_journal_depth", { agent: "ag-1" })).toBe(7);
    expect(series(text, "ax_agent_outbox_depth", { agent: "ag-1" })).toBe(2);
    expect(series(text, "ax_agent_journal_depth", { agent: "ag-2" })).toBeUndefined();
  });

  it("keeps a registry of its own and stops counting once closed", async () => {
    const other = new CoordinatorMetrics({ events, fleet, store });
    events.emit("fired", { jobId: "j", scheduledFor: 1, executionId: "e", at: 1, late: false });
    other.close();
    events.emit("fired", { jobId: "j", scheduledFor: 2, executionId: "e", at: 2, late: false });
    expect(series(await other.render(), "ax_fires_total", { outcome: "on_time" })).toBe(1);
    expect(series(await metrics.render(), "ax_fires_total", { outcome: "on_time" })).toBe(2);
    expect(other.contentType).toMatch(/^text\/plain/);
  });
  it("exports exactly the series docs/api.md lists", async () => {
    const doc = readFileSync(new URL("../docs/api.md", import.meta.url), "utf8");
    const documented = [...doc.matchAll(/^\| `(ax_[a-z_]+)` +\|/gm)].map((m) => m[1]).sort();
    const exported = [...(await metrics.render()).matchAll(/^# TYPE (ax_[a-z_]+) /gm)]
      .map((m) => m[1])
      .sort();
    expect(exported.length).toBeGreaterThan(20);
    expect(documented).toEqual(exported);
  });
  it("counts only members whose lease still holds, and shows no lease below 0", async () => {
    const now = Date.now();
    const member = (id: string, leaseUntil: number) => ({
      id,
      epoch: 1,
      joinedAt: now - 60_000,
      renewedAt: now - 1_000,
      leaseUntil,
      info: {},
    });
    const clustered = new CoordinatorMetrics({
      events,
      fleet,
      store,
      membership: () => ({
        id: "c1",
        epoch: 1,
        role: "active",
        firing: "active",
        dispatch: "active",
        clockOffsetMs: 0,
        // c3 was killed: its lease lapsed since the last renewal read the members.
        coordinators: [
          member("c1", now + 2_500),
          member("c2", now + 2_000),
          member("c3", now - 200),
        ],
      }),
    });
    const text = await clustered.render();
    clustered.close();
    expect(series(text, "ax_cluster_members")).toBe(2);
    const left = series(text, "ax_cluster_lease_remaining_seconds", { coordinator: "c2" }) ?? 0;
    expect(left).toBeGreaterThan(1.5);
    expect(left).toBeLessThanOrEqual(2);
    expect(
      series(text, "ax_cluster_lease_remaining_seconds", { coordinator: "c3" }),
    ).toBeUndefined();
  });
});
