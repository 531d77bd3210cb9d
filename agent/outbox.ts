import type { Report } from "../shared/protocol/index.js";

/** A report body before the envelope and seq are added. */
export type ReportBody = Report extends infer R
  ? R extends Report
    ? Omit<R, "v" | "msgId" | "sentAt" | "seq">
    : never
  : never;

/**
 * Reports waiting for the coordinator's application-level `ack` (rule 1). Each gets the next seq
 * and is re-sent unchanged (same msgId, same seq) until acknowledged. This one lives in memory;
 * the durable journal keeps the same contract across restarts.
 */
export class Outbox {
  private readonly entries: Report[] = [];
  private nextSeq: number;

  constructor(lastSeq = 0) {
    this.nextSeq = lastSeq + 1;
  }

  /** The highest seq handed out so far. */
  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  get depth(): number {
    return this.entries.length;
  }

  /**
   * Numbers a report with the next seq (whatever `seq` it came with), keeps it until acknowledged,
   * and returns it ready to publish. Numbering here keeps seq gapless and in order, which `ack`
   * relies on.
   */
  add(report: Report): Report {
    const numbered: Report = { ...report, seq: this.nextSeq };
    this.entries.push(numbered);
    this.nextSeq++;
    return numbered;
  }

  /** The seq the next report will carry. */
  peekSeq(): number {
    return this.nextSeq;
  }

  /** Drops every report with seq ≤ upTo. */
  ack(upTo: number): void {
    let n = 0;
    while (n < this.entries.length && (this.entries[n]?.seq ?? Number.POSITIVE_INFINITY) <= upTo)
      n++;
    if (n > 0) this.entries.splice(0, n);
  }

  /** Unacknowledged reports, oldest first. */
  pending(): readonly Report[] {
    return this.entries;
  }
}
