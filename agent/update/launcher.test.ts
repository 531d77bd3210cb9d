import { existsSync, mkdirSync, readlinkSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../../test/helpers/env.js";
import { decideLaunch, healthWindowEnded } from "./launcher.js";
import {
  MAX_TRIAL_STARTS,
  readState,
  type Slot,
  switchTo,
  type UpdateTrial,
  writeState,
} from "./state.js";

/**
 * The launcher's decisions for every state a power cut can leave on disk during an update
 * (docs/rollouts.md, "What happens on failure"): each one starts one of the two versions, and an
 * update that did not come up is recorded failed for the old version to report.
 */
let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

function install(current: Slot | undefined): string {
  const t = tempDir("ax-launch-");
  cleanup = t.cleanup;
  for (const slot of ["a", "b"]) {
    mkdirSync(join(t.dir, slot));
    writeFileSync(join(t.dir, slot, "agent.mjs"), `// ${slot}\n`);
  }
  if (current) symlinkSync(current, join(t.dir, "current"));
  return t.dir;
}

const trial = (over: Partial<UpdateTrial> = {}): UpdateTrial => ({
  executionId: "ex-1",
  round: 1,
  slot: "b",
  previous: "a",
  version: "2.0.0",
  fromVersion: "1.0.0",
  sha256: "f".repeat(64),
  healthWindowMs: 5_000,
  starts: 0,
  ...over,
});

describe("launcher", () => {
  it("starts the current slot when no update is on trial", () => {
    const root = install("a");
    expect(decideLaunch(root, 1)).toEqual({ agentFile: join(root, "current", "agent.mjs") });
  });

  it("a cut between recording the trial and the switch: the old version starts, the update is failed", () => {
    const root = install("a");
    writeState(root, { trial: trial() });
    const l = decideLaunch(root, 1);
    expect(l.agentFile).toBe(join(root, "current", "agent.mjs"));
    expect(readlinkSync(join(root, "current"))).toBe("a");
    expect(l.watch).toBeUndefined();
    const out = readState(root);
    expect(out.trial).toBeUndefined();
    expect(out.outcome).toMatchObject({ executionId: "ex-1", ok: false, running: "1.0.0" });
    expect(out.outcome?.message).toContain("interrupted before its switch");
  });

  it("a cut inside the switch (the new link written beside current, not renamed): the old version starts", () => {
    const root = install("a");
    writeState(root, { trial: trial() });
    symlinkSync("b", join(root, ".current.tmp"));
    decideLaunch(root, 1);
    expect(readlinkSync(join(root, "current"))).toBe("a");
    expect(readState(root).outcome?.ok).toBe(false);
    // The next switch replaces the leftover.
    switchTo(root, "b");
    expect(readlinkSync(join(root, "current"))).toBe("b");
    expect(existsSync(join(root, ".current.tmp"))).toBe(false);
  });

  it("after the switch: the new version starts on trial, each start counted and watched", () => {
    const root = install("b");
    writeState(root, { trial: trial() });
    const l = decideLaunch(root, 1);
    expect(l.agentFile).toBe(join(root, "current", "agent.mjs"));
    expect(l.watch?.starts).toBe(1);
    expect(readState(root).trial?.starts).toBe(1);
    expect(decideLaunch(root, 2).watch?.starts).toBe(2);
  });

  it(`a crash loop: after ${MAX_TRIAL_STARTS} starts without registering, back to the previous slot`, () => {
    const root = install("b");
    writeState(root, { trial: trial({ starts: MAX_TRIAL_STARTS }) });
    const l = decideLaunch(root, 1);
    expect(l.watch).toBeUndefined();
    expect(readlinkSync(join(root, "current"))).toBe("a");
    const out = readState(root).outcome;
    expect(out).toMatchObject({ ok: false, running: "1.0.0", installed: "2.0.0" });
    expect(out?.message).toContain(`started ${MAX_TRIAL_STARTS} times without registering`);
  });

  it("the health window: still on trial at its end → back; confirmed by then → nothing", () => {
    const root = install("b");
    writeState(root, { trial: trial() });
    const watched = decideLaunch(root, 1).watch as UpdateTrial;
    expect(healthWindowEnded(root, watched, 2)).toBe(true);
    expect(readlinkSync(join(root, "current"))).toBe("a");
    expect(readState(root).outcome?.message).toContain("did not register within 5000 ms");

    switchTo(root, "b");
    writeState(root, { trial: trial({ executionId: "ex-2" }) });
    const again = decideLaunch(root, 3).watch as UpdateTrial;
    writeState(root, {
      outcome: {
        executionId: "ex-2",
        round: 1,
        ok: true,
        running: "2.0.0",
        installed: "2.0.0",
        message: "ok",
        at: 4,
      },
    });
    expect(healthWindowEnded(root, again, 5)).toBe(false);
    expect(readlinkSync(join(root, "current"))).toBe("b");
  });

  it("a half-written slot from a cut during install is ignored: the current slot starts", () => {
    const root = install("a");
    mkdirSync(join(root, ".install-b"));
    writeFileSync(join(root, ".install-b", "agent.mjs"), "partial");
    expect(decideLaunch(root, 1).agentFile).toBe(join(root, "current", "agent.mjs"));
  });

  it("a flat install (the bundle's files in the root) runs the agent beside the launcher", () => {
    const t = tempDir("ax-launch-");
    cleanup = t.cleanup;
    writeFileSync(join(t.dir, "agent.mjs"), "//");
    expect(decideLaunch(t.dir, 1)).toEqual({ agentFile: join(t.dir, "agent.mjs") });
  });

  it("nothing to start: no current link and no agent beside it", () => {
    const t = tempDir("ax-launch-");
    cleanup = t.cleanup;
    expect(decideLaunch(t.dir, 1).agentFile).toBeUndefined();
  });
});
