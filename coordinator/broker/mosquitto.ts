import { pbkdf2Sync, randomBytes } from "node:crypto";
import { join } from "node:path";
import { AxError } from "../../shared/errors.js";
import { topics } from "../../shared/protocol/topics.js";
import { mqttPassword } from "../security/secrets.js";
import type { IdentityRecord } from "../store/port.js";

/*
 * Mosquitto 2's files for one fleet, as data (the writing and the reload live in
 * mosquitto-files.ts). The ACL says what rules.ts says, so a fleet behind Mosquitto runs under the
 * same rules as one behind the embedded broker.
 */

/** File names inside the folder `ax broker config --out` writes. */
export const MOSQUITTO_FILES = {
  conf: "mosquitto.conf",
  passwords: "passwd",
  acl: "acl",
  pid: "mosquitto.pid",
} as const;

/** Who may log in, and under which prefix. */
export interface MosquittoFleet {
  /** The topic prefix (`mqtt.prefix`). */
  prefix: string;
  /** The fleet key: agents' broker passwords derive from it. */
  fleet: Buffer;
  /** The coordinator's login (`coordinatorMqttLogin`). */
  coordinator: { username: string; password: string };
  /**
   * The usernames (client ids) of the other coordinators sharing the store (`broker.coordinators`):
   * each logs in as this one does, with the password the fleet key derives for it. @default none
   */
  peers?: readonly string[];
  /** Every enrolment; revoked ones are left out of the password file. */
  identities: readonly IdentityRecord[];
  /** 12 random bytes per password. @default crypto.randomBytes */
  salt?: () => Buffer;
}

/** How Mosquitto listens (`mosquitto.conf`). */
export interface MosquittoListenOptions {
  /** The folder the files live in; the conf names the others by absolute path. */
  dir: string;
  /** @default 8883 with TLS, else 1883 */
  port?: number;
  /** Bind address. @default all interfaces */
  host?: string;
  /**
   * The user Mosquitto runs as when started as root. It must be the coordinator's: the files are
   * private to it (0600), and only the same user may send Mosquitto the SIGHUP that reloads them.
   * @default none (Mosquitto's own default, "mosquitto")
   */
  user?: string;
  /** TLS on the listener: the broker's certificate and key (PEM) and, optionally, a client CA. */
  tls?: { cert: string; key: string; ca?: string; requireClientCert?: boolean };
}

/** Mosquitto 2.0's PBKDF2-SHA512 hash (`$7$`), its fixed iteration count and salt length. */
const PBKDF2 = { id: 7, iterations: 101, saltBytes: 12, hashBytes: 64 } as const;

/**
 * One password file line in Mosquitto 2's format, `user:$7$101$<salt>$<hash>` (both base64), as
 * `mosquitto_passwd` 2.0 writes it: PBKDF2-HMAC-SHA512, 101 iterations, a 12-byte salt.
 */
export function mosquittoPasswordLine(
  username: string,
  password: string,
  salt: Buffer = randomBytes(PBKDF2.saltBytes),
): string {
  const hash = pbkdf2Sync(password, salt, PBKDF2.iterations, PBKDF2.hashBytes, "sha512");
  return `${username}:$${PBKDF2.id}$${PBKDF2.iterations}$${salt.toString("base64")}$${hash.toString("base64")}`;
}

/**
 * Mosquitto's password file splits a line at its first ':' and its ACL substitutes `%u` into a
 * topic; a name with ':', a wildcard or a space could not be written safely.
 */
const MOSQUITTO_USERNAME = /^[A-Za-z0-9._-]{1,128}$/;

function checkUsername(name: string, what: string): void {
  if (!MOSQUITTO_USERNAME.test(name)) {
    throw new AxError(
      "AX_BROKER_CONFIG",
      `${what} "${name}" cannot be a Mosquitto user: use only letters, digits, '.', '_' and '-'`,
      { context: { username: name } },
    );
  }
}

/** The coordinators' usernames: this one's, then the others' (`peers`), each checked. */
function coordinatorUsers(f: Pick<MosquittoFleet, "coordinator" | "peers">): string[] {
  checkUsername(f.coordinator.username, "the coordinator's username");
  const peers = (f.peers ?? []).filter((p) => p !== f.coordinator.username);
  for (const p of peers) checkUsername(p, "coordinator client id (broker.coordinators)");
  return [f.coordinator.username, ...peers];
}

/** The enrolled, unrevoked agents, sorted, each checked to be a user Mosquitto can hold. */
function enrolled(
  f: Pick<MosquittoFleet, "identities" | "coordinator" | "peers">,
): IdentityRecord[] {
  const out = f.identities
    .filter((r) => r.status === "enrolled")
    .sort((a, b) => (a.agentId < b.agentId ? -1 : 1));
  const coordinators = new Set(coordinatorUsers(f));
  for (const r of out) {
    checkUsername(r.agentId, "agent id");
    if (coordinators.has(r.agentId)) {
      throw new AxError(
        "AX_BROKER_CONFIG",
        `agent id "${r.agentId}" is a coordinator's broker username; revoke the agent or give the coordinator another mqtt.clientId`,
        { context: { username: r.agentId } },
      );
    }
  }
  return out;
}

/** The password file: the coordinators, then every enrolled, unrevoked agent. */
export function mosquittoPasswordFile(f: MosquittoFleet): string {
  const salt = f.salt ?? (() => randomBytes(PBKDF2.saltBytes));
  const [, ...peers] = coordinatorUsers(f);
  const lines = [
    mosquittoPasswordLine(f.coordinator.username, f.coordinator.password, salt()),
    // Derived as coordinatorMqttLogin derives each one's own (generation 0 of its client id).
    ...peers.map((p) => mosquittoPasswordLine(p, mqttPassword(f.fleet, p, 0), salt())),
  ];
  for (const r of enrolled(f)) {
    lines.push(
      mosquittoPasswordLine(r.agentId, mqttPassword(f.fleet, r.agentId, r.generation), salt()),
    );
  }
  return `${lines.join("\n")}\n`;
}

/**
 * The ACL of rules.ts, one block per user. Not `pattern … %u` lines: Mosquitto applies patterns to
 * every user, the coordinator included, and has no "any user" form for the event topics but a
 * pattern it warns about at each load. A user without a block (a revoked agent) may do nothing.
 */
export function mosquittoAcl(f: Omit<MosquittoFleet, "salt" | "fleet">): string {
  const t = topics(f.prefix);
  const lines = [
    "# Written by `ax broker config` from coordinator/broker/rules.ts, and rewritten by the",
    "# coordinator on every enrolment change (broker.mosquitto.dir). Edits here are lost.",
    "",
    "# A coordinator reads every agent's up and presence and the events, and writes downs.",
  ];
  for (const user of coordinatorUsers(f)) {
    lines.push(
      `user ${user}`,
      `topic read ${t.allUp}`,
      `topic read ${t.allPresence}`,
      `topic read ${t.allEvents}`,
      `topic write ${t.down("+")}`,
    );
  }
  lines.push(
    "",
    "# An agent (username = agent id = client id) writes its own up and presence, and events;",
    "# it reads its own down.",
  );
  for (const r of enrolled(f)) {
    lines.push(
      `user ${r.agentId}`,
      `topic write ${t.up(r.agentId)}`,
      `topic write ${t.presence(r.agentId)}`,
      `topic write ${t.allEvents}`,
      `topic read ${t.down(r.agentId)}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/** `mosquitto.conf` for the files in `o.dir`. */
export function mosquittoConf(o: MosquittoListenOptions): string {
  const port = o.port ?? (o.tls ? 8883 : 1883);
  if (o.tls?.requireClientCert && o.tls.ca === undefined) {
    throw new AxError("AX_BROKER_CONFIG", "requiring client certificates needs a CA to check them");
  }
  const lines = [
    "# Written by `ax broker config`. Start with: mosquitto -c <this file>",
    "per_listener_settings false",
    o.host === undefined ? `listener ${port}` : `listener ${port} ${o.host}`,
    "allow_anonymous false",
    `password_file ${join(o.dir, MOSQUITTO_FILES.passwords)}`,
    `acl_file ${join(o.dir, MOSQUITTO_FILES.acl)}`,
    // An agent's client id is its username (ax agents use their id for both), so no client can
    // take another's client id, which would end that client's session [MQTT-3.1.4-2].
    "use_username_as_clientid true",
    // The coordinator sends SIGHUP to this pid after it rewrote passwd and acl.
    `pid_file ${join(o.dir, MOSQUITTO_FILES.pid)}`,
    // Rule 10: without it a small publish waits on the peer's delayed ACK.
    "set_tcp_nodelay true",
    "max_inflight_messages 100",
    // The coordinator's session queues what agents report while it restarts, and the wills of a
    // whole fleet cut off at once (10,000 at a time): it must not overflow, nor vanish with a
    // broker restart. Mosquitto's default (1,000) dropped most of a 10,000-agent fleet's wills.
    "max_queued_messages 100000",
    "persistence true",
    `persistence_location ${o.dir}/`,
    "persistent_client_expiration 7d",
  ];
  if (o.user !== undefined) lines.push(`user ${o.user}`);
  if (o.tls) {
    lines.push(`certfile ${o.tls.cert}`, `keyfile ${o.tls.key}`);
    if (o.tls.ca !== undefined) lines.push(`cafile ${o.tls.ca}`);
    if (o.tls.requireClientCert) lines.push("require_certificate true");
  }
  return `${lines.join("\n")}\n`;
}

/** The coordinator's broker login, which Mosquitto's files need; AX_BROKER_CONFIG without one. */
export function requireLogin(login: { username?: string; password?: string }): {
  username: string;
  password: string;
} {
  if (login.username === undefined || login.password === undefined) {
    throw new AxError(
      "AX_BROKER_CONFIG",
      'the coordinator has no broker login to write: set mqtt.username and mqtt.password, or leave security.messages "required" so it derives one',
    );
  }
  return { username: login.username, password: login.password };
}
