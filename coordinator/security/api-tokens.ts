import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { AxError } from "../../shared/errors.js";
import { type ApiRole, TOKEN_NAME_PATTERN } from "../config.js";
import type { ApiTokenRecord, Store } from "../store/port.js";
import { readPrivate, SECRET_FILES, writePrivate } from "./secrets.js";

/** The name the admin token file's token acts under. */
export const ADMIN_TOKEN_NAME = "admin";

/** A token the coordinator knows: its name (the actor recorded) and its role. */
export interface TokenOwner {
  name: string;
  role: ApiRole;
}

/** An API token as `GET /api/tokens` shows it: never the token, nor its digest. */
export type ApiTokenView = Omit<ApiTokenRecord, "digest">;

/** SHA-256 of a token: what is kept and compared, never the token itself. */
export function tokenDigest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/** A new token: `axt_` and 32 random bytes in base64url (the prefix lets secret scanners find it). */
export function newToken(): string {
  return `axt_${randomBytes(32).toString("base64url")}`;
}

/** How often a token's last use is written back at most: a request is not a write. */
const TOUCH_INTERVAL_MS = 60_000;

/**
 * The HTTP API's own tokens: the admin token in the secrets folder, and the tokens made through
 * the API (their digests in the store, held in memory so a revocation takes effect on the next
 * request). The config file's tokens are the HTTP server's business.
 */
export class ApiTokens {
  private admin: Buffer | undefined;
  private readonly byDigest = new Map<string, ApiTokenRecord>();
  private readonly reserved = new Set<string>([ADMIN_TOKEN_NAME]);

  constructor(
    private readonly store: Store,
    private readonly secretsDir: string,
    private readonly now: () => number,
  ) {}

  /** The admin token's file: `admin.token` in the secrets folder. */
  get adminTokenFile(): string {
    return join(this.secretsDir, SECRET_FILES.adminToken);
  }

  /** Loads the tokens made through the API from the store. */
  async load(): Promise<void> {
    const tokens = await this.store.listApiTokens();
    // Swapped in one step: a request checked while the store answered sees the old set whole.
    this.byDigest.clear();
    for (const t of tokens) this.byDigest.set(t.digest, t);
  }

  /**
   * Reads the admin token, creating its file (0600) first when there is none. A file readable by
   * others, or holding less than 16 characters, is AX_SECURITY_KEY.
   */
  ensureAdminToken(): { path: string; created: boolean } {
    const path = this.adminTokenFile;
    let created = false;
    if (!existsSync(path)) {
      try {
        writePrivate(path, `${newToken()}\n`);
        created = true;
      } catch (err) {
        // Another process created it first: read theirs.
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
    }
    const token = readPrivate(path).trim();
    if (token.length < 16) {
      throw new AxError(
        "AX_SECURITY_KEY",
        `${path}: must hold a token of at least 16 characters; delete it to have a new one made`,
      );
    }
    this.admin = tokenDigest(token);
    return { path, created };
  }

  /** Names no API token may take (the config file's tokens). */
  reserve(names: Iterable<string>): void {
    for (const n of names) this.reserved.add(n);
  }

  /**
   * Who a presented token's digest belongs to, or undefined. The admin digest is compared in
   * constant time; the others are found by digest in a map, which tells a timing observer
   * nothing about any token, since the digest of a guess is all that is looked up.
   */
  verify(digest: Buffer): TokenOwner | undefined {
    if (this.admin !== undefined && timingSafeEqual(digest, this.admin)) {
      return { name: ADMIN_TOKEN_NAME, role: "admin" };
    }
    const t = this.byDigest.get(digest.toString("hex"));
    if (t === undefined) return undefined;
    const now = this.now();
    if (t.lastUsedAt === null || now - t.lastUsedAt >= TOUCH_INTERVAL_MS) {
      t.lastUsedAt = now;
      // Best effort: a failed write of a last-use time must not fail the request.
      this.store.touchApiToken(t.name, now).catch(() => {});
    }
    return { name: t.name, role: t.role };
  }

  /** Makes a token; returns it (the only time it is shown) with its record. */
  async create(
    name: string,
    role: ApiRole,
    actor: string,
  ): Promise<{ token: string; record: ApiTokenView }> {
    if (!TOKEN_NAME_PATTERN.test(name)) {
      throw new AxError("AX_API_INVALID_REQUEST", "the token's name is not valid", {
        context: {
          issues: [
            { path: ["body", "name"], message: "must be 1 to 64 letters, digits, '.', '_' or '-'" },
          ],
        },
      });
    }
    if (this.reserved.has(name) || this.list().some((t) => t.name === name)) {
      throw new AxError("AX_API_TOKEN_EXISTS", `a token named "${name}" exists already`, {
        context: { name },
      });
    }
    const token = newToken();
    const record: ApiTokenRecord = {
      name,
      role,
      digest: tokenDigest(token).toString("hex"),
      createdAt: this.now(),
      createdBy: actor,
      lastUsedAt: null,
    };
    await this.store.putApiToken(record);
    await this.store.flush();
    this.byDigest.set(record.digest, record);
    this.announce();
    return { token, record: view(record) };
  }

  /** The tokens made through the API, by name. */
  list(): ApiTokenView[] {
    return [...this.byDigest.values()].map(view).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** Revokes a token: refused from the next request on. AX_API_TOKEN_NOT_FOUND when unknown. */
  async revoke(name: string): Promise<void> {
    const entry = [...this.byDigest.entries()].find(([, t]) => t.name === name);
    if (entry === undefined) {
      throw new AxError(
        "AX_API_TOKEN_NOT_FOUND",
        this.reserved.has(name)
          ? `token "${name}" is not one made through the API; ${name === ADMIN_TOKEN_NAME ? "delete the admin token file and restart the coordinator" : "remove it from the config file"} to replace it`
          : `no token named "${name}"`,
        { context: { name } },
      );
    }
    this.byDigest.delete(entry[0]);
    await this.store.deleteApiToken(name);
    await this.store.flush();
    this.announce();
  }

  /** Tells the other coordinators on the store to load the tokens again (best effort: logged). */
  private announce(): void {
    this.store.announceWork("access").catch(() => {});
  }
}

function view(t: ApiTokenRecord): ApiTokenView {
  const { digest: _digest, ...rest } = t;
  return rest;
}
