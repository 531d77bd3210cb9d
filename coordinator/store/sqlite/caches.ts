import type { JobDefinition } from "../../domain/job.js";
import type { ExecutionRecord } from "../port.js";

/** How many executions {@link ExecutionCache} keeps. */
export const EXECUTION_CACHE_SIZE = 20_000;

/** How many parsed job definitions {@link DefinitionCache} keeps. */
const DEFINITION_CACHE_SIZE = 4096;

/**
 * Executions as last written or read, by id, when the store is its file's only writer (group
 * commit): every report and dispatch reads its execution first, and most were written moments
 * before. Updated on every write, dropped on any failed one. Callers share the records and
 * never change them. Without group commit nothing is kept (another writer may change a row).
 *
 * Two generations of half the size each: new records go into the young one, and when it is full
 * the old one is dropped whole and the young one takes its place, so between half and all of
 * {@link EXECUTION_CACHE_SIZE} of the latest are kept and making room costs nothing. (Copying
 * the newest three quarters into a new map each time it was full cost a 10,000-agent command
 * two copies of 15,000 entries; deleting the oldest entry one at a time left the map's deleted
 * slots at its front for every later lookup of "the oldest" to step over, three times slower.)
 */
export class ExecutionCache {
  private young = new Map<string, ExecutionRecord>();
  private old = new Map<string, ExecutionRecord>();

  constructor(private readonly enabled: boolean) {}

  get(id: string): ExecutionRecord | undefined {
    return this.young.get(id) ?? this.old.get(id);
  }

  /** Keeps `e` (when enabled), making room by dropping the old generation when full. */
  add(e: ExecutionRecord): void {
    if (!this.enabled) return;
    if (this.young.size >= EXECUTION_CACHE_SIZE / 2 && !this.young.has(e.id)) {
      this.old = this.young;
      this.young = new Map();
    }
    this.old.delete(e.id);
    this.young.set(e.id, e);
  }

  /** Replaces a cached record after a write that changed it, in the generation it is in. */
  set(id: string, e: ExecutionRecord): void {
    if (this.old.has(id)) this.old.set(id, e);
    else this.young.set(id, e);
  }

  delete(id: string): void {
    this.young.delete(id);
    this.old.delete(id);
  }

  /** Forgets everything: a write failed, and what it cached may have been undone with it. */
  clear(): void {
    this.young.clear();
    this.old.clear();
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
