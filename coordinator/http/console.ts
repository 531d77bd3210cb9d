import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { pathToFileURL } from "node:url";
import { AxError } from "../../shared/errors.js";
import { packageFile } from "../package-files.js";
import type { RawRoute } from "./route.js";

/** The console's files, read once: it is four small static files and needs no build step. */
const ASSETS = pathToFileURL(`${packageFile("coordinator", "http", "console-assets")}/`);
const FILES: Record<string, { type: string; body: Buffer }> = {};
function file(name: string, type: string): { type: string; body: Buffer } {
  FILES[name] ??= { type, body: readFileSync(new URL(name, ASSETS)) };
  return FILES[name];
}

const TYPES: Record<string, string> = {
  "app.js": "text/javascript; charset=utf-8",
  "app.css": "text/css; charset=utf-8",
  // index.html links it, so browsers ask for it instead of a /favicon.ico nothing serves.
  "favicon.svg": "image/svg+xml",
};

function send(res: ServerResponse, f: { type: string; body: Buffer }): void {
  res.writeHead(200, {
    "content-type": f.type,
    "content-length": f.body.length,
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
  });
  res.end(f.body);
}

/** `GET /`: the web console's page. */
export function consoleHandler(_req: IncomingMessage, res: ServerResponse): void {
  send(res, file("index.html", "text/html; charset=utf-8"));
}

/** `GET /assets/*`: the console's script, style sheet and icon; nothing else is served. */
export const consoleAssetsRoute: RawRoute = {
  kind: "raw",
  method: "GET",
  path: "/assets/*",
  role: "public",
  operationId: "consoleAssets",
  summary: "The web console's script, style sheet and icon",
  tag: "meta",
  contentType: "text/javascript",
  handle(_req, res, { params }) {
    const name = params["*"] ?? "";
    const type = TYPES[name];
    if (type === undefined) {
      // Answered as every API error is (errors.md): 404 with the JSON error body.
      throw new AxError("AX_API_NOT_FOUND", `no console asset "${name}"; see /api/openapi.json`);
    }
    send(res, file(name, type));
  },
};
