import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PREFIX_RULE, topics } from "../shared/protocol/topics.js";
import { axFailure } from "../test/helpers/ax-error.js";
import { tempDir } from "../test/helpers/env.js";
import {
  DEPRECATED_KEYS,
  loadCoordinatorConfig,
  parseCoordinatorConfig,
  requireStore,
  secretsDir,
} from "./config.js";

const base = { mqtt: { url: "mqtt://127.0.0.1:1" } };
const problems = (input: unknown) =>
  axFailure(() => parseCoordinatorConfig(input, "c.json"))
    .split("\n")
    .slice(1);

describe("coordinator config: unknown keys", () => {
  it("refuses an unknown key at every level, naming its path and the closest key", () => {
    expect(
      problems({
        ...base,
        heartbeatMz: 5,
        store: { pth: "x" },
        mqtt: { ...base.mqtt, prefx: "ax" },
        http: { portt: 1, auth: { tokens: [{ token: "t".repeat(16), role: "viewer", nam: "a" }] } },
        alerts: { webhooks: [{ url: "https://h", secert: "s".repeat(16) }] },
        security: { messagez: "off" },
        broker: { mosquitto: { dir: "/d", pidfile: "/p" } },
      }),
    ).toEqual([
      'store.pth: unknown key; did you mean "path"?',
      'mqtt.prefx: unknown key; did you mean "prefix"?',
      'http.auth.tokens.0.nam: unknown key; did you mean "name"?',
      'http.portt: unknown key; did you mean "port"?',
      'alerts.webhooks.0.secert: unknown key; did you mean "secret"?',
      'security.messagez: unknown key; did you mean "messages"?',
      'broker.mosquitto.pidfile: unknown key; did you mean "pidFile"?',
      'heartbeatMz: unknown key; did you mean "heartbeatMs"?',
    ]);
  });

  it("says once that a required key is missing when its near miss is there", () => {
    expect(problems({ mqtt: { URL: "mqtt://x" } })).toEqual([
      'mqtt.URL: unknown key; did you mean "url"? (mqtt.url is required)',
    ]);
    expect(problems({ mqt: { url: "mqtt://x" } })).toEqual([
      'mqt: unknown key; did you mean "mqtt"? (mqtt is required)',
    ]);
    // Inside http.auth, read on its own, the hint still names the key by its full path.
    expect(
      problems({ ...base, http: { auth: { tokens: [{ token: "t".repeat(16), rol: "viewer" }] } } }),
    ).toEqual([
      'http.auth.tokens.0.rol: unknown key; did you mean "role"? (http.auth.tokens.0.role is required)',
    ]);
    // A token is one of two keys, neither required alone: the rule is said, not "token is required".
    expect(
      problems({ ...base, http: { auth: { tokens: [{ role: "viewer", tokn: "t".repeat(16) }] } } }),
    ).toEqual([
      'http.auth.tokens.0.tokn: unknown key; did you mean "token"?',
      "http.auth.tokens.0: give exactly one of token and tokenFile",
    ]);
  });

  it("says a missing key is required, and of what type, without zod's wording", () => {
    expect(problems({})).toEqual(["mqtt: is required (object)"]);
    expect(problems({ mqtt: {} })).toEqual(["mqtt.url: is required (string)"]);
  });

  it("offers nothing for a key far from every known one", () => {
    expect(problems({ ...base, colour: "red" })).toEqual(["colour: unknown key"]);
  });
});

describe("coordinator config: durations end in Ms; the 0.x names are read as deprecated", () => {
  it("reads every duration as milliseconds or a duration string", () => {
    const c = parseCoordinatorConfig({
      ...base,
      heartbeatMs: "2s",
      dispatchLeadMs: 250,
      commandHorizonMs: "1h",
      pollMs: 50,
      lookAheadMs: "3s",
      misfireThresholdMs: "1m",
      busyBackoffMs: 10,
      timeoutGraceMs: "1s",
      alerts: { backoffBaseMs: "2s", backoffCapMs: "1m", timeoutMs: 500 },
      security: { freshnessMs: "10m" },
    });
    expect([
      c.heartbeatMs,
      c.dispatchLeadMs,
      c.commandHorizonMs,
      c.pollMs,
      c.lookAheadMs,
      c.misfireThresholdMs,
      c.busyBackoffMs,
      c.timeoutGraceMs,
      c.alerts.backoffBaseMs,
      c.alerts.backoffCapMs,
      c.alerts.timeoutMs,
      c.security.freshnessMs,
    ]).toEqual([2000, 250, 3_600_000, 50, 3000, 60_000, 10, 1000, 2000, 60_000, 500, 600_000]);
  });

  it("maps each old name to its new one, with a warning naming the new key", () => {
    const warnings: string[] = [];
    const c = parseCoordinatorConfig(
      {
        ...base,
        heartbeat: "2s",
        misfireThreshold: 700,
        alerts: { timeout: "3s", backoffBase: 5 },
        security: { freshness: "1m" },
      },
      "c.json",
      { warn: (w) => warnings.push(w) },
    );
    expect([c.heartbeatMs, c.misfireThresholdMs, c.alerts.timeoutMs]).toEqual([2000, 700, 3000]);
    expect([c.alerts.backoffBaseMs, c.security.freshnessMs]).toEqual([5, 60_000]);
    expect(warnings).toEqual([
      "c.json: heartbeat is deprecated: name it heartbeatMs (the value is read as before)",
      "c.json: misfireThreshold is deprecated: name it misfireThresholdMs (the value is read as before)",
      "c.json: alerts.backoffBase is deprecated: name it alerts.backoffBaseMs (the value is read as before)",
      "c.json: alerts.timeout is deprecated: name it alerts.timeoutMs (the value is read as before)",
      "c.json: security.freshness is deprecated: name it security.freshnessMs (the value is read as before)",
    ]);
  });

  it("covers every duration the config has, each once", () => {
    expect(Object.values(DEPRECATED_KEYS).every((k) => k.endsWith("Ms"))).toBe(true);
    expect(Object.keys(DEPRECATED_KEYS)).toHaveLength(12);
  });

  it("refuses a key given under both names, and leaves the input as it was", () => {
    const input = { ...base, poll: 5, pollMs: 6, security: { freshness: 1000, freshnessMs: 2000 } };
    expect(problems(input)).toEqual([
      "poll: the deprecated name of pollMs, which is given too; keep only pollMs",
      "security.freshness: the deprecated name of security.freshnessMs, which is given too; keep only security.freshnessMs",
    ]);
    expect(input).toEqual({
      ...base,
      poll: 5,
      pollMs: 6,
      security: { freshness: 1000, freshnessMs: 2000 },
    });
  });

  it("still names a bad value under its new name", () => {
    expect(problems({ ...base, heartbeatMs: "fast" })).toEqual([
      'heartbeatMs: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "fast")',
    ]);
  });

  it("names a bad value given under its deprecated name as the file has it", () => {
    expect(problems({ ...base, heartbeat: "fast", security: { freshness: "1x" } })).toEqual([
      'heartbeat: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "fast")',
      'security.freshness: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got "1x")',
    ]);
  });

  it("holds heartbeatMs to what a welcome may carry: whole ms from 100 to 600000", () => {
    expect(problems({ ...base, heartbeatMs: "15m" })).toEqual([
      "heartbeatMs: must be at most 600000 ms (10 minutes)",
    ]);
    expect(problems({ ...base, heartbeatMs: 50 })).toEqual([
      "heartbeatMs: must be at least 100 ms",
    ]);
    expect(problems({ ...base, heartbeatMs: 1500.5 })).toEqual([
      "heartbeatMs: must be a whole number of milliseconds",
    ]);
    expect(
      parseCoordinatorConfig({ ...base, heartbeatMs: "10m", idleHeartbeatMs: 0 }).heartbeatMs,
    ).toBe(600_000);
    expect(parseCoordinatorConfig({ ...base, heartbeatMs: "100ms" }).heartbeatMs).toBe(100);
  });

  it("holds idleHeartbeatMs to 0 or from heartbeatMs to an hour", () => {
    expect(parseCoordinatorConfig(base).idleHeartbeatMs).toBe(60_000);
    expect(parseCoordinatorConfig({ ...base, idleHeartbeatMs: "5m" }).idleHeartbeatMs).toBe(
      300_000,
    );
    expect(parseCoordinatorConfig({ ...base, idleHeartbeatMs: 0 }).idleHeartbeatMs).toBe(0);
    expect(problems({ ...base, idleHeartbeatMs: "2h" })).toEqual([
      "idleHeartbeatMs: must be at most 3600000 ms (1 hour)",
    ]);
    expect(problems({ ...base, idleHeartbeatMs: -1 })).toEqual([
      "idleHeartbeatMs: must be milliseconds or a duration such as 500ms, 2s, 5m, 1h (got -1)",
    ]);
    expect(problems({ ...base, heartbeatMs: 10_000, idleHeartbeatMs: 5_000 })).toEqual([
      "idleHeartbeatMs: must be 0 (off) or at least heartbeatMs (10000 ms), not 5000 ms",
    ]);
    expect(problems({ ...base, heartbeatMs: "2m", idleHeartbeatMs: "1m" })).toEqual([
      "idleHeartbeatMs: must be 0 (off) or at least heartbeatMs (120000 ms), not 60000 ms",
    ]);
  });

  it("turns the default idleHeartbeatMs off when heartbeats are a minute or more apart", () => {
    // Not written, it is no reason to refuse a heartbeat the file gives (nor under its old name).
    const slow = parseCoordinatorConfig({ ...base, heartbeatMs: "2m" });
    expect([slow.heartbeatMs, slow.idleHeartbeatMs]).toEqual([120_000, 0]);
    expect(parseCoordinatorConfig({ ...base, heartbeat: "10m" }).idleHeartbeatMs).toBe(0);
    expect(parseCoordinatorConfig({ ...base, heartbeatMs: "1m" }).idleHeartbeatMs).toBe(60_000);
    expect(parseCoordinatorConfig({ ...base, heartbeatMs: "30s" }).idleHeartbeatMs).toBe(60_000);
  });
});

describe("coordinator config: paths", () => {
  const tmp = tempDir("ax-config-");
  afterAll(() => tmp.cleanup());
  const all = {
    ...base,
    store: { path: "data/ax.sqlite" },
    jobsFile: "jobs.json",
    security: { dir: "keys" },
    broker: { mosquitto: { dir: "mq", pidFile: "run/mosquitto.pid" } },
    http: {
      auth: {
        tokens: [
          { tokenFile: "tokens/ci.token", role: "operator" },
          { token: "t".repeat(16), role: "viewer" },
        ],
      },
    },
  };

  it("reads each relative path from the config file's folder, whatever the working folder", () => {
    const dir = join(tmp.dir, "etc");
    mkdirSync(dir);
    const file = join(dir, "coordinator.json");
    writeFileSync(file, JSON.stringify(all));
    const c = loadCoordinatorConfig(file);
    expect(c.store.path).toBe(join(dir, "data/ax.sqlite"));
    expect(c.jobsFile).toBe(join(dir, "jobs.json"));
    expect(c.security.dir).toBe(join(dir, "keys"));
    expect(c.broker.mosquitto).toEqual({
      dir: join(dir, "mq"),
      pidFile: join(dir, "run/mosquitto.pid"),
    });
    const auth = c.http.auth;
    expect(auth !== "off" && auth.tokens.map((t) => t.tokenFile)).toEqual([
      join(dir, "tokens/ci.token"),
      undefined,
    ]);
  });

  it("puts the default store (and its secrets) beside the config file", () => {
    const file = join(tmp.dir, "plain.json");
    writeFileSync(file, JSON.stringify(base));
    const c = loadCoordinatorConfig(file);
    expect(c.store.path).toBe(join(tmp.dir, "ax.sqlite"));
    expect(secretsDir(c)).toBe(join(tmp.dir, "ax-secrets"));
  });

  it("leaves absolute paths as they are, and relative ones alone in a config made in code", () => {
    const absolute = {
      ...base,
      store: { path: "/var/lib/ax/ax.sqlite" },
      jobsFile: "/etc/ax/j.json",
    };
    const fromFile = parseCoordinatorConfig(absolute, "c.json", { base: "/somewhere" });
    expect([fromFile.store.path, fromFile.jobsFile]).toEqual([
      "/var/lib/ax/ax.sqlite",
      "/etc/ax/j.json",
    ]);
    const inCode = parseCoordinatorConfig(all);
    expect([inCode.store.path, inCode.jobsFile, inCode.security.dir]).toEqual([
      "data/ax.sqlite",
      "jobs.json",
      "keys",
    ]);
  });

  it("refuses to read a missing store, naming the resolved path and the config", () => {
    const c = parseCoordinatorConfig({ ...base, store: { path: "nowhere/ax.sqlite" } }, "c.json", {
      base: tmp.dir,
    });
    expect(axFailure(() => requireStore(c, "c.json", "bundle fleet"))).toBe(
      `AX_STORE_MISSING: bundle fleet: ${join(tmp.dir, "nowhere/ax.sqlite")}: no such store (store.path of c.json; a relative path is read from the config file's folder). bundle fleet only reads a store: fix store.path, or start the coordinator once, which creates it`,
    );
    writeFileSync(join(tmp.dir, "here.sqlite"), "");
    const here = parseCoordinatorConfig({ ...base, store: { path: "here.sqlite" } }, "c.json", {
      base: tmp.dir,
    });
    expect(() => requireStore(here, "c.json", "bundle fleet")).not.toThrow();
    expect(resolve(here.store.path)).toBe(join(tmp.dir, "here.sqlite"));
  });
});

describe("coordinator config: mqtt.prefix", () => {
  it("takes one or more topic levels, as the topics are built", () => {
    for (const prefix of ["ax", "plant-3/ax", "a/b/c.d_e"]) {
      const c = parseCoordinatorConfig({ mqtt: { url: "mqtt://x", prefix } });
      expect(topics(c.mqtt.prefix).up("a1")).toBe(`${prefix}/v1/agents/a1/up`);
    }
  });

  it.each(["", "ax/", "/ax", "a//b", "ax/+", "ax/#", "$SYS", "a b"])(
    "refuses %j, saying what a prefix may be",
    (prefix) => {
      expect(problems({ mqtt: { url: "mqtt://x", prefix } })).toEqual([
        `mqtt.prefix: ${PREFIX_RULE}`,
      ]);
    },
  );
});

describe("coordinator config: cluster.dispatch", () => {
  const pg = { ...base, store: { url: "postgres://db/ax" } };

  it("is active by default, and shared with firing shared", () => {
    expect(parseCoordinatorConfig(pg).cluster.dispatch).toBe("active");
    const shared = parseCoordinatorConfig({
      ...pg,
      cluster: { firing: "shared", dispatch: "shared" },
    });
    expect(shared.cluster).toMatchObject({ firing: "shared", dispatch: "shared" });
  });

  it("refuses shared without firing shared, and with a shared subscription, naming both", () => {
    expect(problems({ ...pg, cluster: { dispatch: "shared" } })).toEqual([
      'cluster.dispatch: "shared" needs cluster.firing "shared": each coordinator dispatches the jobs it fires',
    ]);
    expect(
      problems({
        ...pg,
        mqtt: { ...base.mqtt, sharedGroup: "ax" },
        cluster: { firing: "shared", dispatch: "shared" },
      }),
    ).toEqual([
      "mqtt.sharedGroup: cannot be used with cluster.dispatch \"shared\": every coordinator must read every agent's messages (each handles its own agents'), and a shared subscription hands each message to one of them",
    ]);
    expect(problems({ ...pg, cluster: { dispatch: "all" } })[0]).toMatch(/^cluster\.dispatch: /);
  });
});
