import { realpathSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import {
  AGENT_UPDATE_HANDLER,
  type AgentUpdateParams,
  agentUpdateParamsSchema,
  DEFAULT_HEALTH_WINDOW_MS,
  type NativeTarget,
  targetMismatch,
} from "../../shared/update.js";
import type { AgentLogger } from "../agent.js";
import {
  defineHandler,
  type Handler,
  type HandlerContext,
  HandlerFailure,
} from "../handlers/registry.js";
import type { CommandRow, ReportBody } from "../journal/journal.js";
import type * as Installer from "./installer.js";
import {
  currentSlot,
  DOWNLOADS_DIR,
  otherSlot,
  readState,
  type Slot,
  switchTo,
  type UpdateState,
  writeState,
} from "./state.js";

type Finished = Extract<ReportBody, { type: "finished" }>;

export interface UpdaterOptions {
  /** The A/B install root (the launcher's folder). */
  root: string;
  /** The agent file this process runs (inside a slot). */
  self: string;
  /** Loads the installer (update.mjs beside the agent): only when an update runs. */
  installer: () => Promise<typeof Installer>;
  agentId: string;
  /** The message key and its generation: they vouch for the download request. */
  key: Buffer;
  generation: number;
  /** The coordinator's bundle public key (SPKI PEM), from the identity file. */
  bundlePublicKey: string;
  /** This agent's version. */
  version: string;
  /** What this device runs on. */
  target: NativeTarget;
  coordNow(): number;
  /**
   * Lets go of the update's execution (the next process reports it), stops the agent as on
   * SIGTERM and exits for systemd to start it again.
   */
  restart(executionId: string): void;
  log: AgentLogger;
}

/**
 * The built-in `agent.update` handler and the two ends of an update that outlive a process:
 * recovery (an update's execution found running after the restart it asked for) and
 * confirmation (the new version registered). docs/rollouts.md, "Agent updates". The download,
 * the checks and the install are in installer.ts, loaded when an update runs.
 */
export class Updater {
  readonly handler: Handler<AgentUpdateParams>;
  private readonly slot: Slot | undefined;
  /** The update downloading or installing in this process: one at a time (they share the slot). */
  private inProgress: string | undefined;

  constructor(private readonly o: UpdaterOptions) {
    const slot = basename(dirname(realpathSync(o.self)));
    this.slot = slot === "a" || slot === "b" ? slot : undefined;
    this.handler = defineHandler(AGENT_UPDATE_HANDLER, agentUpdateParamsSchema, (ctx, p) =>
      this.run(ctx, p),
    );
  }

  /**
   * What recovery reports for a command found running after a restart: the update's outcome the
   * launcher or a confirmation recorded; `hold` for the update on trial in this very process (it
   * is reported once this version registers); undefined for anything else.
   */
  recovered(row: CommandRow, finishedAt: number): Finished | "hold" | undefined {
    const state = readState(this.o.root);
    const trial = state.trial;
    if (trial && trial.executionId === row.executionId && trial.round === row.round) {
      return this.slot === trial.slot ? "hold" : undefined;
    }
    const out = state.outcome;
    if (!out || out.executionId !== row.executionId || out.round !== row.round) return undefined;
    return outcomeReport(row, out, finishedAt);
  }

  /**
   * Called when this agent is welcomed: a trial of this very version ends well. The outcome is
   * written before it is reported, so a crash between the two reports it after the restart.
   */
  confirm(now: number): UpdateState["outcome"] | undefined {
    const trial = readState(this.o.root).trial;
    if (!trial || trial.slot !== this.slot || currentSlot(this.o.root) !== trial.slot) {
      return undefined;
    }
    const outcome = {
      executionId: trial.executionId,
      round: trial.round,
      ok: true,
      running: this.o.version,
      installed: trial.version,
      message: `updated from ${trial.fromVersion} to ${trial.version}; registered on start ${trial.starts}`,
      at: now,
    };
    writeState(this.o.root, { outcome });
    this.o.log("info", "update confirmed: this version registered", {
      version: trial.version,
      executionId: trial.executionId,
    });
    return outcome;
  }

  private async run(ctx: HandlerContext, p: AgentUpdateParams): Promise<undefined> {
    const root = this.o.root;
    const running = currentSlot(root);
    if (running === undefined || running !== this.slot) {
      throw new HandlerFailure(
        `not an A/B install: ${root}/current does not point at the slot this agent runs from (docs/rollouts.md, "Agent updates")`,
        { retryable: false },
      );
    }
    if (readState(root).trial) {
      throw new HandlerFailure("another update is on trial on this device");
    }
    const mismatch = targetMismatch(p.target, this.o.target);
    if (mismatch) {
      throw new HandlerFailure(`refused before download: ${mismatch}`, { retryable: false });
    }
    // Two updates at once (two rollouts reaching this device together) would download to one file
    // and install into one slot over each other. The second waits for a retry.
    if (this.inProgress !== undefined) {
      throw new HandlerFailure(`another update (${this.inProgress}) is in progress on this device`);
    }
    this.inProgress = ctx.executionId;
    const slot = otherSlot(running);
    try {
      const installer = await this.o.installer();
      const archive = await installer.download(p, {
        root,
        agentId: this.o.agentId,
        key: this.o.key,
        generation: this.o.generation,
        coordNow: this.o.coordNow,
        signal: ctx.signal,
        log: ctx.log,
      });
      ctx.progress(60, "downloaded");
      const files = installer.verifyBundle(archive, p, this.o.bundlePublicKey, this.o.target);
      ctx.progress(80, `installing into ${slot}`);
      installer.installSlot(root, slot, files);
      rmSync(join(root, DOWNLOADS_DIR, `${p.sha256}.tar.gz`), { force: true });
    } catch (err) {
      this.inProgress = undefined;
      const retryable = (err as { retryable?: unknown }).retryable;
      throw new HandlerFailure((err as Error).message, {
        retryable: typeof retryable === "boolean" ? retryable : true,
        cause: err,
      });
    }
    try {
      // The trial first, then the switch: a power cut between them leaves the old version running
      // and the trial recorded, which the launcher turns into a failed update at the next start.
      writeState(root, {
        trial: {
          executionId: ctx.executionId,
          round: ctx.round,
          slot,
          previous: running,
          version: p.version,
          fromVersion: this.o.version,
          sha256: p.sha256,
          healthWindowMs: p.healthWindowMs ?? DEFAULT_HEALTH_WINDOW_MS,
          starts: 0,
        },
      });
      switchTo(root, slot);
    } catch (err) {
      // Not switched: this process may take another update (a trial left on disk is still
      // refused above, and the launcher fails it at the next start).
      this.inProgress = undefined;
      throw err;
    }
    ctx.log("switched: restarting into the new version", { slot, version: p.version });
    this.o.restart(ctx.executionId);
    // Reported by the next process: on success by the new version, otherwise by the old one.
    return new Promise<undefined>(() => {});
  }
}

/** The report of an update's outcome, for its execution found running after a restart. */
export function outcomeReport(
  row: Pick<CommandRow, "executionId" | "round" | "startedAt">,
  out: NonNullable<UpdateState["outcome"]>,
  finishedAt: number,
): Finished {
  return {
    type: "finished",
    executionId: row.executionId,
    round: row.round,
    finishedAt,
    ...(row.startedAt === null ? {} : { startedAt: row.startedAt }),
    outcome: out.ok ? "succeeded" : "failed",
    retryable: false,
    message: out.message,
    result: { version: out.running, installed: out.installed, rolledBack: !out.ok },
  };
}
