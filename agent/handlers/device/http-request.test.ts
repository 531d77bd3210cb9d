import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { HTTP_BODY_CAP_BYTES, httpRequestHandler } from "./http-request.js";
import { failureOf, paramsError, testContext } from "./test-context.js";

let server: Server;
let base: string;
let seen: string[] = [];

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readBody(req);
  seen.push(`${req.method} ${req.url}`);
  switch (req.url) {
    case "/json":
      res.writeHead(200, { "content-type": "application/json", etag: '"v1"', "x-other": "no" });
      res.end(JSON.stringify({ ok: true, pin: 17 }));
      return;
    case "/echo":
      res.writeHead(201, { "content-type": "application/json; charset=utf-8" });
      res.end(
        JSON.stringify({
          method: req.method,
          contentType: req.headers["content-type"] ?? null,
          idempotencyKey: req.headers["idempotency-key"] ?? null,
          body,
        }),
      );
      return;
    case "/text":
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("plain");
      return;
    case "/missing":
      res.writeHead(404, { "content-type": "text/plain" });
      res.end("no such relay\n");
      return;
    case "/boom":
      res.writeHead(500);
      res.end("database down");
      return;
    case "/busy":
      res.writeHead(429, { "retry-after": "1" });
      res.end();
      return;
    case "/big":
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("é".repeat(HTTP_BODY_CAP_BYTES)); // 2 bytes each: twice the cap
      return;
    case "/control":
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("\u0001".repeat(12_000)); // 12,000 bytes, 72,000 as JSON (\u0001 each)
      return;
    case "/redirect":
      res.writeHead(302, { location: "http://example.invalid/elsewhere" });
      res.end();
      return;
    case "/slow":
      // Never answers; the client's timeout or abort ends it, or afterAll closes the socket.
      return;
    default:
      res.writeHead(400);
      res.end();
  }
}

beforeAll(async () => {
  server = createServer((req, res) => {
    route(req, res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  base = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

beforeEach(() => {
  seen = [];
});

describe("http.request", () => {
  it("GETs a 2xx JSON answer: status, a few headers, body text and parsed json", async () => {
    const handler = httpRequestHandler({ allowOrigins: [base] });
    expect(handler.name).toBe("http.request");
    await expect(handler.run(testContext(), { url: `${base}/json` })).resolves.toEqual({
      status: 200,
      headers: {
        "content-type": "application/json",
        etag: '"v1"',
      },
      body: '{"ok":true,"pin":17}',
      json: { ok: true, pin: 17 },
    });
    expect(seen).toEqual(["GET /json"]);
  });

  it("sends an object body as JSON, with the executionId as Idempotency-Key", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const ctx = testContext({ executionId: "ex-42" });
    const result = await handler.run(ctx, {
      url: `${base}/echo`,
      method: "POST",
      body: { relay: 2, on: true },
    });
    expect(result).toMatchObject({
      status: 201,
      json: {
        method: "POST",
        contentType: "application/json",
        idempotencyKey: "ex-42",
        body: '{"relay":2,"on":true}',
      },
    });
    const text = await handler.run(testContext(), {
      url: `${base}/echo`,
      method: "PUT",
      headers: { "content-type": "text/plain" },
      body: "raw",
    });
    expect(text).toMatchObject({
      json: { method: "PUT", contentType: "text/plain", body: "raw", idempotencyKey: null },
    });
  });

  it("keeps an Idempotency-Key the params set", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const result = await handler.run(testContext({ executionId: "ex-43" }), {
      url: `${base}/echo`,
      method: "PATCH",
      headers: { "Idempotency-Key": "order-7" },
      body: "x",
    });
    expect(result).toMatchObject({ json: { method: "PATCH", idempotencyKey: "order-7" } });
  });

  it("leaves json out when the answer is not JSON", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const result = await handler.run(testContext(), { url: `${base}/text` });
    expect(result).toEqual({
      status: 200,
      headers: { "content-type": "text/plain" },
      body: "plain",
    });
  });

  it("fails for good on a 4xx, quoting the body", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    expect(await failureOf(handler.run(testContext(), { url: `${base}/missing` }))).toEqual({
      name: "HandlerFailure",
      message: `http.request: GET ${base}/missing answered 404 Not Found: no such relay`,
      retryable: false,
    });
  });

  it("fails retryable on a 5xx and on 429", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    expect(
      await failureOf(handler.run(testContext(), { url: `${base}/boom`, method: "DELETE" })),
    ).toEqual({
      name: "HandlerFailure",
      message: `http.request: DELETE ${base}/boom answered 500 Internal Server Error: database down`,
      retryable: true,
    });
    expect(await failureOf(handler.run(testContext(), { url: `${base}/busy` }))).toEqual({
      name: "HandlerFailure",
      message: `http.request: GET ${base}/busy answered 429 Too Many Requests`,
      retryable: true,
    });
  });

  it("fails retryable when the endpoint is too slow (params timeoutMs, then the default)", async () => {
    const handler = httpRequestHandler({ allowOrigins: [], defaultTimeoutMs: 150 });
    expect(
      await failureOf(handler.run(testContext(), { url: `${base}/slow`, timeoutMs: 100 })),
    ).toEqual({
      name: "HandlerFailure",
      message: `http.request: GET ${base}/slow timed out after 100 ms`,
      retryable: true,
    });
    expect(await failureOf(handler.run(testContext(), { url: `${base}/slow` }))).toEqual({
      name: "HandlerFailure",
      message: `http.request: GET ${base}/slow timed out after 150 ms`,
      retryable: true,
    });
  });

  it("stops when the execution is aborted", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const ctx = testContext();
    const run = handler.run(ctx, { url: `${base}/slow` });
    setTimeout(() => ctx.abort.abort(), 30);
    expect(await failureOf(run)).toEqual({
      name: "HandlerFailure",
      message: `http.request: GET ${base}/slow aborted`,
      retryable: true,
    });
  });

  it("fails retryable when nothing listens", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const address = closed.address();
    const port = typeof address === "object" && address ? address.port : 0;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const handler = httpRequestHandler({ allowOrigins: [] });
    expect(
      await failureOf(handler.run(testContext(), { url: `http://127.0.0.1:${port}/x` })),
    ).toEqual({
      name: "HandlerFailure",
      message: `http.request: GET http://127.0.0.1:${port}/x failed: connect ECONNREFUSED 127.0.0.1:${port}`,
      retryable: true,
    });
  });

  it("refuses an origin that is not allowed, without sending anything", async () => {
    const handler = httpRequestHandler({
      allowOrigins: ["http://127.0.0.1:1", "https://hub.local/"],
    });
    expect(await failureOf(handler.run(testContext(), { url: `${base}/json` }))).toEqual({
      name: "HandlerFailure",
      message: `http.request: ${base} is not in this agent's allowOrigins (http://127.0.0.1:1, https://hub.local)`,
      retryable: false,
    });
    expect(seen).toEqual([]);
  });

  it("keeps at most 16 KiB of the body", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const result = (await handler.run(testContext(), { url: `${base}/big` })) as {
      body: string;
      truncated?: boolean;
    };
    expect(result.truncated).toBe(true);
    expect(Buffer.byteLength(result.body)).toBe(HTTP_BODY_CAP_BYTES);
    expect(result.body).toBe("é".repeat(HTTP_BODY_CAP_BYTES / 2));
  });

  it("counts the body as it is sent, JSON-escaped, so status and headers always reach the coordinator", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const result = (await handler.run(testContext(), { url: `${base}/control` })) as {
      status: number;
      body: string;
      truncated?: boolean;
    };
    expect(result.status).toBe(200);
    expect(result.truncated).toBe(true);
    expect(result.body).toBe("\u0001".repeat(Math.floor(HTTP_BODY_CAP_BYTES / 6)));
    expect(Buffer.byteLength(JSON.stringify(result.body)) - 2).toBeLessThanOrEqual(
      HTTP_BODY_CAP_BYTES,
    );
  });

  it("does not follow a redirect: the 3xx is the result", async () => {
    const handler = httpRequestHandler({ allowOrigins: [base] });
    await expect(handler.run(testContext(), { url: `${base}/redirect` })).resolves.toEqual({
      status: 302,
      headers: { location: "http://example.invalid/elsewhere" },
      body: "",
    });
    expect(seen).toEqual(["GET /redirect"]);
  });

  it("refuses an allowOrigins entry that is not an origin", () => {
    expect(() => httpRequestHandler({ allowOrigins: ["http://127.0.0.1:8080/api"] })).toThrow(
      new TypeError('allowOrigins: "http://127.0.0.1:8080/api" is not an origin'),
    );
  });

  it("validates params with messages that name the field", () => {
    const { params } = httpRequestHandler({ allowOrigins: [] });
    const check = (input: unknown) => paramsError(params, input);
    expect(check({ url: "http://127.0.0.1/x", method: "PATCH", body: {}, timeoutMs: 5 })).toBe(
      "ok",
    );
    expect(check({})).toBe("params.url: is required (string)");
    expect(check({ url: "not a url" })).toBe(
      "params.url: must be an http:// or https:// URL without credentials",
    );
    expect(check({ url: "ftp://127.0.0.1/x" })).toBe(
      "params.url: must be an http:// or https:// URL without credentials",
    );
    expect(check({ url: "http://user:pw@127.0.0.1/" })).toBe(
      "params.url: must be an http:// or https:// URL without credentials",
    );
    expect(check({ url: "http://h/", method: "HEAD" })).toBe(
      'params.method: must be one of "GET", "POST", "PUT", "PATCH", "DELETE"',
    );
    expect(check({ url: "http://h/", body: "x" })).toBe(
      "params.body: a GET request cannot have a body",
    );
    expect(check({ url: "http://h/", method: "POST", body: [1] })).toBe(
      "params.body: must be a string or a JSON object",
    );
    expect(check({ url: "http://h/", headers: { a: 1 } })).toBe(
      "params.headers.a: expected string, got number",
    );
    expect(check({ url: "http://h/", timeoutMs: 0 })).toBe("params.timeoutMs: must be at least 1");
    expect(check({ url: "http://h/", timeoutMs: 1.5 })).toBe(
      "params.timeoutMs: expected int, got number",
    );
  });

  it("refuses a header the fetch API cannot send, for good", async () => {
    const handler = httpRequestHandler({ allowOrigins: [] });
    const failure = await failureOf(
      handler.run(testContext(), { url: `${base}/json`, headers: { "bad header": "x" } }),
    );
    expect(failure).toMatchObject({ retryable: false });
    expect(failure.message).toMatch(/^http\.request: bad header: /);
    expect(seen).toEqual([]);
  });
});
