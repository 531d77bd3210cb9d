import * as z from "zod/mini";
import { ID_PATTERN } from "./ids.js";
import { describeIssue } from "./protocol/codec.js";

/**
 * What a device needs to speak for itself (docs/security.md, "Enrolment"): written by
 * `ax fleet enroll`, read by the agent from its `identityFile`. It is a secret: whoever holds it
 * can speak as this agent, and only as this agent.
 */
export const identityFileSchema = z.object({
  /** Format of this file. */
  ax: z.literal("agent-identity/1"),
  agentId: z
    .string()
    .check(z.regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)")),
  /** Key generation; the coordinator refuses a message made with any other. */
  generation: z.int().check(z.gte(1)),
  /** The message key: 32 bytes, unpadded base64url (43 characters). */
  key: z.string().check(z.regex(/^[A-Za-z0-9_-]{43}$/, "must be 32 bytes in unpadded base64url")),
  /** The agent's broker login: its username is its agentId. */
  mqtt: z.object({
    username: z.string().check(z.minLength(1)),
    password: z.string().check(z.minLength(16)),
  }),
  /** The coordinator's bundle signing key (SPKI PEM), to check bundles sent to this device. */
  bundlePublicKey: z.optional(z.string().check(z.startsWith("-----BEGIN PUBLIC KEY-----"))),
});
export type IdentityFile = z.infer<typeof identityFileSchema>;

/**
 * Reads an identity file's text: what it says, or its problems, one a line as `field: problem`
 * (or `not valid JSON: …`). The agent and `ax bundle build --identity` both read it so.
 */
export function parseIdentityText(
  text: string,
): { ok: true; identity: IdentityFile } | { ok: false; problems: string[] } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, problems: [`not valid JSON: ${(err as Error).message}`] };
  }
  const parsed = identityFileSchema.safeParse(raw, { error: describeIssue });
  if (parsed.success) return { ok: true, identity: parsed.data };
  return {
    ok: false,
    problems: parsed.error.issues.map(
      (i) => `${i.path.map(String).join(".") || "(root)"}: ${i.message}`,
    ),
  };
}
