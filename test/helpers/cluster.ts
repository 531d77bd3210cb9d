import { join } from "node:path";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator, openStore } from "../../coordinator/coordinator.js";
import type { TestBroker } from "./env.js";

/**
 * A coordinator of a PostgreSQL store several share, for a test, not started: cluster id `id`, the
 * test's broker and topic prefix (or `mqttUrl`), client id `<prefix>-<id>` unless given, and the
 * secrets in `dir`/ax-secrets, which every coordinator of the test shares as a fleet does.
 */
export async function clusterCoordinator(
  shared: { url: string; schema: string; broker: TestBroker; dir: string },
  id: string,
  more: { clientId?: string | undefined; mqttUrl?: string; messages?: "off" | "required" } = {},
): Promise<Coordinator> {
  const o = { ...shared, ...more, id };
  const config = parseCoordinatorConfig({
    store: { url: o.url, schema: o.schema, poolMax: 2 },
    cluster: { id: o.id, leaseMs: 3_000 },
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
