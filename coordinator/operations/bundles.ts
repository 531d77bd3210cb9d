import { createPublicKey } from "node:crypto";
import { AxError } from "../../shared/errors.js";
import {
  BUNDLE_AUTH_SKEW_MS,
  type BundleAuth,
  MAX_BUNDLE_BYTES,
  nativeTargetSchema,
  verifyBundleAuth,
} from "../../shared/update.js";
import { IDENTITY_FILE } from "../bundle/identity.js";
import { MANIFEST_FILE, sha256 } from "../bundle/manifest.js";
import { keyIdOf, SIGNATURE_FILE, type TrustedKey } from "../bundle/signature.js";
import { verifyArchive } from "../bundle/verify.js";
import type { BundlePage, BundleRecord } from "../domain/bundle.js";
import type { Identities } from "../security/identities.js";
import type { Secrets } from "../security/secrets.js";
import type { Store } from "../store/port.js";

/** How the archive is named in problems: what `ax bundle build` calls it. */
const ARCHIVE = "NAME.tar.gz";

/** A page of published bundles as the API lists it; `nextCursor` is null on the last page. */
export interface BundleList {
  items: BundleRecord[];
  nextCursor: string | null;
}

function notFound(sha: string): AxError {
  return new AxError("AX_BUNDLE_NOT_FOUND", `no published bundle has sha256 ${sha}`, {
    context: { sha256: sha },
  });
}

/**
 * A refused archive: every problem, one a line, each naming the file (or manifest field) and
 * what is wrong; also as issues, by file, for the API's error body.
 */
function invalid(problems: string[]): AxError {
  return new AxError("AX_BUNDLE_INVALID", `bundle refused:\n${problems.join("\n")}`, {
    context: {
      problems,
      issues: problems.map((p) => {
        const colon = p.indexOf(": ");
        return colon === -1
          ? { path: ["body"], message: p }
          : { path: [p.slice(0, colon)], message: p.slice(colon + 2) };
      }),
    },
  });
}

function unauthorized(message: string, agentId?: string): AxError {
  return new AxError("AX_API_UNAUTHORIZED", message, {
    ...(agentId === undefined ? {} : { context: { agentId } }),
  });
}

/**
 * Published bundles (docs/bundles.md, "Publishing a bundle"): an operator publishes a built,
 * signed bundle's archive; the coordinator checks it against its own bundle key and serves it to
 * agents by its sha256 for `agent.update`. The API and the CLI come here.
 */
export class BundleOperations {
  private readonly trusted: TrustedKey;
  private readonly keyId: string;

  constructor(
    private readonly store: Store,
    secrets: Secrets,
    private readonly identities: Identities,
    /** The coordinator's clock, UTC ms. */
    private readonly now: () => number,
  ) {
    this.trusted = {
      key: createPublicKey(secrets.bundleKey),
      source: "this coordinator's bundle-signing key",
    };
    this.keyId = keyIdOf(this.trusted.key);
  }

  /**
   * Checks `archive` (a bundle's NAME.tar.gz) and publishes it by its sha256 as `actor`. Refuses
   * with AX_BUNDLE_INVALID anything that is not a gzipped tar of one bundle folder, has no valid
   * manifest, is unsigned, is not signed by this coordinator's bundle key, has a file that does
   * not match the manifest, or holds an agent's identity. Idempotent: publishing the same bytes
   * again answers the bundle published first, with `created` false.
   */
  async publish(
    archive: Buffer,
    actor: string,
  ): Promise<{ created: boolean; bundle: BundleRecord }> {
    if (archive.length === 0) {
      throw invalid([`body: empty: send the bytes of the bundle's ${ARCHIVE}`]);
    }
    if (archive.length > MAX_BUNDLE_BYTES) {
      throw invalid([`body: ${archive.length} bytes, more than the ${MAX_BUNDLE_BYTES} allowed`]);
    }
    // gzip's magic bytes (RFC 1952 §2.3.1): a clearer answer than zlib's "incorrect header check".
    if (archive[0] !== 0x1f || archive[1] !== 0x8b) {
      throw invalid([
        `body: not a gzip file: send the bundle's ${ARCHIVE}, as ax bundle build wrote it`,
      ]);
    }
    const r = verifyArchive(archive, ARCHIVE, { trusted: this.trusted });
    const problems = [...r.problems];
    const m = r.manifest;
    if (m?.unsigned === true) {
      problems.unshift(
        `${MANIFEST_FILE}: unsigned: a development build (ax bundle build --unsigned) cannot be published`,
      );
    }
    if (r.identityAgentId !== undefined) {
      // Every agent may download a published bundle: one agent's key must not go with it.
      problems.push(
        `${IDENTITY_FILE}: the bundle holds agent ${r.identityAgentId}'s identity (built with --identity); publish a build without one`,
      );
    }
    const target = m && { ...m.target, nodeAbi: m.node.abi };
    if (m && target) {
      const t = nativeTargetSchema.safeParse(target);
      if (!t.success) {
        for (const i of t.error.issues) {
          const field =
            i.path[0] === "nodeAbi" ? "node.abi" : `target.${i.path.map(String).join(".")}`;
          problems.push(`${MANIFEST_FILE}: ${field}: ${i.message}`);
        }
      }
      if (m.profile.name.length > 64) {
        problems.push(`${MANIFEST_FILE}: profile.name: longer than 64 characters`);
      }
      if (m.ax.version.length > 64) {
        problems.push(`${MANIFEST_FILE}: ax.version: longer than 64 characters`);
      }
    }
    if (problems.length > 0 || m === undefined || target === undefined) {
      throw invalid(problems.length > 0 ? problems : [`${MANIFEST_FILE}: missing`]);
    }
    if (r.signature !== "valid") {
      // verifyArchive lists a missing or bad signature among the problems; this is a guard.
      throw invalid([`${SIGNATURE_FILE}: the signature was not checked`]);
    }
    const record: BundleRecord = {
      sha256: sha256(archive),
      profile: m.profile.name,
      version: m.ax.version,
      target,
      bytes: archive.length,
      agentSha256: (m.files[m.agent] as { sha256: string }).sha256,
      keyId: this.keyId,
      builtAt: Date.parse(m.builtAt),
      publishedAt: this.now(),
      publishedBy: actor,
    };
    if (await this.store.putBundle(record, archive)) {
      await this.store.flush();
      return { created: true, bundle: record };
    }
    const existing = await this.store.getBundle(record.sha256);
    if (existing === undefined) throw notFound(record.sha256);
    return { created: false, bundle: existing };
  }

  /** A published bundle's record; AX_BUNDLE_NOT_FOUND when there is none. */
  async get(sha: string): Promise<BundleRecord> {
    const b = await this.store.getBundle(sha);
    if (b === undefined) throw notFound(sha);
    return b;
  }

  /** Published bundles, newest first, optionally of one profile, in pages. */
  async list(query: { limit: number; cursor?: string; profile?: string }): Promise<BundleList> {
    const page: BundlePage = await this.store.pageBundles(query);
    return { items: page.items, nextCursor: page.next ?? null };
  }

  /** A published bundle's record and archive bytes; AX_BUNDLE_NOT_FOUND when there is none. */
  async archive(sha: string): Promise<{ bundle: BundleRecord; archive: Buffer }> {
    const bundle = await this.store.getBundle(sha);
    const archive = bundle && (await this.store.readBundleArchive(sha));
    if (bundle === undefined || archive === undefined) throw notFound(sha);
    return { bundle, archive };
  }

  /**
   * Checks an agent's `AX-Agent` request for the archive `sha` (shared/update.ts): the agent is
   * enrolled and not revoked, `kid` is its current key generation, `at` is within
   * BUNDLE_AUTH_SKEW_MS of the coordinator's clock, and the tag verifies with its current
   * message key. Returns the agent's id; throws AX_API_UNAUTHORIZED otherwise.
   */
  authorizeAgent(auth: BundleAuth, sha: string): string {
    const { agentId } = auth;
    const key = this.identities.keyOf(agentId);
    if (key === undefined) {
      throw unauthorized(
        `agent "${agentId}" is not enrolled, or its enrolment is revoked`,
        agentId,
      );
    }
    if (auth.kid !== key.generation) {
      throw unauthorized(
        `agent "${agentId}": key generation ${auth.kid} is not its current one`,
        agentId,
      );
    }
    const skew = auth.at - this.now();
    if (Math.abs(skew) > BUNDLE_AUTH_SKEW_MS) {
      throw unauthorized(
        `agent "${agentId}": the request's time (at ${auth.at}) is ${Math.round(Math.abs(skew) / 1000)} s ${skew < 0 ? "behind" : "ahead of"} the coordinator's clock; at most ${BUNDLE_AUTH_SKEW_MS / 1000} s is accepted`,
        agentId,
      );
    }
    if (!verifyBundleAuth(auth, key.key, sha)) {
      throw unauthorized(
        `agent "${agentId}": the tag does not verify with its current key for this archive`,
        agentId,
      );
    }
    return agentId;
  }
}
