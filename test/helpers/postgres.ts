import { randomBytes } from "node:crypto";
import pg from "pg";
import { describe, it } from "vitest";

/**
 * PostgreSQL for tests: the server `AX_TEST_PG_URL` names (CI sets it, .ci/run), each test in a
 * schema of its own. Without the variable, or with a server that does not answer on a developer's
 * machine, the PostgreSQL tests are skipped with a note; in CI (`CI` set) a server that does not
 * answer fails them instead, so they are never reported green untested.
 */
export type PgTestTarget = { url: string } | { skip: string };

/** How long the reachability probe waits for the server. */
const PROBE_TIMEOUT_MS = 3_000;

let probed: Promise<PgTestTarget> | undefined;

/**
 * Where the PostgreSQL tests run, or why they are skipped (warned once per test file). Throws
 * when CI is set and the server named by AX_TEST_PG_URL cannot be reached.
 */
export function pgTestUrl(): Promise<PgTestTarget> {
  probed ??= probe();
  return probed;
}

async function probe(): Promise<PgTestTarget> {
  const url = process.env.AX_TEST_PG_URL;
  if (!url) return skip("AX_TEST_PG_URL is not set, PostgreSQL tests skipped");
  const client = new pg.Client({
    connectionString: url,
    connectionTimeoutMillis: PROBE_TIMEOUT_MS,
  });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.query("SELECT 1");
    return { url };
  } catch (err) {
    const why = `PostgreSQL at AX_TEST_PG_URL is not reachable (${(err as Error).message})`;
    if (process.env.CI && process.env.CI !== "false") {
      throw new Error(`${why}; CI is set, so the PostgreSQL tests fail instead of skipping`);
    }
    return skip(`${why}, PostgreSQL tests skipped`);
  } finally {
    await client.end().catch(() => {});
  }
}

function skip(reason: string): PgTestTarget {
  console.warn(`postgres store: ${reason}`);
  return { skip: reason };
}

/**
 * A suite that runs against the test server: `body` gets its URL. Without one it is a skipped
 * suite whose title says why, so the skip shows in the report.
 */
export async function describeOnPg(title: string, body: (url: string) => void): Promise<void> {
  const target = await pgTestUrl();
  if ("skip" in target) {
    describe.skip(`${title}: ${target.skip}`, () => {
      it("runs against PostgreSQL", () => {});
    });
  } else {
    describe(title, () => body(target.url));
  }
}

/** A fresh, empty schema name for one test: `ax_t_` and random hex. */
export function freshPgSchema(): string {
  return `ax_t_${randomBytes(6).toString("hex")}`;
}

/** Drops `schema` and everything in it (a test's cleanup). */
export async function dropPgSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  client.on("error", () => {});
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${client.escapeIdentifier(schema)} CASCADE`);
  } finally {
    await client.end();
  }
}

/** Runs `fn` on a plain client of the test server, with `search_path` set to `schema`. */
export async function withPgClient<T>(
  url: string,
  schema: string,
  fn: (client: pg.Client) => Promise<T>,
): Promise<T> {
  const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  client.on("error", () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}
