import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { AgentDeps } from "./agent.js";
import type { AgentParts } from "./parts/types.js";

/**
 * What a bundled agent tells its `Agent` about itself: its identity for hello (the ax version it
 * was built from and the sha256 of its own file, which manifest.json records too, so the
 * coordinator shows which build each device runs) and where its native binding is. An agent run
 * from source has neither: it reports `dev` and finds better-sqlite3 in node_modules.
 *
 * The hash is of the file as it is on the device, read at start (a few ms), not a value stamped
 * in at build time: a file changed after the build reports a sha256 that matches no manifest.
 */
export function bundleRuntime(
  parts: AgentParts,
  entryUrl: string,
): Pick<AgentDeps, "bundle" | "nativeBinding"> {
  const bundle = parts.bundle;
  if (!bundle) return {};
  const self = fileURLToPath(entryUrl);
  const sha256 = createHash("sha256").update(readFileSync(self)).digest("hex");
  return {
    bundle: { version: bundle.version, sha256 },
    nativeBinding: join(dirname(self), bundle.nativeBinding),
  };
}
