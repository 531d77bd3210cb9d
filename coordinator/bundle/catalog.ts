import type { FeatureName, HandlerName } from "../../shared/profile.js";
import { packageFile } from "../package-files.js";

/** Where the build finds each part a profile can include: a module of agent/ and its export. */
export interface PartModule {
  /** Absolute path of the module. */
  file: string;
  /** Its export: a HandlerPart for a handler, the feature's value for a feature. */
  exportName: string;
}

// The agent's TypeScript sources ship in the package: a bundle is built from them.
const agentFile = (path: string) => packageFile("agent", path);

/** Every handler's module; one file each, so a bundle's bundler sees only those it includes. */
export const HANDLER_MODULES: Readonly<Record<HandlerName, PartModule>> = {
  echo: { file: agentFile("handlers/builtin/echo.ts"), exportName: "echoPart" },
  sleep: { file: agentFile("handlers/builtin/sleep.ts"), exportName: "sleepPart" },
  fail: { file: agentFile("handlers/builtin/fail.ts"), exportName: "failPart" },
  "mqtt.publish": {
    file: agentFile("handlers/device/mqtt-publish.ts"),
    exportName: "mqttPublishPart",
  },
  "http.request": {
    file: agentFile("handlers/device/http-request.ts"),
    exportName: "httpRequestPart",
  },
  "file.write": { file: agentFile("handlers/device/file-write.ts"), exportName: "fileWritePart" },
  exec: { file: agentFile("handlers/device/exec.ts"), exportName: "execPart" },
};

/** Every feature's module. */
export const FEATURE_MODULES: Readonly<Record<FeatureName, PartModule>> = {
  tls: { file: agentFile("link/tls.ts"), exportName: "tlsTransport" },
  websocket: {
    file: agentFile("handlers/device/mqtt-websocket.ts"),
    exportName: "websocketConnector",
  },
};

/** The module a bundle replaces with its own list of parts (agent/parts/included.ts). */
export const INCLUDED_PARTS_MODULE = agentFile("parts/included.ts");

/** The agent's entry point: `node agent.mjs --config FILE`. */
export const AGENT_ENTRY = agentFile("cli.ts");

/** The A/B launcher's entry point: `node launch.mjs --config FILE` (docs/rollouts.md). */
export const LAUNCHER_ENTRY = agentFile("launch.ts");

/** The installer `agent.update` loads from beside the agent (agent/update/updater.ts). */
export const INSTALLER_ENTRY = agentFile("update/installer.ts");
