import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { AxError } from "../../shared/errors.js";

/** Where a page of executions (newest first) ended: the last row's creation time and id. */
export interface ExecutionCursor {
  createdAt: number;
  id: string;
}

/**
 * The key cursors are tagged with. Random per process until {@link setCursorKey} gives the one
 * derived from the fleet key, which every coordinator of a cluster shares: then a cursor holds
 * across coordinators and restarts.
 */
let cursorKey: Buffer = randomBytes(32);

/** Tags cursors with a key derived from `secret` (the fleet key). */
export function setCursorKey(secret: Buffer): void {
  cursorKey = createHmac("sha256", secret).update("ax cursor v1").digest();
}

/** Characters of a cursor's tag: 12 bytes of HMAC-SHA256, base64url. */
const TAG_CHARS = 16;

/** A cursor: its position (base64url of JSON), a dot, and its tag. */
const CURSOR = new RegExp(`^([A-Za-z0-9_-]+)\\.([A-Za-z0-9_-]{${TAG_CHARS}})$`);

function tagOf(position: string): string {
  return createHmac("sha256", cursorKey)
    .update(position)
    .digest()
    .subarray(0, (TAG_CHARS * 3) / 4)
    .toString("base64url");
}

/**
 * An opaque cursor for the next page. Keyset, not offset: rows created or purged between two
 * pages neither repeat nor skip a row of the listing. Tagged, so that one cut, altered or made up
 * is refused rather than read as some other position (api.md: a cursor not returned by the API
 * is refused).
 */
export function encodeExecutionCursor(c: ExecutionCursor): string {
  const position = Buffer.from(JSON.stringify([c.createdAt, c.id]), "utf8").toString("base64url");
  return `${position}.${tagOf(position)}`;
}

function badCursor(cursor: string, cause?: unknown): AxError {
  return new AxError("AX_STORE_BAD_CURSOR", `cursor "${cursor}" is not one a listing returned`, {
    ...(cause === undefined ? {} : { cause }),
    context: { cursor },
  });
}

/** Reads a cursor from {@link encodeExecutionCursor}; anything else is AX_STORE_BAD_CURSOR. */
export function decodeExecutionCursor(cursor: string): ExecutionCursor {
  const m = CURSOR.exec(cursor);
  if (!m) throw badCursor(cursor);
  const position = m[1] as string;
  const tag = Buffer.from(m[2] as string);
  if (!timingSafeEqual(tag, Buffer.from(tagOf(position)))) throw badCursor(cursor);
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(position, "base64url").toString("utf8"));
  } catch (err) {
    throw badCursor(cursor, err);
  }
  if (
    !Array.isArray(value) ||
    value.length !== 2 ||
    typeof value[0] !== "number" ||
    !Number.isFinite(value[0]) ||
    typeof value[1] !== "string"
  ) {
    throw badCursor(cursor);
  }
  return { createdAt: value[0], id: value[1] };
}
