import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import mqtt, { type IClientOptions, type MqttClient } from "mqtt";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startEmbeddedBroker } from "../../coordinator/broker/embedded.js";
import { identityLogins } from "../../coordinator/broker/logins.js";
import { MOSQUITTO_FILES, type MosquittoFleet } from "../../coordinator/broker/mosquitto.js";
import { syncMosquitto, writeMosquittoFiles } from "../../coordinator/broker/mosquitto-files.js";
import { Identities } from "../../coordinator/security/identities.js";
import { loadOrCreateSecrets, mqttPassword } from "../../coordinator/security/secrets.js";
import { SqliteStore } from "../../coordinator/store/sqlite/sqlite-store.js";
import { topics } from "../../shared/protocol/topics.js";
import { freePort } from "../helpers/chaos/ports.js";
import { tempDir, waitFor } from "../helpers/env.js";

/*
 * The broker rules (coordinator/broker/rules.ts) on both brokers ax supports: the embedded aedes
 * broker with auth, and a real Mosquitto started with the files `ax broker config` writes. One
 * suite, run against each. A refused publish is dropped silently (a QoS 1 one is still acked)
 * and Mosquitto 2.0.11 grants a forbidden subscription and filters on delivery, so each "nothing
 * arrives" waits for a marker that does arrive after it, and cannot pass for want of traffic.
 */

const MOSQUITTO = "/usr/sbin/mosquitto";
const PREFIX = "axsec";
const t = topics(PREFIX);
/** How long to wait, after a marker arrived, for a message that must not. */
const SETTLE_MS = 300;

interface Fixture {
  url: string;
  coordinator: { username: string; password: string };
  identities: Identities;
  /** An agent's current broker password. */
  password(agentId: string): string;
  close(): Promise<void>;
}

/** Secrets, a store and three enrolled agents, shared by both brokers' fixtures. */
async function fleet(dir: string) {
  const secrets = loadOrCreateSecrets(join(dir, "secrets"));
  const store = new SqliteStore({ path: join(dir, "ax.sqlite") });
  const identities = new Identities(store, secrets, () => Date.now());
  for (const id of ["a", "b", "c"]) await identities.enroll(id, { actor: "test" });
  const username = "ax-c-test";
  const coordinator = { username, password: mqttPassword(secrets.fleet, username, 0) };
  const mosquittoFleet = (): MosquittoFleet => ({
    prefix: PREFIX,
    fleet: secrets.fleet,
    coordinator,
    identities: identities.list(),
  });
  const password = (agentId: string) => identities.mqttPasswordOf(agentId) ?? "revoked";
  return { secrets, store, identities, coordinator, mosquittoFleet, password };
}

async function embeddedFixture(dir: string): Promise<Fixture> {
  const f = await fleet(dir);
  const broker = await startEmbeddedBroker(0, {
    auth: { prefix: PREFIX, logins: () => identityLogins(f.identities, f.coordinator) },
  });
  broker.follow(f.identities);
  return {
    url: broker.url,
    coordinator: f.coordinator,
    identities: f.identities,
    password: f.password,
    close: async () => {
      await broker.close();
      await f.store.close();
    },
  };
}

async function mosquittoFixture(dir: string): Promise<Fixture> {
  const f = await fleet(dir);
  const port = await freePort();
  const brokerDir = join(dir, "mosquitto");
  const written = writeMosquittoFiles(brokerDir, f.mosquittoFleet(), {
    port,
    host: "127.0.0.1",
    user: userInfo().username,
  });
  let output = "";
  const proc: ChildProcess = spawn(MOSQUITTO, ["-c", written.conf as string], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  proc.stdout?.on("data", (d) => (output += d));
  proc.stderr?.on("data", (d) => (output += d));
  const pidFile = join(brokerDir, MOSQUITTO_FILES.pid);
  await waitFor(`mosquitto to start (${output})`, () =>
    existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() === String(proc.pid)
      ? true
      : undefined,
  );
  // What the coordinator does with broker.mosquitto: rewrite the files and SIGHUP.
  f.identities.onChange = () => {
    if (!syncMosquitto({ dir: brokerDir }, f.mosquittoFleet(), () => {})) {
      throw new Error("syncMosquitto failed");
    }
  };
  const url = `mqtt://127.0.0.1:${port}`;
  // Listening comes a moment after the pid file.
  await waitFor("mosquitto to listen", async () => {
    const c = await mqtt
      .connectAsync(url, { reconnectPeriod: 0, ...f.coordinator, clientId: f.coordinator.username })
      .catch(() => undefined);
    await c?.endAsync(true);
    return c === undefined ? undefined : true;
  });
  return {
    url,
    coordinator: f.coordinator,
    identities: f.identities,
    password: f.password,
    close: async () => {
      const exited = new Promise((resolve) => proc.once("exit", resolve));
      proc.kill("SIGTERM");
      await exited;
      await f.store.close();
    },
  };
}

const hasMosquitto = existsSync(MOSQUITTO);
if (!hasMosquitto) {
  console.warn(
    `broker-security: ${MOSQUITTO} not found; the Mosquitto half of the suite is skipped`,
  );
}

const backends = [
  { name: "embedded aedes with auth", start: embeddedFixture, embedded: true, skip: false },
  {
    name: "Mosquitto 2 with ax broker config",
    start: mosquittoFixture,
    embedded: false,
    skip: !hasMosquitto,
  },
];

describe.each(backends)("broker security: $name", ({ start, embedded, skip }) => {
  let fx: Fixture;
  let cleanup: () => void;
  const clients: MqttClient[] = [];

  beforeAll(async () => {
    if (skip) return;
    const tmp = tempDir("ax-broker-sec-");
    cleanup = tmp.cleanup;
    fx = await start(tmp.dir);
  });
  afterAll(async () => {
    if (skip) return;
    await fx.close();
    cleanup();
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
  });

  async function connect(options: IClientOptions): Promise<MqttClient> {
    const c = await mqtt.connectAsync(fx.url, {
      reconnectPeriod: 0,
      connectTimeout: 5_000,
      protocolVersion: 4,
      ...options,
    });
    clients.push(c);
    return c;
  }
  const agent = (id: string, extra: IClientOptions = {}) =>
    connect({ clientId: id, username: id, password: fx.password(id), ...extra });
  const coordinator = () =>
    connect({ clientId: fx.coordinator.username, ...fx.coordinator, clean: true });
  /** Collects what `c` receives, as "topic payload". */
  function inbox(c: MqttClient): string[] {
    const got: string[] = [];
    c.on("message", (topic, payload) => got.push(`${topic} ${payload.toString()}`));
    return got;
  }
  async function arrived(got: string[], entry: string): Promise<void> {
    await waitFor(`"${entry}"`, () => (got.includes(entry) ? true : undefined), 5_000);
    await new Promise((r) => setTimeout(r, SETTLE_MS));
  }
  /** The QoS granted per filter; 128 is a refusal (which mqtt.js reports as an error). */
  async function granted(c: MqttClient, filters: string[]): Promise<number[]> {
    try {
      return (await c.subscribeAsync(filters, { qos: 1 })).map((g) => g.qos);
    } catch (err) {
      const packet = (err as { packet?: { granted?: number[] } }).packet;
      if (packet?.granted === undefined) throw err;
      return packet.granted;
    }
  }
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => "connected",
      (err: { code?: number }) => err.code,
    );

  it.skipIf(skip)("refuses an anonymous client", async () => {
    expect(await refusal(connect({ clientId: "anon" }))).toBe(5);
  });

  it.skipIf(skip)("refuses a wrong password, and an unknown agent", async () => {
    const wrong = await refusal(connect({ clientId: "a", username: "a", password: "guess" }));
    expect([4, 5]).toContain(wrong);
    const unknown = await refusal(
      connect({ clientId: "zed", username: "zed", password: fx.password("a") }),
    );
    expect([4, 5]).toContain(unknown);
  });

  it.skipIf(skip)(
    "lets the coordinator subscribe to every up and presence and publish downs",
    async () => {
      const co = await coordinator();
      // aedes has no shared subscriptions: that the filter is allowed is what is checked here.
      expect(
        await granted(co, [t.allUp, t.allPresence, t.allEvents, `$share/g/${t.allEvents}`]),
      ).toEqual([1, 1, 1, 1]);
      const got = inbox(co);
      const c = await agent("c");
      const cGot = inbox(c);
      await c.subscribeAsync(t.down("c"), { qos: 1 });
      await c.publishAsync(t.up("c"), "c-up", { qos: 1 });
      await c.publishAsync(t.event("ping"), "c-event", { qos: 1 });
      await co.publishAsync(t.down("c"), "to-c", { qos: 1 });
      await arrived(got, `${t.event("ping")} c-event`);
      expect(got).toEqual([`${t.up("c")} c-up`, `${t.event("ping")} c-event`]);
      await arrived(cGot, `${t.down("c")} to-c`);
    },
  );

  it.skipIf(skip)("drops what agent A publishes on B's up and presence", async () => {
    const co = await coordinator();
    await co.subscribeAsync([t.allUp, t.allPresence], { qos: 1 });
    const got = inbox(co);
    for (const topic of [t.up("b"), t.presence("b"), t.down("b")]) {
      const forger = await agent("a");
      if (embedded) {
        // aedes ends the connection of a client that publishes where it may not.
        const closed = new Promise<void>((resolve) => forger.once("close", () => resolve()));
        forger.publish(topic, "forged", { qos: 0 });
        await closed;
      } else {
        // Mosquitto drops the message and still acks it (MQTT 3.1.1 has no code to refuse it).
        await forger.publishAsync(topic, "forged", { qos: 1 });
      }
    }
    const a = await agent("a");
    await a.publishAsync(t.up("a"), "marker", { qos: 1 });
    await arrived(got, `${t.up("a")} marker`);
    expect(got).toEqual([`${t.up("a")} marker`]);
  });

  it.skipIf(skip)("gives agent A nothing of B's down, +/down or #", async () => {
    const a = await agent("a");
    const aGot = inbox(a);
    const subs = await granted(a, [t.down("b"), t.down("+"), "#", t.down("a")]);
    // aedes refuses each in the SUBACK; Mosquitto 2.0.11 grants them and filters on delivery.
    expect(subs).toEqual(embedded ? [128, 128, 128, 1] : [1, 1, 1, 1]);
    const b = await agent("b");
    const bGot = inbox(b);
    await b.subscribeAsync(t.down("b"), { qos: 1 });
    const co = await coordinator();
    await co.publishAsync(t.down("b"), "for-b", { qos: 1 });
    await co.publishAsync(t.down("a"), "for-a", { qos: 1 });
    await arrived(aGot, `${t.down("a")} for-a`);
    expect(bGot).toEqual([`${t.down("b")} for-b`]);
    expect(aGot).toEqual([`${t.down("a")} for-a`]);
  });

  it.skipIf(skip)("does not let agent A take B's client id", async () => {
    const b = await agent("b");
    const bGot = inbox(b);
    await b.subscribeAsync(t.down("b"), { qos: 1 });
    const taken = await refusal(agent("a", { clientId: "b" }));
    // aedes refuses it; Mosquitto (use_username_as_clientid) lets A in under its own id "a".
    if (embedded) expect(taken).toBe(2);
    else expect(taken).toBe("connected");
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    expect(b.connected).toBe(true);
    const co = await coordinator();
    await co.publishAsync(t.down("b"), "still-b", { qos: 1 });
    await arrived(bGot, `${t.down("b")} still-b`);
  });

  it.skipIf(skip)("does not deliver A's Last Will on B's presence", async () => {
    const co = await coordinator();
    await co.subscribeAsync(t.allPresence, { qos: 1 });
    const got = inbox(co);
    const forged = await refusal(
      agent("a", {
        will: {
          topic: t.presence("b"),
          payload: Buffer.from("forged-will"),
          qos: 1,
          retain: false,
        },
      }),
    );
    if (embedded) expect(forged).toBe(5);
    const last = clients.at(-1);
    // Gone without a DISCONNECT: the broker publishes the will (if it would).
    if (forged === "connected" && last) last.stream.destroy();
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const own = await agent("a", {
      will: { topic: t.presence("a"), payload: Buffer.from("own-will"), qos: 1, retain: false },
    });
    own.stream.destroy();
    await arrived(got, `${t.presence("a")} own-will`);
    expect(got).toEqual([`${t.presence("a")} own-will`]);
  });

  it.skipIf(skip)("disconnects a revoked agent at once and refuses it after", async () => {
    const c = await agent("c");
    const closed = new Promise<void>((resolve) => c.once("close", () => resolve()));
    const password = fx.password("c");
    await fx.identities.revoke("c", "test");
    await closed;
    expect(c.connected).toBe(false);
    const again = await refusal(connect({ clientId: "c", username: "c", password }));
    expect([4, 5]).toContain(again);
  });

  it.skipIf(skip)("after a rotation drops the old login and refuses the old password", async () => {
    const b = await agent("b");
    const old = fx.password("b");
    const closed = new Promise<void>((resolve) => b.once("close", () => resolve()));
    // An agent whose enrolment did not change keeps its connection through the reload.
    const a = await agent("a");
    await fx.identities.enroll("b", { rotate: true, actor: "test" });
    await closed;
    const stale = await refusal(connect({ clientId: "b", username: "b", password: old }));
    expect([4, 5]).toContain(stale);
    expect(fx.password("b")).not.toBe(old);
    expect(await refusal(agent("b"))).toBe("connected");
    expect(a.connected).toBe(true);
  });
});

describe("embedded broker: its refusals are logged, once per client and reason a minute", () => {
  it("tells a wrong password, a publish and a subscribe out of bounds, each naming the client", async () => {
    const tmp = tempDir("ax-broker-log-");
    const f = await fleet(tmp.dir);
    const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
    const broker = await startEmbeddedBroker(0, {
      auth: { prefix: PREFIX, logins: () => identityLogins(f.identities, f.coordinator) },
      log: (level, message, fields = {}) => lines.push({ level, message, fields }),
    });
    const opened: MqttClient[] = [];
    try {
      const base = { reconnectPeriod: 0, connectTimeout: 5_000, protocolVersion: 4 } as const;
      // Twice the same wrong password: one line.
      for (let i = 0; i < 2; i++) {
        await expect(
          mqtt.connectAsync(broker.url, { ...base, clientId: "a", username: "a", password: "x" }),
        ).rejects.toThrow();
      }
      const a = await mqtt.connectAsync(broker.url, {
        ...base,
        clientId: "a",
        username: "a",
        password: f.password("a"),
      });
      opened.push(a);
      const refusedSub = await a.subscribeAsync(t.down("b"), { qos: 1 }).catch((e) => e);
      expect(refusedSub).toBeInstanceOf(Error);
      // A forbidden publish ends the connection; QoS 0 so nothing waits for an ack.
      a.publish(t.up("b"), "{}", { qos: 0 });
      await waitFor("the refusals to be logged", () => (lines.length >= 3 ? true : undefined));
      expect(lines.map((l) => [l.level, l.fields.clientId, l.fields.reason])).toEqual([
        ["warn", "a", "bad-credentials"],
        ["warn", "a", "not-allowed"],
        ["warn", "a", "not-allowed"],
      ]);
      expect(lines[0]?.message).toBe('broker: refused login of client "a": bad-credentials');
      expect(lines[0]?.fields.username).toBe("a");
      expect(lines[0]?.fields.remote).toMatch(/127\.0\.0\.1/);
      expect(lines[1]?.fields).toMatchObject({ topic: t.down("b") });
      expect(lines[1]?.message).toContain("refused subscribe");
      expect(lines[2]?.fields).toMatchObject({ topic: t.up("b") });
      expect(lines[2]?.message).toContain("refused publish");
      // Nothing about a password was logged.
      expect(JSON.stringify(lines)).not.toContain(f.password("a"));
    } finally {
      await Promise.all(opened.map((c) => c.endAsync(true)));
      await broker.close();
      await f.store.close();
      tmp.cleanup();
    }
  });
});
