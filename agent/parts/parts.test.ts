import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { isAxError } from "../../shared/errors.js";
import { parseFirmwareProfile, profileAgentDefaults } from "../../shared/profile.js";
import { FEATURE_NAMES, HANDLER_NAMES } from "../../shared/profile-names.js";
import { parseAgentConfig } from "../config.js";
import { fileWritePart } from "../handlers/device/file-write.js";
import { mqttPublishPart } from "../handlers/device/mqtt-publish.js";
import { tlsTransport } from "../link/tls.js";
import { PARTS } from "./included.js";
import { type AgentParts, featureNames } from "./types.js";

const sensorHub = parseFirmwareProfile(
  JSON.parse(
    readFileSync(new URL("../../firmware-profiles/sensor-hub.json", import.meta.url), "utf8"),
  ),
  "sensor-hub.json",
);

/** The parts of a sensor-hub bundle, as its generated module would list them. */
const bundled: AgentParts = {
  handlers: [mqttPublishPart, fileWritePart],
  features: { tls: tlsTransport },
  bundle: {
    profile: "sensor-hub",
    version: "1.2.3",
    defaults: profileAgentDefaults(sensorHub),
    nativeBinding: "better_sqlite3.node",
  },
};

const device = { agentId: "hub-1", mqtt: { url: "mqtt://broker:1883" } };

function configErrors(input: unknown, parts: AgentParts): string[] {
  try {
    parseAgentConfig(input, "agent.json", parts);
  } catch (err) {
    expect(isAxError(err, "AX_CONFIG_INVALID")).toBe(true);
    return (err as Error).message.split("\n").slice(1);
  }
  return [];
}

describe("the parts an agent is built with", () => {
  it("from source: every handler and every feature a profile can name", () => {
    expect(PARTS.handlers.map((h) => h.name).sort()).toEqual([...HANDLER_NAMES].sort());
    expect(featureNames(PARTS.features)).toEqual([...FEATURE_NAMES]);
    expect(PARTS.bundle).toBeUndefined();
  });

  it("a bundle's profile supplies the defaults; the device's config file wins where it speaks", () => {
    const c = parseAgentConfig(device, "agent.json", bundled);
    expect(c.profile).toBe("sensor-hub");
    expect(c.capacity).toEqual({ concurrency: 2, queue: 16, maxPending: 10_000 });
    expect(c.journal).toMatchObject({ maxOutbox: 2000, retainMs: 3_600_000 });
    expect(c.mqtt.keepaliveS).toBe(30);
    expect([c.tickMs, c.wheelSlots, c.heartbeatMs]).toEqual([20, 256, 10_000]);

    const own = parseAgentConfig(
      { ...device, mqtt: { ...device.mqtt, keepaliveS: 5 }, capacity: { concurrency: 3 } },
      "agent.json",
      bundled,
    );
    expect(own.capacity).toEqual({ concurrency: 3, queue: 16, maxPending: 10_000 });
    expect(own.mqtt.keepaliveS).toBe(5);
  });

  it("from source, the built-in defaults apply", () => {
    const c = parseAgentConfig(device, "agent.json");
    expect(c.profile).toBe("dev");
    expect(c.capacity).toEqual({ concurrency: 4, queue: 64, maxPending: 10_000 });
    expect([c.tickMs, c.wheelSlots]).toEqual([20, 512]);
  });

  it("refuses a section for a handler left out of the bundle, saying so", () => {
    expect(
      configErrors({ ...device, handlers: { exec: { enabled: true }, typo: {} } }, bundled),
    ).toEqual([
      "handlers.exec: not built into this agent's bundle (profile sensor-hub); it has mqtt.publish, file.write",
      "handlers.typo: unknown key",
    ]);
  });

  it("refuses another profile's name, and mqtts:// or ws:// without their features", () => {
    expect(configErrors({ ...device, profile: "server" }, bundled)).toEqual([
      'profile: this agent\'s bundle was built for profile "sensor-hub", got "server" (leave the field out)',
    ]);
    const plain: AgentParts = { ...bundled, features: {} };
    expect(configErrors({ ...device, mqtt: { url: "mqtts://broker" } }, plain)).toEqual([
      "mqtt.url: must be an mqtt:// URL (mqtts:// needs the tls feature, left out of this agent)",
    ]);
    expect(
      configErrors(
        { ...device, handlers: { "mqtt.publish": { url: "ws://127.0.0.1:9001" } } },
        bundled,
      ),
    ).toEqual([
      "handlers.mqtt.publish.url: must be an mqtt:// or mqtts:// URL (ws:// and wss:// need the websocket feature, left out of this agent)",
    ]);
    expect(
      configErrors(
        { ...device, handlers: { "mqtt.publish": { url: "ws://127.0.0.1:9001" } } },
        PARTS,
      ),
    ).toEqual([]);
  });
});
