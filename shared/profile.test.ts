import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { isAxError } from "./errors.js";
import {
  FEATURE_NAMES,
  type FirmwareProfileInput,
  HANDLER_NAMES,
  parseFirmwareProfile,
  profileAgentDefaults,
} from "./profile.js";

const dir = new URL("../firmware-profiles/", import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith(".json"));

const valid: FirmwareProfileInput = {
  name: "board",
  description: "a test board",
  node: { maxOldSpaceMb: 32 },
  capacity: { concurrency: 2, queue: 16, maxPending: 1000 },
  journal: { maxOutbox: 500, retainMs: 3_600_000 },
  heartbeatMs: 5000,
  keepaliveS: 10,
  handlers: ["file.write"],
  budgets: { bundleBytes: 100_000, idleRssMb: 50 },
};

/** The error lines after the first (the source line). */
function problems(input: unknown, expectedName?: string): string[] {
  try {
    parseFirmwareProfile(input, "boards/x.json", expectedName);
  } catch (err) {
    expect(isAxError(err, "AX_PROFILE_INVALID")).toBe(true);
    const [first, ...rest] = (err as Error).message.split("\n");
    expect(first).toBe("boards/x.json: invalid firmware profile");
    return rest;
  }
  return [];
}

describe("firmware profiles", () => {
  it("has the three profiles the bundles are built from, each valid and named as its file", () => {
    expect(files.sort()).toEqual(["gateway.json", "sensor-hub.json", "server.json"]);
    for (const f of files) {
      const raw = JSON.parse(readFileSync(new URL(f, dir), "utf8"));
      expect(() => parseFirmwareProfile(raw, f, f.replace(/\.json$/, ""))).not.toThrow();
    }
  });

  it("keeps sensor-hub small: concurrency 2, only mqtt.publish and file.write, no exec", () => {
    const raw = JSON.parse(readFileSync(new URL("sensor-hub.json", dir), "utf8"));
    const p = parseFirmwareProfile(raw, "sensor-hub.json");
    expect(p.capacity.concurrency).toBe(2);
    expect([...p.handlers].sort()).toEqual(["file.write", "mqtt.publish"]);
    expect(p.budgets.bundleBytes).toBeLessThanOrEqual(150 * 1024);
    const server = parseFirmwareProfile(
      JSON.parse(readFileSync(new URL("server.json", dir), "utf8")),
      "server.json",
    );
    expect([...server.handlers].sort()).toEqual([...HANDLER_NAMES].sort());
    expect([...server.features].sort()).toEqual([...FEATURE_NAMES].sort());
  });

  it("fills in the 20 ms wheel tick, 512 slots and no features when left out", () => {
    const p = parseFirmwareProfile(valid, "x.json");
    expect(p.wheel).toEqual({ tickMs: 20, slots: 512 });
    expect(p.features).toEqual([]);
  });

  it("names the field and the problem of a bad profile", () => {
    expect(problems({ ...valid, capacity: { concurrency: 0, queue: 16, maxPending: 10 } })).toEqual(
      ["capacity.concurrency: must be at least 1"],
    );
    expect(problems({ ...valid, handlers: ["file.write", "gpio"] })).toEqual([
      `handlers.1: unknown handler "gpio"; known: ${HANDLER_NAMES.join(", ")}`,
    ]);
    expect(problems({ ...valid, features: ["bluetooth"] })).toEqual([
      `features.0: unknown feature "bluetooth"; known: ${FEATURE_NAMES.join(", ")}`,
    ]);
    expect(problems({ ...valid, handlers: ["exec", "exec"] })).toEqual([
      "handlers: must not repeat a handler",
    ]);
    expect(problems({ ...valid, handlers: [] })).toEqual(["handlers: must have at least 1 items"]);
    expect(problems({ ...valid, node: undefined })).toEqual(["node: is required (object)"]);
    expect(problems({ ...valid, budgets: { bundleBytes: 100_000, idleRss: 50 } })).toEqual([
      "budgets.idleRssMb: is required (number)",
      "budgets: has unknown keys idleRss",
    ]);
    expect(problems({ ...valid, name: "Board One" })).toEqual([
      "name: must be 1-63 of a-z 0-9 - (a file name)",
    ]);
    expect(problems(valid, "other")).toEqual([
      'name: must be "other", the file\'s name, got "board"',
    ]);
  });

  it("turns the runtime settings into agent config defaults", () => {
    const p = parseFirmwareProfile({ ...valid, wheel: { tickMs: 10 } }, "x.json");
    expect(profileAgentDefaults(p)).toEqual({
      profile: "board",
      tickMs: 10,
      wheelSlots: 512,
      capacity: { concurrency: 2, queue: 16, maxPending: 1000 },
      journal: { maxOutbox: 500, retainMs: 3_600_000 },
      heartbeatMs: 5000,
      mqtt: { keepaliveS: 10 },
    });
  });
});
