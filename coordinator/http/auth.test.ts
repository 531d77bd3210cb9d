import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { tempDir } from "../../test/helpers/env.js";
import { authorize, resolveAuth } from "./auth.js";

const READ = "read-token-0123456789";
const OPERATE = "operate-token-0123456789";

describe("HTTP auth", () => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => {
    tmp = tempDir();
  });
  afterEach(() => tmp.cleanup());

  const auth = () =>
    resolveAuth({
      tokens: [
        { token: READ, role: "read" },
        { token: OPERATE, role: "operate" },
      ],
    });

  it("lets a read token read and refuses it an operation; an operate token may do both", () => {
    const a = auth();
    expect(() => authorize(a, `Bearer ${READ}`, "read")).not.toThrow();
    expect(() => authorize(a, `Bearer ${OPERATE}`, "read")).not.toThrow();
    expect(() => authorize(a, `Bearer ${OPERATE}`, "operate")).not.toThrow();
    expect(() => authorize(a, `bearer  ${OPERATE}`, "operate")).not.toThrow();
    expect(() => authorize(a, `Bearer ${READ}`, "operate")).toThrow(
      expect.objectContaining({
        code: "AX_API_FORBIDDEN",
        message: "this operation needs a token with the operate role; this one has read",
      }),
    );
  });

  it("refuses a missing, malformed, unknown or truncated token with AX_API_UNAUTHORIZED", () => {
    const a = auth();
    for (const [header, message] of [
      [undefined, "this route needs a bearer token (Authorization: Bearer …)"],
      [`Basic ${READ}`, "the Authorization header is not a bearer token"],
      ["Bearer", "the Authorization header is not a bearer token"],
      [`Bearer ${READ.slice(0, -1)}`, "unknown bearer token"],
      [`Bearer ${READ}x`, "unknown bearer token"],
    ] as const) {
      expect(() => authorize(a, header, "read"), String(header)).toThrow(
        expect.objectContaining({ code: "AX_API_UNAUTHORIZED", message }),
      );
    }
  });

  it("lets anyone through public routes, and everywhere when auth is off", () => {
    expect(() => authorize(auth(), undefined, "public")).not.toThrow();
    expect(() => authorize("off", undefined, "operate")).not.toThrow();
  });

  it("reads a token file, trimmed, and names a file it cannot read or a short token", () => {
    const file = join(tmp.dir, "token");
    writeFileSync(file, `  ${OPERATE}\n`);
    const a = resolveAuth({ tokens: [{ tokenFile: file, role: "operate" }] });
    expect(() => authorize(a, `Bearer ${OPERATE}`, "operate")).not.toThrow();

    const missing = join(tmp.dir, "missing");
    expect(() => resolveAuth({ tokens: [{ tokenFile: missing, role: "read" }] })).toThrow(
      expect.objectContaining({
        code: "AX_CONFIG_READ",
        message: expect.stringContaining(`${missing}: cannot read token file: ENOENT`),
      }),
    );
    writeFileSync(file, "short\n");
    expect(() =>
      resolveAuth({
        tokens: [
          { token: READ, role: "read" },
          { tokenFile: file, role: "read" },
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
