import { readFileSync, realpathSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { INSTALLER_FILE } from "../shared/update-limits.js";
import type { AgentDeps } from "./agent.js";
import type { AgentParts } from "./parts/types.js";
import { ROOT_ENV } from "./update/state.js";

/** True when the agent file is in an A/B slot's folder (`a` or `b`), links resolved. */
function inSlot(self: string): boolean {
  try {
    const slot = basename(dirname(realpathSync(self)));
    return slot === "a" || slot === "b";
  } catch {
    return false;
  }
}

/** The manifest written beside the agent by `ax bundle build`. */
const MANIFEST_FILE = "manifest.json";

/**
 * The sha256 of the agent file: as its manifest.json records it, when the manifest is there and
 * records the file's size; otherwise computed. Why not always computed: hashing needs node:crypto,
 * and loading it initialises OpenSSL, about 2 MiB of RSS an agent on a plain mqtt:// broker never
 * otherwise needs (docs/bundles.md, "Memory"). Checking that the file matches the manifest is
 * `ax bundle verify`'s job.
 */
function ownSha256(self: string, agentFile: string): string {
  try {
    const manifest = JSON.parse(readFileSync(join(dirname(self), MANIFEST_FILE), "utf8")) as {
      files?: Record<string, { sha256?: unknown; bytes?: unknown }>;
    };
    const entry = manifest.files?.[agentFile];
    if (
      typeof entry?.sha256 === "string" &&
      /^[0-9a-f]{64}$/.test(entry.sha256) &&
      entry.bytes === statSync(self).size
    ) {
      return entry.sha256;
    }
  } catch {
    // No manifest beside the agent, or not a readable one: hash the file itself.
  }
  const crypto = createRequire(import.meta.url)("node:crypto") as typeof import("node:crypto");
  return crypto.createHash("sha256").update(readFileSync(self)).digest("hex");
}

/**
 * What a bundled agent tells its `Agent` about itself: its identity for hello (the ax version it
 * was built from and the sha256 of its agent file, so the coordinator shows which build each
 * device runs) and where its native binding is. An agent run from source has neither: it reports
 * `dev` and finds better-sqlite3 in node_modules.
 */
export function bundleRuntime(
  parts: AgentParts,
  entryUrl: string,
): Pick<AgentDeps, "bundle" | "nativeBinding" | "sqliteModule" | "update"> {
  const bundle = parts.bundle;
  if (!bundle) return {};
  const self = fileURLToPath(entryUrl);
  // Started by the A/B launcher (agent/launch.ts) from slot a or b: this agent can install
  // updates. A bundle unpacked flat and started the same way has no slot to install into, so it
  // does not offer agent.update (docs/rollouts.md, "The device side").
  const root = process.env[ROOT_ENV];
  return {
    ...(root && inSlot(self)
      ? {
          update: {
            root,
            self,
            // Its own file, so its bytes are read only when an update runs.
            installer: () => import(pathToFileURL(join(dirname(self), INSTALLER_FILE)).href),
          },
        }
      : {}),
    bundle: {
      version: bundle.version,
      sha256: ownSha256(self, self.slice(dirname(self).length + 1)),
    },
    nativeBinding: join(dirname(self), bundle.nativeBinding),
    // The journal's checkpoint thread loads better-sqlite3 from the agent file itself, which
    // exports it (agent/cli.ts): a bundle has no node_modules, and a second file would cost bytes.
    sqliteModule: entryUrl,
  };
}
