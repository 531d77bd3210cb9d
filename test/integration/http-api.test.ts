import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { type AnyRoute, apiRoute } from "../../coordinator/http/route.js";
import {
  errorSchema,
  executionDetailSchema,
  executionPageSchema,
  executionSchema,
  jobListSchema,
  jobSchema,
  previewSchema,
  readinessSchema,
} from "../../coordinator/http/schemas.js";
import { builtinRoutes, type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import { AxError } from "../../shared/errors.js";
import { startTestCoordinator, type TestBroker, tempDir, testBroker } from "../helpers/env.js";
import { type Answer, call, errorOf } from "../helpers/http.js";

const READ = "read-token-0123456789";
const OPERATE = "operate-token-0123456789";
const OPERATE_2 = "operate-two-token-0123456789";

/** The HTTP API on a real coordinator (embedded broker, SQLite file), over real HTTP. */
describe("HTTP API", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let url: string;

  /** `token` null: no Authorization header. */
  const get = (path: string, token: string | null = READ) =>
    call(url, "GET", path, token === null ? {} : { token });
  const post = (path: string, body?: unknown, token = OPERATE) =>
    call(url, "POST", path, body === undefined ? { token } : { token, body });
  const put = (path: string, body: unknown, token = OPERATE) =>
    call(url, "PUT", path, { token, body });
  const del = (path: string, token = OPERATE) => call(url, "DELETE", path, { token });

  /** Asserts an error answer: its status, code, and (when given) the paths of its issues. */
  function expectError(a: Answer, status: number, code: string, paths?: string[]) {
    expect(a.status, a.text).toBe(status);
    expect(errorSchema.safeParse(a.body).success, a.text).toBe(true);
    const e = errorOf(a);
    expect(e.code).toBe(code);
    if (paths) expect(e.paths.sort()).toEqual([...paths].sort());
    return e;
  }

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir();
    coordinator = await startTestCoordinator(broker, tmp.dir, 1_000);
    http = await startHttpServer(coordinator, {
      port: 0,
      auth: {
        tokens: [
          { token: READ, role: "viewer" },
          { token: OPERATE, role: "operator" },
          { token: OPERATE_2, role: "operator" },
        ],
      },
      maxBodyBytes: 4096,
    });
    url = http.url;
  });

  afterAll(async () => {
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  describe("health and auth", () => {
    it("answers health and readiness without a token", async () => {
      const health = await get("/api/health", null);
      expect(health.status).toBe(200);
      expect(health.body).toMatchObject({ status: "ok", version: expect.any(String) });
      const ready = await get("/api/ready", null);
      expect(ready.status).toBe(200);
      expect(readinessSchema.parse(ready.body)).toEqual({
        ready: true,
        store: true,
        mqtt: true,
        role: "active",
      });
    });

    it("needs a known token: 401 without one or with a bad one, 403 for read on a change", async () => {
      const none = await get("/api/jobs", null);
      expectError(none, 401, "AX_API_UNAUTHORIZED");
      expect(none.headers.get("www-authenticate")).toMatch(/^Bearer/);
      expectError(await get("/api/jobs", "wrong-token-0123456789"), 401, "AX_API_UNAUTHORIZED");
      expectError(
        await call(url, "GET", "/api/jobs", { headers: { authorization: `Basic ${READ}` } }),
        401,
        "AX_API_UNAUTHORIZED",
      );
      expectError(await get("/metrics", null), 401, "AX_API_UNAUTHORIZED");
      expect((await get("/api/jobs", READ)).status).toBe(200);
      expect((await get("/api/jobs", OPERATE)).status).toBe(200);
      const job = { id: "auth-job", handler: "echo", trigger: { type: "manual" } };
      expectError(await post("/api/jobs", job, READ), 403, "AX_API_FORBIDDEN");
      expect(await coordinator.store.getJob("auth-job")).toBeUndefined();
      expect((await post("/api/jobs", job, OPERATE)).status).toBe(201);
    });

    it("serves everything without tokens when auth is off", async () => {
      const open = await startHttpServer(coordinator, { port: 0, auth: "off" });
      try {
        expect((await call(open.url, "GET", "/api/jobs")).status).toBe(200);
        const r = await call(open.url, "POST", "/api/preview", {
          body: { trigger: { type: "every", every: "1s", anchor: 0 }, n: 2, after: 0 },
        });
        expect(r.status).toBe(200);
        expect(r.body).toEqual({ times: [1000, 2000] });
      } finally {
        await open.close();
      }
    });

    it("refuses a query string on the routes that take none, and lets a browser's pass", async () => {
      const metrics = expectError(
        await get("/metrics?format=json", READ),
        400,
        "AX_API_INVALID_REQUEST",
      );
      expect(metrics.paths).toEqual(["query"]);
      expect(metrics.message).toContain('Unrecognized key: "format"');
      expectError(await get("/api/openapi.json?v=1", null), 400, "AX_API_INVALID_REQUEST");
      expectError(
        await get(`/api/bundles/${"0".repeat(64)}/archive?from=0`, READ),
        400,
        "AX_API_INVALID_REQUEST",
      );
      // The console's page and files load with a cache-buster.
      expect((await get("/?v=2", null)).status).toBe(200);
      expect((await get("/assets/app.js?v=2", null)).status).toBe(200);
      expect((await get("/metrics", READ)).status).toBe(200);
    });

    it("answers a store that refuses for now 503 with Retry-After, and logs it as a warning", async () => {
      const logged: [string, string][] = [];
      const refusing = (code: "AX_STORE_BUSY" | "AX_STORE_FENCED", path: string): AnyRoute =>
        apiRoute({
          method: "POST",
          path,
          role: "operator",
          operationId: `test${code}`,
          summary: "a write the store refuses",
          tag: "test",
          success: { status: 200, description: "never" },
          handle: async () => {
            throw new AxError(code, `${code} from the store`);
          },
        });
      const server = await startHttpServer(coordinator, {
        port: 0,
        auth: { tokens: [{ token: OPERATE, role: "operator" }] },
        routes: [
          refusing("AX_STORE_BUSY", "/test/busy"),
          refusing("AX_STORE_FENCED", "/test/fenced"),
        ],
        log: (level, message) => logged.push([level, message]),
      });
      try {
        for (const [path, code] of [
          ["/test/busy", "AX_STORE_BUSY"],
          ["/test/fenced", "AX_STORE_FENCED"],
        ] as const) {
          const r = await call(server.url, "POST", path, { token: OPERATE, body: {} });
          expectError(r, 503, code);
          expect(r.headers.get("retry-after")).toBe("1");
        }
        const about = logged.filter(([, m]) => m.includes("/test/"));
        expect(about.map(([level]) => level)).toEqual(["warn", "warn"]);
      } finally {
        await server.close();
      }
    });

    it("answers 404 for an unknown path and 405 with Allow for a wrong method", async () => {
      expectError(await get("/api/nothing"), 404, "AX_API_NOT_FOUND");
      expectError(await get("/api"), 404, "AX_API_NOT_FOUND");
      // An empty segment is no id: not a request for the job "" (which would be a 400).
      expectError(await get("/api/jobs/"), 404, "AX_API_NOT_FOUND");
      expectError(await post("/api/executions//cancel", {}, OPERATE), 404, "AX_API_NOT_FOUND");
      const wrong = await del("/api/executions");
      expectError(wrong, 405, "AX_API_METHOD_NOT_ALLOWED");
      expect(wrong.headers.get("allow")).toBe("GET");
      expect((await del("/api/jobs")).headers.get("allow")).toBe("GET, POST");
    });

    it("serves the console page at / and its two assets, and nothing else under /assets", async () => {
      const page = await get("/", null);
      expect(page.status).toBe(200);
      expect(page.headers.get("content-type")).toMatch(/^text\/html/);
      expect(page.text).toContain('<script type="module" src="/assets/app.js">');
      const js = await get("/assets/app.js", null);
      expect(js.status).toBe(200);
      expect(js.headers.get("content-type")).toMatch(/^text\/javascript/);
      expect(js.text).toContain("/api/agents");
      expect((await get("/assets/app.css", null)).headers.get("content-type")).toMatch(
        /^text\/css/,
      );
      expect((await get("/assets/../../package.json", null)).status).toBe(404);
      expectError(await get("/assets/nope.js", null), 404, "AX_API_NOT_FOUND");
    });
  });

  describe("jobs", () => {
    const every = (id: string, over: Record<string, unknown> = {}) => ({
      id,
      handler: "echo",
      trigger: { type: "every", every: "1h", anchor: 0 },
      ...over,
    });

    it("creates, shows, lists, updates (new version), pauses, resumes and deletes a job", async () => {
      const created = await post("/api/jobs", every("crud-1", { params: { a: 1 } }));
      expect(created.status, created.text).toBe(201);
      const job = jobSchema.parse(created.body);
      expect(job).toMatchObject({ id: "crud-1", version: 1, paused: false });
      expect(job.nextFireAt).toBeGreaterThan(Date.now());
      expect(job.definition.trigger).toEqual({ type: "every", everyMs: 3_600_000, anchor: 0 });

      expectError(await post("/api/jobs", every("crud-1")), 409, "AX_JOB_EXISTS");

      expect(jobSchema.parse((await get("/api/jobs/crud-1")).body)).toEqual(job);
      const list = jobListSchema.parse((await get("/api/jobs")).body);
      expect(list.items.map((j) => j.id)).toContain("crud-1");

      const updated = await put("/api/jobs/crud-1", every("crud-1", { params: { a: 2 } }));
      expect(updated.status, updated.text).toBe(200);
      expect(jobSchema.parse(updated.body)).toMatchObject({
        version: 2,
        definition: { params: { a: 2 } },
      });
      // Without an id in the body, the path names the job; an identical definition changes nothing.
      const same = await put("/api/jobs/crud-1", {
        ...every("crud-1", { params: { a: 2 } }),
        id: undefined,
      });
      expect(jobSchema.parse(same.body).version).toBe(2);

      // Pausing is state: the version stays, and a paused job shows no next fire time.
      const v2 = jobSchema.parse(same.body);
      const paused = jobSchema.parse((await post("/api/jobs/crud-1/pause")).body);
      expect(paused).toEqual({
        ...v2,
        paused: true,
        nextFireAt: null,
        definition: { ...v2.definition, paused: true },
      });
      expect(jobSchema.parse((await get("/api/jobs/crud-1")).body)).toEqual(paused);
      const listed = jobListSchema.parse((await get("/api/jobs")).body);
      expect(listed.items.find((j) => j.id === "crud-1")).toEqual(paused);
      // The paused definition, stored again, is no new version and does not resume the job.
      const again = jobSchema.parse((await put("/api/jobs/crud-1", paused.definition)).body);
      expect(again).toMatchObject({ version: 2, paused: true, nextFireAt: null });
      const resumed = jobSchema.parse((await post("/api/jobs/crud-1/resume")).body);
      expect(resumed).toEqual(v2);
      const history = (await get("/api/jobs/crud-1/history")).body as {
        items: { action: string; version: number }[];
      };
      expect(history.items.map((h) => [h.action, h.version])).toEqual([
        ["created", 1],
        ["updated", 2],
        ["paused", 2],
        ["resumed", 2],
      ]);
      expect((history as unknown as { nextCursor: unknown }).nextCursor).toBeNull();
      // A page at a time from the newest back, each oldest first: every entry once.
      type HistoryPage = { items: { seq: number; action: string }[]; nextCursor: string | null };
      const first = (await get("/api/jobs/crud-1/history?limit=3")).body as HistoryPage;
      expect(first.items.map((h) => h.action)).toEqual(["updated", "paused", "resumed"]);
      expect(first.nextCursor).not.toBeNull();
      const back = (
        await get(
          `/api/jobs/crud-1/history?limit=3&cursor=${encodeURIComponent(first.nextCursor ?? "")}`,
        )
      ).body as HistoryPage;
      expect(back).toEqual({ items: [history.items[0]], nextCursor: null });
      expectError(await get("/api/jobs/crud-1/history?limit=0"), 400, "AX_API_INVALID_REQUEST");
      expectError(
        await get(`/api/jobs/other/history?cursor=${encodeURIComponent(first.nextCursor ?? "")}`),
        400,
        "AX_STORE_BAD_CURSOR",
      );

      const gone = await del("/api/jobs/crud-1");
      expect(gone.status).toBe(204);
      expect(gone.text).toBe("");
      expectError(await get("/api/jobs/crud-1"), 404, "AX_JOB_NOT_FOUND");
      expectError(await del("/api/jobs/crud-1"), 404, "AX_JOB_NOT_FOUND");
      expect(
        jobListSchema.parse((await get("/api/jobs")).body).items.map((j) => j.id),
      ).not.toContain("crud-1");
    });

    it("pages the job listing by id: no job twice or skipped while jobs come and go", async () => {
      for (const id of ["page-a", "page-b", "page-c", "page-d", "page-e"]) {
        expect((await post("/api/jobs", every(id))).status).toBe(201);
      }
      const page = async (query: string) => {
        const a = await get(`/api/jobs?${query}`);
        expect(a.status, a.text).toBe(200);
        const p = jobListSchema.parse(a.body);
        return {
          ids: p.items.map((j) => j.id).filter((id) => id.startsWith("page-")),
          next: p.nextCursor,
        };
      };
      const first = await page("limit=2&cursor=page-");
      expect(first).toEqual({ ids: ["page-a", "page-b"], next: "page-b" });
      // A job added before the cursor, and one deleted after it, shift nothing.
      expect((await post("/api/jobs", every("page-0"))).status).toBe(201);
      expect((await del("/api/jobs/page-c")).status).toBe(204);
      const second = await page(`limit=2&cursor=${first.next}`);
      expect(second.ids).toEqual(["page-d", "page-e"]);
      // Other tests' jobs may sort after these: then this page is not the last.
      expect([null, "page-e"]).toContain(second.next);
      const all = await page("limit=1000");
      expect(all.ids).toEqual(["page-0", "page-a", "page-b", "page-d", "page-e"]);
      expectError(
        await get("/api/jobs?limit=1001&cursor=no/such&extra=1"),
        400,
        "AX_API_INVALID_REQUEST",
        ["query.limit", "query.cursor", "query"],
      );
    });

    it("answers 404 for an unknown job on every job route", async () => {
      expectError(await put("/api/jobs/nope", every("nope")), 404, "AX_JOB_NOT_FOUND");
      for (const action of ["pause", "resume", "trigger"]) {
        expectError(await post(`/api/jobs/nope/${action}`), 404, "AX_JOB_NOT_FOUND");
      }
      expectError(await get("/api/jobs/nope/preview"), 404, "AX_JOB_NOT_FOUND");
    });

    it("lists every field error of a bad definition with its path", async () => {
      const bad = await post("/api/jobs", {
        id: "bad/id",
        handler: "9nope",
        trigger: { type: "cron", expr: "* * *" },
        shards: 0,
        retry: { maxAttempts: 1, colour: "red" },
      });
      const e = expectError(bad, 400, "AX_API_INVALID_REQUEST", [
        "body.id",
        "body.handler",
        "body.trigger.expr",
        "body.shards",
        "body.retry",
      ]);
      expect(e.message).toContain(
        "body.trigger.expr: must have 5 fields (minute hour day month weekday) or 6 (with seconds first), got 3",
      );
      expect(e.message).toContain('body.retry: Unrecognized key: "colour"');
    });

    it("refuses a body id other than the path's, and a job that fires after itself", async () => {
      await post("/api/jobs", every("path-1"));
      expectError(await put("/api/jobs/path-1", every("path-2")), 400, "AX_API_INVALID_REQUEST", [
        "body.id",
      ]);
      const self = await post("/api/jobs", {
        id: "self-1",
        handler: "echo",
        trigger: { type: "after", job: "self-1" },
      });
      expectError(self, 400, "AX_JOB_INVALID", ["body.trigger.job"]);
    });

    it("refuses bad JSON, a missing body, and a body over the size limit", async () => {
      const notJson = await post("/api/jobs", "{ nope");
      expect(expectError(notJson, 400, "AX_API_INVALID_REQUEST", ["body"]).message).toContain(
        "not valid JSON",
      );
      expectError(await post("/api/jobs"), 400, "AX_API_INVALID_REQUEST", ["body"]);
      const big = await post("/api/jobs", every("big-1", { params: { blob: "x".repeat(5000) } }));
      expectError(big, 413, "AX_API_TOO_LARGE");
      expect(await coordinator.store.getJob("big-1")).toBeUndefined();
      // Far over the limit, the answer still arrives (the rest of the body is read and dropped).
      const huge = await post(
        "/api/jobs",
        every("big-2", { params: { blob: "x".repeat(2_000_000) } }),
      );
      expectError(huge, 413, "AX_API_TOO_LARGE");
      // The server is still there for the next request.
      expect((await get("/api/jobs")).status).toBe(200);
    });

    it("refuses a query parameter or body a route does not take, and writes nothing", async () => {
      await post("/api/jobs", { id: "strict-1", handler: "echo", trigger: { type: "manual" } });
      const unknownQuery = [
        await get("/api/jobs/strict-1?bogus=1"),
        await get("/api/health?foo=1", null),
        await get("/api/ready?bogus=1", null),
        await post("/api/jobs/strict-1/trigger?bogus=1"),
      ];
      for (const a of unknownQuery) {
        expect(expectError(a, 400, "AX_API_INVALID_REQUEST", ["query"]).message).toContain(
          'query: Unrecognized key: "',
        );
      }
      // A path that does not decode is an invalid request like any other: its issue is listed.
      expect(
        expectError(await get("/api/jobs/%E0%A4%A"), 400, "AX_API_INVALID_REQUEST", ["path"])
          .message,
      ).toBe('invalid request\npath: "/api/jobs/%E0%A4%A" is not valid percent-encoding');
      const withBody = [
        await post("/api/jobs/strict-1/trigger", { bogus: 1 }),
        await post("/api/jobs/strict-1/pause", "{not json"),
        await post("/api/jobs/strict-1/pause", [1]),
      ];
      expect(withBody[0] && errorOf(withBody[0]).message).toContain(
        'body: Unrecognized key: "bogus"',
      );
      expect(withBody[1] && errorOf(withBody[1]).message).toContain("body: not valid JSON");
      for (const a of withBody) expectError(a, 400, "AX_API_INVALID_REQUEST", ["body"]);
      const big = await post("/api/jobs/strict-1/pause", { pad: "x".repeat(2_000_000) });
      expectError(big, 413, "AX_API_TOO_LARGE");
      // Nothing was triggered or paused by any of them.
      expect(await coordinator.store.listExecutions({ jobId: "strict-1" })).toHaveLength(0);
      expect((await coordinator.store.getJob("strict-1"))?.paused).toBe(false);
      // An empty body, or one that says nothing, is taken.
      expect((await post("/api/jobs/strict-1/pause", {})).status).toBe(200);
      expect((await post("/api/jobs/strict-1/resume")).status).toBe(200);
      expect((await del("/api/jobs/strict-1")).status).toBe(204);
    });

    it("previews a job's next fire times and a trigger's", async () => {
      await post(
        "/api/jobs",
        every("preview-1", { trigger: { type: "every", every: "5s", anchor: 0 } }),
      );
      const r = await get("/api/jobs/preview-1/preview?n=3&after=1000");
      expect(r.status, r.text).toBe(200);
      expect(previewSchema.parse(r.body).times).toEqual([5000, 10000, 15000]);
      const iso = await get("/api/jobs/preview-1/preview?n=1&after=1970-01-01T00:00:06Z");
      expect(iso.body).toEqual({ times: [10000] });
      // Cron in a time zone, across New York's fall-back: 01:30 fires once, at EDT.
      const cron = await post(
        "/api/preview",
        {
          trigger: { type: "cron", expr: "30 1 * * *", tz: "America/New_York" },
          n: 2,
          after: "2026-10-31T12:00:00Z",
        },
        READ,
      );
      expect(cron.status, cron.text).toBe(200);
      expect(
        (cron.body as { times: number[] }).times.map((t) => new Date(t).toISOString()),
      ).toEqual(["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]);
      // The zone the times are reckoned in, for showing them as local times (the CLI does).
      expect((cron.body as { tz?: string }).tz).toBe("America/New_York");
      expectError(
        await post("/api/preview", { trigger: { type: "cron", expr: "61 * * * *" }, n: 0 }, READ),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.trigger.expr", "body.n"],
      );
      expectError(
        await get("/api/jobs/preview-1/preview?n=abc&after=soon&extra=1"),
        400,
        "AX_API_INVALID_REQUEST",
        ["query.n", "query.after", "query"],
      );
    });

    it("triggers a job now: one execution per shard", async () => {
      await post("/api/jobs", {
        id: "trig-1",
        handler: "echo",
        trigger: { type: "manual" },
        shards: 3,
      });
      const r = await post("/api/jobs/trig-1/trigger");
      expect(r.status, r.text).toBe(202);
      const ids = (r.body as { executionIds: string[] }).executionIds;
      expect(ids).toHaveLength(3);
      for (const id of ids)
        expect((await coordinator.store.getExecution(id))?.jobId).toBe("trig-1");
    });

    it("fires event-triggered jobs with the payload in their params", async () => {
      await post("/api/jobs", {
        id: "door-job",
        handler: "echo",
        params: { site: "n" },
        trigger: { type: "event", name: "door-open" },
      });
      const r = await post("/api/events/door-open", { payload: { door: 3 } });
      expect(r.status, r.text).toBe(202);
      expect(r.body).toEqual({ event: "door-open", fired: 1 });
      const page = executionPageSchema.parse((await get("/api/executions?job=door-job")).body);
      expect(page.items).toHaveLength(1);
      expect(page.items[0]?.params).toEqual({ site: "n", door: 3 });
      // No body at all is an empty payload; an event nobody listens for fires nothing.
      expect((await post("/api/events/door-open")).body).toEqual({ event: "door-open", fired: 1 });
      expect((await post("/api/events/nobody-listens")).body).toEqual({
        event: "nobody-listens",
        fired: 0,
      });
      expectError(await post("/api/events/bad%2Fname"), 400, "AX_API_INVALID_REQUEST", [
        "params.name",
      ]);
      expectError(await post("/api/events/x", { payload: 3 }), 400, "AX_API_INVALID_REQUEST", [
        "body.payload",
      ]);
      // Params and payload each fit a dispatch; merged, they must too. Refused, firing nothing.
      // (The job through the engine: this test's server takes bodies of 4 KiB at most.)
      await coordinator.putJob({
        id: "big-door",
        handler: "echo",
        params: { plan: "p".repeat(59_900) },
        trigger: { type: "event", name: "big-door" },
      });
      const big = expectError(
        await post("/api/events/big-door", { payload: { photo: "y".repeat(200) } }),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.payload"],
      );
      expect(big.message).toContain('body.payload: merged into job "big-door"\'s params, is ');
      const none = executionPageSchema.parse((await get("/api/executions?job=big-door")).body);
      expect(none.items).toEqual([]);
      expect((await post("/api/events/big-door", { payload: { n: 1 } })).body).toEqual({
        event: "big-door",
        fired: 1,
      });
    });
  });

  describe("executions and commands", () => {
    /** Commands queued for an agent nobody runs: they wait PENDING until their deadline. */
    async function pendingCommands(agentId: string, n: number): Promise<string[]> {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const r = await post("/api/commands", {
          agentId,
          queue: true,
          handler: "echo",
          params: { i },
          at: Date.now() + 600_000,
          deadline: Date.now() + 660_000,
        });
        expect(r.status, r.text).toBe(202);
        ids.push(...(r.body as { executionIds: string[] }).executionIds);
      }
      return ids;
    }

    it("makes what a request with an Idempotency-Key makes once, and answers the same again", async () => {
      const target = "idem-agent";
      const body = {
        agentId: target,
        queue: true,
        handler: "echo",
        at: Date.now() + 600_000,
        deadline: Date.now() + 660_000,
      };
      const keyed = (path: string, key: string, b: unknown = {}, token = OPERATE) =>
        call(url, "POST", path, { token, body: b, headers: { "idempotency-key": key } });
      const mine = async () =>
        (await coordinator.store.listExecutions({ limit: 1_000_000 })).filter(
          (e) => e.targetAgentId === target,
        );
      const first = await keyed("/api/commands", "k-1", body);
      expect(first.status, first.text).toBe(202);
      // The same request again, and two at once: one command each.
      const again = await keyed("/api/commands", "k-1", body);
      expect(again.status, again.text).toBe(202);
      expect(again.body).toEqual(first.body);
      const [a, b] = await Promise.all([
        keyed("/api/commands", "k-2", body),
        keyed("/api/commands", "k-2", body),
      ]);
      expect(a.status, a.text).toBe(202);
      expect(b.body).toEqual(a.body);
      expect(a.body).not.toEqual(first.body);
      // Another token's key is its own.
      const other = await keyed("/api/commands", "k-1", body, OPERATE_2);
      expect(other.status, other.text).toBe(202);
      expect(other.body).not.toEqual(first.body);
      expect((await mine()).length).toBe(3);
      // The key with another body, and keys that are not keys: refused, nothing made.
      expectError(
        await keyed("/api/commands", "k-1", { ...body, params: { x: 1 } }),
        400,
        "AX_API_INVALID_REQUEST",
        ["headers.idempotency-key"],
      );
      for (const bad of ["two words", "x".repeat(256), "é"]) {
        expectError(await keyed("/api/commands", bad, body), 400, "AX_API_INVALID_REQUEST", [
          "headers.idempotency-key",
        ]);
      }
      expect((await mine()).length).toBe(3);
      // A retry and a run now, each once per key.
      const [id] = (first.body as { executionIds: string[] }).executionIds;
      expect((await post(`/api/executions/${id}/cancel`)).status).toBe(202);
      const retried = await keyed(`/api/executions/${id}/retry`, "r-1");
      expect(retried.status, retried.text).toBe(201);
      expect((await keyed(`/api/executions/${id}/retry`, "r-1")).body).toEqual(retried.body);
      expect((await mine()).length).toBe(4);
      await coordinator.putJob({
        id: "idem-job",
        handler: "echo",
        paused: true,
        trigger: { type: "every", every: "1h" },
      });
      const ran = await keyed("/api/jobs/idem-job/trigger", "t-1");
      expect(ran.status, ran.text).toBe(202);
      expect((await keyed("/api/jobs/idem-job/trigger", "t-1")).body).toEqual(ran.body);
      expect(await coordinator.store.listExecutions({ jobId: "idem-job" })).toHaveLength(1);
    });

    it("refuses a command for an agent it does not know, and writes nothing", async () => {
      const before = (await coordinator.store.listExecutions({ limit: 1_000_000 })).length;
      const r = await post("/api/commands", { agentId: "no-such-agent", handler: "echo" });
      expect(r.status, r.text).toBe(404);
      expect(r.body).toEqual({
        error: {
          code: "AX_AGENT_NOT_FOUND",
          message:
            'agent "no-such-agent" is not known: it is not enrolled and has never connected (to create the command anyway, for an agent still to come, send it with queue: true, or ax command send --queue)',
        },
      });
      expect((await coordinator.store.listExecutions({ limit: 1_000_000 })).length).toBe(before);
      // queue is for an agent id; a selector matches agents already known.
      expectError(
        await post("/api/commands", {
          selector: { tags: { a: "b" } },
          queue: true,
          handler: "echo",
        }),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.queue"],
      );
    });

    it("refuses a run timeout no agent would take: 0, a fraction of a millisecond, or past a timer's longest delay", async () => {
      for (const timeout of [0, "0s", 1.5, "25d", 2_147_483_648]) {
        const e = expectError(
          await post("/api/commands", { agentId: "x", queue: true, handler: "echo", timeout }),
          400,
          "AX_API_INVALID_REQUEST",
          ["body.timeout"],
        );
        expect(e.message).toMatch(
          /body\.timeout: must be (at least 1ms|a whole number|at most 2147483647 ms)/,
        );
      }
      // The longest is taken: 24 days, and exactly a timer's longest delay.
      for (const timeout of ["24d", 2_147_483_647]) {
        const res = await post("/api/commands", {
          agentId: "x",
          queue: true,
          handler: "echo",
          timeout,
        });
        expect(res.status).toBe(202);
      }
      const job = (field: string, value: unknown) =>
        post("/api/jobs", {
          id: "zero",
          handler: "echo",
          trigger: { type: "manual" },
          [field]: value,
        });
      expectError(await job("timeout", 0), 400, "AX_API_INVALID_REQUEST", ["body.timeout"]);
      expectError(await job("timeout", "30d"), 400, "AX_API_INVALID_REQUEST", ["body.timeout"]);
      expectError(await job("dispatchTimeout", "0ms"), 400, "AX_API_INVALID_REQUEST", [
        "body.dispatchTimeout",
      ]);
    });

    it("creates a command for an agent enrolled but never connected, which waits PENDING", async () => {
      await coordinator.enrollAgent("enrolled-only", { actor: "test" });
      const r = await post("/api/commands", { agentId: "enrolled-only", handler: "echo" });
      expect(r.status, r.text).toBe(202);
      const [id] = (r.body as { executionIds: string[] }).executionIds;
      expect(await coordinator.store.getExecution(id as string)).toMatchObject({
        state: "PENDING",
        targetAgentId: "enrolled-only",
      });
    });

    it("queues a command for an agent not known yet when asked to; it waits PENDING", async () => {
      const r = await post("/api/commands", {
        agentId: "not-here-yet",
        handler: "echo",
        queue: true,
      });
      expect(r.status, r.text).toBe(202);
      const body = r.body as {
        executionIds: string[];
        targets: { agentId: string; executionId: string }[];
      };
      expect(body.executionIds).toHaveLength(1);
      expect(body.targets).toEqual([
        { agentId: "not-here-yet", executionId: body.executionIds[0] },
      ]);
      const e = executionSchema.parse(
        (await coordinator.store.getExecution(body.executionIds[0] as string)) as unknown,
      );
      expect(e).toMatchObject({ kind: "command", state: "PENDING", targetAgentId: "not-here-yet" });
      expect(e.deadline - e.fireAt).toBe(30_000);
    });

    it("refuses a bad command with every problem, and a selector nobody matches with 404", async () => {
      expectError(
        await post("/api/commands", {
          agentId: "a-1",
          selector: { tags: { site: "x" } },
          handler: "",
          at: 2000,
          deadline: 1000,
          priority: 5000,
        }),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.agentId", "body.handler", "body.deadline", "body.priority"],
      );
      expectError(await post("/api/commands", { handler: "echo" }), 400, "AX_API_INVALID_REQUEST", [
        "body.agentId",
      ]);
      expectError(
        await post("/api/commands", { selector: { tags: {} }, handler: "echo" }),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.selector.tags"],
      );
      expectError(
        await post("/api/commands", { agentId: "a-1", handler: "echo", deadline: 1000 }),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.deadline"],
      );
      const none = expectError(
        await post("/api/commands", { selector: { tags: { site: "atlantis" } }, handler: "echo" }),
        404,
        "AX_AGENT_NOT_FOUND",
      );
      expect(none.message).toBe('no agent has the tags {"site":"atlantis"}');
    });

    it("pages through more executions than a page, newest first, without repeats or gaps", async () => {
      const ids = await pendingCommands("pager", 25);
      const seen: { id: string; createdAt: number }[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const q: string = `/api/executions?agent=pager&limit=7${cursor ? `&cursor=${cursor}` : ""}`;
        const page = executionPageSchema.parse((await get(q)).body);
        expect(page.items.length).toBe(pages < 3 ? 7 : 4);
        seen.push(...page.items);
        cursor = page.nextCursor;
        pages++;
      } while (cursor !== null);
      expect(pages).toBe(4);
      // Every execution once, newest first.
      expect(seen.map((e) => e.id).sort()).toEqual([...ids].sort());
      for (let i = 1; i < seen.length; i++) {
        const [a, b] = [seen[i - 1], seen[i]] as [
          { id: string; createdAt: number },
          { id: string; createdAt: number },
        ];
        expect(a.createdAt > b.createdAt || (a.createdAt === b.createdAt && a.id > b.id)).toBe(
          true,
        );
      }
      expectError(await get("/api/executions?cursor=garbage!"), 400, "AX_STORE_BAD_CURSOR");
      // A cursor altered in one character, or made up in the format of one, is not a position.
      const first = executionPageSchema.parse(
        (await get("/api/executions?agent=pager&limit=7")).body,
      );
      const real = first.nextCursor as string;
      const altered = `${real.slice(0, 3)}${real[3] === "A" ? "B" : "A"}${real.slice(4)}`;
      const madeUp = Buffer.from(JSON.stringify([9e15, "zzz"])).toString("base64url");
      for (const c of [altered, madeUp, `${madeUp}.${real.split(".")[1]}`]) {
        expectError(await get(`/api/executions?cursor=${c}`), 400, "AX_STORE_BAD_CURSOR");
      }
      expect((await get(`/api/executions?agent=pager&limit=7&cursor=${real}`)).status).toBe(200);
    });

    it("filters executions by job, state, agent, kind and time range", async () => {
      await post("/api/jobs", {
        id: "filter-job",
        handler: "echo",
        trigger: { type: "manual" },
        overlap: { policy: "PARALLEL" },
      });
      const before = Date.now();
      await post("/api/jobs/filter-job/trigger");
      const trig = (await post("/api/jobs/filter-job/trigger")).body as { executionIds: string[] };
      const [c] = await pendingCommands("filter-agent", 1);
      await post(`/api/executions/${trig.executionIds[0]}/cancel`);
      const list = async (q: string) =>
        executionPageSchema.parse((await get(`/api/executions?${q}`)).body).items.map((e) => e.id);
      expect(await list("job=filter-job")).toHaveLength(2);
      expect(await list("job=filter-job&state=CANCELED")).toEqual(trig.executionIds);
      expect(await list("job=filter-job&state=PENDING,DISPATCHED")).toHaveLength(1);
      expect(await list("agent=filter-agent")).toEqual([c]);
      expect(await list("agent=filter-agent&kind=job")).toEqual([]);
      expect(await list(`agent=filter-agent&kind=command&from=${before}`)).toEqual([c]);
      expect(await list(`job=filter-job&to=${new Date(before).toISOString()}`)).toEqual([]);
      expectError(
        await get("/api/executions?state=DONE,PENDING&limit=0&kind=x&from=1000&to=10"),
        400,
        "AX_API_INVALID_REQUEST",
        ["query.state", "query.limit", "query.kind", "query.to"],
      );
      // A time in a query string says its zone, as in a body: never read in the coordinator's.
      const local = expectError(
        await get("/api/executions?from=2026-12-24T18:00:00&to=Tue,%2001%20Dec%202026"),
        400,
        "AX_API_INVALID_REQUEST",
        ["query.from", "query.to"],
      );
      expect(local.message).toContain("query.from: has no time zone");
      expect(
        await list(`job=filter-job&from=${encodeURIComponent(new Date(before).toISOString())}`),
      ).toHaveLength(2);
    });

    it("shows an execution with its timeline, cancels it once (then 409), and retries it", async () => {
      const [id] = await pendingCommands("detail-agent", 1);
      const shown = executionDetailSchema.parse((await get(`/api/executions/${id}`)).body);
      expect(shown.execution).toMatchObject({ id, state: "PENDING" });
      expect(shown.timeline.map((t) => t.event)).toEqual(["created"]);

      const canceled = await post(`/api/executions/${id}/cancel`);
      expect(canceled.status, canceled.text).toBe(202);
      expect(executionSchema.parse(canceled.body).state).toBe("CANCELED");
      const after = executionDetailSchema.parse((await get(`/api/executions/${id}`)).body);
      expect(after.timeline.map((t) => [t.event, t.toState])).toEqual([
        ["created", "PENDING"],
        ["cancel", "CANCELED"],
      ]);
      const again = expectError(
        await post(`/api/executions/${id}/cancel`),
        409,
        "AX_EXEC_CONFLICT",
      );
      expect(again.message).toBe(`execution "${id}" already ended CANCELED`);

      const retried = await post(`/api/executions/${id}/retry`);
      expect(retried.status, retried.text).toBe(201);
      const newId = (retried.body as { executionId: string }).executionId;
      expect(retried.body).toEqual({ executionId: newId, retryOf: id });
      expect((await coordinator.store.getExecution(newId))?.state).toBe("PENDING");
      // The retry is open, so it cannot be retried itself.
      expectError(await post(`/api/executions/${newId}/retry`), 409, "AX_EXEC_CONFLICT");

      expectError(await get("/api/executions/ex_nothing"), 404, "AX_EXEC_NOT_FOUND");
      expectError(await post("/api/executions/ex_nothing/cancel"), 404, "AX_EXEC_NOT_FOUND");
      expectError(await post("/api/executions/ex_nothing/retry"), 404, "AX_EXEC_NOT_FOUND");
      expectError(await get("/api/executions/bad%20id"), 400, "AX_API_INVALID_REQUEST", [
        "params.id",
      ]);
    });

    it("lists no agents and answers 404 for an unknown one", async () => {
      const r = await get("/api/agents");
      expect(r.status).toBe(200);
      expect(r.body).toEqual({
        items: [],
        nextCursor: null,
        total: 0,
        counts: { online: 0, offline: 0 },
      });
      expectError(await get("/api/agents/ghost"), 404, "AX_AGENT_NOT_FOUND");
    });
  });

  describe("rollouts", () => {
    const spec = {
      id: "ro-http",
      selector: { tags: { site: "nowhere" } },
      command: { handler: "echo", params: { n: 1 } },
      rate: { perMinute: 60 },
      abort: { thresholdPercent: 10, minExecuted: 5 },
      start: false,
    };

    it("creates one rollout per Idempotency-Key, and answers with it again", async () => {
      const { id: _, ...generated } = spec;
      const body = { ...generated, description: "keyed" };
      const keyed = (key: string, b: unknown = body) =>
        call<{ id: string }>(url, "POST", "/api/rollouts", {
          token: OPERATE,
          body: b,
          headers: { "idempotency-key": key },
        });
      const first = await keyed("ro-key-1");
      expect(first.status, first.text).toBe(201);
      const again = await keyed("ro-key-1");
      expect(again.status, again.text).toBe(201);
      expect(again.body.id).toBe(first.body.id);
      // Two at once: one rollout, both told its id.
      const [a, b] = await Promise.all([keyed("ro-key-2"), keyed("ro-key-2")]);
      expect([a.status, b.status]).toEqual([201, 201]);
      expect(b.body.id).toBe(a.body.id);
      expect(a.body.id).not.toBe(first.body.id);
      expectError(
        await keyed("ro-key-1", { ...body, description: "another" }),
        400,
        "AX_API_INVALID_REQUEST",
        ["headers.idempotency-key"],
      );
      const made = (await coordinator.store.pageRollouts({ limit: 500 })).items.filter(
        (r) => r.description === "keyed" || r.description === "another",
      );
      expect(made.map((r) => r.id).sort()).toEqual([first.body.id, a.body.id].sort());
    });

    it("creates, lists, shows, starts, pauses and aborts one, each change in its timeline", async () => {
      expectError(await post("/api/rollouts", spec, READ), 403, "AX_API_FORBIDDEN");
      const created = await post("/api/rollouts", spec);
      expect(created.status, created.text).toBe(201);
      expect(created.body).toMatchObject({
        id: "ro-http",
        state: "CREATED",
        version: 1,
        rate: { perMinute: 60 },
        waves: [{ percent: 100, soak: 0 }],
        abort: { thresholdPercent: 10, minExecuted: 5, on: ["FAILED", "TIMED_OUT", "EXPIRED"] },
        command: { handler: "echo", params: { n: 1 }, startWithin: 60_000, timeout: 30_000 },
        progress: { matching: 0, reached: 0, byState: {} },
      });
      expectError(await post("/api/rollouts", spec), 409, "AX_ROLLOUT_CONFLICT");
      const list = await get("/api/rollouts?state=CREATED");
      expect(list.status).toBe(200);
      expect((list.body as { items: { id: string }[] }).items.map((r) => r.id)).toContain(
        "ro-http",
      );
      expect((await post("/api/rollouts/ro-http/resume", undefined)).body).toMatchObject({
        state: "IN_PROGRESS",
      });
      const paused = await post("/api/rollouts/ro-http/pause", { reason: "a look" });
      expect(paused.body).toMatchObject({ state: "PAUSED", reason: "a look" });
      expectError(await post("/api/rollouts/ro-http/pause", {}), 409, "AX_ROLLOUT_CONFLICT");
      expectError(await post("/api/rollouts/ro-http/abort", {}, READ), 403, "AX_API_FORBIDDEN");
      const aborted = await post("/api/rollouts/ro-http/abort", { reason: "not needed" });
      expect(aborted.body).toMatchObject({ state: "ABORTED", reason: "not needed" });
      expectError(await post("/api/rollouts/ro-http/resume", {}), 409, "AX_ROLLOUT_CONFLICT");
      const shown = await get("/api/rollouts/ro-http");
      expect(shown.status).toBe(200);
      const detail = shown.body as { timeline: { event: string; actor: string }[] };
      expect(detail.timeline.map((e) => e.event)).toEqual([
        "created",
        "started",
        "paused",
        "aborted",
      ]);
      // Every change names the token that asked for it, the same one here.
      const actors = new Set(detail.timeline.map((e) => e.actor));
      expect(actors.size).toBe(1);
      expect([...actors][0]).not.toBe("system");
      expectError(await get("/api/rollouts/ro-none"), 404, "AX_ROLLOUT_NOT_FOUND");
    });

    it("refuses a bad rollout naming each bad field, and creates nothing", async () => {
      const bad = await post("/api/rollouts", {
        ...spec,
        id: "ro-bad",
        selector: {},
        waves: [{ percent: 50 }, { percent: 20 }],
        abort: { thresholdPercent: 0 },
        rate: { perMinute: -1 },
      });
      expectError(bad, 400, "AX_API_INVALID_REQUEST", [
        "body.abort.thresholdPercent",
        "body.rate.perMinute",
        "body.selector",
        // Both problems of the second wave: not above the first, and not the last 100 %.
        "body.waves.1.percent",
        "body.waves.1.percent",
      ]);
      expectError(await get("/api/rollouts/ro-bad"), 404, "AX_ROLLOUT_NOT_FOUND");
      expectError(
        await post("/api/rollouts", { ...spec, id: "ro-late", endsAt: 1_000 }),
        400,
        "AX_API_INVALID_REQUEST",
        ["body.endsAt"],
      );
      expectError(await get("/api/rollouts?state=DONE"), 400, "AX_API_INVALID_REQUEST", [
        "query.state",
      ]);
    });
  });

  describe("OpenAPI document", () => {
    it("is JSON with every route, its parameters and schemas", async () => {
      const r = await get("/api/openapi.json", null);
      expect(r.status).toBe(200);
      expect(r.headers.get("content-type")).toMatch(/^application\/json/);
      const doc = JSON.parse(r.text) as {
        openapi: string;
        paths: Record<string, Record<string, Record<string, unknown>>>;
        components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> };
      };
      expect(doc.openapi).toBe("3.1.0");
      expect(doc.components.securitySchemes.bearer).toMatchObject({
        type: "http",
        scheme: "bearer",
      });
      const routes: AnyRoute[] = builtinRoutes(() => []);
      expect(routes.length).toBe(42);
      const ops = new Set<string>();
      for (const route of routes) {
        const op = doc.paths[route.path]?.[route.method.toLowerCase()] as
          | {
              operationId: string;
              parameters?: { name: string; in: string; schema: unknown }[];
              requestBody?: { content: Record<string, { schema: { properties?: object } }> };
              responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
              security: unknown[];
            }
          | undefined;
        expect(op, `${route.method} ${route.path}`).toBeDefined();
        if (!op) continue;
        ops.add(op.operationId);
        expect(op.security).toEqual(route.role === "public" ? [] : [{ bearer: [] }]);
        if (route.kind !== "api") continue;
        for (const name of [...route.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1])) {
          expect(op.parameters?.find((p) => p.in === "path" && p.name === name)).toBeDefined();
        }
        for (const h of route.headers ?? []) {
          expect(op.parameters?.find((p) => p.in === "header" && p.name === h.name)).toBeDefined();
        }
        if (route.body) {
          expect(op.requestBody?.content["application/json"]?.schema).toMatchObject({
            type: "object",
          });
        }
        const success = op.responses[String(route.success.status)];
        expect(success, `${route.operationId} ${route.success.status}`).toBeDefined();
        if (route.success.schema)
          expect(success?.content?.["application/json"]?.schema).toBeDefined();
        if (route.role !== "public") expect(op.responses["401"]).toBeDefined();
        if (route.role !== "public" && route.role !== "viewer")
          expect(op.responses["403"]).toBeDefined();
        for (const s of route.errors ?? []) expect(op.responses[String(s)]).toBeDefined();
      }
      expect(ops.size).toBe(routes.length);
      // The schemas are the ones requests are validated with.
      const create = doc.paths["/api/jobs"]?.post as {
        requestBody: {
          content: {
            "application/json": {
              schema: { properties: Record<string, unknown>; required: string[] };
            };
          };
        };
      };
      const body = create.requestBody.content["application/json"].schema;
      expect(Object.keys(body.properties)).toEqual(
        expect.arrayContaining(["id", "handler", "trigger", "retry", "overlap", "misfire"]),
      );
      expect(body.required).toEqual(expect.arrayContaining(["id", "handler", "trigger"]));
      const list = doc.paths["/api/executions"]?.get as {
        parameters: { name: string; in: string }[];
      };
      expect(list.parameters.map((p) => p.name).sort()).toEqual(
        ["agent", "cursor", "from", "job", "kind", "limit", "state", "to"].sort(),
      );
      // The routes that make executions take an Idempotency-Key.
      for (const [path, method] of [
        ["/api/commands", "post"],
        ["/api/jobs/{id}/trigger", "post"],
        ["/api/executions/{id}/retry", "post"],
      ] as const) {
        const op = doc.paths[path]?.[method] as { parameters: { name: string; in: string }[] };
        expect(op.parameters).toContainEqual(
          expect.objectContaining({ name: "Idempotency-Key", in: "header" }),
        );
      }
    });
  });
});
