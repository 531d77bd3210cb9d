import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../../test/helpers/env.js";
import { type HandlerContext, HandlerFailure } from "../handlers/registry.js";
import type * as Installer from "./installer.js";
import { Updater } from "./updater.js";

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

const TARGET = { platform: "linux", arch: "x64", libc: "glibc", nodeAbi: 115 };

function context(executionId: string): HandlerContext {
  return {
    executionId,
    attempt: 1,
    round: 1,
    shard: undefined,
    signal: new AbortController().signal,
    progress: () => {},
    log: () => {},
  };
}

/**
 * One update at a time on a device: two rollouts reaching it together must not download to one
 * file and install into one slot over each other. The download is held open (a network transfer
 * in progress, not something this test can make real), so the second arrives during the first.
 */
describe("agent.update: one at a time", () => {
  it("fails a second update while one is downloading, retryable, and takes one again after it ends", async () => {
    const t = tempDir("ax-updater-");
    cleanup = t.cleanup;
    for (const slot of ["a", "b"]) {
      mkdirSync(join(t.dir, slot));
      writeFileSync(join(t.dir, slot, "agent.mjs"), `// ${slot}\n`);
    }
    symlinkSync("a", join(t.dir, "current"));
    const downloads: { id: string; fail: (err: Error) => void }[] = [];
    const installer = {
      download: (_p: unknown, o: { signal: AbortSignal }) =>
        new Promise<never>((_resolve, reject) => {
          downloads.push({ id: String(downloads.length + 1), fail: reject });
          o.signal.addEventListener("abort", () => reject(new Error("aborted")));
        }),
    } as unknown as typeof Installer;
    const updater = new Updater({
      root: t.dir,
      self: join(t.dir, "a", "agent.mjs"),
      installer: async () => installer,
      agentId: "a1",
      key: Buffer.alloc(32),
      generation: 1,
      bundlePublicKey: "",
      version: "1.0.0",
      target: TARGET,
      coordNow: () => Date.now(),
      restart: () => {},
      log: () => {},
    });
    const params = {
      sha256: "f".repeat(64),
      url: "http://127.0.0.1:1/api/bundles/x/archive",
      bytes: 1000,
      version: "2.0.0",
      profile: "sensor-hub",
      target: TARGET,
    };
    const first = updater.handler.run(context("ex-1"), params);
    first.catch(() => {});
    await new Promise((r) => setTimeout(r, 10));
    expect(downloads).toHaveLength(1);
    const second = updater.handler.run(context("ex-2"), params);
    await expect(second).rejects.toThrow("another update (ex-1) is in progress on this device");
    await expect(second).rejects.toSatisfy((e) => e instanceof HandlerFailure && e.retryable);
    expect(downloads).toHaveLength(1);
    // The first ends (its download failed): the next update is taken.
    downloads[0]?.fail(new Error("connection reset"));
    await expect(first).rejects.toThrow("connection reset");
    const third = updater.handler.run(context("ex-3"), params);
    third.catch(() => {});
    await new Promise((r) => setTimeout(r, 10));
    expect(downloads).toHaveLength(2);
    downloads[1]?.fail(new Error("done"));
    await expect(third).rejects.toThrow("done");
  });
});
