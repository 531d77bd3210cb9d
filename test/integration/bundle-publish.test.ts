import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type MadeBundle, makeBundle } from "../../coordinator/bundle/make.js";
import { sha256 } from "../../coordinator/bundle/manifest.js";
import { keyIdOf, signManifest } from "../../coordinator/bundle/signature.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import type { BundleRecord } from "../../coordinator/domain/bundle.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import { readTarGz, type TarEntry, tarGz } from "../../shared/tar.js";
import { BUNDLE_AUTH_SKEW_MS, bundleAuthorization, MAX_BUNDLE_BYTES } from "../../shared/update.js";
import {
  runAx,
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
} from "../helpers/env.js";
import { type Answer, call, errorOf } from "../helpers/http.js";

const VIEWER = "viewer-token-0123456789";
const OPERATOR = "operator-token-0123456789";

/**
 * Publishing bundles (docs/bundles.md, "Publishing a bundle") against a real coordinator and HTTP
 * server: one sensor-hub bundle built for real and signed with the coordinator's own bundle key,
 * then copies of its archive changed one way each in memory; agents download it with their
 * message key (shared/update.ts), resuming with Range. Ends with `ax bundle publish` as a child
 * process.
 */
describe("published bundles", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let admin: string;
  let made: MadeBundle;
  let archive: Buffer;
  let entries: TarEntry[];
  let sha: string;

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir("ax-bundle-publish-");
    coordinator = await startTestCoordinator(broker, tmp.dir, 1_000);
    http = await startHttpServer(coordinator, {
      port: 0,
      auth: {
        tokens: [
          { token: VIEWER, role: "viewer", name: "dashboard" },
          { token: OPERATOR, role: "operator", name: "ops" },
        ],
      },
    });
    admin = readFileSync(join(tmp.dir, "ax-secrets", "admin.token"), "utf8").trim();
    made = await makeBundle({
      profile: "sensor-hub",
      outDir: join(tmp.dir, "bundles"),
      signingKey: coordinator.secrets.bundleKey,
    });
    archive = readFileSync(made.archive);
    entries = readTarGz(archive);
    sha = sha256(archive);
  }, 180_000);

  afterAll(async () => {
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  /** POSTs `body` to /api/bundles as application/gzip (unless told otherwise). */
  const post = (body: Buffer, token: string | null = OPERATOR, type = "application/gzip") =>
    fetch(`${http.url}/api/bundles`, {
      method: "POST",
      headers: {
        "content-type": type,
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
      },
      body,
    }).then(async (res) => ({ status: res.status, body: (await res.json()) as unknown }));

  const expectError = (a: { status: number; body: unknown }, status: number, code: string) => {
    expect(a.status, JSON.stringify(a.body)).toBe(status);
    const e = (a.body as { error: { code: string; message: string } }).error;
    expect(e.code).toBe(code);
    return e.message;
  };

  const file = (name: string) => {
    const e = entries.find((x) => x.name === `sensor-hub/${name}`);
    if (!e) throw new Error(`no ${name} in the archive`);
    return e.data;
  };

  /**
   * A copy of the archive with `change` applied to its files (by name in the folder) and its
   * manifest, re-signed with `key` (this coordinator's unless given; null: manifest.sig dropped).
   */
  function variant(
    change: {
      files?: (files: Map<string, Buffer>) => void;
      manifest?: (m: Record<string, unknown>) => void;
    },
    key: KeyObject | null = coordinator.secrets.bundleKey,
  ): Buffer {
    const files = new Map(
      entries.filter((e) => !e.name.endsWith("/")).map((e) => [e.name.slice(11), e.data]),
    );
    change.files?.(files);
    if (change.manifest) {
      const m = JSON.parse(file("manifest.json").toString("utf8")) as Record<string, unknown>;
      change.manifest(m);
      files.set("manifest.json", Buffer.from(`${JSON.stringify(m, null, 2)}\n`));
    }
    files.delete("manifest.sig");
    if (key !== null) {
      files.set(
        "manifest.sig",
        Buffer.from(signManifest(files.get("manifest.json") as Buffer, key)),
      );
    }
    return tarGz(
      [
        { name: "sensor-hub/", data: Buffer.alloc(0) },
        ...[...files].map(([name, data]) => ({ name: `sensor-hub/${name}`, data })),
      ],
      new Date(0),
    );
  }

  describe("POST /api/bundles", () => {
    it("refuses a token without the operator role, and a request without one", async () => {
      expectError(await post(archive, VIEWER), 403, "AX_API_FORBIDDEN");
      expectError(await post(archive, null), 401, "AX_API_UNAUTHORIZED");
      expect(await coordinator.bundles.list({ limit: 10 })).toEqual({
        items: [],
        nextCursor: null,
      });
    });

    it("publishes a signed bundle: 201 with its record, then 200 with the same record", async () => {
      const first = await post(archive);
      expect(first.status, JSON.stringify(first.body)).toBe(201);
      const m = made.manifest;
      const record = first.body as BundleRecord;
      expect(record).toEqual({
        sha256: sha,
        profile: "sensor-hub",
        version: m.ax.version,
        target: { ...m.target, nodeAbi: m.node.abi },
        bytes: archive.length,
        agentSha256: m.files[m.agent]?.sha256,
        keyId: keyIdOf(coordinator.secrets.bundleKey),
        builtAt: Date.parse(m.builtAt),
        publishedAt: expect.any(Number),
        publishedBy: "ops",
      });
      const again = await post(archive, admin, "application/octet-stream");
      expect(again.status).toBe(200);
      expect(again.body).toEqual(record);
    });

    it("refuses an unsigned build, naming the manifest field and the missing signature", async () => {
      const unsigned = variant({ manifest: (m) => Object.assign(m, { unsigned: true }) }, null);
      const message = expectError(await post(unsigned), 400, "AX_BUNDLE_INVALID");
      expect(message).toBe(
        "bundle refused:\n" +
          "manifest.json: unsigned: a development build (ax bundle build --unsigned) cannot be published\n" +
          "manifest.sig: missing: the bundle is unsigned",
      );
      // Each issue's path is the file (docs/api.md): manifest.json, then manifest.sig.
      expect(errorOf((await post(unsigned)) as Answer).paths).toEqual([
        "manifest.json",
        "manifest.sig",
      ]);
      const noSig = variant({}, null);
      expect(expectError(await post(noSig), 400, "AX_BUNDLE_INVALID")).toBe(
        "bundle refused:\nmanifest.sig: missing: the bundle is unsigned",
      );
    });

    it("refuses a bundle signed with another key", async () => {
      const other = generateKeyPairSync("ed25519").privateKey;
      const r = await post(variant({}, other));
      const message = expectError(r, 400, "AX_BUNDLE_INVALID");
      expect(message).toBe(
        `bundle refused:\nmanifest.sig: signature does not verify with key ${keyIdOf(coordinator.secrets.bundleKey)} (this coordinator's bundle-signing key): the bundle was signed with key ${keyIdOf(other)}`,
      );
      expect(errorOf(r as Answer).paths).toEqual(["manifest.sig"]);
    });

    it("refuses a file changed after signing, naming it", async () => {
      const agent = made.manifest.agent;
      const tampered = variant({
        files: (f) => f.set(agent, Buffer.concat([f.get(agent) as Buffer, Buffer.from("//x")])),
      });
      const message = expectError(await post(tampered), 400, "AX_BUNDLE_INVALID");
      const bytes = made.manifest.files[agent]?.bytes as number;
      expect(message).toContain(`${agent}: ${bytes + 3} bytes, the manifest says ${bytes}`);
      expect(message).toMatch(new RegExp(`${agent}: sha256 [0-9a-f]{12}…, the manifest says`));
    });

    it("refuses a manifest that fails its schema, and an archive without one", async () => {
      const bad = variant({ manifest: (m) => Object.assign(m, { format: 2 }) });
      expect(expectError(await post(bad), 400, "AX_BUNDLE_INVALID")).toMatch(
        /^bundle refused:\nmanifest\.json: format: /,
      );
      const none = variant({ files: (f) => f.delete("manifest.json") }, null);
      expect(expectError(await post(none), 400, "AX_BUNDLE_INVALID")).toBe(
        "bundle refused:\nmanifest.json: missing",
      );
    });

    it("refuses a bundle that holds an agent's identity", async () => {
      const identity = Buffer.from(JSON.stringify({ ax: "agent-identity/1", agentId: "hub-1" }));
      const withIdentity = variant({
        files: (f) => f.set("ax-identity.json", identity),
        manifest: (m) => {
          (m.files as Record<string, unknown>)["ax-identity.json"] = {
            sha256: sha256(identity),
            bytes: identity.length,
          };
        },
      });
      expect(expectError(await post(withIdentity), 400, "AX_BUNDLE_INVALID")).toMatch(
        /^bundle refused:\nax-identity\.json: /,
      );
    });

    it("refuses what is not a gzipped tar", async () => {
      expect(expectError(await post(Buffer.from("hello")), 400, "AX_BUNDLE_INVALID")).toBe(
        "bundle refused:\nbody: not a gzip file: send the bundle's NAME.tar.gz, as ax bundle build wrote it",
      );
      expect(expectError(await post(gzipSync("hello")), 400, "AX_BUNDLE_INVALID")).toBe(
        "bundle refused:\nNAME.tar.gz: must hold one folder, holds nothing\nmanifest.json: missing",
      );
    });

    it("refuses a body sent as JSON or text: 415", async () => {
      const r = await post(archive, OPERATOR, "text/plain");
      expect(expectError(r, 415, "AX_API_UNSUPPORTED_MEDIA_TYPE")).toBe(
        'Content-Type header "text/plain" is not allowed: a request body must be sent as application/gzip or application/octet-stream',
      );
    });

    it("refuses a body over MAX_BUNDLE_BYTES: 413, before reading it", async () => {
      const r = await new Promise<{ status: number; body: unknown }>((resolve, reject) => {
        const req = request(`${http.url}/api/bundles`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${OPERATOR}`,
            "content-type": "application/gzip",
            "content-length": String(MAX_BUNDLE_BYTES + 1),
          },
        });
        req.once("response", (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            resolve({
              status: res.statusCode ?? 0,
              body: JSON.parse(Buffer.concat(chunks).toString()),
            });
            req.destroy();
          });
        });
        req.once("error", reject);
        req.write(Buffer.alloc(1024));
      });
      expectError(r, 413, "AX_API_TOO_LARGE");
    });
  });

  describe("GET /api/bundles and /api/bundles/{sha256}", () => {
    it("lists the published bundle (viewer), by profile, and shows it", async () => {
      const list = await call<{ items: BundleRecord[]; nextCursor: string | null }>(
        http.url,
        "GET",
        "/api/bundles",
        { token: VIEWER },
      );
      expect(list.status).toBe(200);
      expect(list.body.items.map((b) => b.sha256)).toEqual([sha]);
      expect(list.body.nextCursor).toBeNull();
      const none = await call<{ items: unknown[] }>(
        http.url,
        "GET",
        "/api/bundles?profile=gateway",
        {
          token: VIEWER,
        },
      );
      expect(none.body.items).toEqual([]);
      const show = await call<BundleRecord>(http.url, "GET", `/api/bundles/${sha}`, {
        token: VIEWER,
      });
      expect(show.status).toBe(200);
      expect(show.body).toEqual(list.body.items[0]);
    });

    it("answers 404 AX_BUNDLE_NOT_FOUND, 400 for a malformed sha256 or limit, 401 without a token", async () => {
      const missing = await call(http.url, "GET", `/api/bundles/${"0".repeat(64)}`, {
        token: VIEWER,
      });
      expect(missing.status).toBe(404);
      expect(errorOf(missing).message).toBe(`no published bundle has sha256 ${"0".repeat(64)}`);
      expect(errorOf(missing).code).toBe("AX_BUNDLE_NOT_FOUND");
      const bad = await call(http.url, "GET", "/api/bundles/ABC", { token: VIEWER });
      expect(bad.status).toBe(400);
      expect(errorOf(bad).paths).toEqual(["params.sha256"]);
      const limit = await call(http.url, "GET", "/api/bundles?limit=0", { token: VIEWER });
      expect(errorOf(limit).paths).toEqual(["query.limit"]);
      expect((await call(http.url, "GET", "/api/bundles")).status).toBe(401);
    });

    it("documents the routes in the OpenAPI document", async () => {
      const doc = await call<{ paths: Record<string, Record<string, Record<string, unknown>>> }>(
        http.url,
        "GET",
        "/api/openapi.json",
      );
      const post = doc.body.paths["/api/bundles"]?.post as {
        requestBody: { content: Record<string, unknown> };
        responses: Record<string, unknown>;
      };
      expect(Object.keys(post.requestBody.content)).toEqual([
        "application/gzip",
        "application/octet-stream",
      ]);
      expect(Object.keys(post.responses)).toEqual(
        expect.arrayContaining(["200", "201", "413", "415", "403"]),
      );
      expect(doc.body.paths["/api/bundles/{sha256}/archive"]?.get?.responses).toHaveProperty("416");
    });
  });

  describe("GET /api/bundles/{sha256}/archive", () => {
    const download = (headers: Record<string, string>, path = `/api/bundles/${sha}/archive`) =>
      fetch(`${http.url}${path}`, { headers }).then(async (res) => ({
        status: res.status,
        headers: res.headers,
        bytes: Buffer.from(await res.arrayBuffer()),
      }));
    const json = (b: Buffer) =>
      JSON.parse(b.toString("utf8")) as { error: { code: string; message: string } };

    /** Enrols `agentId` through the identities API; returns its message key and generation. */
    async function enrol(agentId: string, rotate = false) {
      const r = await call<{ file: { key: string; generation: number } }>(
        http.url,
        "POST",
        "/api/identities",
        { token: admin, body: { agentId, ...(rotate ? { rotate: true } : {}) } },
      );
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      return { key: Buffer.from(r.body.file.key, "base64url"), generation: r.body.file.generation };
    }

    it("serves the bytes to an operator token, with its type, ETag and Accept-Ranges", async () => {
      const r = await download({ authorization: `Bearer ${VIEWER}` });
      expect(r.status).toBe(200);
      expect(r.bytes.equals(archive)).toBe(true);
      expect(r.headers.get("content-type")).toBe("application/gzip");
      expect(r.headers.get("etag")).toBe(`"${sha}"`);
      expect(r.headers.get("accept-ranges")).toBe("bytes");
      expect(r.headers.get("content-length")).toBe(String(archive.length));
    });

    it("refuses a request with no credentials or a bad token: 401, never the bytes", async () => {
      const none = await download({});
      expect(none.status).toBe(401);
      expect(json(none.bytes).error.code).toBe("AX_API_UNAUTHORIZED");
      const bad = await download({ authorization: "Bearer not-a-token-0123456789" });
      expect(bad.status).toBe(401);
      const malformed = await download({ authorization: "AX-Agent dev-1 1.2.xyz" });
      expect(malformed.status).toBe(401);
      expect(json(malformed.bytes).error.message).toBe(
        "the Authorization header is not a valid AX-Agent header (AX-Agent <agentId> <kid>.<at>.<tag>)",
      );
    });

    it("serves an enrolled agent vouched for by its current message key", async () => {
      const { key, generation } = await enrol("dl-1");
      const r = await download({
        authorization: bundleAuthorization(key, generation, Date.now(), "dl-1", sha),
      });
      expect(r.status).toBe(200);
      expect(r.bytes.equals(archive)).toBe(true);
    });

    it("refuses an agent's request with a wrong tag, a stale time, an old key, or for another archive", async () => {
      const { key, generation } = await enrol("dl-2");
      const refused = async (authorization: string, message: string) => {
        const r = await download({ authorization });
        expect(r.status).toBe(401);
        const e = json(r.bytes).error;
        expect(e.code).toBe("AX_API_UNAUTHORIZED");
        expect(e.message).toBe(message);
      };
      const wrongKey = Buffer.alloc(32, 7);
      await refused(
        bundleAuthorization(wrongKey, generation, Date.now(), "dl-2", sha),
        'agent "dl-2": the tag does not verify with its current key for this archive',
      );
      await refused(
        bundleAuthorization(key, generation, Date.now(), "dl-2", "1".repeat(64)),
        'agent "dl-2": the tag does not verify with its current key for this archive',
      );
      const stale = Date.now() - BUNDLE_AUTH_SKEW_MS - 60_000;
      const r = await download({
        authorization: bundleAuthorization(key, generation, stale, "dl-2", sha),
      });
      expect(r.status).toBe(401);
      expect(json(r.bytes).error.message).toMatch(
        /^agent "dl-2": the request's time \(at \d+\) is 3\d\d s behind the coordinator's clock; at most 300 s is accepted$/,
      );
      const rotated = await enrol("dl-2", true);
      await refused(
        bundleAuthorization(key, generation, Date.now(), "dl-2", sha),
        `agent "dl-2": key generation ${generation} is not its current one`,
      );
      const ok = await download({
        authorization: bundleAuthorization(
          rotated.key,
          rotated.generation,
          Date.now(),
          "dl-2",
          sha,
        ),
      });
      expect(ok.status).toBe(200);
    });

    it("refuses an unknown agent and a revoked one", async () => {
      await expect(
        download({
          authorization: bundleAuthorization(Buffer.alloc(32), 1, Date.now(), "nobody", sha),
        }),
      ).resolves.toMatchObject({ status: 401 });
      const { key, generation } = await enrol("dl-3");
      const revoke = await call(http.url, "POST", "/api/identities/dl-3/revoke", { token: admin });
      expect(revoke.status).toBe(200);
      const r = await download({
        authorization: bundleAuthorization(key, generation, Date.now(), "dl-3", sha),
      });
      expect(r.status).toBe(401);
      expect(json(r.bytes).error.message).toBe(
        'agent "dl-3" is not enrolled, or its enrolment is revoked',
      );
    });

    it("resumes with Range: 206 with the tail, a closed range, a suffix; 416 past the end", async () => {
      const auth = { authorization: `Bearer ${VIEWER}` };
      const from = 1000;
      const tail = await download({ ...auth, range: `bytes=${from}-` });
      expect(tail.status).toBe(206);
      expect(tail.bytes.equals(archive.subarray(from))).toBe(true);
      expect(tail.headers.get("content-range")).toBe(
        `bytes ${from}-${archive.length - 1}/${archive.length}`,
      );
      expect(tail.headers.get("etag")).toBe(`"${sha}"`);
      const head = await download({ ...auth, range: "bytes=0-9" });
      expect(head.status).toBe(206);
      expect(head.bytes.equals(archive.subarray(0, 10))).toBe(true);
      const suffix = await download({ ...auth, range: "bytes=-5" });
      expect(suffix.bytes.equals(archive.subarray(archive.length - 5))).toBe(true);
      // Another archive's ETag in If-Range: the whole, as the part would not fit what was kept.
      const changed = await download({ ...auth, range: "bytes=10-", "if-range": '"other"' });
      expect(changed.status).toBe(200);
      expect(changed.bytes.equals(archive)).toBe(true);
      const past = await download({ ...auth, range: `bytes=${archive.length}-` });
      expect(past.status).toBe(416);
      expect(past.headers.get("content-range")).toBe(`bytes */${archive.length}`);
      expect(json(past.bytes).error.code).toBe("AX_API_RANGE_NOT_SATISFIABLE");
    });

    it("answers 404 for an archive never published", async () => {
      const r = await download(
        { authorization: `Bearer ${VIEWER}` },
        `/api/bundles/${"0".repeat(64)}/archive`,
      );
      expect(r.status).toBe(404);
      expect(json(r.bytes).error.code).toBe("AX_BUNDLE_NOT_FOUND");
    });
  });

  describe("ax bundle publish | published", () => {
    const env = () => ({ AX_URL: http.url, AX_TOKEN: OPERATOR });

    it("publishes a bundle folder's archive, or the archive itself, and says when it already was", async () => {
      // A fresh archive (other bytes, same signed files): a new sha256.
      const fresh = variant({});
      const path = join(tmp.dir, "fresh.tar.gz");
      writeFileSync(path, fresh);
      const first = await runAx(["bundle", "publish", path], env());
      expect(first.stderr).toBe("");
      expect(first.code).toBe(0);
      expect(first.stdout).toContain(`published: ${sha256(fresh)}\n`);
      expect(first.stdout).toContain(`profile sensor-hub, ax ${made.manifest.ax.version}, for `);
      const again = await runAx(["bundle", "publish", made.dir, "--json"], env());
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout)).toMatchObject({ sha256: sha, profile: "sensor-hub" });
      const text = await runAx(["bundle", "publish", made.dir], env());
      expect(text.stdout).toContain(`already published: ${sha}\n`);
    });

    it("lists the published bundles, by profile", async () => {
      const r = await runAx(["bundle", "published", "--json"], env());
      expect(r.code, r.stderr).toBe(0);
      const list = JSON.parse(r.stdout) as { items: BundleRecord[]; nextCursor: null };
      expect(list.items.map((b) => b.sha256)).toContain(sha);
      const table = await runAx(["bundle", "published", "--profile", "sensor-hub"], env());
      expect(table.code, table.stderr).toBe(0);
      expect(table.stdout).toContain(sha);
      const none = await runAx(["bundle", "published", "--profile", "gateway", "--json"], env());
      expect(JSON.parse(none.stdout).items).toEqual([]);
    });

    it("refuses a bad bundle with the API's code, and bad flags naming them", async () => {
      const bad = join(tmp.dir, "bad.tar.gz");
      writeFileSync(bad, variant({}, null));
      const r = await runAx(["bundle", "publish", bad], env());
      expect(r.code).toBe(1);
      expect(r.stderr).toContain("AX_BUNDLE_INVALID");
      expect(r.stderr).toContain("manifest.sig: missing: the bundle is unsigned");
      const missing = await runAx(["bundle", "publish", join(tmp.dir, "nope.tar.gz")], env());
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain("nope.tar.gz: no such file or folder");
      const flag = await runAx(["bundle", "publish", made.dir, "--fast"], env());
      expect(flag.code).toBe(2);
      expect(flag.stderr).toContain("--fast");
      const none = await runAx(["bundle", "publish"], env());
      expect(none.code).toBe(2);
      expect(none.stderr).toContain("bundle publish: give PATH");
      const limit = await runAx(["bundle", "published", "--limit", "0"], env());
      expect(limit.code).toBe(2);
      expect(limit.stderr).toContain("--limit must be a whole number from 1 to 500");
      const viewer = await runAx(["bundle", "publish", made.dir], { ...env(), AX_TOKEN: VIEWER });
      expect(viewer.code).toBe(1);
      expect(viewer.stderr).toContain("AX_API_FORBIDDEN");
    });
  });
});
