import { createHmac } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type CoordinatorConfigInput, parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { AlertRecord } from "../../coordinator/store/port.js";
import { storeBeside, type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";
import { fakeAgent } from "../helpers/fake-agent.js";

interface Received {
  headers: IncomingMessage["headers"];
  body: string;
}

/** A webhook receiver that answers each request with the next status in `statuses` (then 200). */
async function receiver(statuses: number[] = [], hang = false) {
  const received: Received[] = [];
  const server: Server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c.toString("utf8");
    });
    req.on("end", () => {
      received.push({ headers: req.headers, body });
      if (hang) return; // never answers
      res.statusCode = statuses.shift() ?? 200;
      // A redirect points back at the hook itself, to show whether it is followed.
      if (res.statusCode >= 300 && res.statusCode < 400) res.setHeader("location", "/hook");
      res.end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return {
    url,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe("alerts: webhooks", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  const coordinators: Coordinator[] = [];
  const servers: { close(): Promise<void> }[] = [];

  const startCoordinator = async (
    alerts: CoordinatorConfigInput["alerts"],
    more: Partial<CoordinatorConfigInput> = {},
  ) => {
    const c = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.sqlite") },
        mqtt: { url: broker.url, prefix: broker.prefix },
        // Unsigned agents: this test is not about authentication (test/integration/security*.test.ts are).
        security: { messages: "off" },
        heartbeatMs: 500,
        alerts,
        ...more,
      }),
    );
    await c.start();
    coordinators.push(c);
    return c;
  };
  /** A command for an agent that never shows up: it ends EXPIRED at its deadline. */
  const expireOne = (c: Coordinator, inMs = 200) =>
    c.sendCommand({ agentId: "nobody", queue: true, handler: "echo", deadline: Date.now() + inMs });

  /**
   * Runs `whileRefused` while the store refuses every alert row (a trigger made on a second
   * connection: a fault, a full disk), checks that no alert was recorded meanwhile, lets the store
   * take them again, and adds the first alert once the coordinator `whileRefused` returns (`c`)
   * has recorded and delivered it.
   */
  const refusingAlerts = async <T extends { c: Coordinator }>(
    whileRefused: () => Promise<T>,
  ): Promise<T & { alert: AlertRecord }> => {
    const db = storeBeside(join(tmp.dir, "ax.sqlite"));
    try {
      await db.exec(`CREATE TRIGGER no_alert BEFORE INSERT ON alerts
        BEGIN SELECT RAISE(ABORT, 'no room'); END`);
      const got = await whileRefused();
      expect(await got.c.store.listAlerts()).toEqual([]);
      await db.exec("DROP TRIGGER no_alert");
      const [alert] = await waitFor("delivered", async () => {
        const list = await got.c.store.listAlerts();
        return list[0]?.status === "delivered" ? list : undefined;
      });
      return { ...got, alert: alert as AlertRecord };
    } finally {
      db.close();
    }
  };

  beforeEach(async () => {
    broker = await testBroker();
    tmp = tempDir();
  });
  afterEach(async () => {
    for (const c of coordinators.splice(0)) await c.close();
    for (const s of servers.splice(0)) await s.close();
    await broker.close();
    tmp.cleanup();
  });

  it("posts an expired execution to the hook, signed, retrying failed attempts with back-off, and records it", async () => {
    const hook = await receiver([500, 503]);
    servers.push(hook);
    const secret = "a-secret-of-16-chars+";
    const c = await startCoordinator({
      webhooks: [{ url: hook.url, secret, headers: { authorization: "Bearer t0k" } }],
      maxAttempts: 5,
      backoffBaseMs: 20,
      backoffCapMs: 100,
    });
    const id = await expireOne(c);
    await waitFor("delivered", async () => {
      const [a] = await c.store.listAlerts();
      return a?.status === "delivered" ? a : undefined;
    });
    const [alert] = await c.store.listAlerts();
    expect(alert).toMatchObject({ kind: "execution.expired", attempts: 3, status: "delivered" });
    expect(hook.received).toHaveLength(3);
    const last = hook.received[2] as Received;
    const payload = JSON.parse(last.body) as Record<string, unknown>;
    expect(payload).toMatchObject({
      id: alert?.id,
      kind: "execution.expired",
      executionId: id,
      state: "EXPIRED",
    });
    // Every attempt carries the same id, so the receiver can drop a repeat.
    expect(new Set(hook.received.map((r) => r.headers["x-ax-alert-id"]))).toEqual(
      new Set([alert?.id]),
    );
    expect(last.headers.authorization).toBe("Bearer t0k");
    expect(last.headers["x-ax-signature"]).toBe(
      `sha256=${createHmac("sha256", secret).update(last.body).digest("hex")}`,
    );
  });

  it("records an execution's end and its alert together, or neither", async () => {
    const hook = await receiver();
    servers.push(hook);
    const c = await startCoordinator({ webhooks: [{ url: hook.url }] });
    // The store refuses the alert's row: the expiry that raises it is not recorded either,
    // rather than recorded without its alert.
    const { id, alert } = await refusingAlerts(async () => {
      const id = await expireOne(c);
      // An expiry lands within about a second of the deadline; this one cannot.
      await new Promise((r) => setTimeout(r, 2_000));
      expect((await c.store.getExecution(id))?.state).toBe("PENDING");
      return { c, id };
    });
    // Once the store takes them, the next pass records both, and the hook hears of it once.
    expect((await c.store.getExecution(id))?.state).toBe("EXPIRED");
    expect(alert).toMatchObject({ kind: "execution.expired", status: "delivered" });
    expect(
      hook.received.map((r) => (JSON.parse(r.body) as { executionId: string }).executionId),
    ).toEqual([id]);
  });

  it("records a job's missed fires and their alert together, or neither", async () => {
    const hook = await receiver();
    servers.push(hook);
    const more = { misfireThresholdMs: 1_000 };
    const a = await startCoordinator({ webhooks: [{ url: hook.url }] }, more);
    const jobId = "every-second";
    await a.putJob({
      id: jobId,
      handler: "echo",
      trigger: { type: "every", every: "1s" },
      misfire: { policy: "SKIP" },
    });
    await waitFor("a fire", async () =>
      (await a.store.listExecutions({ jobId })).length > 0 ? true : undefined,
    );
    await a.close();
    coordinators.splice(coordinators.indexOf(a), 1);
    // Read with the coordinator closed: where the job stopped.
    const file = new Database(join(tmp.dir, "ax.sqlite"), { readonly: true });
    const missedFrom = (
      file.prepare("SELECT next_fire_at AS n FROM jobs WHERE id = ?").get(jobId) as { n: number }
    ).n;
    file.close();
    // Down for 3 s: the next start finds its times missed. The store refuses the alert's row.
    await new Promise((r) => setTimeout(r, 3_000));
    const { c: b, alert } = await refusingAlerts(async () => {
      const b = await startCoordinator({ webhooks: [{ url: hook.url }] }, more);
      await new Promise((r) => setTimeout(r, 1_500));
      // Neither the missed times nor their alert nor their count: the job has not moved on.
      expect((await b.store.getJob(jobId))?.nextFireAt).toBe(missedFrom);
      expect((await b.store.counters()).missed_fires ?? 0).toBe(0);
      return { c: b };
    });
    expect(alert).toMatchObject({ kind: "fire.missed", status: "delivered" });
    const sent = hook.received.map(
      (r) => JSON.parse(r.body) as { kind: string; jobId: string; scheduledFor: number[] },
    );
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ kind: "fire.missed", jobId });
    expect(sent[0]?.scheduledFor[0]).toBe(missedFrom);
    // The alert names what the record holds missed, and the job moved on past them.
    expect((await b.store.counters()).missed_fires).toBeGreaterThanOrEqual(
      sent[0]?.scheduledFor.length ?? 0,
    );
    expect((await b.store.getJob(jobId))?.nextFireAt).toBeGreaterThan(missedFrom);
  });

  it("records an agent offline and its alert together, or neither", async () => {
    const hook = await receiver();
    servers.push(hook);
    const c = await startCoordinator({ webhooks: [{ url: hook.url, kinds: ["agent.offline"] }] });
    const agentId = `${broker.prefix}-gone`;
    const agent = await fakeAgent(broker, agentId);
    await waitFor("online", async () =>
      (await c.store.getAgent(agentId))?.status === "online" ? true : undefined,
    );
    const { alert } = await refusingAlerts(async () => {
      // Silent from now on (no Last Will: a clean close): three heartbeats (1.5 s) later it is
      // taken offline, and the store refuses the alert's row.
      await agent.close();
      await new Promise((r) => setTimeout(r, 3_000));
      expect((await c.store.getAgent(agentId))?.status).toBe("online");
      return { c };
    });
    // The next sweep writes both, and the hook hears of it once.
    expect(alert).toMatchObject({ kind: "agent.offline", status: "delivered" });
    expect((await c.store.getAgent(agentId))?.status).toBe("offline");
    expect(hook.received.map((r) => JSON.parse(r.body) as { agentId: string })).toEqual([
      expect.objectContaining({ kind: "agent.offline", agentId }),
    ]);
  });

  it("takes a redirect for a failed attempt, not a delivery, and does not follow it", async () => {
    const hook = await receiver([302]);
    servers.push(hook);
    const c = await startCoordinator({
      webhooks: [{ url: hook.url }],
      maxAttempts: 5,
      backoffBaseMs: 20,
      backoffCapMs: 100,
    });
    await expireOne(c);
    const alert = await waitFor("delivered", async () => {
      const [a] = await c.store.listAlerts();
      return a?.status === "delivered" ? a : undefined;
    });
    expect(alert.attempts).toBe(2);
    // Two POSTs: the redirected attempt and the retry; no request that followed the redirect.
    expect(hook.received).toHaveLength(2);
  });

  it("records an alert failed after its last attempt, and sends each hook only the kinds it asked for", async () => {
    const wanted = await receiver();
    servers.push(wanted);
    const down = await receiver();
    await down.close(); // nothing listens there any more
    const c = await startCoordinator({
      webhooks: [
        { url: down.url, kinds: ["execution.expired"] },
        { url: wanted.url, kinds: ["agent.offline"] },
      ],
      maxAttempts: 3,
      backoffBaseMs: 10,
      backoffCapMs: 30,
    });
    await expireOne(c);
    const failed = await waitFor("failed", async () => {
      const a = (await c.store.listAlerts()).find((x) => x.url === down.url);
      return a?.status === "failed" ? a : undefined;
    });
    expect(failed.attempts).toBe(3);
    expect(failed.lastError).toBeTruthy();
    expect((await c.store.counters()).alerts_failed).toBe(1);
    // The other hook wanted only agent.offline: it got nothing for the expiry.
    expect(wanted.received).toHaveLength(0);
    expect((await c.store.listAlerts()).filter((a) => a.url === wanted.url)).toHaveLength(0);
  });

  it("never holds up scheduling: with a hook that never answers, executions still expire on time", async () => {
    const hung = await receiver([], true);
    servers.push(hung);
    const c = await startCoordinator({
      webhooks: [{ url: hung.url }],
      maxAttempts: 2,
      backoffBaseMs: 10,
      backoffCapMs: 10,
      timeoutMs: 60_000,
    });
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push(await expireOne(c, 100 + i * 50));
    const expired = await waitFor("all expired", async () => {
      const execs = await Promise.all(ids.map((id) => c.store.getExecution(id)));
      return execs.every((e) => e?.state === "EXPIRED") ? execs : undefined;
    });
    // Each one within a second of its deadline (the dispatcher's pass runs every 100 ms).
    for (const e of expired) expect((e?.updatedAt ?? 0) - (e?.deadline ?? 0)).toBeLessThan(1_000);
    // All 12 alerts are recorded; at most 8 are being sent, the rest wait.
    expect((await c.store.listAlerts()).length).toBe(12);
    await waitFor("hook reached", () => (hung.received.length >= 8 ? true : undefined));
    expect(hung.received.length).toBe(8);
  });

  it("resumes alerts still pending after a restart", async () => {
    const hook = await receiver([500]);
    servers.push(hook);
    const config = { webhooks: [{ url: hook.url }], maxAttempts: 5, backoffBaseMs: 60_000 };
    const first = await startCoordinator({ ...config, backoffCapMs: 60_000 });
    await expireOne(first);
    await waitFor("first attempt failed", async () => {
      const [a] = await first.store.listAlerts();
      return a?.attempts === 1 ? a : undefined;
    });
    await first.close();
    coordinators.splice(0);
    const second = await startCoordinator({ ...config, backoffBaseMs: 10, backoffCapMs: 10 });
    const [alert] = await waitFor("delivered after restart", async () => {
      const list = await second.store.listAlerts();
      return list[0]?.status === "delivered" ? list : undefined;
    });
    expect(alert?.attempts).toBe(2);
    expect(hook.received).toHaveLength(2);
  });
});
