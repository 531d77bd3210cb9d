import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { AxError } from "../../shared/errors.js";
import type { HttpConfig } from "../config.js";
import type { Role } from "./route.js";

/** A token as the server keeps it: only its digest, and its role. */
export interface KnownToken {
  digest: Buffer;
  role: "read" | "operate";
}

/** Tokens kept by digest, or auth off. */
export type Auth = "off" | KnownToken[];

const digest = (token: string) => createHash("sha256").update(token, "utf8").digest();

/** Resolves the configured tokens, reading each `tokenFile` (named in any error). */
export function resolveAuth(auth: HttpConfig["auth"]): Auth {
  if (auth === "off") return "off";
  return auth.tokens.map((t, i) => {
    let token = t.token;
    if (t.tokenFile !== undefined) {
      try {
        token = readFileSync(t.tokenFile, "utf8").trim();
      } catch (err) {
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
    return { digest: digest(token as string), role: t.role };
  });
}

/**
 * Checks a request's `Authorization` header against what the route needs. Every known token is
 * compared, each in constant time on fixed-length digests, so neither the time taken nor an early
 * exit tells a caller how much of a token was right. Throws AX_API_UNAUTHORIZED (no or unknown
 * token) or AX_API_FORBIDDEN (a `read` token on an `operate` route).
 */
export function authorize(auth: Auth, header: string | undefined, need: Role): void {
  if (auth === "off" || need === "public") return;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header ?? "");
  if (!m) {
    throw new AxError(
      "AX_API_UNAUTHORIZED",
      header === undefined
        ? "this route needs a bearer token (Authorization: Bearer …)"
        : "the Authorization header is not a bearer token",
    );
  }
  const presented = digest(m[1] as string);
  let role: KnownToken["role"] | undefined;
  for (const t of auth) {
    if (timingSafeEqual(presented, t.digest) && role !== "operate") role = t.role;
  }
  if (role === undefined) throw new AxError("AX_API_UNAUTHORIZED", "unknown bearer token");
  if (need === "operate" && role !== "operate") {
    throw new AxError(
      "AX_API_FORBIDDEN",
      "this operation needs a token with the operate role; this one has read",
    );
  }
}
