import { AxError } from "../../shared/errors.js";
import type { IdentityFile } from "../../shared/identity.js";
import type { IdentityRecord, Store } from "../store/port.js";
import { messageKey, mqttPassword, type Secrets } from "./secrets.js";

/** An enrolled agent's current key. */
export interface AgentKey {
  generation: number;
  key: Buffer;
}

/**
 * The enrolled fleet, held in memory (a revocation takes effect on the next message), written
 * through to the store. Keys and broker passwords are derived from the fleet key on demand.
 */
export class Identities {
  private readonly byId = new Map<string, IdentityRecord>();
  private readonly keys = new Map<string, AgentKey>();
  /** Told of every change, so an embedded broker can drop a revoked agent's connection. */
  onChange: ((identity: IdentityRecord) => void) | undefined;

  constructor(
    private readonly store: Store,
    readonly secrets: Secrets,
    private readonly now: () => number,
  ) {}

  /** Loads every enrolment from the store. */
  async load(): Promise<void> {
    for (const r of await this.store.listIdentities()) this.byId.set(r.agentId, r);
  }

  /**
   * Loads the enrolments again, after another coordinator on the store changed some, and tells
   * {@link onChange} of each that is new or changed (a revocation, a rotation), as if made here.
   */
  async reload(): Promise<void> {
    for (const r of await this.store.listIdentities()) {
      const old = this.byId.get(r.agentId);
      if (old !== undefined && old.status === r.status && old.generation === r.generation) {
        if (old.updatedAt !== r.updatedAt) this.byId.set(r.agentId, r);
        continue;
      }
      this.byId.set(r.agentId, r);
      this.keys.delete(r.agentId);
      this.onChange?.(r);
    }
  }

  get(agentId: string): IdentityRecord | undefined {
    return this.byId.get(agentId);
  }

  list(): IdentityRecord[] {
    return [...this.byId.values()].sort((a, b) => (a.agentId < b.agentId ? -1 : 1));
  }

  /** The key of an enrolled, unrevoked agent; undefined for any other. */
  keyOf(agentId: string): AgentKey | undefined {
    const r = this.byId.get(agentId);
    if (r === undefined || r.status !== "enrolled") return undefined;
    let k = this.keys.get(agentId);
    if (k === undefined || k.generation !== r.generation) {
      k = { generation: r.generation, key: messageKey(this.secrets.fleet, agentId, r.generation) };
      this.keys.set(agentId, k);
    }
    return k;
  }

  /** The broker password of an enrolled, unrevoked agent. */
  mqttPasswordOf(agentId: string): string | undefined {
    const r = this.byId.get(agentId);
    if (r === undefined || r.status !== "enrolled") return undefined;
    return mqttPassword(this.secrets.fleet, agentId, r.generation);
  }

  /**
   * Enrols `agentId` (or, with `rotate`, gives an enrolled one a new key generation; its old
   * key and password stop working at once). Enrolling a revoked agent again starts a new
   * generation. Returns what the device needs.
   */
  async enroll(
    agentId: string,
    options: { tags?: Record<string, string>; rotate?: boolean; actor: string },
  ): Promise<{ identity: IdentityRecord; file: IdentityFile }> {
    const at = this.now();
    const old = this.byId.get(agentId);
    if (old?.status === "enrolled" && !options.rotate) {
      throw new AxError(
        "AX_AGENT_ENROLLED",
        `agent "${agentId}" is already enrolled (generation ${old.generation}); use --rotate for a new key, or revoke it first`,
        { context: { agentId } },
      );
    }
    const identity: IdentityRecord = {
      agentId,
      generation: (old?.generation ?? 0) + 1,
      tags: options.tags ?? old?.tags ?? {},
      status: "enrolled",
      enrolledAt: old?.status === "enrolled" ? old.enrolledAt : at,
      updatedAt: at,
      actor: options.actor,
    };
    await this.store.putIdentity(identity);
    await this.store.flush();
    this.byId.set(agentId, identity);
    this.keys.delete(agentId);
    this.onChange?.(identity);
    this.store.announceWork("access").catch(() => {});
    return { identity, file: this.fileOf(identity) };
  }

  /** Revokes an agent: its messages and its broker login are refused from now on. */
  async revoke(agentId: string, actor: string): Promise<IdentityRecord> {
    const old = this.byId.get(agentId);
    if (old === undefined) {
      throw new AxError("AX_AGENT_NOT_FOUND", `agent "${agentId}" is not enrolled`, {
        context: { agentId },
      });
    }
    const identity: IdentityRecord = { ...old, status: "revoked", updatedAt: this.now(), actor };
    await this.store.putIdentity(identity);
    await this.store.flush();
    this.byId.set(agentId, identity);
    this.keys.delete(agentId);
    this.onChange?.(identity);
    this.store.announceWork("access").catch(() => {});
    return identity;
  }

  private fileOf(r: IdentityRecord): IdentityFile {
    return {
      ax: "agent-identity/1",
      agentId: r.agentId,
      generation: r.generation,
      key: messageKey(this.secrets.fleet, r.agentId, r.generation).toString("base64url"),
      mqtt: {
        username: r.agentId,
        password: mqttPassword(this.secrets.fleet, r.agentId, r.generation),
      },
      bundlePublicKey: this.secrets.bundlePublicPem,
    };
  }
}
