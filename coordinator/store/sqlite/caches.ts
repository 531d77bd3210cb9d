import type { JobDefinition } from "../../domain/job.js";
import type { ExecutionRecord } from "../port.js";

/** How many executions {@link ExecutionCache} keeps. */
const EXECUTION_CACHE_SIZE = 20_000;

/** How many parsed job definitions {@link DefinitionCache} keeps. */
const DEFINITION_CACHE_SIZE = 4096;

/**
 * Executions as last written or read, by id, when the store is its file's only writer (group
 * commit): every report and dispatch reads its execution first, and most were written moments
 * before. Updated on every write, dropped on any failed one. Callers share the records and
 * never change them. Without group commit nothing is kept (another writer may change a row).
 */
export class ExecutionCache {
  private map = new Map<string, ExecutionRecord>();

  constructor(private readonly enabled: boolean) {}

  get(id: string): ExecutionRecord | undefined {
    return this.map.get(id);
  }

  /** Keeps `e` (when enabled), making room by dropping the oldest quarter when full. */
  add(e: ExecutionRecord): void {
    if (!this.enabled) return;
    if (this.map.size >= EXECUTION_CACHE_SIZE && !this.map.has(e.id)) {
      // The oldest quarter goes at once, into a new map. Deleting the oldest entry one at a time
      // left the map's deleted slots at its front for every later lookup of "the oldest" to step
      // over: creating 10,000 executions took three times as long once the cache was full.
      const keep = [...this.map].slice(EXECUTION_CACHE_SIZE / 4);
      this.map = new Map(keep);
    }
    this.map.set(e.id, e);
  }

  /** Replaces a cached record after a write that changed it (no eviction: it is there). */
  set(id: string, e: ExecutionRecord): void {
    this.map.set(id, e);
  }

  delete(id: string): void {
    this.map.delete(id);
  }

  /** Forgets everything: a write failed, and what it cached may have been undone with it. */
  clear(): void {
    this.map.clear();
  }
}

/**
 * Parsed definitions by job id and version: a job is read when it fires and again when its
 * execution is dispatched, and parsing its JSON each time cost more than reading the row.
 * Frozen, since callers share them. Versions only rise, so a version seen is its definition.
 */
export class DefinitionCache {
  private readonly map = new Map<string, { version: number; definition: JobDefinition }>();

  get(jobId: string): { version: number; definition: JobDefinition } | undefined {
    return this.map.get(jobId);
  }

  set(jobId: string, version: number, definition: JobDefinition): void {
    if (this.map.size >= DEFINITION_CACHE_SIZE) {
      // The oldest entry goes (a Map iterates in insertion order).
      const oldest = this.map.keys().next().value;
      if (oldest !== undefined) this.map.delete(oldest);
    }
    this.map.set(jobId, { version, definition });
  }

  delete(jobId: string): void {
    this.map.delete(jobId);
  }
}
