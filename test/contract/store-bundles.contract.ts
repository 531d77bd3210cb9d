import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sha256 } from "../../coordinator/bundle/manifest.js";
import type { BundleRecord } from "../../coordinator/domain/bundle.js";
import type { Store } from "../../coordinator/store/port.js";

/**
 * Published bundles as part of the Store contract: put once, read back byte for byte, listed
 * newest first in keyset pages, by profile. Called inside `storeContract` with its fresh store
 * and, where the adapter can, a second store on the same database.
 */
export function bundlesContract(
  current: () => Store,
  another: () => Promise<Store> | undefined,
): void {
  /** A record of `archive` (random bytes unless given), published at `publishedAt`. */
  function bundle(
    publishedAt: number,
    over: Partial<BundleRecord> = {},
    archive: Buffer = randomBytes(64 + (publishedAt % 97)),
  ): { record: BundleRecord; archive: Buffer } {
    return {
      record: {
        sha256: sha256(archive),
        profile: "sensor-hub",
        version: "0.1.0",
        target: { platform: "linux", arch: "arm64", libc: "glibc", nodeAbi: 115 },
        bytes: archive.length,
        agentSha256: "a".repeat(64),
        keyId: "0123456789abcdef",
        builtAt: 1_000.5,
        publishedAt,
        publishedBy: "ops",
        ...over,
      },
      archive,
    };
  }

  describe("published bundles", () => {
    it("puts a bundle once, reads back its record and its exact bytes", async () => {
      const store = current();
      // Every byte value, and a NUL: the archive is binary, not text.
      const archive = Buffer.concat([Buffer.from([0, 255, 0, 1]), randomBytes(70_000)]);
      const b = bundle(
        2_000,
        { target: { platform: "linux", arch: "x64", libc: "musl", nodeAbi: null } },
        archive,
      );
      expect(await store.putBundle(b.record, b.archive)).toBe(true);
      expect(await store.getBundle(b.record.sha256)).toEqual(b.record);
      const read = await store.readBundleArchive(b.record.sha256);
      expect(Buffer.isBuffer(read)).toBe(true);
      expect(read?.equals(archive)).toBe(true);
    });

    it("refuses the same sha256 again, changing nothing", async () => {
      const store = current();
      const b = bundle(2_000);
      expect(await store.putBundle(b.record, b.archive)).toBe(true);
      const again = { ...b.record, publishedAt: 9_000, publishedBy: "someone-else", profile: "x" };
      expect(await store.putBundle(again, Buffer.from("other bytes"))).toBe(false);
      expect(await store.getBundle(b.record.sha256)).toEqual(b.record);
      expect((await store.readBundleArchive(b.record.sha256))?.equals(b.archive)).toBe(true);
      expect((await store.pageBundles({ limit: 10 })).items).toHaveLength(1);
    });

    it("answers undefined for a sha256 never published", async () => {
      const store = current();
      expect(await store.getBundle("f".repeat(64))).toBeUndefined();
      expect(await store.readBundleArchive("f".repeat(64))).toBeUndefined();
      expect(await store.pageBundles({ limit: 10 })).toEqual({ items: [] });
    });

    it("pages bundles newest published first, by profile, without repeats or gaps", async () => {
      const store = current();
      const all = [
        bundle(1_000),
        bundle(3_000, { profile: "gateway" }),
        bundle(2_000),
        // Two at the same time: sha256 orders them, descending.
        bundle(2_000, { profile: "gateway" }),
        bundle(4_000),
      ];
      for (const b of all) expect(await store.putBundle(b.record, b.archive)).toBe(true);
      const expected = all
        .map((b) => b.record)
        .sort((a, b) =>
          a.publishedAt !== b.publishedAt
            ? b.publishedAt - a.publishedAt
            : a.sha256 < b.sha256
              ? 1
              : -1,
        );
      const seen: BundleRecord[] = [];
      let cursor: string | undefined;
      for (let i = 0; i < 10; i++) {
        const page = await store.pageBundles({ limit: 2, ...(cursor ? { cursor } : {}) });
        expect(page.items.length).toBeLessThanOrEqual(2);
        seen.push(...page.items);
        if (page.next === undefined) break;
        cursor = page.next;
      }
      expect(seen).toEqual(expected);
      const gateway = await store.pageBundles({ limit: 10, profile: "gateway" });
      expect(gateway.items).toEqual(expected.filter((r) => r.profile === "gateway"));
      expect(gateway.next).toBeUndefined();
    });

    it("refuses a malformed cursor with AX_STORE_BAD_CURSOR", async () => {
      await expect(
        current().pageBundles({ limit: 2, cursor: "not-a-cursor!" }),
      ).rejects.toMatchObject({ code: "AX_STORE_BAD_CURSOR" });
    });

    it("a second store on the same database sees what was published", async (ctx) => {
      const open = another();
      if (open === undefined) return ctx.skip();
      const b = bundle(5_000);
      const store = current();
      expect(await store.putBundle(b.record, b.archive)).toBe(true);
      await store.flush();
      const other = await open;
      expect(await other.getBundle(b.record.sha256)).toEqual(b.record);
      expect((await other.readBundleArchive(b.record.sha256))?.equals(b.archive)).toBe(true);
      expect(await other.putBundle(b.record, b.archive)).toBe(false);
    });
  });
}
