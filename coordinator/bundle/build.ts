import { fileURLToPath } from "node:url";
import { build, type Metafile } from "esbuild";

const ENTRY = fileURLToPath(new URL("../../agent/cli.ts", import.meta.url));

/**
 * mqtt.js and its dependencies are CommonJS and `require()` Node built-ins at run time; an ESM
 * bundle has no `require`, so the bundle defines one.
 */
export const REQUIRE_BANNER =
  'import { createRequire as __axCreateRequire } from "node:module"; const require = __axCreateRequire(import.meta.url);';

export interface AgentBuildOptions {
  /** Output file, e.g. dist/bundles/NAME/agent.mjs. */
  outfile: string;
  /** @default true */
  minify?: boolean;
}

/**
 * Builds the agent into one ESM file for Node 20. better-sqlite3 stays external: it is a native
 * addon, shipped beside the bundle.
 */
export async function buildAgentBundle(
  options: AgentBuildOptions,
): Promise<{ outfile: string; metafile: Metafile }> {
  const result = await build({
    entryPoints: [ENTRY],
    outfile: options.outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    minify: options.minify ?? true,
    external: ["better-sqlite3"],
    banner: { js: REQUIRE_BANNER },
    metafile: true,
    logLevel: "silent",
  });
  return { outfile: options.outfile, metafile: result.metafile };
}
