import { createHash, timingSafeEqual } from "node:crypto";
import type { IdentityRecord } from "../store/port.js";
import type { BrokerUser } from "./rules.js";

/** A login the broker accepted: who it is, and the key generation its password was made for. */
export interface BrokerLogin {
  user: BrokerUser;
  /** 0 for the coordinator; an agent's enrolment generation. */
  generation: number;
}

/** Why a login was refused (the CONNACK code follows from it). */
export type LoginRefusal = "anonymous" | "bad-credentials" | "not-enrolled" | "client-id";

/** Checks broker logins. */
export interface BrokerLogins {
  check(
    username: string | undefined,
    password: Buffer | string | undefined,
    clientId: string,
  ): { ok: true; login: BrokerLogin } | { ok: false; refusal: LoginRefusal };
}

/** What {@link identityLogins} reads of the enrolled fleet (`Identities` has both). */
export interface IdentitySource {
  get(agentId: string): IdentityRecord | undefined;
  mqttPasswordOf(agentId: string): string | undefined;
}

/**
 * Compares two secrets in time independent of where they differ. Both sides are hashed first, so
 * their lengths (which `timingSafeEqual` needs equal) give nothing away either.
 */
export function sameSecret(given: Buffer | string, expected: string): boolean {
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected, "utf8").digest();
  return timingSafeEqual(a, b);
}

/**
 * The logins of a fleet: the coordinator's own, and every enrolled, unrevoked agent with the
 * password derived for its current generation. An agent must connect with its id as client id:
 * a client id is a session, and taking another agent's would end that agent's connection
 * ([MQTT-3.1.4-2]).
 */
export function identityLogins(
  identities: IdentitySource,
  coordinator: { username: string; password: string },
): BrokerLogins {
  return {
    check(username, password, clientId) {
      if (username === undefined || password === undefined) {
        return { ok: false, refusal: "anonymous" };
      }
      if (username === coordinator.username) {
        return sameSecret(password, coordinator.password)
          ? { ok: true, login: { user: { kind: "coordinator" }, generation: 0 } }
          : { ok: false, refusal: "bad-credentials" };
      }
      const record = identities.get(username);
      const expected = identities.mqttPasswordOf(username);
      if (record === undefined || expected === undefined) {
        return { ok: false, refusal: "not-enrolled" };
      }
      if (!sameSecret(password, expected)) return { ok: false, refusal: "bad-credentials" };
      if (clientId !== username) return { ok: false, refusal: "client-id" };
      return {
        ok: true,
        login: { user: { kind: "agent", agentId: username }, generation: record.generation },
      };
    },
  };
}
