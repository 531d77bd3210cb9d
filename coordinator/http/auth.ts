import { timingSafeEqual } from "node:crypto";
import { AxError } from "../../shared/errors.js";
import type { ApiRole, HttpConfig } from "../config.js";
import { type TokenOwner, tokenDigest } from "../security/api-tokens.js";
import { readPrivate } from "../security/secrets.js";
import type { Principal, Role } from "./route.js";

/** A config file's token as the server keeps it: only its digest, its name and its role. */
export interface KnownToken extends TokenOwner {
  digest: Buffer;
}

/** Looks up the tokens the config file does not hold (the admin token, the API's tokens). */
export interface TokenLookup {
  verify(digest: Buffer): TokenOwner | undefined;
}

/** Auth off, or the config file's tokens and a lookup for the others. */
export type Auth = "off" | { config: KnownToken[]; lookup?: TokenLookup };

/** The caller with auth off: anyone on this machine, so it may do anything. */
export const ANONYMOUS: Principal = Object.freeze({ name: "anonymous", role: "admin" });

const RANK: Record<ApiRole, number> = { viewer: 0, operator: 1, admin: 2 };

/** Resolves the configured tokens, reading each `tokenFile` (named in any error). */
export function resolveAuth(auth: HttpConfig["auth"], lookup?: TokenLookup): Auth {
  if (auth === "off") return "off";
  const config = auth.tokens.map((t, i) => {
    let token = t.token;
    if (t.tokenFile !== undefined) {
      try {
        // Private, as the admin token and the CLI's token files are: a token others can read
        // is anyone's on the host.
        token = readPrivate(t.tokenFile).trim();
      } catch (err) {
        if (err instanceof AxError) {
          throw new AxError("AX_SECURITY_KEY", `http.auth.tokens.${i}.tokenFile: ${err.message}`);
        }
        throw new AxError(
          "AX_CONFIG_READ",
          `${t.tokenFile}: cannot read token file: ${(err as Error).message}`,
          { cause: err },
        );
      }
      if (token.length < 16) {
        throw new AxError(
          "AX_CONFIG_INVALID",
          `http.auth.tokens.${i}.tokenFile: ${t.tokenFile} must hold a token of at least 16 characters`,
        );
      }
    }
    return {
      digest: tokenDigest(token as string),
      name: t.name ?? `config-token-${i}`,
      role: t.role,
    };
  });
  return lookup === undefined ? { config } : { config, lookup };
}

/**
 * Checks a request's `Authorization` header against what the route needs and returns who is
 * calling. Every config token is compared, each in constant time on fixed-length digests, so
 * neither the time taken nor an early exit tells a caller how much of a token was right. Throws
 * AX_API_UNAUTHORIZED (no or unknown token) or AX_API_FORBIDDEN (a role below the route's).
 */
export function authorize(auth: Auth, header: string | undefined, need: Role): Principal {
  if (auth === "off") return ANONYMOUS;
  if (need === "public" && header === undefined) return { name: "public", role: "viewer" };
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header ?? "");
  if (!m) {
    if (need === "public") return { name: "public", role: "viewer" };
    throw new AxError(
      "AX_API_UNAUTHORIZED",
      header === undefined
        ? "this route needs a bearer token (Authorization: Bearer …)"
        : "the Authorization header is not a bearer token",
    );
  }
  const presented = tokenDigest(m[1] as string);
  let owner: TokenOwner | undefined;
  for (const t of auth.config) {
    if (
      timingSafeEqual(presented, t.digest) &&
      (owner === undefined || RANK[t.role] > RANK[owner.role])
    ) {
      owner = t;
    }
  }
  // Asked whatever the config tokens said, so that the admin token is compared on every request
  // too and the time taken does not tell whether a config token matched.
  const stored = auth.lookup?.verify(presented);
  owner ??= stored;
  if (owner === undefined) {
    if (need === "public") return { name: "public", role: "viewer" };
    throw new AxError("AX_API_UNAUTHORIZED", "unknown or revoked bearer token");
  }
  if (need !== "public" && RANK[owner.role] < RANK[need]) {
    throw new AxError(
      "AX_API_FORBIDDEN",
      `this operation needs a token with the ${need} role; this one ("${owner.name}") has ${owner.role}`,
      { context: { need, role: owner.role, token: owner.name } },
    );
  }
  return { name: owner.name, role: owner.role };
}
