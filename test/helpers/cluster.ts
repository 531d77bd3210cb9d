import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator, openStore } from "../../coordinator/coordinator.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import { type TestBroker, tempDir, testBroker } from "./env.js";
import { dropPgSchema, freshPgSchema } from "./postgres.js";

/**
 * A coordinator of a PostgreSQL store several share, for a test, not started: cluster id `id`, the
 * test's broker and topic prefix (or `mqttUrl`), client id `<prefix>-<id>` unless given, and the
 * secrets in `dir`/ax-secrets, which every coordinator of the test shares as a fleet does.
 */
export async function clusterCoordinator(
  shared: { url: string; schema: string; broker: TestBroker; dir: string },
  id: string,
  more: {
    clientId?: string | undefined;
    mqttUrl?: string;
    messages?: "off" | "required";
    /** `cluster.firing` and `cluster.dispatch`. */
    shares?: { firing: "active" | "shared"; dispatch: "active" | "shared" };
  } = {},
): Promise<Coordinator> {
  const o = { ...shared, ...more, id };
  const config = parseCoordinatorConfig({
    store: { url: o.url, schema: o.schema, poolMax: 2 },
    cluster: { id: o.id, leaseMs: 3_000, ...o.shares },
    mqtt: {
      url: o.mqttUrl ?? o.broker.url,
      prefix: o.broker.prefix,
      clientId: o.clientId ?? `${o.broker.prefix}-${o.id}`,
    },
    security: {
      dir: join(o.dir, "ax-secrets"),
      ...(o.messages === undefined ? {} : { messages: o.messages }),
    },
  });
  return new Coordinator(config, { store: await openStore(config) });
}

/**
 * The parts of a cluster test on one PostgreSQL store: a broker, a folder (the shared secrets),
 * a schema of its own, and the coordinators and API servers it starts, which {@link close} ends
 * with the rest, last started first.
 */
export interface ClusterRig {
  broker: TestBroker;
  dir: string;
  /** A coordinator of the store, not started (see {@link clusterCoordinator}). */
  coordinator(id: string, more?: Parameters<typeof clusterCoordinator>[2]): Promise<Coordinator>;
  /** One started and serving its API on a free port. */
  serve(
    id: string,
    more?: Parameters<typeof clusterCoordinator>[2],
  ): Promise<{ c: Coordinator; url: string }>;
  /** Closes one now (its membership leaves), and not again at the end. */
  closeOne(c: Coordinator): Promise<void>;
  /** The admin token every coordinator of the rig shares (made by the first one's start). */
  adminToken(): string;
  close(): Promise<void>;
}

export async function clusterRig(url: string): Promise<ClusterRig> {
  const broker = await testBroker();
  const tmp = tempDir();
  const schema = freshPgSchema();
  const shared = { url, schema, broker, dir: tmp.dir };
  const coordinators: Coordinator[] = [];
  const servers: HttpServer[] = [];
  const rig: ClusterRig = {
    broker,
    dir: tmp.dir,
    async coordinator(id, more) {
      const c = await clusterCoordinator(shared, id, more);
      coordinators.push(c);
      return c;
    },
    async serve(id, more) {
      const c = await rig.coordinator(id, more);
      await c.start();
      const http = await startHttpServer(c, { port: 0 });
      servers.push(http);
      return { c, url: http.url };
    },
    async closeOne(c) {
      coordinators.splice(coordinators.indexOf(c), 1);
      await c.close();
    },
    adminToken: () => readFileSync(join(tmp.dir, "ax-secrets", "admin.token"), "utf8").trim(),
    async close() {
      for (const s of servers.splice(0)) await s.close();
      for (const c of coordinators.splice(0).reverse()) await c.close();
      await broker.close();
      await dropPgSchema(url, schema);
      tmp.cleanup();
    },
  };
  return rig;
}
