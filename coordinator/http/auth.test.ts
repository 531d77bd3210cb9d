import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { tempDir } from "../../test/helpers/env.js";
import { httpConfigSchema } from "../config.js";
import { tokenDigest } from "../security/api-tokens.js";
import { authorize, resolveAuth } from "./auth.js";

const READ = "read-token-0123456789";
const OPERATE = "operate-token-0123456789";

describe("HTTP auth", () => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => {
    tmp = tempDir();
  });
  afterEach(() => tmp.cleanup());

  const ADMIN = "admin-token-0123456789";
  const auth = () =>
    resolveAuth({
      tokens: [
        { token: READ, role: "viewer" },
        { token: OPERATE, role: "operator", name: "ops" },
        { token: ADMIN, role: "admin" },
      ],
    });

  it("ranks viewer < operator < admin and names the role needed and the token's", () => {
    const a = auth();
    expect(authorize(a, `Bearer ${READ}`, "viewer")).toEqual({
      name: "config-token-0",
      role: "viewer",
    });
    expect(authorize(a, `Bearer ${OPERATE}`, "viewer")).toEqual({ name: "ops", role: "operator" });
    expect(authorize(a, `bearer  ${OPERATE}`, "operator").name).toBe("ops");
    expect(authorize(a, `Bearer ${ADMIN}`, "admin").role).toBe("admin");
    expect(() => authorize(a, `Bearer ${READ}`, "operator")).toThrow(
      expect.objectContaining({
        code: "AX_API_FORBIDDEN",
        message:
          'this operation needs a token with the operator role; this one ("config-token-0") has viewer',
      }),
    );
    expect(() => authorize(a, `Bearer ${OPERATE}`, "admin")).toThrow(
      expect.objectContaining({
        code: "AX_API_FORBIDDEN",
        message: 'this operation needs a token with the admin role; this one ("ops") has operator',
      }),
    );
  });

  it("asks the lookup for a token the config does not hold", () => {
    const a = resolveAuth(
      { tokens: [] },
      {
        verify: (d) =>
          d.equals(tokenDigest("looked-up-0123456789"))
            ? { name: "x", role: "operator" }
            : undefined,
      },
    );
    expect(authorize(a, "Bearer looked-up-0123456789", "operator")).toEqual({
      name: "x",
      role: "operator",
    });
    expect(() => authorize(a, `Bearer ${READ}`, "viewer")).toThrow(
      expect.objectContaining({ code: "AX_API_UNAUTHORIZED" }),
    );
  });

  it("reads the deprecated roles read and operate as viewer and operator", () => {
    const parsed = httpConfigSchema.parse({
      auth: {
        tokens: [
          { token: READ, role: "viewer" },
          { token: OPERATE, role: "operate" },
        ],
      },
    });
    expect(parsed.auth === "off" ? [] : parsed.auth.tokens.map((t) => t.role)).toEqual([
      "viewer",
      "operator",
    ]);
  });

  it("refuses a missing, malformed, unknown or truncated token with AX_API_UNAUTHORIZED", () => {
    const a = auth();
    for (const [header, message] of [
      [undefined, "this route needs a bearer token (Authorization: Bearer …)"],
      [`Basic ${READ}`, "the Authorization header is not a bearer token"],
      ["Bearer", "the Authorization header is not a bearer token"],
      [`Bearer ${READ.slice(0, -1)}`, "unknown or revoked bearer token"],
      [`Bearer ${READ}x`, "unknown or revoked bearer token"],
    ] as const) {
      expect(() => authorize(a, header, "viewer"), String(header)).toThrow(
        expect.objectContaining({ code: "AX_API_UNAUTHORIZED", message }),
      );
    }
  });

  it("lets anyone through public routes, and everywhere when auth is off", () => {
    expect(authorize(auth(), undefined, "public").name).toBe("public");
    expect(authorize("off", undefined, "admin")).toEqual({ name: "anonymous", role: "admin" });
  });

  it("reads a token file, trimmed, and names a file it cannot read or a short token", () => {
    const file = join(tmp.dir, "token");
    writeFileSync(file, `  ${OPERATE}\n`, { mode: 0o644 });
    chmodSync(file, 0o644);
    // A token file others can read is anyone's on the host: refused, as the CLI refuses it.
    expect(() => resolveAuth({ tokens: [{ tokenFile: file, role: "operator" }] })).toThrow(
      expect.objectContaining({
        code: "AX_SECURITY_KEY",
        message: `http.auth.tokens.0.tokenFile: ${file}: is readable by others (mode 644); run chmod 600 ${file}`,
      }),
    );
    chmodSync(file, 0o600);
    const a = resolveAuth({ tokens: [{ tokenFile: file, role: "operator" }] });
    expect(() => authorize(a, `Bearer ${OPERATE}`, "operator")).not.toThrow();

    const missing = join(tmp.dir, "missing");
    expect(() => resolveAuth({ tokens: [{ tokenFile: missing, role: "viewer" }] })).toThrow(
      expect.objectContaining({
        code: "AX_CONFIG_READ",
        message: expect.stringContaining(`${missing}: cannot read token file: ENOENT`),
      }),
    );
    writeFileSync(file, "short\n");
    expect(() =>
      resolveAuth({
        tokens: [
          { token: READ, role: "viewer" },
          { tokenFile: file, role: "viewer" },
        ],
      }),
    ).toThrow(
      expect.objectContaining({
        code: "AX_CONFIG_INVALID",
        message: `http.auth.tokens.1.tokenFile: ${file} must hold a token of at least 16 characters`,
      }),
    );
  });
});
