import { describe, expect, it } from "vitest";
import type { Report } from "../shared/protocol/index.js";
import { Outbox } from "./outbox.js";

function accepted(executionId: string, seq = 0): Report {
  return {
    v: 1,
    type: "accepted",
    msgId: `m-${executionId}`,
    sentAt: 1_700_000_000_000,
    seq,
    executionId,
    round: 1,
  };
}

describe("Outbox", () => {
  it("hands out seq from 1 for a new journal", () => {
    const box = new Outbox();
    expect(box.lastSeq).toBe(0);
    expect(box.peekSeq()).toBe(1);
    expect(box.add(accepted("a", 1)).seq).toBe(1);
    expect(box.add(accepted("b", 2)).seq).toBe(2);
    expect(box.lastSeq).toBe(2);
    expect(box.peekSeq()).toBe(3);
  });

  it("hands out seq from lastSeq + 1, one per report, whatever seq the report came with", () => {
    const box = new Outbox(41);
    expect(box.lastSeq).toBe(41);
    expect(box.peekSeq()).toBe(42);
    const first = box.add(accepted("a", box.peekSeq()));
    const second = box.add(accepted("b", 7));
    expect([first.seq, second.seq]).toEqual([42, 43]);
    expect(box.pending().map((r) => r.seq)).toEqual([42, 43]);
    expect(box.lastSeq).toBe(43);
  });

  it("keeps the report otherwise unchanged (same msgId) for re-sending", () => {
    const box = new Outbox();
    const report = accepted("a", 1);
    const stored = box.add(report);
    expect(stored).toEqual(report);
    expect(box.pending()[0]).toBe(stored);
  });

  it("ack(upTo) drops every report with seq <= upTo and nothing after", () => {
    const box = new Outbox(9);
    for (const id of ["a", "b", "c", "d"]) box.add(accepted(id));
    expect(box.depth).toBe(4);
    box.ack(11);
    expect(box.pending().map((r) => r.seq)).toEqual([12, 13]);
    expect(box.depth).toBe(2);
    // Older or repeated acks change nothing.
    box.ack(5);
    box.ack(11);
    expect(box.pending().map((r) => r.seq)).toEqual([12, 13]);
    box.ack(13);
    expect(box.depth).toBe(0);
    expect(box.pending()).toEqual([]);
    // An ack beyond what was handed out neither fails nor moves seq.
    box.ack(100);
    expect(box.peekSeq()).toBe(14);
    expect(box.add(accepted("e")).seq).toBe(14);
  });

  it("lists pending reports oldest first", () => {
    const box = new Outbox();
    for (const id of ["a", "b", "c"]) box.add(accepted(id));
    expect(box.pending().map((r) => (r.type === "accepted" ? r.executionId : ""))).toEqual([
      "a",
      "b",
      "c",
    ]);
    box.ack(1);
    box.add(accepted("d"));
    expect(box.pending().map((r) => r.seq)).toEqual([2, 3, 4]);
  });
});
