import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import { AxError } from "../../../shared/errors.js";
import {
  BUNDLE_AUTH_SCHEME,
  MAX_BUNDLE_BYTES,
  parseBundleAuthorization,
} from "../../../shared/update.js";
import { apiRoute, type RawRoute } from "../route.js";
import { bundleListSchema, bundleSchema, bundlesQuery, sha256Params } from "../schemas.js";

/*
 * Published bundles (docs/bundles.md, "Publishing a bundle"; docs/api.md): an operator publishes
 * a bundle's NAME.tar.gz as it is (not JSON), and agents download it by its sha256 for
 * `agent.update`, resuming with Range, vouched for by their own message key.
 */

/** The Content-Types a bundle's archive may be sent as. */
export const BUNDLE_CONTENT_TYPES = ["application/gzip", "application/octet-stream"] as const;

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "cache-control": "no-store",
  });
  res.end(JSON.stringify(value));
}

/** The `sha256` path parameter, checked as the JSON routes check theirs. */
function sha256Param(params: Record<string, string>): string {
  const r = sha256Params.safeParse(params);
  if (r.success) return r.data.sha256;
  const issues = r.error.issues.map((i) => ({
    path: ["params", ...i.path.map(String)].join("."),
    message: i.message,
  }));
  throw new AxError(
    "AX_API_INVALID_REQUEST",
    `invalid request\n${issues.map((i) => `${i.path}: ${i.message}`).join("\n")}`,
    { context: { issues } },
  );
}

/**
 * The byte range a request asks for of `size` bytes (RFC 9110 §14): `bytes=N-`, `bytes=N-M` or
 * `bytes=-N`, one range only. Undefined when the whole is to be sent: no Range, one that is not a
 * single byte range (a server may ignore it, §14.2), or an If-Range that is not this archive's
 * ETag. Throws AX_API_RANGE_NOT_SATISFIABLE when it starts past the end.
 */
export function byteRange(
  headers: IncomingHttpHeaders,
  size: number,
  etag: string,
): { start: number; end: number } | undefined {
  const range = headers.range;
  if (range === undefined) return undefined;
  const ifRange = headers["if-range"];
  if (ifRange !== undefined && ifRange !== etag) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
  if (!m || (m[1] === "" && m[2] === "")) return undefined;
  let start: number;
  let end: number;
  if (m[1] === "") {
    // A suffix: the last N bytes.
    const n = Number(m[2]);
    if (n === 0) throw unsatisfiable(range, size);
    start = Math.max(0, size - n);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== "" && Number(m[2]) < start) return undefined;
  }
  if (start >= size) throw unsatisfiable(range, size);
  return { start, end };
}

function unsatisfiable(range: string, size: number): AxError {
  return new AxError(
    "AX_API_RANGE_NOT_SATISFIABLE",
    `Range "${range}" is not satisfiable: the archive has ${size} bytes`,
    { context: { range, size } },
  );
}

const publish: RawRoute = {
  kind: "raw",
  method: "POST",
  path: "/api/bundles",
  role: "operator",
  operationId: "publishBundle",
  summary: "Publish a bundle",
  description:
    "The body is a bundle's NAME.tar.gz as ax bundle build wrote it, sent as application/gzip " +
    `(or application/octet-stream), at most ${MAX_BUNDLE_BYTES} bytes (413 AX_API_TOO_LARGE). It ` +
    "is checked in memory: a gzipped tar of one folder, a manifest.json that passes its schema, " +
    "manifest.sig verifying with this coordinator's bundle-signing key, every file matching its " +
    "sha256 and size, no agent identity; else 400 AX_BUNDLE_INVALID naming each file and problem. " +
    "Answers 201 with the record, or 200 with the record published first when this archive " +
    "(its sha256) is already published.",
  tag: "bundles",
  contentType: "application/json",
  noQuery: true,
  body: {
    contentTypes: BUNDLE_CONTENT_TYPES,
    maxBytes: MAX_BUNDLE_BYTES,
    description: "The bundle's NAME.tar.gz, byte for byte.",
  },
  success: { status: 201, description: "The bundle, published now." },
  alsoSuccess: [{ status: 200, description: "The bundle, already published (its first record)." }],
  errors: [400],
  handle: async (_req, res, { coordinator, principal, readBody }) => {
    const archive = await readBody();
    const { created, bundle } = await coordinator.bundles.publish(archive, principal.name);
    sendJson(res, created ? 201 : 200, bundle);
  },
};

const archive: RawRoute = {
  kind: "raw",
  method: "GET",
  path: "/api/bundles/{sha256}/archive",
  role: "viewer",
  operationId: "getBundleArchive",
  summary: "Download a bundle's archive",
  description:
    "The archive's bytes (application/gzip, ETag the quoted sha256, Accept-Ranges: bytes). One " +
    "byte range (Range: bytes=N-, bytes=N-M or bytes=-N) answers 206 with Content-Range, so a " +
    "download can resume; a range past the end answers 416. Taken with a bearer token, or by " +
    `an agent with Authorization: ${BUNDLE_AUTH_SCHEME} <agentId> <kid>.<at>.<tag> (docs/api.md).`,
  tag: "bundles",
  contentType: "application/gzip",
  noQuery: true,
  errors: [400, 404, 416],
  authenticate: (header, { coordinator, params }) => {
    if (header === undefined || !/^AX-Agent\s/i.test(header)) return undefined;
    const auth = parseBundleAuthorization(header);
    if (auth === undefined) {
      throw new AxError(
        "AX_API_UNAUTHORIZED",
        `the Authorization header is not a valid ${BUNDLE_AUTH_SCHEME} header (${BUNDLE_AUTH_SCHEME} <agentId> <kid>.<at>.<tag>)`,
      );
    }
    const agentId = coordinator.bundles.authorizeAgent(auth, params.sha256 ?? "");
    return { name: `agent:${agentId}`, role: "viewer" };
  },
  handle: async (req, res, { coordinator, params }) => {
    const sha = sha256Param(params);
    const { bundle, archive: bytes } = await coordinator.bundles.archive(sha);
    const etag = `"${bundle.sha256}"`;
    const common = {
      "content-type": "application/gzip",
      etag,
      "accept-ranges": "bytes",
      // Named by its sha256, the bytes never change; only the caller may keep them.
      "cache-control": "private, max-age=31536000, immutable",
      "content-disposition": `attachment; filename="${bundle.profile.replace(/[^\w.-]/g, "_")}.tar.gz"`,
    };
    let range: { start: number; end: number } | undefined;
    try {
      range = byteRange(req.headers, bytes.length, etag);
    } catch (err) {
      res.setHeader("content-range", `bytes */${bytes.length}`);
      throw err;
    }
    if (range === undefined) {
      res.writeHead(200, { ...common, "content-length": String(bytes.length) });
      res.end(bytes);
      return;
    }
    res.writeHead(206, {
      ...common,
      "content-range": `bytes ${range.start}-${range.end}/${bytes.length}`,
      "content-length": String(range.end - range.start + 1),
    });
    res.end(bytes.subarray(range.start, range.end + 1));
  },
};

/** Published bundles: publish, list, show, download. */
export const bundleRoutes = [
  publish,
  apiRoute({
    method: "GET",
    path: "/api/bundles",
    role: "viewer",
    operationId: "listBundles",
    summary: "List published bundles",
    description: "Newest published first, optionally of one profile, in pages (nextCursor).",
    tag: "bundles",
    query: bundlesQuery,
    success: { status: 200, description: "A page of bundles.", schema: bundleListSchema },
    handle: async ({ coordinator, query }) =>
      coordinator.bundles.list({
        limit: query.limit,
        ...(query.profile === undefined ? {} : { profile: query.profile }),
        ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
      }),
  }),
  apiRoute({
    method: "GET",
    path: "/api/bundles/{sha256}",
    role: "viewer",
    operationId: "getBundle",
    summary: "Show a published bundle",
    tag: "bundles",
    params: sha256Params,
    success: { status: 200, description: "The bundle.", schema: bundleSchema },
    errors: [404],
    handle: async ({ coordinator, params }) => coordinator.bundles.get(params.sha256),
  }),
  archive,
];
