import type { IncomingMessage, ServerResponse } from "node:http";

const PAGE = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>ax coordinator</title></head>
<body>
<h1>ax coordinator</h1>
<p>The web console is not part of this build yet. The HTTP API is described by
<a href="/api/openapi.json">/api/openapi.json</a>; metrics are at <a href="/metrics">/metrics</a>.</p>
</body>
</html>
`;

/** `GET /`: a placeholder page until the web console replaces it. */
export function consoleHandler(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(200, {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
  });
  res.end(PAGE);
}
