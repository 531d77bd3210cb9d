import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import mqtt, { type MqttClient } from "mqtt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import type { EngineEvents } from "../../coordinator/engine/events.js";
import type { IdentityFile } from "../../shared/identity.js";
import { newId } from "../../shared/ids.js";
import { seal, unseal } from "../../shared/protocol/mac.js";
import { type TestBroker, tempDir, testBroker, waitFor, waitForEnd } from "../helpers/env.js";

/**
 * Issue 16, item 5, on the message level: an attacker with nothing but a client on the broker
 * (no ACL: the broker lets anyone publish anywhere, the worst case, as on a shared Mosquitto)
 * tries each attack of the issue against a coordinator and real agent processes that hold their
 * identities. Each is refused and changes nothing: checked against the record, the agents' side
 * effects (files file.write would have written) and what the agents said on the wire.
 */
describe("authenticated messages: forgeries and replays are refused", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let effects: string;
  let attacker: MqttClient;
  let sniffer: MqttClient;
  const wire: { topic: string; payload: Buffer }[] = [];
  const refusals: EngineEvents["refusedMessage"][] = [];
  const invalids: EngineEvents["invalidMessage"][] = [];
  const agents: AgentProcess[] = [];
  const ids: Record<"A" | "B", IdentityFile> = {} as Record<"A" | "B", IdentityFile>;
  let A: string;
  let B: string;

  const topic = (agentId: string, ch: "up" | "down" | "presence") =>
    `${broker.prefix}/v1/agents/${agentId}/${ch}`;
  const keyOf = (who: "A" | "B") => Buffer.from(ids[who].key, "base64url");
  const body = (payload: Buffer) => {
    const s = unseal(payload);
    return (typeof s === "string" ? payload : s.body).toString();
  };
  /** What was seen on a topic since `from` (an index into `wire`). */
  const seenOn = (t: string, from = 0) =>
    wire
      .slice(from)
      .filter((m) => m.topic === t)
      .map((m) => body(m.payload));
  const publish = (t: string, payload: string | Buffer, retain = false) =>
    attacker.publishAsync(t, payload, { qos: 1, retain });
  const refusedSince = (n: number, code?: string) =>
    refusals.slice(n).filter((r) => code === undefined || r.code === code);

  /** A real command that writes `name` into the effects folder; resolves when it succeeded. */
  const realWrite = async (agentId: string, name: string) => {
    const id = await coordinator.sendCommand({
      agentId,
      handler: "file.write",
      params: { path: join(effects, name), value: name },
    });
    const done = await waitForEnd(coordinator, id, 20_000);
    expect(done.state).toBe("SUCCEEDED");
    expect(readFileSync(join(effects, name), "utf8")).toBe(name);
    return id;
  };

  const dispatch = (executionId: string, path: string) =>
    JSON.stringify({
      v: 1,
      type: "dispatch",
      msgId: newId(),
      sentAt: Date.now(),
      executionId,
      round: 1,
      attempt: 1,
      handler: "file.write",
      params: { path, value: "forged" },
      fireAt: Date.now(),
      deadline: Date.now() + 30_000,
      timeoutMs: 5_000,
      priority: 0,
    });

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    effects = join(tmp.dir, "effects");
    mkdirSync(effects);
    A = `${broker.prefix}-sa`;
    B = `${broker.prefix}-sb`;
    coordinator = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.sqlite") },
        mqtt: { url: broker.url, prefix: broker.prefix },
        heartbeatMs: 500,
        // Every heartbeat 500 ms apart, idle or not: the revocation test waits for one.
        idleHeartbeatMs: 0,
      }),
    );
    coordinator.events.on("refusedMessage", (e) => refusals.push(e));
    coordinator.events.on("invalidMessage", (e) => invalids.push(e));
    await coordinator.start();
    sniffer = await mqtt.connectAsync(broker.url, { clientId: `${broker.prefix}-sniff` });
    sniffer.on("message", (t, payload) => wire.push({ topic: t, payload: Buffer.from(payload) }));
    await sniffer.subscribeAsync(`${broker.prefix}/#`, { qos: 1 });
    attacker = await mqtt.connectAsync(broker.url, { clientId: `${broker.prefix}-evil` });
    for (const [who, agentId] of [
      ["A", A],
      ["B", B],
    ] as const) {
      const { file } = await coordinator.identities.enroll(agentId, {
        tags: { site: "north" },
        actor: "test",
      });
      ids[who] = file;
      const identityFile = join(tmp.dir, `${agentId}.identity.json`);
      writeFileSync(identityFile, JSON.stringify(file), { mode: 0o600 });
      agents.push(
        spawnAgentProcess(tmp.dir, {
          agentId,
          identityFile,
          mqtt: {
            url: broker.url,
            prefix: broker.prefix,
            keepaliveS: 5,
            reconnect: { baseMs: 100, capMs: 1000 },
          },
          heartbeatMs: 500,
          // The hello claims a tag it was not enrolled with.
          tags: { site: "south" },
          handlers: { "file.write": { allow: [effects] } },
        }),
      );
    }
    await waitFor("both agents online", () =>
      coordinator.fleet.get(A)?.status === "online" && coordinator.fleet.get(B)?.status === "online"
        ? true
        : undefined,
    );
  }, 60_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop(3000)));
    await attacker?.endAsync();
    await sniffer?.endAsync();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("runs real work with every message on the wire MACed, and routes by the enrolled tags", async () => {
    const from = wire.length;
    await realWrite(A, "real-0");
    // The dispatch, the reports, the ack, and the heartbeats (every 500 ms) and their clock
    // samples: whichever of them are on the wire once a few are, none unsealed. (The work may be
    // recorded before its ack, or a held `time` answer, has crossed the broker.)
    const ofA = () => wire.slice(from).filter((m) => m.topic.includes(`/agents/${A}/`));
    await waitFor("A's messages of the work", () => (ofA().length > 3 ? true : undefined));
    const mine = ofA();
    for (const m of mine) expect(/^(\{|\[\{)"mac":"/.test(m.payload.toString())).toBe(true);
    expect(coordinator.fleet.get(A)?.tags).toEqual({ site: "north" });
  }, 30_000);

  it("never runs a forged dispatch: unsigned, signed with another agent's key, or for another agent", async () => {
    const forged = ["f-unsigned", "f-keyB", "f-topicB", "f-badgen"].map((n) => ({
      id: `${n}-${newId()}`,
      path: join(effects, n),
    }));
    const [unsigned, withKeyB, forB, badGen] = forged as [
      (typeof forged)[0],
      (typeof forged)[0],
      (typeof forged)[0],
      (typeof forged)[0],
    ];
    const now = Date.now();
    await publish(topic(A, "down"), dispatch(unsigned.id, unsigned.path));
    // A stolen device B tries to command A with its own key.
    await publish(
      topic(A, "down"),
      seal(dispatch(withKeyB.id, withKeyB.path), topic(A, "down"), keyOf("B"), 1, now),
    );
    // A message B may read (its own down) replayed onto A's topic fails for A.
    await publish(
      topic(A, "down"),
      seal(dispatch(forB.id, forB.path), topic(B, "down"), keyOf("A"), 1, now),
    );
    await publish(
      topic(A, "down"),
      seal(dispatch(badGen.id, badGen.path), topic(A, "down"), keyOf("A"), 2, now),
    );
    const from = wire.length;
    // Messages to one agent are handled in order: once this has run, the forgeries were seen.
    await realWrite(A, "real-1");
    for (const f of forged) {
      expect(existsSync(f.path)).toBe(false);
      expect(await coordinator.store.getExecution(f.id)).toBeUndefined();
    }
    // Not a word about them from the agent either (a `rejected` would be its own signed report).
    const said = seenOn(topic(A, "up"), 0).join("\n");
    for (const f of forged) expect(said).not.toContain(f.id);
    // The sniffer gets A's reports through the broker as the coordinator does, so they may reach
    // it after the coordinator recorded the work: wait for them rather than race them.
    await waitFor("A's reports of real-1 on the wire", () =>
      seenOn(topic(A, "up"), from).length > 0 ? true : undefined,
    );
  }, 30_000);

  it("keeps the real result when a forged finished is published for a running execution", async () => {
    const id = await coordinator.sendCommand({
      agentId: A,
      handler: "sleep",
      params: { ms: 1500 },
    });
    await waitFor("running", async () =>
      (await coordinator.store.getExecution(id))?.state === "RUNNING" ? true : undefined,
    );
    const acks = seenOn(topic(A, "down"))
      .map((t) => JSON.parse(t) as { type: string; upTo?: number })
      .filter((m) => m.type === "ack");
    const seq = (acks.at(-1)?.upTo ?? 0) + 1;
    const n = refusals.length;
    const finished = (msgId: string) =>
      JSON.stringify({
        v: 1,
        type: "finished",
        msgId,
        sentAt: Date.now(),
        seq,
        executionId: id,
        round: 1,
        outcome: "succeeded",
        retryable: false,
        message: "forged",
        result: { forged: true },
        startedAt: Date.now() - 10,
        finishedAt: Date.now(),
      });
    await publish(topic(A, "up"), finished("forge-1"));
    await publish(
      topic(A, "up"),
      seal(finished("forge-2"), topic(A, "up"), keyOf("B"), 1, Date.now()),
    );
    // An unreadable report is acknowledged in its turn only when it is authentic: a forged one,
    // acknowledged, would make the coordinator pass over the real report of that seq.
    const unreadable = finished("forge-3").replace('{"forged":true}', '"forged"');
    await publish(topic(A, "up"), unreadable);
    await publish(topic(A, "up"), seal(unreadable, topic(A, "up"), keyOf("B"), 1, Date.now()));
    await waitFor("the forgeries refused", () => (refusedSince(n).length >= 4 ? true : undefined));
    expect((await coordinator.store.getExecution(id))?.state).toBe("RUNNING");
    const done = await waitForEnd(coordinator, id, 20_000);
    expect(done.state).toBe("SUCCEEDED");
    expect(done.result).not.toEqual({ forged: true });
    expect(done.message ?? "").not.toContain("forged");
    expect(refusedSince(n).map((r) => r.code)).toEqual([
      "AX_AUTH_UNSIGNED",
      "AX_AUTH_BAD_MAC",
      "AX_AUTH_UNSIGNED",
      "AX_AUTH_BAD_MAC",
    ]);
    expect((await coordinator.store.counters()).unreadable_reports ?? 0).toBe(0);
  }, 30_000);

  it("refuses a forged hello and presence for an existing agent, and an agent that is not enrolled", async () => {
    const before = coordinator.fleet.get(A);
    const n = refusals.length;
    const hello = (agentId: string) =>
      JSON.stringify({
        v: 1,
        type: "hello",
        msgId: newId(),
        sentAt: Date.now(),
        agentId,
        instanceId: `evil-${newId()}`,
        journalId: `evil-${newId()}`,
        lastSeq: 0,
        profile: "dev",
        bundle: { version: "dev", sha256: "dev" },
        handlers: ["file.write"],
        capacity: { concurrency: 4, queue: 64 },
        tags: {},
      });
    const offline = JSON.stringify({
      v: 1,
      type: "presence",
      msgId: newId(),
      sentAt: Date.now(),
      status: "offline",
      instanceId: before?.instanceId,
    });
    const ghost = `${broker.prefix}-ghost`;
    await publish(topic(A, "up"), hello(A));
    await publish(topic(A, "up"), seal(hello(A), topic(A, "up"), keyOf("B"), 1, Date.now()));
    await publish(topic(A, "presence"), offline);
    await publish(topic(ghost, "up"), hello(ghost));
    await waitFor("four refusals", () => (refusedSince(n).length >= 4 ? true : undefined));
    await realWrite(A, "real-2");
    const after = coordinator.fleet.get(A);
    expect(after?.instanceId).toBe(before?.instanceId);
    expect(after?.journalId).toBe(before?.journalId);
    expect(after?.status).toBe("online");
    expect(coordinator.fleet.get(ghost)).toBeUndefined();
    expect(refusedSince(n).map((r) => r.code)).toEqual([
      "AX_AUTH_UNSIGNED",
      "AX_AUTH_BAD_MAC",
      "AX_AUTH_UNSIGNED",
      "AX_AUTH_UNSIGNED",
    ]);
  }, 30_000);

  it("refuses a payload over the size limit by its size, sealed or not, before its MAC", async () => {
    const n = refusals.length;
    const m = invalids.length;
    const ack = (pad: number) =>
      JSON.stringify({
        v: 1,
        type: "accepted",
        msgId: newId(),
        sentAt: Date.now(),
        seq: 1_000_000,
        executionId: "ex-size",
        round: 1,
        pad: "x".repeat(pad),
      });
    // The body alone is within the 65,536 bytes; sealed with A's own key, the payload is not.
    const bodyBytes = Buffer.byteLength(ack(0));
    const sealed = seal(ack(65_536 - bodyBytes - 10), topic(A, "up"), keyOf("A"), 1, Date.now());
    expect(Buffer.byteLength(sealed)).toBeGreaterThan(65_536);
    await publish(topic(A, "up"), sealed);
    await publish(topic(A, "up"), ack(70_000));
    await waitFor("both refused", () => (invalids.length >= m + 2 ? true : undefined));
    expect(invalids.slice(m).map((e) => e.code)).toEqual([
      "AX_PROTO_TOO_LARGE",
      "AX_PROTO_TOO_LARGE",
    ]);
    expect(invalids.slice(m)[0]?.message).toContain("more than the limit of 65536");
    // Neither was taken for a forgery: the size decided before the MAC was looked at.
    expect(refusedSince(n)).toEqual([]);
  }, 30_000);

  it("refuses replays of real messages, both ways", async () => {
    const hb = wire.filter(
      (m) => m.topic === topic(A, "up") && body(m.payload).includes('"type":"heartbeat"'),
    );
    const online = wire.filter(
      (m) => m.topic === topic(A, "presence") && body(m.payload).includes('"online"'),
    );
    const dispatches = wire.filter(
      (m) => m.topic === topic(A, "down") && body(m.payload).includes('"type":"dispatch"'),
    );
    expect(hb.length).toBeGreaterThan(0);
    expect(online.length).toBeGreaterThan(0);
    expect(dispatches.length).toBeGreaterThan(0);
    const n = refusals.length;
    await publish(topic(A, "up"), (hb.at(-1) as { payload: Buffer }).payload);
    await publish(topic(A, "presence"), (online.at(-1) as { payload: Buffer }).payload);
    await waitFor("two replays refused", () =>
      refusedSince(n, "AX_AUTH_STALE").length >= 2 ? true : undefined,
    );
    // The first real dispatch (real-0's file.write) replayed to A: its file is removed first, so
    // a second run would show.
    const first = dispatches[0] as { payload: Buffer };
    const replayedId = (JSON.parse(body(first.payload)) as { executionId: string }).executionId;
    const { rmSync } = await import("node:fs");
    rmSync(join(effects, "real-0"));
    const from = wire.length;
    await publish(topic(A, "down"), first.payload);
    await realWrite(A, "real-3");
    expect(existsSync(join(effects, "real-0"))).toBe(false);
    // Refused before it reached the journal: not even a `state` answer to a duplicate.
    expect(seenOn(topic(A, "up"), from).join("\n")).not.toContain(replayedId);
    expect(coordinator.fleet.get(A)?.status).toBe("online");
  }, 30_000);

  it("refuses an authentic message signed outside the window, and sends the agent a clock sample", async () => {
    const sentAt = Date.now() - 600_000;
    const stale = JSON.stringify({
      v: 1,
      type: "heartbeat",
      msgId: newId(),
      sentAt,
      instanceId: coordinator.fleet.get(A)?.instanceId,
      running: [],
      queued: 0,
      scheduled: 0,
      load: 0,
      clockOffset: { offsetMs: 0, uncertaintyMs: 0 },
      journal: { depth: 0, outboxDepth: 0 },
    });
    const n = refusals.length;
    const from = wire.length;
    await publish(topic(A, "up"), seal(stale, topic(A, "up"), keyOf("A"), 1, sentAt));
    await waitFor("refused as stale", () =>
      refusedSince(n, "AX_AUTH_STALE").length >= 1 ? true : undefined,
    );
    const sample = await waitFor("a clock sample for it", () =>
      seenOn(topic(A, "down"), from)
        .map((t) => JSON.parse(t) as { type: string; clock?: { t0: number } })
        .find((m) => m.type === "time" && m.clock?.t0 === sentAt),
    );
    expect(sample.clock?.t0).toBe(sentAt);
  }, 30_000);

  it("fires an event job only for an event MACed by the enrolled identity it names", async () => {
    await coordinator.putJob({
      id: "on-alarm",
      handler: "echo",
      trigger: { type: "event", name: "alarm" },
    });
    const event = (from?: string) =>
      JSON.stringify({
        v: 1,
        type: "event",
        msgId: newId(),
        sentAt: Date.now(),
        ...(from === undefined ? {} : { from }),
        payload: { zone: 3 },
      });
    const t = `${broker.prefix}/v1/events/alarm`;
    const n = refusals.length;
    await publish(t, event());
    await publish(t, event(B));
    await publish(t, seal(event(A), t, keyOf("B"), 1, Date.now()));
    await waitFor("three refused", () => (refusedSince(n).length >= 3 ? true : undefined));
    expect(await coordinator.store.listExecutions({ jobId: "on-alarm" })).toHaveLength(0);
    await publish(t, seal(event(B), t, keyOf("B"), 1, Date.now()));
    const [exec] = await waitFor("the event's execution", async () => {
      const list = await coordinator.store.listExecutions({ jobId: "on-alarm" });
      return list.length > 0 ? list : undefined;
    });
    expect((await waitForEnd(coordinator, exec?.id ?? "", 20_000)).state).toBe("SUCCEEDED");
    // A sealed event that does not decode is an invalid message, not a refused forgery.
    const m = invalids.length;
    const r = refusals.length;
    const bad = JSON.stringify({
      v: 2,
      type: "event",
      msgId: newId(),
      sentAt: Date.now(),
      from: B,
    });
    await publish(t, seal(bad, t, keyOf("B"), 1, Date.now()));
    await waitFor("the invalid event", () => (invalids.length > m ? true : undefined));
    expect(invalids.slice(m).map((e) => e.code)).toEqual(["AX_PROTO_BAD_VERSION"]);
    expect(refusedSince(r)).toEqual([]);
  }, 30_000);

  it("stops hearing a revoked agent at once and sends it nothing more", async () => {
    const n = refusals.length;
    await coordinator.identities.revoke(B, "test");
    expect(coordinator.fleet.get(B)?.status).toBe("offline");
    // B keeps sending heartbeats with its (now revoked) key: each is refused.
    await waitFor("B's heartbeat refused", () =>
      refusedSince(n, "AX_AUTH_NOT_ENROLLED").some((r) => r.source === B) ? true : undefined,
    );
    const from = wire.length;
    const executions = (await coordinator.store.listExecutions({ limit: 1_000_000 })).length;
    // A command for it is refused at once (it could only expire), and nothing is written.
    const refused = await coordinator
      .sendCommand({
        agentId: B,
        handler: "file.write",
        params: { path: join(effects, "to-revoked"), value: "x" },
        deadline: Date.now() + 3_000,
      })
      .then(
        () => undefined,
        (err: unknown) => err as { code?: string; message?: string },
      );
    expect(refused?.code).toBe("AX_AUTH_NOT_ENROLLED");
    expect(refused?.message).toBe(
      `agent "${B}"'s enrolment is revoked: the coordinator sends it nothing (enrol it again first: ax fleet enroll ${B} --rotate)`,
    );
    expect((await coordinator.store.listExecutions({ limit: 1_000_000 })).length).toBe(executions);
    await new Promise((r) => setTimeout(r, 1_500));
    expect(seenOn(topic(B, "down"), from)).toEqual([]);
    expect(existsSync(join(effects, "to-revoked"))).toBe(false);
    expect(coordinator.fleet.get(B)?.status).toBe("offline");
  }, 30_000);
});

/**
 * The Last Will is signed when its connection opens and published when it ends: on a connection
 * older than the freshness window it was refused as stale, and a dead agent waited out the
 * heartbeat rule instead of going offline at once (operations.md).
 */
describe("authenticated messages: the will of a long connection", () => {
  it("takes an agent killed with kill -9 offline by its will, its connection older than the window", async () => {
    const broker = await testBroker();
    const tmp = tempDir();
    const coordinator = new Coordinator(
      parseCoordinatorConfig({
        store: { path: join(tmp.dir, "ax.sqlite") },
        mqtt: { url: broker.url, prefix: broker.prefix },
        // 3 missed heartbeats take 30 s: an agent offline within seconds went by its will.
        heartbeatMs: 10_000,
        security: { freshnessMs: 1_000 },
      }),
    );
    const refused: EngineEvents["refusedMessage"][] = [];
    const offline: EngineEvents["agent"][] = [];
    coordinator.events.on("refusedMessage", (e) => refused.push(e));
    coordinator.events.on("agent", (e) => {
      if (e.status === "offline") offline.push(e);
    });
    await coordinator.start();
    const agentId = `${broker.prefix}-will`;
    const { file } = await coordinator.identities.enroll(agentId, { actor: "test" });
    const identityFile = join(tmp.dir, `${agentId}.identity.json`);
    writeFileSync(identityFile, JSON.stringify(file), { mode: 0o600 });
    const agent = spawnAgentProcess(tmp.dir, {
      agentId,
      identityFile,
      mqtt: {
        url: broker.url,
        prefix: broker.prefix,
        keepaliveS: 1,
        reconnect: { baseMs: 100, capMs: 1000 },
      },
      heartbeatMs: 10_000,
    });
    try {
      await waitFor("the agent online", () =>
        coordinator.fleet.get(agentId)?.status === "online" ? true : undefined,
      );
      // Twice the window: the will held by the broker was signed 2 s before it is published.
      await new Promise((r) => setTimeout(r, 2_000));
      const killedAt = Date.now();
      await agent.kill();
      const gone = await waitFor("the agent offline", () => offline[0], 15_000);
      expect(gone.reason).toBe("presence");
      // The broker gives up on the silent client after 1.5 keepalives; the will comes then.
      expect(gone.at - killedAt).toBeLessThan(1_500 + 2_000);
      expect(refused.filter((r) => r.code === "AX_AUTH_STALE")).toEqual([]);
    } finally {
      await agent.kill();
      await coordinator.close();
      await broker.close();
      tmp.cleanup();
    }
  }, 40_000);
});
