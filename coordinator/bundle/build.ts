import { join } from "node:path";
import { build, type Metafile, type Plugin } from "esbuild";
import type { BundleFacts } from "../../agent/parts/types.js";
import type { FirmwareProfile } from "../../shared/profile.js";
import { INSTALLER_FILE, LAUNCHER_FILE } from "../../shared/update-limits.js";
import { AGENT_ENTRY, INSTALLER_ENTRY, LAUNCHER_ENTRY } from "./catalog.js";
import { includedPartsPlugin, standInsPlugin } from "./plugins.js";

/**
 * mqtt.js, better-sqlite3 and their dependencies are CommonJS and `require()` Node built-ins at
 * run time; an ESM bundle has no `require`, so the bundle defines one.
 */
export const REQUIRE_BANNER =
  'import { createRequire as __axCreateRequire } from "node:module"; const require = __axCreateRequire(import.meta.url);';

export interface AgentBuildOptions {
  /** Output file, e.g. dist/bundles/NAME/agent.mjs. */
  outfile: string;
  /** @default true */
  minify?: boolean;
  /**
   * Build for a firmware profile: only its handlers and features, its runtime settings as the
   * config defaults, better-sqlite3's JavaScript bundled in (its addon is loaded from the file
   * beside the agent), so the agent runs with no node_modules. Without a profile: every handler
   * and feature, better-sqlite3 left external (for benchmarks run inside this repository).
   */
  profile?: { profile: FirmwareProfile; facts: BundleFacts } | undefined;
}

/**
 * Node already provides what these packages polyfill for browsers (mqtt.js pulls them in only
 * with the websocket feature).
 */
const NODE_ALIASES: Record<string, string> = { "readable-stream": "stream" };

/** Builds the agent into one ESM file for Node 20. */
export async function buildAgentBundle(
  options: AgentBuildOptions,
): Promise<{ outfile: string; metafile: Metafile }> {
  const plugins: Plugin[] = [standInsPlugin()];
  if (options.profile) {
    plugins.unshift(includedPartsPlugin(options.profile.profile, options.profile.facts));
  }
  const result = await build({
    entryPoints: [AGENT_ENTRY],
    outfile: options.outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    minify: options.minify ?? true,
    external: options.profile ? [] : ["better-sqlite3"],
    alias: NODE_ALIASES,
    plugins,
    banner: { js: REQUIRE_BANNER },
    metafile: true,
    logLevel: "silent",
  });
  return { outfile: options.outfile, metafile: result.metafile };
}

export { INSTALLER_FILE, LAUNCHER_FILE };

/**
 * Builds the two small files of an A/B install beside the agent, each one ESM file of Node
 * built-ins only: the launcher (agent/launch.ts) and the installer `agent.update` loads
 * (agent/update/installer.ts).
 */
export async function buildUpdateFiles(dir: string): Promise<void> {
  for (const [entry, file] of [
    [LAUNCHER_ENTRY, LAUNCHER_FILE],
    [INSTALLER_ENTRY, INSTALLER_FILE],
  ] as const) {
    await build({
      entryPoints: [entry],
      outfile: join(dir, file),
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      minify: true,
      logLevel: "silent",
    });
  }
}
