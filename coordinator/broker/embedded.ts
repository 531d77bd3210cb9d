import { createServer, type Server } from "node:net";
import { Aedes, type AedesOptions, type Client } from "aedes";
import { LogThrottle } from "../domain/log-throttle.js";
import type { Logger } from "../engine/context.js";
import { coalesceWrites } from "../link/coalesce.js";
import type { IdentityRecord } from "../store/port.js";
import type { BrokerLogin, BrokerLogins, LoginRefusal } from "./logins.js";
import { mayPublish, maySubscribe } from "./rules.js";

/** An MQTT 3.1.1 broker in this process (aedes), for the demo and tests. */
export interface EmbeddedBroker {
  url: string;
  port: number;
  broker: Aedes;
  /**
   * Ends the connection of `identity`'s agent unless it logged in with the identity's current,
   * unrevoked generation. Called for every `Identities.onChange` by {@link follow}.
   */
  identityChanged(identity: Pick<IdentityRecord, "agentId" | "status" | "generation">): void;
  /**
   * Chains {@link identityChanged} onto `identities.onChange` (keeping the hook already there), so
   * a revocation or rotation drops the agent's live connection at once.
   */
  follow(identities: { onChange: ((identity: IdentityRecord) => void) | undefined }): void;
  close(): Promise<void>;
}

/** Logins and rules for an embedded broker. */
export interface EmbeddedBrokerAuth {
  /** The topic prefix `rules.ts` applies. */
  prefix: string;
  /**
   * Resolved at each CONNECT, so the broker can start before the coordinator it serves (the
   * coordinator's config needs the broker's URL): while it returns undefined, every login is
   * refused as "server unavailable" and clients retry.
   */
  logins: () => BrokerLogins | undefined;
}

/** Options of {@link startEmbeddedBroker}. */
export interface EmbeddedBrokerOptions {
  /** Refuse unknown logins and enforce `rules.ts`. @default none: the broker is open to all */
  auth?: EmbeddedBrokerAuth;
  /**
   * Where refused logins, publishes and subscribes are told (`warn`), as Mosquitto logs them:
   * once per client and reason a minute, so a client retrying cannot flood the log. @default none
   */
  log?: Logger;
}

/** CONNACK return codes of MQTT 3.1.1 (§3.2.2.3). */
const CONNACK: Record<LoginRefusal | "unavailable", number> = {
  "client-id": 2,
  unavailable: 3,
  "bad-credentials": 4,
  // An unknown or revoked agent is told the same as a wrong password: a client that cannot log
  // in learns nothing about which ids are enrolled.
  "not-enrolled": 4,
  anonymous: 5,
};

function refused(code: number, message: string): Error & { returnCode: number } {
  return Object.assign(new Error(message), { returnCode: code });
}

/** The aedes hooks that enforce `auth`, and the table of who is logged in as whom. */
function authHooks(
  auth: EmbeddedBrokerAuth,
  logins: WeakMap<Client, BrokerLogin>,
  log: Logger,
): Pick<AedesOptions, "preConnect" | "authenticate" | "authorizePublish" | "authorizeSubscribe"> {
  const wills = new WeakMap<Client, string>();
  const throttle = new LogThrottle();
  // What a client sent is quoted as JSON in the message: a client id or topic cannot start a line.
  const tell = (client: Client | null, what: string, reason: string, fields: object) => {
    const clientId = client?.id ?? null;
    if (!throttle.allow(`${clientId}\u0000${what}\u0000${reason}`, Date.now())) return;
    const remote = (client as unknown as { conn?: { remoteAddress?: string } } | null)?.conn
      ?.remoteAddress;
    log("warn", `broker: refused ${what} of client ${JSON.stringify(clientId)}: ${reason}`, {
      clientId,
      ...(remote === undefined ? {} : { remote }),
      reason,
      ...fields,
    });
  };
  return {
    preConnect(client, packet, done) {
      if (packet.will) wills.set(client, packet.will.topic);
      done(null, true);
    },
    authenticate(client, username, password, done) {
      const from = auth.logins();
      if (from === undefined) {
        done(refused(CONNACK.unavailable, "broker logins not ready"), false);
        return;
      }
      const r = from.check(username, password, client.id);
      if (!r.ok) {
        tell(client, "login", r.refusal, { username: username ?? null });
        done(refused(CONNACK[r.refusal], r.refusal), false);
        return;
      }
      // A Last Will is published by the broker on the client's behalf, after it is gone: one on a
      // topic the client may not publish to is refused at CONNECT, as Mosquitto does, rather
      // than left to be dropped silently later.
      const will = wills.get(client);
      if (will !== undefined && !mayPublish(r.login.user, will, auth.prefix)) {
        tell(client, "login", "will-topic", { username: username ?? null, topic: will });
        done(refused(5, `will on ${will} not allowed`), false);
        return;
      }
      logins.set(client, r.login);
      done(null, true);
    },
    authorizePublish(client, packet, done) {
      // aedes also asks for wills it finds of clients no longer here (client null): refused, as
      // no login vouches for them.
      const login = client === null ? undefined : logins.get(client);
      if (login !== undefined && mayPublish(login.user, packet.topic, auth.prefix)) {
        done(null);
        return;
      }
      // A will of a client long gone (client null) is no one's attempt: not told.
      if (client !== null) tell(client, "publish", "not-allowed", { topic: packet.topic });
      done(new Error(`publish on ${packet.topic} not allowed`));
    },
    authorizeSubscribe(client, sub, done) {
      const login = logins.get(client);
      // (null, null) refuses this one filter with granted QoS 0x80 in the SUBACK
      // [MQTT-3.9.3-2]; an error would drop the whole connection.
      if (login !== undefined && maySubscribe(login.user, sub.topic, auth.prefix)) {
        done(null, sub);
        return;
      }
      tell(client, "subscribe", "not-allowed", { topic: sub.topic });
      done(null, null);
    },
  };
}

/**
 * Starts an embedded broker on 127.0.0.1; `port` 0 picks a free one. With `options.auth` it
 * refuses anonymous clients, wrong passwords, unknown or revoked agents and an agent whose client
 * id is not its username, and enforces `rules.ts` on publishes, subscribes and Last Wills.
 *
 * @example
 *   let coordinator: Coordinator | undefined;
 *   const broker = await startEmbeddedBroker(0, {
 *     auth: { prefix: "ax", logins: () => coordinator && identityLogins(…) },
 *   });
 *   coordinator = new Coordinator(configFor(broker.url));
 *   broker.follow(coordinator.identities);
 */
export async function startEmbeddedBroker(
  port = 0,
  options: EmbeddedBrokerOptions = {},
): Promise<EmbeddedBroker> {
  const logins = new WeakMap<Client, BrokerLogin>();
  const broker = await Aedes.createBroker(
    options.auth === undefined ? {} : authHooks(options.auth, logins, options.log ?? (() => {})),
  );
  const connected = new Set<Client>();
  // Rule 10 applies to the broker too: without TCP_NODELAY its small writes (a welcome, a time
  // answer) wait on delayed ACKs, which skews the agents' clock samples by tens of ms.
  broker.on("client", (client) => {
    connected.add(client);
    (client as unknown as { conn?: { setNoDelay?: (on: boolean) => void } }).conn?.setNoDelay?.(
      true,
    );
  });
  broker.on("clientDisconnect", (client) => connected.delete(client));
  // One writev per turn of the loop per connection, not one per packet (coalesce.ts).
  const server: Server = createServer((socket) => {
    coalesceWrites(socket);
    broker.handle(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  const actual = typeof address === "object" && address !== null ? address.port : port;
  const identityChanged: EmbeddedBroker["identityChanged"] = (identity) => {
    for (const client of connected) {
      const login = logins.get(client);
      if (login?.user.kind !== "agent" || login.user.agentId !== identity.agentId) continue;
      if (identity.status === "enrolled" && identity.generation === login.generation) continue;
      connected.delete(client);
      client.close();
    }
  };
  return {
    url: `mqtt://127.0.0.1:${actual}`,
    port: actual,
    broker,
    identityChanged,
    follow(identities) {
      const previous = identities.onChange;
      identities.onChange = (identity) => {
        previous?.(identity);
        identityChanged(identity);
      };
    },
    close: async () => {
      await new Promise<void>((resolve) => broker.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
