import mqtt from "mqtt";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { newId } from "../../shared/ids.js";
import type { DownMessage } from "../../shared/protocol/index.js";
import { type ClusterRig, clusterRig } from "../helpers/cluster.js";
import { waitFor } from "../helpers/env.js";
import { type FakeAgent, fakeAgent } from "../helpers/fake-agent.js";
import { call } from "../helpers/http.js";
import { describeOnPg } from "../helpers/postgres.js";

type Dispatch = Extract<DownMessage, { type: "dispatch" }>;
type Cancel = Extract<DownMessage, { type: "cancel" }>;

/**
 * Two coordinators on one PostgreSQL store, the second standing by. Every coordinator serves the
 * API (docs/operations.md, "Several coordinators"), so an operator whose request reaches the
 * standby must get the same answers and the same effects as on the active one. Before, the
 * standby's fleet was empty (no agent listed, a command by tags refused as matching none) and a
 * cancel made through it was never sent: it had no connection to the broker to send it on.
 */
await describeOnPg("a standby serves the API as the active one does", (url) => {
  let rig: ClusterRig;
  let agent: FakeAgent | undefined;
  let admin: string;
  let active: Coordinator;
  let a: string;
  let b: string;

  const start = (id: string, clientId?: string) => rig.serve(id, { messages: "off", clientId });

  beforeAll(async () => {
    rig = await clusterRig(url);
    const first = await start("coord-a");
    active = first.c;
    a = first.url;
    b = (await start("coord-b")).url;
    admin = rig.adminToken();
  }, 30_000);

  afterAll(async () => {
    await agent?.close();
    await rig?.close();
  });

  it("lists the fleet, sends a command by tags and delivers a cancel, through the standby", async () => {
    expect((await call(b, "GET", "/api/ready")).status).toBe(503); // b stands by
    const dev = await fakeAgent(rig.broker, `${rig.broker.prefix}-dev`, {
      tags: { site: "north" },
    });
    agent = dev;
    await waitFor("the agent online at the active one", async () =>
      (await call(a, "GET", `/api/agents/${dev.agentId}`, { token: admin })).status === 200
        ? true
        : undefined,
    );

    // The fleet, as the standby lists it: the store's, within a second.
    const listed = await waitFor("the standby to list the agent", async () => {
      const page = await call<{ items: { agentId: string; status: string }[]; total: number }>(
        b,
        "GET",
        "/api/agents?status=online",
        { token: admin },
      );
      return page.body.items.length > 0 ? page : undefined;
    });
    expect(listed.status).toBe(200);
    expect(listed.body.items.map((x) => [x.agentId, x.status])).toEqual([[dev.agentId, "online"]]);
    expect(listed.body.total).toBe(1);
    const one = await call<{ agentId: string; tags: Record<string, string>; handlers: string[] }>(
      b,
      "GET",
      `/api/agents/${dev.agentId}`,
      { token: admin },
    );
    expect(one.status).toBe(200);
    expect(one.body.tags).toEqual({ site: "north" });
    expect(one.body.handlers).toEqual(["echo"]);

    // A command by tags made through the standby: the active one dispatches it.
    const sent = await call<{ executionIds: string[]; targets: { agentId: string }[] }>(
      b,
      "POST",
      "/api/commands",
      { token: admin, body: { selector: { tags: { site: "north" } }, handler: "echo" } },
    );
    expect(sent.status).toBe(202);
    expect(sent.body.targets.map((t) => t.agentId)).toEqual([dev.agentId]);
    const id = sent.body.executionIds[0] as string;
    const d = await dev.waitFor(
      `dispatch of ${id}`,
      (m): m is Dispatch => m.type === "dispatch" && m.executionId === id,
    );
    const ref = { executionId: id, round: d.round };
    const at = Date.now();
    await dev.report({ type: "accepted", ...ref, seq: 1 });
    await dev.report({ type: "started", ...ref, seq: 2, startedAt: at, lateMs: 0 });
    await waitFor("the run recorded", async () =>
      (await active.store.getExecution(id))?.state === "RUNNING" ? true : undefined,
    );

    // Cancelled through the standby: the agent is sent the cancel, and its answer ends the run.
    const canceled = await call(b, "POST", `/api/executions/${id}/cancel`, { token: admin });
    expect(canceled.status).toBe(202);
    const c = await dev.waitFor(
      `cancel of ${id}`,
      (m): m is Cancel => m.type === "cancel" && m.executionId === id,
    );
    expect(c.round).toBe(d.round);
    await dev.report({
      type: "finished",
      ...ref,
      seq: 3,
      outcome: "canceled",
      retryable: false,
      message: "canceled by the operator",
      startedAt: at,
      finishedAt: Math.max(Date.now(), at + 1),
    });
    const ended = await waitFor("the run to end", async () => {
      const e = await active.store.getExecution(id);
      return e?.state === "CANCELED" ? e : undefined;
    });
    expect(ended.agentId).toBe(dev.agentId);
    const events = (await active.store.getTimeline(id)).map((e) => e.event);
    expect(events).toEqual(["created", "dispatch", "accepted", "started", "cancel", "finished"]);
    // Sent once, by the standby that was asked: the active one sent none of its own.
    expect(dev.received.filter((m) => m.type === "cancel")).toHaveLength(1);
  }, 30_000);

  it("an event job created through the standby fires on the active one's next event", async () => {
    // The active one has read the jobs that listen for events (none): an event fires nothing.
    const warm = await call<{ fired: number }>(a, "POST", "/api/events/bell", { token: admin });
    expect(warm.body.fired).toBe(0);
    const put = await call(b, "POST", "/api/jobs", {
      token: admin,
      body: { id: "on-bell", handler: "echo", trigger: { type: "event", name: "bell" } },
    });
    expect(put.status).toBe(201);
    // Over MQTT, as an application sends it: the active one fires the job the standby created.
    const client = await mqtt.connectAsync(rig.broker.url, {
      clientId: `${rig.broker.prefix}-app`,
    });
    try {
      // Sent again every half second until one fires (the job's news reaches the active one by
      // the store's notification, a few ms after the write): each message at most once.
      const fired = await waitFor(
        "the event to fire on-bell",
        async () => {
          const list = await active.store.listExecutions({ jobId: "on-bell" });
          if (list.length > 0) return list;
          await client.publishAsync(
            `${rig.broker.prefix}/v1/events/bell`,
            JSON.stringify({ v: 1, type: "event", msgId: newId(), sentAt: Date.now() }),
            { qos: 1 },
          );
          return undefined;
        },
        10_000,
        500,
      );
      expect(fired.length).toBeGreaterThan(0);
    } finally {
      await client.endAsync();
    }
  }, 30_000);

  it("opens no connection under the active one's client id, which it would take over", async () => {
    expect((await call(b, "GET", "/api/ready")).body).toMatchObject({ mqtt: true });
    // A third coordinator misconfigured with the active one's client id stands by unconnected.
    // Watched for 3 s (two of the client's reconnect periods): it never connects, and the active
    // one's connection is never ended by one under its id.
    const c = await start("coord-c", `${rig.broker.prefix}-coord-a`);
    const seen = { cUp: 0, aDown: 0, samples: 0 };
    for (const until = Date.now() + 3_000; Date.now() < until; seen.samples++) {
      if ((await call<{ mqtt: boolean }>(c.url, "GET", "/api/ready")).body.mqtt) seen.cUp++;
      if (!(await call<{ mqtt: boolean }>(a, "GET", "/api/ready")).body.mqtt) seen.aDown++;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(seen.samples).toBeGreaterThan(10);
    expect([seen.cUp, seen.aDown]).toEqual([0, 0]);
    expect((await call(c.url, "GET", "/api/ready")).body).toMatchObject({ role: "standby" });
  }, 30_000);
});
