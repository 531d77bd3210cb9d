import { join } from "node:path";
import mqtt, { type MqttClient } from "mqtt";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { Coordinator } from "../../coordinator/coordinator.js";
import { newId } from "../../shared/ids.js";
import { type BodyOf, envelope } from "../../shared/message.js";
import {
  type DownMessage,
  decodeAll,
  encode,
  type Report,
  topics,
  type UpMessage,
} from "../../shared/protocol/index.js";
import { seal, unseal } from "../../shared/protocol/mac.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "./env.js";

/**
 * An agent played by the test over a real MQTT client: it says hello, numbers the reports it is
 * told to send, and records every message the coordinator sends it. Nothing is automatic beyond
 * the hello, so a test can send reports out of order, twice, or late.
 */
export interface FakeAgent {
  agentId: string;
  instanceId: string;
  journalId: string;
  /** Every down message received, in order (each command of a batch on its own). */
  received: DownMessage[];
  /** How many commands each MQTT message on the down topic carried (1 unless a batch). */
  payloadSizes: number[];
  /** Publishes `body` as a report, with the seq the test picks. */
  report(body: BodyOf<Report>): Promise<void>;
  /** Publishes any up message as is. */
  publish(message: UpMessage): Promise<void>;
  /** Reports a dispatch run to success: accepted, started and finished, seqs `seq` to `seq` + 2. */
  succeed(ref: { executionId: string; round: number }, seq: number): Promise<void>;
  /** A heartbeat with `outboxDepth` reports in its outbox, and `time` when given. */
  heartbeat(
    outboxDepth?: number,
    running?: { executionId: string; round: number }[],
    extra?: { time?: boolean; load?: number },
  ): Promise<void>;
  /** Waits for a down message that `match` accepts (received since the call or before). */
  waitFor<T extends DownMessage>(what: string, match: (m: DownMessage) => m is T): Promise<T>;
  close(): Promise<void>;
}

export async function fakeAgent(
  broker: TestBroker,
  agentId: string,
  options: {
    handlers?: string[];
    journalId?: string;
    /** The hello's lastSeq: reports up to it are an earlier process's, replayed. @default 0 */
    lastSeq?: number;
    batchBytes?: number;
    /** Its enrolled key (kid 1): every message is sealed with it, and each one received opened. */
    key?: Buffer;
    /** The tags its hello claims (taken when messages are not authenticated). @default {} */
    tags?: Record<string, string>;
  } = {},
): Promise<FakeAgent> {
  const t = topics(broker.prefix);
  const client: MqttClient = await mqtt.connectAsync(broker.url, {
    clientId: agentId,
    clean: true,
  });
  const received: DownMessage[] = [];
  const payloadSizes: number[] = [];
  const { key } = options;
  client.on("message", (topic, payload) => {
    const opened = key === undefined ? undefined : unseal(payload);
    const body = typeof opened === "object" ? opened.body : payload;
    const all = decodeAll(topic, body, { prefix: broker.prefix });
    payloadSizes.push(all.length);
    for (const d of all) if (d.ok && d.value.channel === "down") received.push(d.value.message);
  });
  await client.subscribeAsync(t.down(agentId), { qos: 1 });
  const instanceId = newId("i");
  const journalId = options.journalId ?? newId("j");
  const publish = async (m: UpMessage) => {
    const topic = t.up(agentId);
    const body = encode(m);
    await client.publishAsync(topic, key ? seal(body, topic, key, 1, Date.now()) : body, {
      qos: 1,
    });
  };
  const agent: FakeAgent = {
    agentId,
    instanceId,
    journalId,
    received,
    payloadSizes,
    report: (body) => publish(envelope(body, Date.now()) as Report),
    publish,
    async succeed(ref, seq) {
      const at = Date.now();
      await agent.report({ type: "accepted", ...ref, seq });
      await agent.report({ type: "started", ...ref, seq: seq + 1, startedAt: at, lateMs: 0 });
      await agent.report({
        type: "finished",
        ...ref,
        seq: seq + 2,
        outcome: "succeeded",
        retryable: false,
        message: "",
        startedAt: at,
        finishedAt: at + 1,
      });
    },
    heartbeat: (outboxDepth = 0, running = [], extra = {}) =>
      publish(
        envelope(
          {
            type: "heartbeat",
            instanceId,
            running,
            queued: 0,
            scheduled: 0,
            load: extra.load ?? 0,
            clockOffset: { offsetMs: 0, uncertaintyMs: 0 },
            journal: { depth: 0, outboxDepth },
            ...(extra.time === undefined ? {} : { time: extra.time }),
          },
          Date.now(),
        ),
      ),
    waitFor: (what, match) =>
      waitFor(what, () => received.find(match), 15_000, 20) as Promise<never>,
    close: () => client.endAsync(),
  };
  await publish(
    envelope(
      {
        type: "hello",
        agentId,
        instanceId,
        journalId,
        lastSeq: options.lastSeq ?? 0,
        profile: "server",
        bundle: { version: "dev", sha256: "dev" },
        handlers: options.handlers ?? ["echo"],
        capacity: { concurrency: 4, queue: 4 },
        tags: options.tags ?? {},
        ...(options.batchBytes === undefined ? {} : { batchBytes: options.batchBytes }),
      },
      Date.now(),
    ),
  );
  await agent.waitFor("welcome", (m): m is DownMessage => m.type === "welcome");
  return agent;
}

/** What a test tears down after itself, last pushed first. */
export type Cleanups = (() => Promise<void> | void)[];

/**
 * A test broker and a coordinator factory on it, with its store in a temp folder and `over`
 * merged into its config (heartbeat 500 ms unless `over` says otherwise). Each `start()` opens a
 * coordinator on the same store and client id: a restart. Everything is closed through `cleanups`.
 */
export async function coordinatorSetup(cleanups: Cleanups, over: Record<string, unknown> = {}) {
  const broker = await testBroker();
  cleanups.push(() => broker.close());
  const tmp = tempDir();
  cleanups.push(() => tmp.cleanup());
  const config = parseCoordinatorConfig({
    store: { path: join(tmp.dir, "ax.sqlite") },
    mqtt: { url: broker.url, prefix: broker.prefix },
    // Unsigned agents: this test is not about authentication (test/integration/security*.test.ts are).
    security: { messages: "off" },
    heartbeatMs: 500,
    ...over,
  });
  const start = async (): Promise<Coordinator> => {
    const c = new Coordinator(config);
    await c.start();
    return c;
  };
  return { broker, start };
}

/** {@link coordinatorSetup} with its coordinator started (and closed through `cleanups`). */
export async function startedCoordinator(cleanups: Cleanups, over: Record<string, unknown> = {}) {
  const { broker, start } = await coordinatorSetup(cleanups, over);
  const coordinator = await start();
  cleanups.push(() => coordinator.close());
  return { broker, coordinator, start };
}
