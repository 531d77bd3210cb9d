/** The store of one run of bench/coordinator-run.ts: the SQLite file, or a PostgreSQL schema. */
import Database from "better-sqlite3";
import { JOBS } from "./coordinator-params.js";
import {
  analyze,
  drainProgress,
  type FireFigures,
  prefillStore,
  type Schedule,
  scoreWindow,
} from "./coordinator-store.js";
import { dropSchema, PgReadBack, prefillPg } from "./coordinator-store-pg.js";

/** What a run's store is: the SQLite file, or the PostgreSQL schema and a reader of it. */
export interface RunStore {
  prefill(o: { rate: number; firstAt: number; now: number }): Promise<Schedule>;
  drainProgress(start: number, end: number): Promise<{ recorded: number; open: number }>;
  /** Ends the drain's reading (the coordinators are stopped next). */
  endDrain(): Promise<void>;
  analyze(
    s: Schedule,
    window: { start: number; end: number },
    observed: Parameters<typeof analyze>[3],
  ): Promise<FireFigures>;
  close(): Promise<void>;
}

export function sqliteRunStore(storePath: string): RunStore {
  let db: Database.Database | undefined;
  return {
    prefill: async (o) => prefillStore(storePath, { jobs: JOBS, ...o }),
    drainProgress: async (start, end) => {
      db ??= new Database(storePath, { readonly: true, fileMustExist: true });
      return drainProgress(db, start, end);
    },
    endDrain: async () => {
      db?.close();
      db = undefined;
    },
    analyze: async (s, window, observed) => analyze(storePath, s, window, observed),
    close: async () => {
      db?.close();
      db = undefined;
    },
  };
}

export function pgRunStore(url: string, schema: string): RunStore {
  let reader: PgReadBack | undefined;
  let created = false;
  return {
    prefill: async (o) => {
      created = true;
      return prefillPg(url, schema, { jobs: JOBS, ...o });
    },
    drainProgress: async (start, end) => {
      reader ??= await PgReadBack.open(url, schema);
      return reader.drainProgress(start, end);
    },
    // The reader stays open for the read-back: it holds no lock and does nothing meanwhile.
    endDrain: async () => {},
    analyze: async (s, window, observed) => {
      reader ??= await PgReadBack.open(url, schema);
      return scoreWindow(s, window, await reader.readBack(window), observed);
    },
    close: async () => {
      await reader?.close().catch(() => {});
      reader = undefined;
      if (created) await dropSchema(url, schema);
    },
  };
}
