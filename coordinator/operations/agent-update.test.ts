import { describe, expect, it } from "vitest";
import { AxError } from "../../shared/errors.js";
import type { NativeTarget } from "../../shared/update.js";
import { parseCoordinatorConfig, publicBaseUrl } from "../config.js";
import { updateRefusal } from "../engine/update-offer.js";
import { agentUpdateParams, bundleArchiveUrl } from "./agent-update.js";

const MQTT = { url: "mqtt://127.0.0.1:1883" };
const X64: NativeTarget = { platform: "linux", arch: "x64", libc: "glibc", nodeAbi: 115 };

describe("http.publicUrl and the bundle URL", () => {
  it("takes publicUrl as given, without a trailing slash", () => {
    expect(
      publicBaseUrl({ host: "0.0.0.0", port: 8080, publicUrl: "https://ax.example.com/" }),
    ).toBe("https://ax.example.com");
    expect(
      bundleArchiveUrl(
        publicBaseUrl({ host: "h", port: 1, publicUrl: "https://ops.example.com/ax" }) as string,
        "ab",
      ),
    ).toBe("https://ops.example.com/ax/api/bundles/ab/archive");
  });

  it("derives it from the listen address without one", () => {
    const at = (host: string, port = 8080) => publicBaseUrl({ host, port, publicUrl: undefined });
    expect(at("0.0.0.0")).toBe("http://127.0.0.1:8080");
    expect(at("::")).toBe("http://127.0.0.1:8080");
    expect(at("localhost", 9000)).toBe("http://127.0.0.1:9000");
    expect(at("10.0.0.5")).toBe("http://10.0.0.5:8080");
    expect(at("ax.example.com")).toBe("http://ax.example.com:8080");
    expect(at("fd00::5")).toBe("http://[fd00::5]:8080");
    // A port picked at start is not known from the config.
    expect(at("127.0.0.1", 0)).toBeUndefined();
  });

  it("refuses a publicUrl that is not http(s), or carries credentials or a query, naming the field", () => {
    for (const publicUrl of [
      "ftp://ax.example.com",
      "ax.example.com",
      "https://user:pw@ax.example.com",
      "https://ax.example.com/?a=1",
    ]) {
      let err: unknown;
      try {
        parseCoordinatorConfig({ mqtt: MQTT, http: { publicUrl } }, "c.json");
      } catch (e) {
        err = e;
      }
      expect(err, publicUrl).toBeInstanceOf(AxError);
      expect((err as AxError).code).toBe("AX_CONFIG_INVALID");
      expect((err as AxError).message).toContain(
        "http.publicUrl: must be an http:// or https:// URL such as https://ax.example.com, without credentials, query or fragment",
      );
    }
    expect(
      parseCoordinatorConfig({ mqtt: MQTT, http: { publicUrl: "https://ax.example.com:8443/ax" } })
        .http.publicUrl,
    ).toBe("https://ax.example.com:8443/ax");
  });
});

describe("offering an agent.update", () => {
  const params = agentUpdateParams(
    "https://ax.example.com",
    {
      sha256: "a".repeat(64),
      profile: "sensor-hub",
      version: "1.2.3",
      target: X64,
      bytes: 10,
      agentSha256: "b".repeat(64),
      keyId: "k",
      builtAt: 1,
      publishedAt: 2,
      publishedBy: "ops",
    },
    undefined,
  );

  it("fills in every field an agent needs, and no health window unless given", () => {
    expect(params).toEqual({
      sha256: "a".repeat(64),
      url: `https://ax.example.com/api/bundles/${"a".repeat(64)}/archive`,
      bytes: 10,
      version: "1.2.3",
      profile: "sensor-hub",
      target: X64,
    });
  });

  it("offers it to an agent of the same target only", () => {
    const exec = { handler: "agent.update", params };
    expect(updateRefusal(exec, { target: X64 })).toBeUndefined();
    expect(updateRefusal(exec, { target: { ...X64, libc: "musl", nodeAbi: 127 } })).toBe(
      "not offered: bundle built for C library glibc, the device has musl; Node ABI 115, the device's Node has 127",
    );
    expect(updateRefusal(exec, {})).toBe(
      "not offered: the agent reports no native target (hello.target): update it by hand",
    );
    expect(updateRefusal({ handler: "agent.update", params: {} }, { target: X64 })).toBe(
      "not offered: its params.target is missing or not a native target",
    );
    // Any other handler is none of its business.
    expect(updateRefusal({ handler: "echo", params: {} }, {})).toBeUndefined();
  });
});
