import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../shared/clock.js";
import { ClockSync } from "../shared/clock-sync.js";
import { envelope } from "../shared/message.js";
import type { Report, Started } from "../shared/protocol/index.js";
import { BUILTIN_HANDLERS } from "./handlers/builtins.js";
import { HandlerRegistry } from "./handlers/registry.js";
import { Journal } from "./journal/journal.js";
import { Executor } from "./runner/executor.js";
import { AgentTime } from "./time.js";

const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

function rig(syncOptions: ConstructorParameters<typeof ClockSync>[0] = {}) {
  const clock = new FakeClock({ mono: 5_000, wall: 1_800_000_000_000 });
  const sync = new ClockSync(syncOptions);
  const time = new AgentTime(clock, sync);
  const journal = new Journal({ path: ":memory:", maxOpen: 100, now: () => time.coordNow() });
  const reports: Report[] = [];
  const ex = new Executor({
    clock,
    handlers: new HandlerRegistry(BUILTIN_HANDLERS),
    journal,
    coordNow: () => time.coordNow(),
    toMono: (t) => time.toMono(t),
    // As the agent wires it: the bound at a coordinator time, on the local timeline.
    uncertaintyMs: (at) => sync.uncertaintyAt(at - sync.offsetMs),
    envelope: (body, seq) => ({ ...envelope(body, time.coordNow()), seq }) as Report,
    publish: (r) => reports.push(r),
    concurrency: 4,
    queue: 16,
    tickMs: 20,
    log: () => {},
  });
  closers.push(
    () => ex.close(),
    () => journal.close(),
  );
  const dispatch = (executionId: string, fireAt: number) =>
    ex.dispatch({
      v: 1,
      type: "dispatch",
      msgId: `m-${executionId}`,
      sentAt: time.coordNow(),
      executionId,
      round: 1,
      attempt: 1,
      handler: "echo",
      params: {},
      fireAt,
      deadline: fireAt + 60_000,
      timeoutMs: 1000,
      priority: 0,
    });
  const started = () => reports.filter((r): r is Started => r.type === "started");
  return { clock, sync, time, ex, dispatch, started };
}

describe("agent time", () => {
  it("does not move when the wall clock jumps", () => {
    const { clock, time } = rig();
    const before = time.coordNow();
    clock.jumpWall(3_600_000);
    expect(time.coordNow()).toBe(before);
    clock.jumpWall(-7_200_000);
    clock.advance(250);
    expect(time.coordNow()).toBe(before + 250);
  });

  it("moves by the offset estimate, and maps coordinator times onto the monotonic clock", () => {
    const { clock, sync, time } = rig();
    const t0 = time.coordNow();
    sync.stamp(t0);
    clock.advance(10);
    // The coordinator's clock is 500 ms ahead; 5 ms each way.
    sync.addSample({ t0, t1: t0 + 505, t2: t0 + 505 }, time.localNow());
    expect(sync.offsetMs).toBe(500);
    expect(time.coordNow()).toBe(t0 + 10 + 500);
    expect(time.toMono(time.coordNow() + 1000)).toBe(clock.monoNow() + 1000);
  });

  it.each([3_600_000, -3_600_000])(
    "a wall-clock jump of %d ms mid-run makes nothing fire early or more than a tick late",
    async (jump) => {
      const { clock, time, dispatch, started } = rig();
      const t = time.coordNow();
      const fireAts = [t + 1000, t + 1500, t + 4000, t + 30_000];
      for (const [i, f] of fireAts.entries()) dispatch(`j-${i}`, f);
      clock.advance(700);
      clock.jumpWall(jump);
      for (let step = 0; step < 31_000; step += 5) {
        clock.advance(5);
        await Promise.resolve();
        for (const s of started()) {
          const fireAt = fireAts[Number(s.executionId.slice(2))] ?? 0;
          expect(s.startedAt).toBeGreaterThanOrEqual(fireAt);
        }
      }
      const s = started();
      expect(s.map((x) => x.executionId).sort()).toEqual(["j-0", "j-1", "j-2", "j-3"]);
      for (const x of s) expect(x.lateMs).toBeLessThanOrEqual(20);
    },
  );

  it("waits out the estimate's uncertainty: never early on the coordinator's clock, late by that much at most twice", async () => {
    const { clock, sync, time, dispatch, started } = rig();
    // The coordinator's clock is 30 ms ahead of this agent's. One clock sample whose request
    // took 40.5 ms and whose answer 0.5 ms: the estimate is 50 ms, 20 ms ahead of the truth,
    // and says ± 20.5.
    const TRUE = 30;
    const sample = (up: number, down: number) => {
      const t0 = time.coordNow();
      sync.stamp(t0);
      clock.advance(up);
      const t1 = time.localNow() + TRUE;
      clock.advance(down);
      sync.addSample({ t0, t1, t2: t1 }, time.localNow());
    };
    sample(40.5, 0.5);
    expect(sync.offsetMs).toBe(50);
    expect(sync.uncertaintyMs).toBe(20.5);
    const trueNow = () => time.localNow() + TRUE;
    const fireAt = trueNow() + 1_000;
    dispatch("j-1", fireAt);
    let startedAtTrue: number | undefined;
    for (let step = 0; step < 1_100 && startedAtTrue === undefined; step += 0.5) {
      clock.advance(0.5);
      await Promise.resolve();
      if (started().length > 0) startedAtTrue = trueNow();
    }
    // Fired on the estimate alone it would have started 20 ms early.
    expect(startedAtTrue).toBeGreaterThanOrEqual(fireAt);
    expect(startedAtTrue).toBeLessThanOrEqual(fireAt + 2 * 20.5);
    expect(started()[0]?.lateMs).toBeGreaterThanOrEqual(20.5);
    // A prompt sample shrinks the bound, and with it the wait.
    sample(0.5, 0.5);
    expect(sync.offsetMs).toBe(TRUE);
    expect(sync.uncertaintyMs).toBe(0.5);
    const next = trueNow() + 1_000;
    dispatch("j-2", next);
    clock.advance(1_000);
    await Promise.resolve();
    expect(started().map((s) => s.executionId)).toEqual(["j-1"]);
    // By then the bound has aged 50 ppm of the second since the sample: 0.55, not 0.5.
    clock.advance(0.5);
    await Promise.resolve();
    expect(started().map((s) => s.executionId)).toEqual(["j-1"]);
    clock.advance(0.5);
    await Promise.resolve();
    expect(started().map((s) => s.executionId)).toEqual(["j-1", "j-2"]);
  });
  it("waits out the bound as it has aged by the start, not as it was at the sample", async () => {
    // 1e-3 ms per ms (a fast rate, so that 20 s of it is 20 ms): a sample of ± 0.5 on an exact
    // estimate, then a command 20 s ahead. At the start the bound is 0.5 + 20 ms.
    const { clock, sync, time, dispatch, started } = rig({ driftRate: 1e-3 });
    const t0 = time.coordNow();
    sync.stamp(t0);
    clock.advance(0.5);
    const t1 = time.localNow();
    clock.advance(0.5);
    sync.addSample({ t0, t1, t2: t1 }, time.localNow());
    expect(sync.offsetMs).toBe(0);
    expect(sync.uncertaintyMs).toBe(0.5);
    const fireAt = time.coordNow() + 20_000;
    dispatch("aged", fireAt);
    clock.advance(20_000 + 10);
    await Promise.resolve();
    // The bound as of the sample (0.5 ms) has passed: it would have started by now.
    expect(started()).toEqual([]);
    for (let step = 0; step < 100 && started().length === 0; step += 0.5) {
      clock.advance(0.5);
      await Promise.resolve();
    }
    const lateMs = started()[0]?.lateMs as number;
    expect(lateMs).toBeGreaterThanOrEqual(0.5 + 20_000 * 1e-3);
    expect(lateMs).toBeLessThanOrEqual(0.5 + 20_100 * 1e-3 + 1);
  });
});
