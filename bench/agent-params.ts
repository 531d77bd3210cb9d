/** Parameters and result shapes shared by bench/agent.ts and its worker process. */

/** The first entry is due this far after setup began… */
export const LEAD_MS = 500;
/** …and the due times spread uniformly over this window. */
export const SPREAD_MS = 5_000;
/** The memory scenario's entries are due this far ahead and later, so none fires before it reads. */
export const MEMORY_LEAD_MS = 2_000;
/** The agent's wheel, as agent/runner/executor.ts builds it. */
export const TICK_MS = 20;
export const SLOTS = 512;

export interface LatenessResult {
  impl: "wheel" | "timeout";
  n: number;
  load: boolean;
  fired: number;
  /** Time to schedule all n entries, ms (one synchronous loop). */
  scheduleMs: number;
  /** Whether scheduling ended after the first entry was due (which would skew the figures). */
  setupOverran: boolean;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  /** Most negative lateness (the earliest early fire), ms; >= 0 when none fired early. */
  min: number;
  early: number;
  earlyPct: number;
  /** Fraction of wall time the load generator spun, while it ran (0 when idle). */
  loadDuty: number;
  /**
   * CPU other processes used while this one measured, in cores (from /proc/stat minus this
   * process's own CPU time); NaN where /proc/stat is missing. The machine is shared, so it says
   * how much of the figure is contention.
   */
  otherCores: number;
}

export interface MemoryResult {
  impl: string;
  n: number;
  before: number;
  after: number;
  bytesPerEntry: number;
  /** Entries still pending when measured (must equal n). */
  pending: number;
  /** Size of the params (due times) allocated before the baseline, not counted. */
  paramsBytes: number;
}
