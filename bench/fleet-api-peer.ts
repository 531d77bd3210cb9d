/**
 * The other side of bench/fleet-api.ts, in a process of its own, as an operator's client and a
 * fleet's devices are: what it does costs the coordinator's event loop nothing, so the figures
 * are the coordinator's.
 *
 *   node --import tsx bench/fleet-api-peer.ts client URL TOKEN
 *     reads lines from stdin, each a JSON `{ method, path, body? }`, makes that request, and
 *     answers a line `{ ms, bytes, status, json }` (ms: from the request to its whole body read;
 *     json: the answer's `targets` count only, not the answer).
 *   node --import tsx bench/fleet-api-peer.ts agents MQTT_URL PREFIX
 *     answers every dispatch on PREFIX/v1/agents/+/down `accepted` (seq rising by one per agent),
 *     as the agents would; prints `ready` once subscribed and `answered N` on SIGTERM.
 */
import { createInterface } from "node:readline";
import mqtt from "mqtt";
import { answerDispatches } from "./fleet-api-answer.js";

const [role, a, b] = process.argv.slice(2);

if (role === "client" && a !== undefined && b !== undefined) {
  const url = a;
  const token = b;
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    const req = JSON.parse(line) as { method: string; path: string; body?: unknown };
    const started = performance.now();
    const r = await fetch(`${url}${req.path}`, {
      method: req.method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(req.body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(req.body === undefined ? {} : { body: JSON.stringify(req.body) }),
    });
    const text = await r.text();
    const ms = performance.now() - started;
    const parsed = r.ok ? (JSON.parse(text) as { targets?: unknown[] }) : undefined;
    process.stdout.write(
      `${JSON.stringify({
        ms,
        bytes: Buffer.byteLength(text),
        status: r.status,
        targets: parsed?.targets?.length ?? null,
        error: r.ok ? null : text.slice(0, 500),
      })}\n`,
    );
  }
} else if (role === "agents" && a !== undefined && b !== undefined) {
  const client = await mqtt.connectAsync(a, { clientId: `fleet-api-agents-${process.pid}` });
  const answered = await answerDispatches(client, b);
  process.stdout.write("ready\n");
  process.once("SIGTERM", () => {
    process.stdout.write(`answered ${answered()}\n`);
    client.end(false, {}, () => process.exit(0));
  });
} else {
  process.stderr.write(
    "usage: fleet-api-peer.ts client URL TOKEN | fleet-api-peer.ts agents MQTT_URL PREFIX\n",
  );
  process.exit(2);
}
