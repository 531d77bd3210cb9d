import { describe, expect, it } from "vitest";
import { startEmbeddedBroker } from "../../../coordinator/broker/embedded.js";
import { describeIssue } from "../../../shared/protocol/codec.js";
import { buildDeviceHandlers, deviceHandlersConfigSchema } from "./index.js";
import { testContext } from "./test-context.js";

function parse(input: unknown) {
  return deviceHandlersConfigSchema.parse(input);
}

/** The config errors as the agent prints them: `field: problem`, one per issue. */
function configErrors(input: unknown): string[] {
  const result = deviceHandlersConfigSchema.safeParse(input, { error: describeIssue });
  if (result.success) return [];
  return result.error.issues.map(
    (i) => `${i.path.map(String).join(".") || "(root)"}: ${i.message}`,
  );
}

function names(input: unknown): string[] {
  return buildDeviceHandlers(parse(input)).handlers.map((h) => h.name);
}

describe("deviceHandlersConfigSchema", () => {
  it("is all optional, and fills in the documented defaults of a present section", () => {
    expect(parse({})).toEqual({});
    expect(
      parse({
        "mqtt.publish": { url: "mqtt://127.0.0.1:1883" },
        "http.request": {},
        "file.write": { allow: ["/sys/class/gpio/"] },
        exec: {},
      }),
    ).toEqual({
      "mqtt.publish": { url: "mqtt://127.0.0.1:1883", connectTimeoutMs: 5_000 },
      "http.request": { allowOrigins: [], defaultTimeoutMs: 10_000 },
      "file.write": { allow: ["/sys/class/gpio/"] },
      exec: { enabled: false, allow: [], maxOutputBytes: 16_384 },
    });
  });

  it("names the field and the problem for a bad section", () => {
    expect(configErrors({ "mqtt.publish": { url: "http://broker" } })).toEqual([
      "mqtt.publish.url: must be an mqtt://, mqtts://, ws:// or wss:// URL",
    ]);
    expect(
      configErrors({ "http.request": { allowOrigins: ["http://127.0.0.1:8080/api"] } }),
    ).toEqual([
      "http.request.allowOrigins.0: must be an http(s) origin such as http://127.0.0.1:8080 (no path)",
    ]);
    expect(configErrors({ "http.request": { defaultTimeoutMs: 0 } })).toEqual([
      "http.request.defaultTimeoutMs: must be at least 1",
    ]);
    expect(configErrors({ "file.write": {} })).toEqual(["file.write.allow: is required (array)"]);
    expect(configErrors({ "file.write": { allow: ["var/out"] } })).toEqual([
      "file.write.allow.0: must be an absolute path",
    ]);
    expect(configErrors({ exec: { enabled: "yes", allow: ["echo"] } })).toEqual([
      "exec.enabled: expected boolean, got string",
      "exec.allow.0: must be an absolute path",
    ]);
    expect(configErrors({ exec: { maxOutputBytes: 65_536 } })).toEqual([
      "exec.maxOutputBytes: must be at most 24576",
    ]);
  });

  it("refuses unknown keys, so a misspelt section is not silently ignored", () => {
    expect(configErrors({ mqtt_publish: { url: "mqtt://x" } })).toEqual([
      "(root): has unknown keys mqtt_publish",
    ]);
    expect(configErrors({ exec: { enable: true } })).toEqual(["exec: has unknown keys enable"]);
  });
});

describe("buildDeviceHandlers", () => {
  it("offers a handler only when its section is present, exec only when enabled", async () => {
    expect(names({})).toEqual([]);
    expect(names({ "http.request": {} })).toEqual(["http.request"]);
    expect(names({ "file.write": { allow: [] }, exec: { allow: ["/bin/echo"] } })).toEqual([
      "file.write",
    ]);
    const all = buildDeviceHandlers(
      parse({
        "mqtt.publish": { url: "mqtt://127.0.0.1:1" },
        "http.request": { allowOrigins: ["http://127.0.0.1:8080"] },
        "file.write": { allow: ["/var/lib/ax/out/"] },
        exec: { enabled: true, allow: ["/bin/echo"] },
      }),
    );
    expect(all.handlers.map((h) => h.name)).toEqual([
      "mqtt.publish",
      "http.request",
      "file.write",
      "exec",
    ]);
    await all.close();
  });

  it("passes the config through: exec's allow-list and output cap", async () => {
    const { handlers } = buildDeviceHandlers(
      parse({ exec: { enabled: true, allow: ["/bin/echo"], maxOutputBytes: 3 } }),
    );
    const exec = handlers[0]!;
    await expect(
      exec.run(testContext(), exec.params.parse({ command: "/bin/echo", args: ["hello"] })),
    ).resolves.toMatchObject({ stdout: "hel", stdoutTruncated: true });
  });

  it("close() closes the MQTT connection", async () => {
    const broker = await startEmbeddedBroker(0);
    try {
      const built = buildDeviceHandlers(parse({ "mqtt.publish": { url: broker.url } }));
      const publish = built.handlers[0]!;
      const disconnected = new Promise((resolve) =>
        broker.broker.once("clientDisconnect", resolve),
      );
      await publish.run(testContext(), publish.params.parse({ topic: "a", payload: "1" }));
      expect(broker.broker.connectedClients).toBe(1);
      await built.close();
      await disconnected;
      expect(broker.broker.connectedClients).toBe(0);
    } finally {
      await broker.close();
    }
  });
});
