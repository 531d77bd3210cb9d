import { describe, expect, it } from "vitest";
import { FakeClock } from "../shared/clock.js";
import { ReplayGate } from "./replay-gate.js";

describe("ReplayGate", () => {
  it("replays at once, then folds a flood of requests into one replay at the window's end", () => {
    const clock = new FakeClock();
    const at: number[] = [];
    const gate = new ReplayGate(clock, () => at.push(clock.monoNow()), 500);
    const t0 = clock.monoNow();
    gate.request();
    expect(at).toEqual([t0]);
    for (let i = 0; i < 1000; i++) {
      clock.advance(0.4);
      gate.request();
    }
    // 400 ms of requests: none ran early, one is waiting for the window to end.
    expect(at).toEqual([t0]);
    clock.advance(100);
    expect(at).toEqual([t0, t0 + 500]);
    expect(gate.counts).toEqual({ replays: 2, coalesced: 1000 });
    // Nothing more was asked: nothing more is sent.
    clock.advance(5_000);
    expect(at).toHaveLength(2);
    gate.close();
  });

  it("waits out the window after a replay made on a welcome, and sends nothing once closed", () => {
    const clock = new FakeClock();
    let replays = 0;
    const gate = new ReplayGate(clock, () => replays++, 500);
    gate.ran();
    clock.advance(200);
    gate.request();
    expect(replays).toBe(0);
    clock.advance(300);
    expect(replays).toBe(1);
    gate.request(); // inside the new window
    gate.close();
    clock.advance(1_000);
    expect(replays).toBe(1);
    expect(clock.pendingTimers).toBe(0);
  });
});
