import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { systemClock } from "../../shared/clock.js";
import { envelope } from "../../shared/message.js";
import type { Decoded } from "../../shared/protocol/index.js";
import { helloBody, idleHeartbeat, tempDir, waitFor } from "../../test/helpers/env.js";
import { parseCoordinatorConfig } from "../config.js";
import { CoordinatorLink } from "../link/mqtt-link.js";
import { SqliteStore } from "../store/sqlite/sqlite-store.js";
import { EngineEventBus } from "./events.js";
import { Fleet } from "./fleet.js";
import { INBOUND_CHUNK, Inbound } from "./inbound.js";
import { Leases } from "./leases.js";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function inbound(log: (level: string, msg: string) => void = () => {}): {
  inbound: Inbound;
  store: SqliteStore;
  link: CoordinatorLink;
} {
  const tmp = tempDir();
  cleanups.push(tmp.cleanup);
  const store = new SqliteStore({ path: join(tmp.dir, "ax.sqlite"), groupCommit: true });
  cleanups.push(() => store.close());
  const config = parseCoordinatorConfig({
    store: { path: join(tmp.dir, "ax.sqlite") },
    mqtt: { url: "mqtt://127.0.0.1:1" },
  });
  // The link is never started: nothing here sends.
  const link = new CoordinatorLink(
    { url: config.mqtt.url, clientId: `ax-c-${Math.random().toString(36).slice(2)}` },
    Date.now,
  );
  const ctx = {
    config,
    store,
    link,
    clock: systemClock,
    log,
    events: new EngineEventBus(),
  };
  return { inbound: new Inbound(ctx, new Fleet(ctx), new Leases(15_000, 10_000)), store, link };
}

describe("Inbound", () => {
  it("logs a flood of invalid messages once per topic and code a minute, and counts every one", async () => {
    const lines: string[] = [];
    const { inbound: ib, store } = inbound((level, msg) => {
      if (level === "warn") lines.push(msg);
    });
    const bad = { code: "AX_PROTO_BAD_JSON", message: "not JSON" } as const;
    for (let i = 0; i < 500; i++) ib.invalid(bad, "ax/v1/agents/a1/up");
    ib.invalid(bad, "ax/v1/agents/a2/up");
    ib.invalid({ code: "AX_PROTO_BAD_VERSION", message: "v: 2" }, "ax/v1/agents/a1/up");
    await waitFor("counted", async () =>
      (await store.counters()).invalid_messages === 502 ? true : undefined,
    );
    expect(lines).toEqual([
      "rejected message on ax/v1/agents/a1/up: AX_PROTO_BAD_JSON: not JSON",
      "rejected message on ax/v1/agents/a2/up: AX_PROTO_BAD_JSON: not JSON",
      "rejected message on ax/v1/agents/a1/up: AX_PROTO_BAD_VERSION: v: 2",
    ]);
  });

  it("logs a quiet refusal at debug, without using up the source's warning for the minute", () => {
    const lines: string[] = [];
    const { inbound: ib } = inbound((level, msg) => lines.push(`${level} ${msg}`));
    const stale = { code: "AX_AUTH_STALE", message: "replayed", source: "a1" } as const;
    ib.refused({ ...stale, quiet: true }, "ax/v1/agents/a1/up");
    ib.refused({ ...stale, quiet: true }, "ax/v1/agents/a1/up");
    ib.refused(stale, "ax/v1/agents/a1/up");
    ib.refused(stale, "ax/v1/agents/a1/up");
    expect(lines).toEqual([
      "debug refused message on ax/v1/agents/a1/up: AX_AUTH_STALE: replayed",
      "warn refused message on ax/v1/agents/a1/up: AX_AUTH_STALE: replayed",
    ]);
  });

  it("lets the event loop turn between chunks of one agent's backlog", async () => {
    const { inbound: ib, store } = inbound();
    const total = INBOUND_CHUNK * 4;
    // Heartbeats of an agent that never said hello: each is counted as superseded and dropped,
    // a store write apiece, like a report.
    for (let i = 0; i < total; i++) {
      const d: Decoded = {
        channel: "up",
        agentId: "a1",
        message: envelope(idleHeartbeat("i1"), Date.now()),
      } as Decoded;
      ib.handle(d, Date.now());
    }
    expect(ib.backlog).toBe(total);
    // A timer set now stands for the firing wheel and the dispatcher: it must run while the
    // backlog is being worked through, not only once all of it is handled.
    const seen: number[] = [];
    await new Promise<void>((resolve) => {
      const tick = () => {
        seen.push(ib.backlog);
        if (ib.backlog === 0) resolve();
        else setTimeout(tick, 0);
      };
      setTimeout(tick, 0);
    });
    await ib.drain();
    expect(seen.some((b) => b > 0 && b < total)).toBe(true);
    expect(Math.max(...seen.filter((b) => b < total))).toBeLessThanOrEqual(total - INBOUND_CHUNK);
    expect((await store.counters()).superseded_messages).toBe(total);
  });

  it("warns of an answer it could not send, but not once the link was closed to stop", async () => {
    const warnings: string[] = [];
    const {
      inbound: ib,
      store,
      link,
    } = inbound((level, msg) => {
      if (level === "warn") warnings.push(msg);
    });
    const hello = (agentId: string): Decoded =>
      ({
        channel: "up",
        agentId,
        message: envelope(helloBody(agentId), Date.now()),
      }) as Decoded;
    // Never started: the welcome cannot go, and that is a fault worth a line.
    ib.handle(hello("a1"), Date.now());
    await ib.drain();
    await waitFor("the warning", () => (warnings.length > 0 ? true : undefined));
    expect(warnings.join("\n")).toMatch(/welcome to a1 failed: link not started/);
    // Closed to stop: what is handled still counts, and its answers are not owed a warning.
    warnings.length = 0;
    await link.close();
    expect(link.closed).toBe(true);
    ib.handle(hello("a2"), Date.now());
    await ib.drain();
    await new Promise((r) => setTimeout(r, 50));
    expect(warnings).toEqual([]);
    expect((await store.getAgent("a2"))?.status).toBe("online");
  });
});
