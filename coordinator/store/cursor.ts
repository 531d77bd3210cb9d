import { AxError } from "../../shared/errors.js";

/** Where a page of executions (newest first) ended: the last row's creation time and id. */
export interface ExecutionCursor {
  createdAt: number;
  id: string;
}

/**
 * An opaque cursor for the next page. Keyset, not offset: rows created or purged between two
 * pages neither repeat nor skip a row of the listing.
 */
export function encodeExecutionCursor(c: ExecutionCursor): string {
  return Buffer.from(JSON.stringify([c.createdAt, c.id]), "utf8").toString("base64url");
}

/** Reads a cursor from {@link encodeExecutionCursor}; anything else is AX_STORE_BAD_CURSOR. */
export function decodeExecutionCursor(cursor: string): ExecutionCursor {
  let value: unknown;
  try {
    if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw new Error("not base64url");
    value = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  } catch (err) {
    throw new AxError("AX_STORE_BAD_CURSOR", `cursor "${cursor}" is not one a listing returned`, {
      cause: err,
      context: { cursor },
    });
  }
  if (
    !Array.isArray(value) ||
    value.length !== 2 ||
    typeof value[0] !== "number" ||
    !Number.isFinite(value[0]) ||
    typeof value[1] !== "string"
  ) {
    throw new AxError("AX_STORE_BAD_CURSOR", `cursor "${cursor}" is not one a listing returned`, {
      context: { cursor },
    });
  }
  return { createdAt: value[0], id: value[1] };
}
