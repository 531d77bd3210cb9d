import { resolve } from "node:path";
import type { Plugin } from "esbuild";
import type { BundleFacts } from "../../agent/parts/types.js";
import type { FirmwareProfile } from "../../shared/profile.js";
import { FEATURE_MODULES, HANDLER_MODULES, INCLUDED_PARTS_MODULE } from "./catalog.js";

/**
 * The source of a bundle's agent/parts/included.ts: it imports only the handlers and features
 * the profile includes, and carries the bundle's facts (profile, version, config defaults).
 */
export function includedPartsSource(profile: FirmwareProfile, facts: BundleFacts): string {
  const lines: string[] = [];
  const handlers = profile.handlers.map((name, i) => {
    const m = HANDLER_MODULES[name];
    lines.push(`import { ${m.exportName} as h${i} } from ${JSON.stringify(m.file)};`);
    return `h${i}`;
  });
  const features = profile.features.map((name, i) => {
    const m = FEATURE_MODULES[name];
    lines.push(`import { ${m.exportName} as f${i} } from ${JSON.stringify(m.file)};`);
    return `${JSON.stringify(name)}: f${i}`;
  });
  lines.push(
    `export const PARTS = { handlers: [${handlers.join(", ")}], features: { ${features.join(", ")} }, bundle: ${JSON.stringify(facts)} };`,
  );
  return `${lines.join("\n")}\n`;
}

/**
 * Replaces agent/parts/included.ts with the profile's own list, so the bundler never reads the
 * modules of handlers and features the profile leaves out.
 */
export function includedPartsPlugin(profile: FirmwareProfile, facts: BundleFacts): Plugin {
  return {
    name: "ax-included-parts",
    setup(build) {
      build.onResolve({ filter: /[\\/]parts[\\/]included\.js$/ }, (args) => {
        const target = resolve(args.resolveDir, args.path).replace(/\.js$/, ".ts");
        if (target !== INCLUDED_PARTS_MODULE) return undefined;
        return { path: "included-parts", namespace: "ax-profile" };
      });
      build.onLoad({ filter: /.*/, namespace: "ax-profile" }, () => ({
        contents: includedPartsSource(profile, facts),
        loader: "js",
        resolveDir: resolve(INCLUDED_PARTS_MODULE, ".."),
      }));
    },
  };
}

/**
 * Stand-ins for packages a bundled agent on Node never runs, so their code stays out:
 * - `bindings`: better-sqlite3's search for its addon in node_modules; a bundle passes the
 *   addon's path (`nativeBinding`) instead;
 * - `debug`: logging of mqtt.js and mqtt-packet, off unless DEBUG is set;
 * - `socks`: mqtt.js's SOCKS proxy transport;
 * - `worker-timers`: mqtt.js's timers for browser tabs.
 */
const STAND_INS: Record<string, string> = {
  bindings: `module.exports = () => { throw new Error("a bundled agent loads better-sqlite3 through its nativeBinding option"); };`,
  debug:
    "module.exports = () => Object.assign(() => {}, { enabled: false, extend() { return module.exports(); } });",
  socks: `module.exports = { SocksClient: { createConnection() { throw new Error("SOCKS proxies are not supported by a bundled agent"); } } };`,
  "worker-timers": "module.exports = { setInterval, clearInterval, setTimeout, clearTimeout };",
};

/**
 * better-sqlite3's Database methods the agent never calls — `backup`, `serialize`, `function`,
 * `aggregate`, `table` (virtual tables) and `transaction` (the agent has its own, shared/migrate.ts)
 * — about 9.5 KB minified: all six are one stand-in that says so (one module, not six: the agent's
 * byte budget counts each module's wrapper).
 */
const UNUSED_SQLITE_METHODS = [
  "backup",
  "serialize",
  "function",
  "aggregate",
  "table",
  "transaction",
];

/** Resolves the packages in {@link STAND_INS}, and unused better-sqlite3 methods, to stand-ins. */
export function standInsPlugin(): Plugin {
  const filter = new RegExp(`^(${Object.keys(STAND_INS).join("|")})$`);
  const methods = new RegExp(`^\\./methods/(${UNUSED_SQLITE_METHODS.join("|")})$`);
  return {
    name: "ax-stand-ins",
    setup(build) {
      build.onResolve({ filter }, (args) => ({ path: args.path, namespace: "ax-stand-in" }));
      build.onResolve({ filter: methods }, (args) =>
        /[\\/]better-sqlite3[\\/]lib[\\/]database\.js$/.test(args.importer)
          ? { path: "unused", namespace: "ax-sqlite-method" }
          : undefined,
      );
      build.onLoad({ filter: /.*/, namespace: "ax-stand-in" }, (args) => ({
        contents: STAND_INS[args.path] ?? "",
        loader: "js",
      }));
      build.onLoad({ filter: /.*/, namespace: "ax-sqlite-method" }, () => ({
        contents: `module.exports = function () { throw new Error("Database.${UNUSED_SQLITE_METHODS.join("/")} are not in a bundled agent"); };`,
        loader: "js",
      }));
    },
  };
}
