import { AxError } from "../../shared/errors.js";
import { loadCoordinatorConfig } from "../config.js";
import { openStore, withoutPassword } from "../coordinator.js";
import { PG_MIGRATIONS } from "../store/postgres/migrations.js";
import { SQLITE_MIGRATIONS } from "../store/sqlite/migrations.js";
import { flags } from "./args.js";

/**
 * `ax store migrate --config FILE`: brings the store of a coordinator config (its SQLite file, or
 * its PostgreSQL database and schema) to this build's schema, as a start would, and says where it
 * is. Ahead of an upgrade of several coordinators, run it once; each step is its own transaction
 * (PostgreSQL: under an advisory lock, so a coordinator starting meanwhile waits). A store written
 * by a newer build is refused (AX_STORE_MIGRATION), changing nothing.
 */
export async function storeMigrate(argv: string[], out: (line: string) => void): Promise<number> {
  const f = flags("store migrate", argv, { config: { type: "string" } });
  if (!f.config) throw new AxError("AX_CLI_USAGE", "store migrate: --config FILE is required");
  const config = loadCoordinatorConfig(f.config);
  const store = await openStore(config);
  await store.close();
  const pg = config.store.url !== undefined;
  const steps = pg ? PG_MIGRATIONS : SQLITE_MIGRATIONS;
  const latest = steps.at(-1);
  const where = pg
    ? `${withoutPassword(config.store.url as string)} (schema ${config.store.schema})`
    : config.store.path;
  out(
    `store ${where}: at migration ${latest?.version ?? 0}${latest === undefined ? "" : ` (${latest.name})`}, this build's newest`,
  );
  return 0;
}
