import { generateKeyPairSync } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nativeTarget } from "../../agent/native-target.js";
import { makeBundle } from "../../coordinator/bundle/make.js";
import { sha256 } from "../../coordinator/bundle/manifest.js";
import { readSigningKey } from "../../coordinator/bundle/signature.js";
import { parseCoordinatorConfig, secretsDir } from "../../coordinator/config.js";
import { openStore } from "../../coordinator/coordinator.js";
import { TERMINAL_STATES } from "../../shared/fsm.js";
import {
  type CoordinatorProcess,
  coordinatorProcess,
} from "../helpers/chaos/coordinator-process.js";
import { type TestBroker, tempDir, testBroker, waitFor } from "../helpers/env.js";
import { enrollBeforeStart } from "../helpers/identities.js";
import {
  abInstall,
  currentSlotOf,
  packBundle,
  readBundleDir,
  SlowProxy,
  SupervisedAgent,
  sizeOf,
  writeJson,
} from "../helpers/ota.js";

/**
 * Over-the-air updates on real parts (issue "Fleet rollouts", items 2 and 4): a coordinator
 * process, a real agent process of the sensor-hub bundle in an A/B install started by its launcher
 * under a supervisor that restarts it as systemd would, bundles built and signed in the test. The
 * agent is updated to a newer build (switches, registers, reports the new version), to a build
 * that exits at start (rolls back by itself), to one that never registers (rolled back at the end
 * of its health window), and from a bundle whose signature is not the coordinator's (refused
 * before install); it is killed -9 during a download (comes back on its version, the record says
 * interrupted) and the next update, a rollout, resumes the download; and it is killed -9 the
 * moment an update's trial is on disk, at the switch (it starts one of its two versions, and the
 * record says which). Every execution's recorded state is the agent journal's, and the slot it
 * runs is the one the record says.
 */
const AGENT = "ota-dev-1";
const HEALTH_MS = 4_000;

interface Exec {
  id: string;
  state: string;
  message?: string;
  result?: Record<string, unknown>;
}

describe("OTA: agent.update on a real agent", () => {
  const tmp = tempDir("ax-ota-");
  const root = join(tmp.dir, "opt-ax-agent");
  let broker: TestBroker;
  let coord: CoordinatorProcess;
  let proxy: SlowProxy;
  let device: SupervisedAgent;
  const published: Record<string, { sha256: string; bytes: number; version: string }> = {};
  const executions: string[] = [];

  const api = <T>(method: string, path: string, body?: unknown) => coord.api<T>(method, path, body);

  async function publish(name: string, archive: Buffer): Promise<string> {
    const res = await fetch(`${coord.url}/api/bundles`, {
      method: "POST",
      headers: {
        authorization: "Bearer chaos-operator-token-0123456789",
        "content-type": "application/gzip",
      },
      body: archive,
    });
    const body = (await res.json()) as { sha256: string; bytes: number; version: string };
    expect(res.status, JSON.stringify(body)).toBeLessThan(300);
    published[name] = body;
    return body.sha256;
  }

  async function update(sha: string): Promise<string> {
    const r = await api<{ executionIds: string[] }>("POST", "/api/commands", {
      agentId: AGENT,
      handler: "agent.update",
      params: { bundle: sha, healthWindowMs: HEALTH_MS },
      timeout: "2m",
      deadline: new Date(Date.now() + 60_000).toISOString(),
    });
    const id = r.executionIds[0] as string;
    executions.push(id);
    return id;
  }

  const execution = async (id: string) =>
    (await api<{ execution: Exec }>("GET", `/api/executions/${id}`)).execution;

  async function ended(id: string, timeoutMs = 45_000): Promise<Exec> {
    try {
      return await waitFor(
        `execution ${id} to end`,
        async () => {
          const e = await execution(id).catch(() => undefined);
          return e && TERMINAL_STATES.has(e.state as never) ? e : undefined;
        },
        timeoutMs,
        100,
      );
    } catch (err) {
      const e = await execution(id).catch(() => undefined);
      throw new Error(
        `${(err as Error).message}; it is ${JSON.stringify(e)}; the agent's log ends:\n${device.log().slice(-4000)}`,
      );
    }
  }

  async function agentVersion(): Promise<string | undefined> {
    const a = await api<{ status: string; bundleVersion?: string; bundle?: { version: string } }>(
      "GET",
      `/api/agents/${AGENT}`,
    ).catch(() => undefined);
    if (a?.status !== "online") return undefined;
    return a.bundleVersion ?? a.bundle?.version;
  }

  beforeAll(async () => {
    broker = await testBroker();
    coord = await coordinatorProcess(tmp.dir, broker.url, broker.prefix, { heartbeatMs: 500 });
    proxy = new SlowProxy(Number(new URL(coord.url).port));
    await proxy.listen();
    // Agents download through the proxy, which the kill-during-download case slows down.
    const config = { ...coord.config, http: { ...coord.config.http, publicUrl: proxy.url } };
    writeFileSync(coord.configFile, JSON.stringify(config, null, 2));
    const identities = await enrollBeforeStart(config, [AGENT], tmp.dir);
    await coord.start();

    const key = readSigningKey(
      join(secretsDir(parseCoordinatorConfig(config)), "bundle-signing.key"),
    );
    const built: Record<string, string> = {};
    for (const version of ["1.0.0", "2.0.0", "3.0.0"]) {
      const b = await makeBundle({
        profile: "sensor-hub",
        outDir: join(tmp.dir, `bundles-${version}`),
        signingKey: key,
        version,
      });
      built[version] = b.dir;
    }
    abInstall(root, built["1.0.0"] as string);
    await publish("v2", readFileSync(join(built["2.0.0"] as string, "sensor-hub.tar.gz")));
    await publish("v3", readFileSync(join(built["3.0.0"] as string, "sensor-hub.tar.gz")));
    const v2 = readBundleDir(built["2.0.0"] as string);
    // Exits as it starts: a crash loop.
    const crash = new Map(v2.files).set("agent.mjs", Buffer.from("process.exit(3);\n"));
    await publish(
      "crash",
      packBundle({ ...v2.manifest, ax: { version: "2.1.0-crash" } }, crash, key),
    );
    // Runs, but never registers: only the health window catches it.
    const mute = new Map(v2.files).set("agent.mjs", Buffer.from("setInterval(() => {}, 1000);\n"));
    await publish("mute", packBundle({ ...v2.manifest, ax: { version: "2.2.0-mute" } }, mute, key));
    // Blocks its event loop at start, the one the launcher's process runs it on.
    const spin = new Map(v2.files).set("agent.mjs", Buffer.from("for (;;) {}\n"));
    await publish("spin", packBundle({ ...v2.manifest, ax: { version: "2.2.1-spin" } }, spin, key));
    // Signed by a key that is not the coordinator's, put straight into the store (as if written
    // by something other than the publishing API, which refuses it): only the device's own check
    // stands between it and the install.
    const other = generateKeyPairSync("ed25519").privateKey;
    const forged = packBundle({ ...v2.manifest, ax: { version: "2.3.0-forged" } }, v2.files, other);
    const store = await openStore(parseCoordinatorConfig(config));
    try {
      const sha = sha256(forged);
      await store.putBundle(
        {
          sha256: sha,
          profile: "sensor-hub",
          version: "2.3.0-forged",
          target: nativeTarget(),
          bytes: forged.length,
          agentSha256: v2.manifest.files["agent.mjs"]?.sha256 as string,
          keyId: "forged",
          builtAt: Date.now(),
          publishedAt: Date.now(),
          publishedBy: "test",
        },
        forged,
      );
      published.forged = { sha256: sha, bytes: forged.length, version: "2.3.0-forged" };
    } finally {
      await store.close();
    }

    const configFile = join(tmp.dir, "agent.json");
    writeJson(configFile, {
      agentId: AGENT,
      mqtt: { url: broker.url, prefix: broker.prefix, keepaliveS: 5 },
      identityFile: identities[AGENT],
      journal: { path: join(tmp.dir, "journal.sqlite") },
      heartbeatMs: 500,
    });
    device = new SupervisedAgent(root, configFile, join(tmp.dir, "agent.log"));
    device.start();
    await waitFor(
      "the agent online on 1.0.0",
      async () => ((await agentVersion()) === "1.0.0" ? true : undefined),
      20_000,
    );
  }, 120_000);

  afterAll(async () => {
    await device?.stop();
    await coord?.stop();
    await proxy?.close();
    await broker?.close();
    tmp.cleanup();
  });

  it("updates to a newer build: switches to slot b, registers, reports the new version", async () => {
    const id = await update(published.v2?.sha256 as string);
    const e = await ended(id);
    expect(e.state, `${e.message}\n${device.log().slice(-3000)}`).toBe("SUCCEEDED");
    expect(e.result).toMatchObject({ version: "2.0.0", installed: "2.0.0", rolledBack: false });
    expect(currentSlotOf(root)).toBe("b");
    await waitFor("the agent online on 2.0.0", async () =>
      (await agentVersion()) === "2.0.0" ? true : undefined,
    );
  }, 60_000);

  it("a build that exits at start: the device goes back by itself and reports the failed update", async () => {
    const startsBefore = device.starts;
    const id = await update(published.crash?.sha256 as string);
    const e = await ended(id);
    expect(e.state).toBe("FAILED");
    expect(e.message).toContain("rolled back to 2.0.0");
    expect(e.message).toContain("started 3 times without registering");
    expect(currentSlotOf(root)).toBe("b");
    // The restart into it, its three starts, the one back.
    expect(device.starts - startsBefore).toBeGreaterThanOrEqual(4);
    await waitFor("the agent online on 2.0.0 again", async () =>
      (await agentVersion()) === "2.0.0" ? true : undefined,
    );
  }, 60_000);

  // Only the health window catches either: the one that blocks its event loop stops the
  // launcher's own thread too, so the window is watched from a worker thread.
  it.each([
    ["runs but never registers", "mute"],
    ["blocks its event loop", "spin"],
  ] as const)(
    "a build that %s: rolled back when its health window ends",
    async (_, build) => {
      const id = await update(published[build]?.sha256 as string);
      const e = await ended(id);
      expect(e.state).toBe("FAILED");
      expect(e.message).toContain(`did not register within ${HEALTH_MS} ms`);
      expect(currentSlotOf(root)).toBe("b");
      await waitFor("the agent online on 2.0.0 again", async () =>
        (await agentVersion()) === "2.0.0" ? true : undefined,
      );
    },
    60_000,
  );

  it("a bundle not signed by the coordinator's key is refused before install", async () => {
    const startsBefore = device.starts;
    const id = await update(published.forged?.sha256 as string);
    const e = await ended(id);
    expect(e.state).toBe("FAILED");
    expect(e.message).toContain("refused before install");
    expect(e.message).toContain("signature does not verify");
    expect(currentSlotOf(root)).toBe("b");
    expect(device.starts).toBe(startsBefore); // nothing restarted
    expect(existsSync(join(root, "update.json"))).toBe(true);
    expect(JSON.parse(readFileSync(join(root, "update.json"), "utf8")).trial).toBeUndefined();
  }, 60_000);

  it("kill -9 during the download: back on its version, recorded interrupted; the next update resumes it", async () => {
    const v3 = published.v3 as { sha256: string; bytes: number };
    proxy.bytesPerSecond = 100_000;
    const id = await update(v3.sha256);
    const part = join(root, "downloads", `${v3.sha256}.tar.gz`);
    await waitFor(
      "part of the download",
      () => (sizeOf(part) > 150_000 ? true : undefined),
      30_000,
    );
    await device.kill9();
    const got = sizeOf(part);
    expect(got).toBeLessThan(v3.bytes);
    proxy.bytesPerSecond = undefined;
    const e = await ended(id);
    expect(e.state, e.message).not.toBe("SUCCEEDED");
    expect(e.message).toContain("stopped while this was running");
    expect(currentSlotOf(root)).toBe("b");
    await waitFor("the agent online on 2.0.0 again", async () =>
      (await agentVersion()) === "2.0.0" ? true : undefined,
    );

    // This time as a rollout, as an operator updates a fleet: it records the same truth.
    await api("POST", "/api/rollouts", {
      id: "ro-ota",
      selector: { agentIds: [AGENT] },
      command: {
        handler: "agent.update",
        params: { bundle: v3.sha256, healthWindowMs: HEALTH_MS },
        timeout: "2m",
      },
      rate: { perMinute: 60 },
    });
    const rollout = await waitFor(
      "the rollout completed",
      async () => {
        const r = (
          await api<{
            rollout: { state: string; settled: boolean; progress: { byState: object } };
          }>("GET", "/api/rollouts/ro-ota")
        ).rollout;
        return r.settled ? r : undefined;
      },
      45_000,
      100,
    );
    expect(rollout.state).toBe("COMPLETED");
    expect(rollout.progress.byState).toEqual({ SUCCEEDED: 1 });
    const updates = await api<{
      items: {
        executionId: string;
        fromVersion: string;
        version: string;
        rolloutId: string | null;
        state: string;
      }[];
    }>("GET", `/api/agents/${AGENT}/updates`);
    const latest = updates.items[0];
    expect(latest).toMatchObject({
      fromVersion: "2.0.0",
      version: "3.0.0",
      rolloutId: "ro-ota",
      state: "SUCCEEDED",
    });
    const again = latest?.executionId as string;
    executions.push(again);
    const done = await ended(again);
    expect(done.state, done.message).toBe("SUCCEEDED");
    expect(done.result).toMatchObject({ version: "3.0.0" });
    expect(currentSlotOf(root)).toBe("a");
    const resumed = proxy.requests.filter((r) => r.line.includes(v3.sha256) && r.range);
    expect(resumed.length).toBeGreaterThanOrEqual(1);
    expect(Number(/bytes=(\d+)-/.exec(resumed.at(-1)?.range ?? "")?.[1])).toBeGreaterThan(0);
    await waitFor("the agent online on 3.0.0", async () =>
      (await agentVersion()) === "3.0.0" ? true : undefined,
    );
  }, 90_000);

  it("kill -9 the moment the trial is recorded: the device starts one of its versions, and the record says which", async () => {
    const v2 = published.v2 as { sha256: string };
    const before = currentSlotOf(root);
    const id = await update(v2.sha256);
    // The trial is written just before the switch: kill as soon as it is on disk, which lands
    // before the switch, inside it, or after it, whichever the scheduler gives.
    const state = join(root, "update.json");
    await waitFor(
      "the trial recorded",
      () => {
        try {
          return JSON.parse(readFileSync(state, "utf8")).trial?.executionId === id
            ? true
            : undefined;
        } catch {
          return undefined;
        }
      },
      30_000,
      1,
    );
    await device.kill9();
    const e = await ended(id);
    const after = currentSlotOf(root);
    if (e.state === "SUCCEEDED") {
      expect(after).not.toBe(before);
      expect(e.result).toMatchObject({ version: "2.0.0" });
      await waitFor("online on 2.0.0", async () =>
        (await agentVersion()) === "2.0.0" ? true : undefined,
      );
    } else {
      expect(e.state, e.message).toBe("FAILED");
      expect(after).toBe(before);
      expect(e.message).toMatch(/rolled back to 3\.0\.0|stopped while this was running/);
      await waitFor("online on 3.0.0", async () =>
        (await agentVersion()) === "3.0.0" ? true : undefined,
      );
    }
    console.log(`kill at the trial: ${e.state} (${e.message}); current ${before} → ${after}`);
  }, 90_000);

  it("the record is the truth: every update's state is what the agent's journal says", async () => {
    await device.stop();
    const journal = new Database(join(tmp.dir, "journal.sqlite"), { readonly: true });
    try {
      for (const id of executions) {
        const e = await execution(id);
        const row = journal
          .prepare("SELECT state FROM commands WHERE execution_id = ? ORDER BY round DESC LIMIT 1")
          .get(id) as { state: string } | undefined;
        expect(row, `journal row of ${id}`).toBeDefined();
        // As the chaos suite's truth check maps them (test/helpers/chaos/truth.ts).
        const expected: Record<string, string> = {
          succeeded: "SUCCEEDED",
          failed: "FAILED",
          interrupted: "FAILED",
        };
        expect(e.state, `${id}: ${e.message}`).toBe(expected[row?.state as string]);
      }
    } finally {
      journal.close();
    }
  }, 30_000);
});
