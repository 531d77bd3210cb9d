/**
 * Identities for benchmark agents that talk to a stand-in coordinator (test/helpers'
 * CoordinatorPeer) rather than a real one, which would enrol them: a random message key, as
 * `ax fleet enroll` would derive one, written as the agent reads it (docs/security.md).
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import type { IdentityFile } from "../shared/identity.js";

/** A fresh identity for `agentId`: a random 32-byte key, generation 1. */
export function benchIdentity(agentId: string): IdentityFile {
  return {
    ax: "agent-identity/1",
    agentId,
    generation: 1,
    key: randomBytes(32).toString("base64url"),
    // The benches' embedded broker lets anyone in; the agent still presents a login.
    mqtt: { username: agentId, password: randomBytes(16).toString("hex") },
  };
}

/** Writes an identity file, readable by its owner only (the agent refuses any other). */
export function writeIdentityFile(path: string, identity: IdentityFile): void {
  writeFileSync(path, JSON.stringify(identity), { mode: 0o600 });
}

/** The key as the CoordinatorPeer holds it. */
export function keyOf(identity: IdentityFile): { key: Buffer; generation: number } {
  return { key: Buffer.from(identity.key, "base64url"), generation: identity.generation };
}

/** `on` − `off` as a share of `off`, in %. */
export function overheadPct(on: number, off: number): number {
  return off > 0 ? (100 * (on - off)) / off : Number.NaN;
}
