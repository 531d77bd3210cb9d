import mqtt from "mqtt";
import type { ExecutionRecord } from "../../../coordinator/store/port.js";
import { topics } from "../../../shared/protocol/index.js";
import type { BrokerKind } from "./broker-process.js";
import { ChaosHarness, type Effect, poll, sleep } from "./harness.js";
import { statesInStore } from "./record.js";
import type { TruthResult } from "./truth.js";

/**
 * The chaos scenarios of issue 15, shared by the tests (test/chaos/) and `npm run bench:chaos`.
 * Each starts its own run (two agents unless said otherwise), injects its fault with real
 * processes, lets the system converge and returns the truth check. The settings of each are in
 * its test file's header and in {@link CHAOS_COORDINATOR} / {@link CHAOS_AGENT}.
 */
export interface Scenario {
  name: string;
  title: string;
  /** Whether two rounds may legitimately both run (the record must then say so). */
  allowsTwoRounds: boolean;
  run(options?: RunOptions): Promise<TruthResult>;
}

/** How a scenario is run. */
export interface RunOptions {
  /** @default {@link chaosBrokerKind} */
  broker?: BrokerKind;
}

/** A job that runs the effect script (or writes its file) every second on either agent. */
export function tickJob(
  h: ChaosHarness,
  id = "tick",
  effect: Effect = { kind: "exec" },
): Record<string, unknown> {
  return {
    id,
    ...h.params(effect, `job-${id}`),
    trigger: { type: "cron", expr: "* * * * * *" },
    overlap: { policy: "PARALLEL" },
    timeout: "10s",
  };
}

/** Runs `body` on a fresh harness and closes it whatever happens. */
async function withHarness(
  scenario: string,
  run: RunOptions | undefined,
  body: (h: ChaosHarness) => Promise<TruthResult>,
): Promise<TruthResult> {
  const h = await ChaosHarness.start({
    scenario,
    ...(run?.broker === undefined ? {} : { broker: run.broker }),
  });
  try {
    return await body(h);
  } finally {
    await h.close();
  }
}

/** Commands with a lead longer than `outageMs` (fireAt − createdAt) must start on time. */
export const leadBeyond =
  (outageMs: number) =>
  (e: ExecutionRecord): boolean =>
    e.kind === "command" && e.fireAt - e.createdAt > outageMs;

/** 1. The broker stopped 10 s and restarted, with 50 commands over the next 20 s and a 1 s cron. */
export const brokerOutage: Scenario = {
  name: "broker-outage",
  title: "broker stopped 10 s, then restarted (50 commands over 20 s, 1 s cron)",
  allowsTwoRounds: false,
  run: (options) =>
    withHarness("broker-outage", options, async (h) => {
      const outageMs = 10_000;
      await h.job(tickJob(h));
      await sleep(2_000);
      const t0 = Date.now();
      for (let i = 0; i < 50; i++) {
        await h.command({
          agentId: h.agent((i % 2) + 1).agentId,
          at: t0 + 1_000 + i * 400,
          effect: i % 2 === 0 ? { kind: "exec", seconds: 0.2 } : { kind: "file" },
        });
      }
      await h.broker.stop();
      await sleep(outageMs);
      await h.broker.start();
      const faultEnd = Date.now();
      const converge = h.convergence(faultEnd);
      await sleep(Math.max(0, t0 + 22_000 - Date.now()));
      return h.truth({ convergeMs: await converge, mustBeOnTime: leadBeyond(outageMs) });
    }),
};

/**
 * Work in every state for a coordinator fault: a 1 s cron job, 3 failing executions retried after
 * 6 s (RETRY_WAITING), 6 commands running 3 s (RUNNING), 20 due over the next 14 s (SCHEDULED or
 * PENDING), 10 due now (PENDING, DISPATCHED) and 4 runs of a job whose group runs one at a time
 * (PENDING). Returns when the running ones were due.
 */
export async function workInEveryState(h: ChaosHarness): Promise<number> {
  await h.job(tickJob(h));
  await h.job({
    id: "flaky",
    handler: "fail",
    params: { retryable: true, message: "flaky on purpose" },
    trigger: { type: "manual" },
    overlap: { policy: "PARALLEL" },
    retry: { maxAttempts: 3, baseMs: 6_000, capMs: 6_000 },
  });
  for (let i = 0; i < 3; i++) await h.trigger("flaky");
  // Pending at the fault: one group runs one execution at a time, the rest wait.
  await h.job({
    id: "serial",
    ...h.params({ kind: "exec", seconds: 2 }, "job-serial"),
    trigger: { type: "manual" },
    overlap: { policy: "PARALLEL" },
    group: "valve-7",
  });
  const t0 = Date.now();
  // Running at the fault: 3 s runs that start now.
  for (let i = 0; i < 6; i++) {
    await h.command({
      agentId: h.agent((i % 2) + 1).agentId,
      at: t0,
      effect: { kind: "exec", seconds: 3 },
    });
  }
  // Scheduled (or still pending) at the fault: due over the next 14 s.
  for (let i = 0; i < 20; i++) {
    await h.command({
      agentId: h.agent((i % 2) + 1).agentId,
      at: t0 + 2_000 + i * 600,
      effect: i % 2 === 0 ? { kind: "exec", seconds: 0.2 } : { kind: "file" },
    });
  }
  await sleep(1_500);
  // Pending and dispatched at the fault: due now, created right before it.
  for (let i = 0; i < 10; i++) {
    await h.command({
      agentId: h.agent((i % 2) + 1).agentId,
      at: Date.now(),
      effect: { kind: "file" },
    });
  }
  for (let i = 0; i < 4; i++) await h.trigger("serial");
  return t0;
}

/** 2. kill -9 of the coordinator with work in every state, restarted after 5 s. */
export const coordinatorKill: Scenario = {
  name: "coordinator-kill",
  title: "coordinator kill -9 with work in every state, restarted after 5 s",
  allowsTwoRounds: false,
  run: (options) =>
    withHarness("coordinator-kill", options, async (h) => {
      const downMs = 5_000;
      const t0 = await workInEveryState(h);
      await h.coordinator.kill();
      const atKill = statesInStore(h.coordinator.storePath);
      await sleep(downMs);
      await h.coordinator.start();
      const faultEnd = Date.now();
      const converge = h.convergence(faultEnd);
      await sleep(Math.max(0, t0 + 18_000 - Date.now()));
      const result = await h.truth({
        convergeMs: await converge,
        mustBeOnTime: leadBeyond(downMs),
      });
      result.notes.push(
        `recorded at the kill: ${Object.entries(atKill)
          .map(([state, n]) => `${n} ${state}`)
          .join(", ")}`,
      );
      return result;
    }),
};

/**
 * Starts 3 s of `exec` on agent `agentId` twice: a job `jobId` routed FIRST (to that agent, with
 * retries, so it may move after a fault) and a command aimed at it. Returns the command.
 */
async function startExecOn(
  h: ChaosHarness,
  agentId: string,
  jobId: string,
): Promise<{ executionId: string; tag: string }> {
  await h.job({
    id: jobId,
    ...h.params({ kind: "exec", seconds: 3 }, `job-${jobId}`),
    trigger: { type: "manual" },
    routing: { strategy: "FIRST" },
    retry: { maxAttempts: 3, baseMs: 200, capMs: 500 },
  });
  const cmd = await h.command({ agentId, at: Date.now(), effect: { kind: "exec", seconds: 3 } });
  await h.trigger(jobId);
  return cmd;
}

/** 3. kill -9 of an agent while an `exec` child runs, restarted a second later. */
export const agentKill: Scenario = {
  name: "agent-kill",
  title: "agent kill -9 mid-exec, restarted after 1 s",
  allowsTwoRounds: false,
  run: (options) =>
    withHarness("agent-kill", options, async (h) => {
      const victim = h.agent(1);
      const cmd = await startExecOn(h, victim.agentId, "retried");
      // A third child ends (its effect done) while the agent is down: only its exit file can
      // tell the restart that it succeeded.
      const short = await h.command({
        agentId: victim.agentId,
        at: Date.now(),
        effect: { kind: "exec", seconds: 0.5 },
      });
      // Some work on the other agent that must not be disturbed.
      for (let i = 0; i < 5; i++) {
        await h.command({
          agentId: h.agent(2).agentId,
          at: Date.now() + 500 + i * 300,
          effect: { kind: "file" },
        });
      }
      await poll("both exec children to begin", () => {
        const begun = h.effects().begun;
        return (begun.get(cmd.tag) ?? 0) >= 1 &&
          (begun.get("job-retried") ?? 0) >= 1 &&
          (begun.get(short.tag) ?? 0) >= 1
          ? true
          : undefined;
      });
      await victim.kill();
      await sleep(1_000);
      victim.start();
      const faultEnd = Date.now();
      const converge = h.convergence(faultEnd);
      await sleep(6_000);
      const truth = await h.truth({ convergeMs: await converge });
      // Truth alone would also hold had the short child been cut off before its effect.
      const rec = (
        await h.coordinator.api<{ execution: { state: string } }>(
          "GET",
          `/api/executions/${encodeURIComponent(short.executionId)}`,
        )
      ).execution;
      const state = rec.state;
      if (state !== "SUCCEEDED") {
        throw new Error(
          `the child that ended while its agent was down is recorded ${state}: ${JSON.stringify(rec)}`,
        );
      }
      return truth;
    }),
};

/** 4. SIGTERM of an agent with scheduled and running work, restarted once it has exited. */
export const agentTerm: Scenario = {
  name: "agent-sigterm",
  title: "agent SIGTERM with scheduled and running work, then restarted",
  allowsTwoRounds: false,
  run: (options) =>
    withHarness("agent-sigterm", options, async (h) => {
      const victim = h.agent(1);
      await h.job(tickJob(h));
      const t0 = Date.now();
      // Running at the SIGTERM, ending inside the 4 s grace period: the agent waits for them,
      // and scheduled commands come due meanwhile.
      const running: { executionId: string; tag: string }[] = [];
      for (let i = 0; i < 2; i++) {
        running.push(
          await h.command({
            agentId: victim.agentId,
            at: t0,
            effect: { kind: "exec", seconds: 3 },
          }),
        );
      }
      // Scheduled: due during the grace period and after it.
      for (let i = 0; i < 8; i++) {
        await h.command({
          agentId: victim.agentId,
          at: t0 + 1_500 + i * 700,
          effect: i % 2 === 0 ? { kind: "exec", seconds: 0.2 } : { kind: "file" },
        });
      }
      await poll("the running children to begin", () =>
        running.every((r) => (h.effects().begun.get(r.tag) ?? 0) >= 1) ? true : undefined,
      );
      const termAt = Date.now();
      victim.term();
      // Work sent to it while it shuts down.
      for (let i = 0; i < 4; i++) {
        await h.command({
          agentId: victim.agentId,
          at: Date.now() + 300,
          effect: { kind: "file" },
        });
      }
      await victim.exited();
      const exitAt = Date.now();
      await sleep(1_000);
      victim.start();
      const faultEnd = Date.now();
      const converge = h.convergence(faultEnd);
      await sleep(Math.max(3_000, t0 + 9_000 - Date.now()));
      const result = await h.truth({ convergeMs: await converge });
      // Rule 13 and item 5: after SIGTERM nothing new starts, and running work that fits in the
      // grace period ends on its own. (Same machine: the agent's clock estimate is this clock.)
      for (const r of h.journals().filter((row) => row.agentId === victim.agentId)) {
        if (r.startedAt !== null && r.startedAt > termAt + 50 && r.startedAt < exitAt) {
          result.violations.push(
            `${r.executionId} round ${r.round} started ${Math.round(r.startedAt - termAt)} ms after SIGTERM, before the exit (${r.state})`,
          );
        }
        if (r.state === "interrupted") {
          result.violations.push(
            `${r.executionId} round ${r.round} was interrupted by the shutdown`,
          );
        }
      }
      return result;
    }),
};

/** 5. The same dispatch delivered three times (two copies published onto the agent's down topic). */
export const duplicateDispatch: Scenario = {
  name: "duplicate-dispatch",
  title: "the same dispatch delivered 3 times",
  allowsTwoRounds: false,
  run: (options) =>
    withHarness("duplicate-dispatch", options, async (h) => {
      const target = h.agent(1);
      const down = topics(h.prefix).down(target.agentId);
      const spy = await mqtt.connectAsync(h.broker.url, {
        clientId: `${h.prefix}-spy`,
        clean: true,
        reconnectPeriod: 0,
      });
      try {
        const copies: Buffer[] = [];
        const msgIds = new Set<string>();
        let dispatches = 0;
        spy.on("message", (_topic, payload) => {
          // The spy gets its own copies back from the broker: keep each message once. A batch
          // of commands (an array) is copied whole, so each of its dispatches is delivered again.
          const parsed = JSON.parse(payload.toString("utf8")) as unknown;
          const items = (Array.isArray(parsed) ? parsed : [parsed]) as {
            type?: string;
            msgId?: string;
          }[];
          const found = items.filter((m) => m.type === "dispatch" && typeof m.msgId === "string");
          const key = found.map((m) => m.msgId).join(",");
          if (found.length === 0 || msgIds.has(key)) return;
          msgIds.add(key);
          dispatches += found.length;
          copies.push(Buffer.from(payload));
        });
        await spy.subscribeAsync(down, { qos: 1 });
        const t0 = Date.now();
        const specs = [
          { at: t0 + 2_500, effect: { kind: "exec", seconds: 0.2 } as const }, // scheduled
          { at: t0, effect: { kind: "exec", seconds: 2 } as const }, // running
          { at: t0 + 1_500, effect: { kind: "file" } as const },
          { at: t0 + 200, effect: { kind: "file" } as const }, // finished
        ];
        for (const s of specs) await h.command({ agentId: target.agentId, ...s });
        const seen = new Set<number>();
        const redeliver = async (i: number) => {
          const copy = copies[i] as Buffer;
          await spy.publishAsync(down, copy, { qos: 1 });
          await spy.publishAsync(down, copy, { qos: 1 });
        };
        await poll(
          "the dispatches",
          async () => {
            for (let i = 0; i < copies.length; i++) {
              if (seen.has(i)) continue;
              seen.add(i);
              await redeliver(i);
            }
            return dispatches >= specs.length ? true : undefined;
          },
          20_000,
        );
        await sleep(Math.max(0, t0 + 6_000 - Date.now()));
        // Once more after all of them ended: a duplicate of a finished command.
        const all = copies.length;
        for (let i = 0; i < all; i++) await redeliver(i);
        const converge = h.convergence(Date.now());
        await sleep(1_000);
        return h.truth({ convergeMs: await converge, mustBeOnTime: leadBeyond(1_000) });
      } finally {
        await spy.endAsync(true);
      }
    }),
};

/** 6. The broker restarted and the coordinator killed within the same minute. */
export const brokerAndCoordinator: Scenario = {
  name: "broker-and-coordinator",
  title: "broker restarted, then the coordinator killed -9, within one minute",
  allowsTwoRounds: false,
  run: (options) =>
    withHarness("broker-and-coordinator", options, async (h) => {
      await h.job(tickJob(h));
      await sleep(1_500);
      const t0 = Date.now();
      for (let i = 0; i < 40; i++) {
        await h.command({
          agentId: h.agent((i % 2) + 1).agentId,
          at: t0 + 1_000 + i * 500,
          effect: i % 2 === 0 ? { kind: "exec", seconds: 0.2 } : { kind: "file" },
        });
      }
      await h.broker.stop();
      await sleep(5_000);
      await h.broker.start();
      await sleep(4_000);
      await h.coordinator.kill();
      await sleep(5_000);
      await h.coordinator.start();
      const faultEnd = Date.now();
      const outageMs = faultEnd - t0;
      const converge = h.convergence(faultEnd);
      await sleep(Math.max(0, t0 + 23_000 - Date.now()));
      return h.truth({ convergeMs: await converge, mustBeOnTime: leadBeyond(outageMs) });
    }),
};

/** 7. An agent partitioned (SIGSTOP) past its lease while running, then resumed (SIGCONT). */
export const partition: Scenario = {
  name: "partition",
  title: "agent SIGSTOP past its lease while running, then SIGCONT",
  allowsTwoRounds: true,
  run: (options) =>
    withHarness("partition", options, async (h) => {
      const victim = h.agent(1);
      const cmd = await startExecOn(h, victim.agentId, "held");
      await poll("both exec children to begin", () => {
        const begun = h.effects().begun;
        return (begun.get(cmd.tag) ?? 0) >= 1 && (begun.get("job-held") ?? 0) >= 1
          ? true
          : undefined;
      });
      victim.pause();
      // Lease 1.5 s + query 2 s lapse inside this; the keepalive (2 s) lets the broker drop it.
      await sleep(7_000);
      victim.resume();
      const faultEnd = Date.now();
      const converge = h.convergence(faultEnd);
      await sleep(5_000);
      return h.truth({ convergeMs: await converge });
    }),
};

/** Every scenario, in the issue's order. */
export const SCENARIOS: readonly Scenario[] = [
  brokerOutage,
  coordinatorKill,
  agentKill,
  agentTerm,
  duplicateDispatch,
  brokerAndCoordinator,
  partition,
];
