import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseCoordinatorConfig } from "../../coordinator/config.js";
import { type Coordinator, coordinatorMqttLogin } from "../../coordinator/coordinator.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import { startTestCoordinator, type TestBroker, tempDir, testBroker } from "../helpers/env.js";
import { type Answer, call, errorOf, rawCall } from "../helpers/http.js";

const VIEWER = "viewer-token-0123456789";
const OPERATOR = "operator-token-0123456789";

/** Issue 16: the API is closed by default. A real coordinator, a real server, real SQLite. */
describe("HTTP API security", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let admin: string;
  const logs: string[] = [];

  const expectError = (
    a: Answer | { status: number; body: unknown },
    status: number,
    code: string,
  ) => {
    expect(a.status, JSON.stringify(a.body)).toBe(status);
    expect((a.body as { error: { code: string } }).error.code).toBe(code);
    return (a.body as { error: { message: string } }).error.message;
  };
  const commandCount = async () =>
    (await coordinator.store.listExecutions({ limit: 10_000 })).filter((e) => e.kind === "command")
      .length;

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 1_000);
    // The default auth (token auth) with two config tokens besides the admin token file.
    http = await startHttpServer(coordinator, {
      port: 0,
      auth: {
        tokens: [
          { token: VIEWER, role: "viewer", name: "dashboard" },
          { token: OPERATOR, role: "operator" },
        ],
      },
      allowedOrigins: ["https://ops.example.com"],
      log: (_level, message) => logs.push(message),
    });
    admin = readFileSync(join(tmp.dir, "ax-secrets", "admin.token"), "utf8").trim();
  });

  afterAll(async () => {
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("creates the admin token file 0600 at first start, logs where (not what), reuses it", async () => {
    const file = join(tmp.dir, "ax-secrets", "admin.token");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(admin).toMatch(/^axt_[A-Za-z0-9_-]{43}$/);
    expect(logs.some((l) => l.startsWith(`created the admin token in ${file}`))).toBe(true);
    expect(logs.some((l) => l.includes(admin))).toBe(false);
    const second: string[] = [];
    const again = await startHttpServer(coordinator, {
      port: 0,
      log: (_l, m) => second.push(m),
    });
    try {
      expect(readFileSync(file, "utf8").trim()).toBe(admin);
      expect(second.some((l) => l.startsWith(`admin token in ${file}`))).toBe(true);
      expect((await call(again.url, "GET", "/api/jobs", { token: admin })).status).toBe(200);
      expect((await call(again.url, "GET", "/api/jobs")).status).toBe(401);
    } finally {
      await again.close();
    }
  });

  it("refuses a request without a token, and a role below the route's", async () => {
    expectError(await call(http.url, "GET", "/api/jobs"), 401, "AX_API_UNAUTHORIZED");
    expectError(await call(http.url, "GET", "/metrics"), 401, "AX_API_UNAUTHORIZED");
    expect((await call(http.url, "GET", "/api/health")).status).toBe(200);
    expect((await call(http.url, "GET", "/api/jobs", { token: VIEWER })).status).toBe(200);
    const before = await commandCount();
    const cmd = { agentId: "a-1", handler: "echo" };
    const m = expectError(
      await call(http.url, "POST", "/api/commands", { token: VIEWER, body: cmd }),
      403,
      "AX_API_FORBIDDEN",
    );
    expect(m).toBe(
      'this operation needs a token with the operator role; this one ("dashboard") has viewer',
    );
    expect(await commandCount()).toBe(before);
    expectError(
      await call(http.url, "POST", "/api/tokens", {
        token: OPERATOR,
        body: { name: "x", role: "viewer" },
      }),
      403,
      "AX_API_FORBIDDEN",
    );
    expectError(
      await call(http.url, "POST", "/api/identities", {
        token: OPERATOR,
        body: { agentId: "dev-1" },
      }),
      403,
      "AX_API_FORBIDDEN",
    );
    expect(coordinator.identities.get("dev-1")).toBeUndefined();
    expectError(
      await call(http.url, "GET", "/api/tokens", { token: VIEWER }),
      403,
      "AX_API_FORBIDDEN",
    );
  });

  it("refuses a cross-origin text/plain POST to /api/commands, and creates nothing", async () => {
    const before = await commandCount();
    const body = JSON.stringify({ agentId: "a-1", handler: "echo" });
    // What a form or fetch(no-cors) on another site sends: no token, a simple content type.
    const csrf = await call(http.url, "POST", "/api/commands", {
      body,
      headers: { "content-type": "text/plain", origin: "https://evil.example" },
    });
    const m = expectError(csrf, 403, "AX_API_ORIGIN_REFUSED");
    expect(m).toBe(
      'Origin header "https://evil.example" is not this coordinator\'s origin nor in http.allowedOrigins',
    );
    // Even with a valid token (a page that somehow holds one) the origin is refused.
    expectError(
      await call(http.url, "POST", "/api/commands", {
        token: admin,
        body,
        headers: { "content-type": "application/json", origin: "http://evil.example" },
      }),
      403,
      "AX_API_ORIGIN_REFUSED",
    );
    expect(await commandCount()).toBe(before);
    // Its own origin and an allowed one are served.
    const own = new URL(http.url).host;
    for (const origin of [`http://${own}`, "https://ops.example.com"]) {
      const r = await call(http.url, "GET", "/api/jobs", { token: VIEWER, headers: { origin } });
      expect(r.status, origin).toBe(200);
    }
  });

  it("lets a page of an allowed origin call the API: preflights granted, answers readable", async () => {
    const ops = "https://ops.example.com";
    // The preflight a browser sends before a JSON POST with a token: no token of its own.
    const preflight = await call(http.url, "OPTIONS", "/api/commands", {
      headers: {
        origin: ops,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get("access-control-allow-origin")).toBe(ops);
    expect(preflight.headers.get("access-control-allow-methods")).toBe("POST");
    expect(preflight.headers.get("access-control-allow-headers")).toBe(
      "authorization, content-type, if-match, idempotency-key",
    );
    expect(preflight.headers.get("access-control-allow-credentials")).toBeNull();
    // The request itself, and a refusal, can be read by the page.
    const listed = await call(http.url, "GET", "/api/jobs", {
      token: VIEWER,
      headers: { origin: ops },
    });
    expect(listed.status).toBe(200);
    expect(listed.headers.get("access-control-allow-origin")).toBe(ops);
    expect(listed.headers.get("vary")).toBe("Origin");
    const refused = await call(http.url, "GET", "/api/jobs", { headers: { origin: ops } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get("access-control-allow-origin")).toBe(ops);
    // So can the refusals of the checks made before the token is read: a body that is not JSON,
    // and a token in the query string.
    const notJson = await call(http.url, "POST", "/api/commands", {
      token: OPERATOR,
      headers: { origin: ops, "content-type": "text/plain" },
      body: "{}",
    });
    expectError(notJson, 415, "AX_API_UNSUPPORTED_MEDIA_TYPE");
    expect(notJson.headers.get("access-control-allow-origin")).toBe(ops);
    expect(notJson.headers.get("vary")).toBe("Origin");
    const inQuery = await call(http.url, "GET", `/api/jobs?token=${VIEWER}`, {
      headers: { origin: ops },
    });
    expectError(inQuery, 401, "AX_API_UNAUTHORIZED");
    expect(inQuery.headers.get("access-control-allow-origin")).toBe(ops);
    // Another site gets no grant, its preflight refused; a request of its own origin needs none.
    expectError(
      await call(http.url, "OPTIONS", "/api/commands", {
        headers: { origin: "https://evil.example", "access-control-request-method": "POST" },
      }),
      403,
      "AX_API_ORIGIN_REFUSED",
    );
    const same = await call(http.url, "GET", "/api/jobs", {
      token: VIEWER,
      headers: { origin: `http://${new URL(http.url).host}` },
    });
    expect(same.headers.get("access-control-allow-origin")).toBeNull();
    // OPTIONS that is not a preflight is still a method no route takes.
    expectError(
      await call(http.url, "OPTIONS", "/api/jobs", { headers: { origin: ops } }),
      405,
      "AX_API_METHOD_NOT_ALLOWED",
    );
  });

  it("answers 415 for a body that is not application/json, even with a valid token", async () => {
    const before = await commandCount();
    const body = JSON.stringify({ agentId: "a-1", handler: "echo", queue: true });
    for (const type of [
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/json; charset=latin1",
    ]) {
      const m = expectError(
        await call(http.url, "POST", "/api/commands", {
          token: admin,
          body,
          headers: { "content-type": type },
        }),
        415,
        "AX_API_UNSUPPORTED_MEDIA_TYPE",
      );
      expect(m).toBe(
        `Content-Type header "${type}" is not allowed: a request body must be sent as application/json`,
      );
    }
    expect(await commandCount()).toBe(before);
    const ok = await call(http.url, "POST", "/api/commands", {
      token: admin,
      body,
      headers: { "content-type": "application/json; charset=utf-8" },
    });
    expect(ok.status).toBe(202);
  });

  it("refuses a foreign Host (DNS rebinding), even for a GET with a valid token", async () => {
    const r = await rawCall(http.url, "GET", "/api/jobs", {
      host: "evil.example:8080",
      authorization: `Bearer ${admin}`,
    });
    const m = expectError(r, 421, "AX_API_HOST_REFUSED");
    expect(m).toBe(
      'Host header "evil.example:8080" is not a name of this coordinator (add it to http.allowedHosts)',
    );
    const port = new URL(http.url).port;
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `LOCALHOST:${port}`]) {
      const ok = await rawCall(http.url, "GET", "/api/jobs", {
        host,
        authorization: `Bearer ${admin}`,
      });
      expect(ok.status, host).toBe(200);
    }
    // The right name on another port is another server.
    expectError(
      await rawCall(http.url, "GET", "/api/health", { host: "localhost:1" }),
      421,
      "AX_API_HOST_REFUSED",
    );
  });

  it("refuses a token in the query string with 401, whatever the token", async () => {
    for (const q of [`token=${admin}`, `access_token=${admin}`]) {
      const m = expectError(
        await call(http.url, "GET", `/api/jobs?${q}`),
        401,
        "AX_API_UNAUTHORIZED",
      );
      expect(m).toContain("a token in the query string");
      // Not even alongside a valid header: the token has leaked into a URL.
      expectError(
        await call(http.url, "GET", `/api/jobs?${q}`, { token: admin }),
        401,
        "AX_API_UNAUTHORIZED",
      );
    }
  });

  it("makes, lists and revokes API tokens; a revoked one is refused at once", async () => {
    const made = await call<{ token: string; name: string; role: string; createdBy: string }>(
      http.url,
      "POST",
      "/api/tokens",
      { token: admin, body: { name: "ci", role: "operator" } },
    );
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ name: "ci", role: "operator", createdBy: "admin" });
    const ci = made.body.token;
    expect(ci).toMatch(/^axt_/);
    const job = { id: "ci-job", handler: "echo", trigger: { type: "manual" } };
    expect((await call(http.url, "POST", "/api/jobs", { token: ci, body: job })).status).toBe(201);
    expectError(await call(http.url, "GET", "/api/tokens", { token: ci }), 403, "AX_API_FORBIDDEN");

    const list = await call<{ items: Record<string, unknown>[] }>(http.url, "GET", "/api/tokens", {
      token: admin,
    });
    expect(list.body.items.map((t) => t.name)).toEqual(["ci"]);
    expect(list.body.items[0]?.lastUsedAt).toEqual(expect.any(Number));
    expect(JSON.stringify(list.body)).not.toContain(ci);
    expect(Object.keys(list.body.items[0] ?? {})).not.toContain("digest");
    // Only the digest is stored.
    const stored = await coordinator.store.listApiTokens();
    expect(JSON.stringify(stored)).not.toContain(ci);

    for (const name of ["ci", "admin", "dashboard", "config-token-1"]) {
      expectError(
        await call(http.url, "POST", "/api/tokens", {
          token: admin,
          body: { name, role: "viewer" },
        }),
        409,
        "AX_API_TOKEN_EXISTS",
      );
    }
    const bad = await call(http.url, "POST", "/api/tokens", {
      token: admin,
      body: { name: "no spaces", role: "root" },
    });
    expectError(bad, 400, "AX_API_INVALID_REQUEST");
    expect(errorOf(bad as Answer).paths.sort()).toEqual(["body.name", "body.role"]);

    expect((await call(http.url, "DELETE", "/api/tokens/ci", { token: admin })).status).toBe(204);
    expectError(
      await call(http.url, "GET", "/api/jobs", { token: ci }),
      401,
      "AX_API_UNAUTHORIZED",
    );
    expectError(
      await call(http.url, "DELETE", "/api/tokens/ci", { token: admin }),
      404,
      "AX_API_TOKEN_NOT_FOUND",
    );
    expect(await coordinator.store.listApiTokens()).toEqual([]);
  });

  it("records which token did each write: the timeline and the job's history", async () => {
    const job = { id: "actor-job", handler: "echo", trigger: { type: "manual" } };
    const created = await call<{ updatedBy: string }>(http.url, "POST", "/api/jobs", {
      token: OPERATOR,
      body: job,
    });
    expect(created.body.updatedBy).toBe("config-token-1");
    const paused = await call<{ updatedBy: string }>(
      http.url,
      "POST",
      "/api/jobs/actor-job/pause",
      {
        token: admin,
      },
    );
    // A pause is state, not a version: the version's writer stays; the history names the pauser.
    expect(paused.body.updatedBy).toBe("config-token-1");
    await call(http.url, "POST", "/api/jobs/actor-job/resume", { token: OPERATOR });
    const fired = await call<{ executionIds: string[] }>(
      http.url,
      "POST",
      "/api/jobs/actor-job/trigger",
      { token: admin },
    );
    const execId = fired.body.executionIds[0] as string;
    await call(http.url, "PUT", "/api/jobs/actor-job", {
      token: OPERATOR,
      body: { ...job, params: { v: 2 } },
    });
    expect((await call(http.url, "DELETE", "/api/jobs/actor-job", { token: admin })).status).toBe(
      204,
    );
    const history = await call<{ items: { action: string; actor: string; version: number }[] }>(
      http.url,
      "GET",
      "/api/jobs/actor-job/history",
      { token: VIEWER },
    );
    expect(history.body.items.map((h) => [h.action, h.actor, h.version])).toEqual([
      ["created", "config-token-1", 1],
      ["paused", "admin", 1],
      ["resumed", "config-token-1", 1],
      ["triggered", "admin", 1],
      ["updated", "config-token-1", 2],
      ["deleted", "admin", 2],
    ]);

    const cancel = await call(http.url, "POST", `/api/executions/${execId}/cancel`, {
      token: OPERATOR,
    });
    expect(cancel.status).toBe(202);
    const retry = await call<{ executionId: string }>(
      http.url,
      "POST",
      `/api/executions/${execId}/retry`,
      { token: admin },
    );
    expect(retry.status).toBe(201);
    const cmd = await call<{ executionIds: string[] }>(http.url, "POST", "/api/commands", {
      token: OPERATOR,
      body: { agentId: "nobody", handler: "echo", queue: true },
    });
    const timeline = async (id: string) =>
      (
        await call<{ timeline: { event: string; actor: string | null }[] }>(
          http.url,
          "GET",
          `/api/executions/${id}`,
          { token: VIEWER },
        )
      ).body.timeline.map((t) => [t.event, t.actor]);
    expect(await timeline(execId)).toEqual([
      ["created", "admin"],
      ["cancel", "config-token-1"],
    ]);
    expect((await timeline(retry.body.executionId))[0]).toEqual(["created", "admin"]);
    expect((await timeline(cmd.body.executionIds[0] as string))[0]).toEqual([
      "created",
      "config-token-1",
    ]);
  });

  it("enrols, lists and revokes agents (admin only); the file is the device's identity", async () => {
    const r = await call<{ identity: Record<string, unknown>; file: Record<string, unknown> }>(
      http.url,
      "POST",
      "/api/identities",
      { token: admin, body: { agentId: "dev-9", tags: { site: "north" } } },
    );
    expect(r.status).toBe(201);
    expect(r.body.identity).toMatchObject({
      agentId: "dev-9",
      generation: 1,
      status: "enrolled",
      tags: { site: "north" },
      actor: "admin",
    });
    expect(r.body.file).toMatchObject({
      ax: "agent-identity/1",
      agentId: "dev-9",
      mqtt: { username: "dev-9" },
    });
    expect(r.body.file.key).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expectError(
      await call(http.url, "POST", "/api/identities", { token: admin, body: { agentId: "dev-9" } }),
      409,
      "AX_AGENT_ENROLLED",
    );
    const rotated = await call<{ identity: { generation: number } }>(
      http.url,
      "POST",
      "/api/identities",
      { token: admin, body: { agentId: "dev-9", rotate: true } },
    );
    expect(rotated.body.identity.generation).toBe(2);

    // The config startTestCoordinator gives: its MQTT user name derives from prefix and store.
    const config = parseCoordinatorConfig({
      store: { path: join(tmp.dir, "ax.sqlite") },
      mqtt: { url: broker.url, prefix: broker.prefix },
    });
    const own = coordinatorMqttLogin(config, coordinator.secrets).username as string;
    expect(own).toMatch(/^ax-c-/);
    const clash = await call(http.url, "POST", "/api/identities", {
      token: admin,
      body: { agentId: own },
    });
    expectError(clash, 400, "AX_API_INVALID_REQUEST");
    expect(errorOf(clash).paths).toEqual(["body.agentId"]);
    const bad = await call(http.url, "POST", "/api/identities", {
      token: admin,
      body: { agentId: "a/b", tags: { k: 1 } },
    });
    expectError(bad, 400, "AX_API_INVALID_REQUEST");
    expect(errorOf(bad).paths.sort()).toEqual(["body.agentId", "body.tags.k"]);

    const list = await call<{ items: Record<string, unknown>[] }>(
      http.url,
      "GET",
      "/api/identities",
      {
        token: admin,
      },
    );
    expect(list.body.items.map((i) => i.agentId)).toContain("dev-9");
    expect(JSON.stringify(list.body)).not.toContain(r.body.file.key as string);
    const revoked = await call<{ status: string; actor: string }>(
      http.url,
      "POST",
      "/api/identities/dev-9/revoke",
      { token: admin },
    );
    expect(revoked.body).toMatchObject({ status: "revoked", actor: "admin" });
    expect(coordinator.identities.keyOf("dev-9")).toBeUndefined();
    expectError(
      await call(http.url, "POST", "/api/identities/nobody/revoke", { token: admin }),
      404,
      "AX_AGENT_NOT_FOUND",
    );
  });

  it('keeps auth "off" as a loud opt-out on loopback, with the Host and Origin checks on', async () => {
    const warned: string[] = [];
    const open = await startHttpServer(coordinator, {
      port: 0,
      auth: "off",
      log: (level, m) => {
        if (level === "warn") warned.push(m);
      },
    });
    try {
      expect(warned.some((m) => m.startsWith("HTTP AUTH IS OFF"))).toBe(true);
      const r = await call<{ updatedBy: string }>(open.url, "POST", "/api/jobs", {
        body: { id: "anon-job", handler: "echo", trigger: { type: "manual" } },
      });
      expect(r.body.updatedBy).toBe("anonymous");
      expectError(
        await rawCall(open.url, "GET", "/api/jobs", { host: "evil.example" }),
        421,
        "AX_API_HOST_REFUSED",
      );
      expectError(
        await call(open.url, "POST", "/api/commands", {
          body: "{}",
          headers: { "content-type": "text/plain", origin: "https://evil.example" },
        }),
        403,
        "AX_API_ORIGIN_REFUSED",
      );
      expectError(
        await call(open.url, "POST", "/api/commands", {
          body: "{}",
          headers: { "content-type": "text/plain" },
        }),
        415,
        "AX_API_UNSUPPORTED_MEDIA_TYPE",
      );
    } finally {
      await open.close();
    }
  });
});
