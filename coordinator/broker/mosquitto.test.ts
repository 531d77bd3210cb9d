import { pbkdf2Sync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { isAxError } from "../../shared/errors.js";
import { parseCoordinatorConfig } from "../config.js";
import { coordinatorMqttLogin } from "../coordinator.js";
import { mqttPassword } from "../security/secrets.js";
import type { IdentityRecord } from "../store/port.js";
import { identityLogins } from "./logins.js";
import {
  mosquittoAcl,
  mosquittoConf,
  mosquittoPasswordFile,
  mosquittoPasswordLine,
} from "./mosquitto.js";

const fleet = Buffer.alloc(32, 1);
const coordinator = { username: "ax-c-1", password: "coord-secret" };
const rec = (agentId: string, status: IdentityRecord["status"] = "enrolled"): IdentityRecord => ({
  agentId,
  generation: 2,
  tags: {},
  status,
  enrolledAt: 0,
  updatedAt: 0,
  actor: "t",
});

function thrown(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (err) {
    if (isAxError(err)) return { code: err.code, message: err.message };
    throw err;
  }
  throw new Error("did not throw");
}

describe("mosquittoPasswordLine", () => {
  it("writes mosquitto_passwd 2.0's $7$ line, which verifies with PBKDF2-SHA512", () => {
    const salt = Buffer.alloc(12, 9);
    const line = mosquittoPasswordLine("a", "pw", salt);
    const [user, hash] = line.split(":") as [string, string];
    const [, id, iterations, s, h] = hash.split("$");
    expect([user, id, iterations, s]).toEqual(["a", "7", "101", salt.toString("base64")]);
    expect(h).toBe(pbkdf2Sync("pw", salt, 101, 64, "sha512").toString("base64"));
  });
});

describe("mosquittoPasswordFile", () => {
  it("holds the coordinator and the enrolled agents, not the revoked ones", () => {
    const text = mosquittoPasswordFile({
      prefix: "ax",
      fleet,
      coordinator,
      identities: [rec("b"), rec("gone", "revoked"), rec("a")],
      salt: () => Buffer.alloc(12),
    });
    expect(text.split("\n").map((l) => l.split(":")[0])).toEqual(["ax-c-1", "a", "b", ""]);
    const salt = Buffer.alloc(12);
    const hashA = pbkdf2Sync(mqttPassword(fleet, "a", 2), salt, 101, 64, "sha512");
    expect(text).toContain(`a:$7$101$${salt.toString("base64")}$${hashA.toString("base64")}`);
  });

  it("refuses a user Mosquitto cannot hold, and an agent named like the coordinator", () => {
    const base = { prefix: "ax", fleet, coordinator };
    expect(thrown(() => mosquittoPasswordFile({ ...base, identities: [rec("x:y")] }))).toEqual({
      code: "AX_BROKER_CONFIG",
      message: `agent id "x:y" cannot be a Mosquitto user: use only letters, digits, '.', '_' and '-'`,
    });
    expect(
      thrown(() => mosquittoPasswordFile({ ...base, identities: [rec("ax-c-1")] })).message,
    ).toBe(
      `agent id "ax-c-1" is a coordinator's broker username; revoke the agent or give the coordinator another mqtt.clientId`,
    );
    expect(
      thrown(() =>
        mosquittoPasswordFile({ ...base, peers: ["ax-c-2"], identities: [rec("ax-c-2")] }),
      ).message,
    ).toBe(
      `agent id "ax-c-2" is a coordinator's broker username; revoke the agent or give the coordinator another mqtt.clientId`,
    );
    expect(
      thrown(() => mosquittoPasswordFile({ ...base, peers: ["c 2"], identities: [] })),
    ).toEqual({
      code: "AX_BROKER_CONFIG",
      message: `coordinator client id (broker.coordinators) "c 2" cannot be a Mosquitto user: use only letters, digits, '.', '_' and '-'`,
    });
  });

  it("holds the other coordinators of the store too, each with the password it derives", () => {
    // broker.coordinators: each logs in as coordinatorMqttLogin derives for its client id.
    const text = mosquittoPasswordFile({
      prefix: "ax",
      fleet,
      coordinator,
      peers: ["ax-c-2", "ax-c-1", "ax-c-3"],
      identities: [rec("a")],
      salt: () => Buffer.alloc(12),
    });
    expect(text.split("\n").map((l) => l.split(":")[0])).toEqual([
      "ax-c-1",
      "ax-c-2",
      "ax-c-3",
      "a",
      "",
    ]);
    const salt = Buffer.alloc(12);
    const peer = pbkdf2Sync(mqttPassword(fleet, "ax-c-2", 0), salt, 101, 64, "sha512");
    expect(text).toContain(`ax-c-2:$7$101$${salt.toString("base64")}$${peer.toString("base64")}`);
    const secrets = { fleet } as Parameters<typeof coordinatorMqttLogin>[1];
    const theirs = coordinatorMqttLogin(
      parseCoordinatorConfig({ mqtt: { url: "mqtt://h", clientId: "ax-c-2" } }),
      secrets,
    );
    expect(theirs).toEqual({ username: "ax-c-2", password: mqttPassword(fleet, "ax-c-2", 0) });
  });
});

describe("mosquittoAcl", () => {
  it("gives the coordinator and each enrolled agent exactly rules.ts", () => {
    const acl = mosquittoAcl({
      prefix: "p",
      coordinator,
      identities: [rec("a"), rec("r", "revoked")],
    });
    const rules = acl.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
    expect(rules).toEqual([
      "user ax-c-1",
      "topic read p/v1/agents/+/up",
      "topic read p/v1/agents/+/presence",
      "topic read p/v1/events/+",
      "topic write p/v1/agents/+/down",
      "user a",
      "topic write p/v1/agents/a/up",
      "topic write p/v1/agents/a/presence",
      "topic write p/v1/events/+",
      "topic read p/v1/agents/a/down",
    ]);
  });

  it("gives every coordinator of the store the coordinator's rules", () => {
    const acl = mosquittoAcl({ prefix: "p", coordinator, peers: ["ax-c-2"], identities: [] });
    const rules = acl.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
    const coordinatorRules = (user: string) => [
      `user ${user}`,
      "topic read p/v1/agents/+/up",
      "topic read p/v1/agents/+/presence",
      "topic read p/v1/events/+",
      "topic write p/v1/agents/+/down",
    ];
    expect(rules).toEqual([...coordinatorRules("ax-c-1"), ...coordinatorRules("ax-c-2")]);
  });
});

describe("mosquittoConf", () => {
  it("refuses anonymous clients and names the files by absolute path", () => {
    const conf = mosquittoConf({ dir: "/etc/ax-mq", port: 1884, host: "127.0.0.1", user: "ax" });
    expect(conf).toContain("listener 1884 127.0.0.1\nallow_anonymous false\n");
    expect(conf).toContain("password_file /etc/ax-mq/passwd\nacl_file /etc/ax-mq/acl\n");
    expect(conf).toContain(
      "use_username_as_clientid true\npid_file /etc/ax-mq/mosquitto.pid\nset_tcp_nodelay true\n",
    );
    expect(conf).toContain("persistence_location /etc/ax-mq/\n");
    expect(conf).toContain("\nuser ax\n");
    expect(conf).not.toContain("certfile");
  });

  it("adds TLS on 8883, with client certificates only with a CA", () => {
    const conf = mosquittoConf({
      dir: "/d",
      tls: { cert: "/c.pem", key: "/k.pem", ca: "/ca.pem", requireClientCert: true },
    });
    expect(conf).toContain("listener 8883\n");
    expect(conf).toContain(
      "certfile /c.pem\nkeyfile /k.pem\ncafile /ca.pem\nrequire_certificate true\n",
    );
    expect(
      thrown(() =>
        mosquittoConf({ dir: "/d", tls: { cert: "c", key: "k", requireClientCert: true } }),
      ),
    ).toEqual({
      code: "AX_BROKER_CONFIG",
      message: "requiring client certificates needs a CA to check them",
    });
  });
});

describe("identityLogins", () => {
  const identities = new Map([
    ["a", rec("a")],
    ["r", rec("r", "revoked")],
  ]);
  const logins = identityLogins(
    {
      get: (id) => identities.get(id),
      mqttPasswordOf: (id) =>
        identities.get(id)?.status === "enrolled" ? mqttPassword(fleet, id, 2) : undefined,
    },
    coordinator,
  );
  const pw = mqttPassword(fleet, "a", 2);

  it("accepts the coordinator and an enrolled agent under its own client id", () => {
    expect(logins.check("ax-c-1", "coord-secret", "anything")).toEqual({
      ok: true,
      login: { user: { kind: "coordinator" }, generation: 0 },
    });
    expect(logins.check("a", Buffer.from(pw), "a")).toEqual({
      ok: true,
      login: { user: { kind: "agent", agentId: "a" }, generation: 2 },
    });
  });

  it("refuses anonymous, wrong, revoked, unknown and a foreign client id", () => {
    const refusal = (u: string | undefined, p: string | undefined, c: string) => {
      const r = logins.check(u, p, c);
      return r.ok ? "ok" : r.refusal;
    };
    expect(refusal(undefined, undefined, "a")).toBe("anonymous");
    expect(refusal("a", `${pw}x`, "a")).toBe("bad-credentials");
    expect(refusal("ax-c-1", pw, "ax-c-1")).toBe("bad-credentials");
    expect(refusal("r", mqttPassword(fleet, "r", 2), "r")).toBe("not-enrolled");
    expect(refusal("nobody", pw, "nobody")).toBe("not-enrolled");
    expect(refusal("a", pw, "b")).toBe("client-id");
  });
});

describe("broker.mosquitto config", () => {
  it("needs a coordinator login, and says so naming the field", () => {
    const input = {
      mqtt: { url: "mqtt://h" },
      security: { messages: "off" },
      broker: { mosquitto: { dir: "/d" } },
    };
    expect(thrown(() => parseCoordinatorConfig(input, "c.json")).message).toContain(
      `broker.mosquitto: needs the coordinator's broker login: set mqtt.username and mqtt.password, or security.messages "required"`,
    );
    const ok = parseCoordinatorConfig({ ...input, security: {} });
    expect(ok.broker.mosquitto).toEqual({ dir: "/d" });
    expect(parseCoordinatorConfig({ mqtt: { url: "mqtt://h" } }).broker).toEqual({
      coordinators: [],
    });
    expect(
      thrown(() =>
        parseCoordinatorConfig({ mqtt: { url: "mqtt://h" }, broker: { mosquitto: { dir: "" } } }),
      ).message,
    ).toContain("broker.mosquitto.dir: must name the folder ax broker config --out wrote");
  });

  it("takes the other coordinators' client ids only with logins derived from the fleet key", () => {
    const url = { url: "mqtt://h" };
    expect(
      parseCoordinatorConfig({ mqtt: url, broker: { coordinators: ["ax-c-2", "ax-c-3"] } }).broker
        .coordinators,
    ).toEqual(["ax-c-2", "ax-c-3"]);
    expect(
      thrown(() =>
        parseCoordinatorConfig({
          mqtt: { ...url, username: "u", password: "p" },
          broker: { coordinators: ["ax-c-2"] },
        }),
      ).message,
    ).toContain(
      'broker.coordinators: needs broker logins derived from the fleet key: leave mqtt.username and mqtt.password unset, with security.messages "required"',
    );
    expect(
      thrown(() => parseCoordinatorConfig({ mqtt: url, broker: { coordinators: ["a", "a"] } }))
        .message,
    ).toContain("broker.coordinators: must not name a client id twice");
    expect(
      thrown(() => parseCoordinatorConfig({ mqtt: url, broker: { coordinators: ["a b"] } }))
        .message,
    ).toContain("broker.coordinators.0: must be 1-128 letters, digits, '.', '_' or '-'");
  });
});
