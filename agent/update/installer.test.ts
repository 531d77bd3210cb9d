import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../test/helpers/env.js";
import { download, InstallFailure } from "./installer.js";

const tmp = tempDir("ax-installer-");
afterAll(() => tmp.cleanup());

describe("download", () => {
  it("refuses, before install and for good, an archive of the announced size whose sha256 differs", async () => {
    const root = join(tmp.dir, "root");
    const wanted = randomBytes(1000);
    const sha256 = createHash("sha256").update(wanted).digest("hex");
    // Bytes of the right size already there: nothing to fetch, and they are not the bundle.
    mkdirSync(join(root, "downloads"), { recursive: true });
    const part = join(root, "downloads", `${sha256}.tar.gz`);
    writeFileSync(part, randomBytes(1000));
    const err = await download(
      { sha256, url: "http://127.0.0.1:1/never", bytes: 1000, version: "9.9.9", profile: "p" },
      {
        root,
        agentId: "a1",
        key: randomBytes(32),
        generation: 1,
        coordNow: () => Date.now(),
        signal: new AbortController().signal,
        log: () => {},
      },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InstallFailure);
    expect((err as InstallFailure).message).toMatch(
      /^refused before install: the archive's sha256 is [0-9a-f]{12}…, the command names [0-9a-f]{12}…$/,
    );
    expect((err as InstallFailure).retryable).toBe(false);
    // The bad bytes are not kept to be resumed from.
    expect(existsSync(part)).toBe(false);
  });
});
