import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, join } from "node:path";
import * as z from "zod/mini";
import { readTar } from "../../shared/tar-read.js";
import {
  AGENT_UPDATE_HANDLER,
  type AgentUpdateParams,
  agentUpdateParamsSchema,
  bundleAuthorization,
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
import {
  currentSlot,
  DOWNLOADS_DIR,
  otherSlot,
  readState,
  type Slot,
  switchTo,
  syncDir,
  type UpdateState,
  writeState,
} from "./state.js";

type Finished = Extract<ReportBody, { type: "finished" }>;

const MANIFEST_FILE = "manifest.json";
const SIGNATURE_FILE = "manifest.sig";
/** A device's own secret never comes in a bundle sent to many devices. */
const IDENTITY_FILE = "ax-identity.json";

/** What of manifest.json an agent checks (coordinator/bundle/manifest.ts has the whole schema). */
const manifestSchema = z.object({
  profile: z.object({ name: z.string() }),
  ax: z.object({ version: z.string() }),
  node: z.object({ abi: z.nullable(z.int()) }),
  target: z.object({ platform: z.string(), arch: z.string(), libc: z.string() }),
  agent: z.string(),
  files: z.record(z.string(), z.object({ sha256: z.string(), bytes: z.int() })),
});

export interface UpdaterOptions {
  /** The A/B install root (the launcher's folder). */
  root: string;
  /** The agent file this process runs (inside a slot). */
  self: string;
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
  /** Stops the agent (all but the update's own execution) and exits for systemd to restart it. */
  restart(): void;
  log: AgentLogger;
}

/**
 * The built-in `agent.update` handler and the two ends of an update that outlive a process:
 * recovery (an update's execution found running after the restart it asked for) and
 * confirmation (the new version registered). docs/rollouts.md, "Agent updates".
 */
export class Updater {
  readonly handler: Handler<AgentUpdateParams>;
  private readonly slot: Slot | undefined;

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
      if (this.slot === trial.slot) return "hold";
      return undefined;
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
    const state = readState(this.o.root);
    const trial = state.trial;
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
      throw new HandlerFailure("another update is on trial on this device", { retryable: true });
    }
    const mismatch = targetMismatch(p.target, this.o.target);
    if (mismatch)
      throw new HandlerFailure(`refused before download: ${mismatch}`, { retryable: false });

    const archive = await this.download(ctx, p);
    const files = this.verify(archive, p);
    const slot = otherSlot(running);
    ctx.progress(90, `installing into ${slot}`);
    install(root, slot, files);
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
    rmSync(join(root, DOWNLOADS_DIR, `${p.sha256}.tar.gz`), { force: true });
    ctx.log("switched: restarting into the new version", { slot, version: p.version });
    this.o.restart();
    // Reported by the next process: on success by the new version, otherwise by the old one.
    return new Promise<undefined>(() => {});
  }

  /** Downloads the archive (resuming a partial one), checking its size and sha256. */
  private async download(ctx: HandlerContext, p: AgentUpdateParams): Promise<Buffer> {
    const dir = join(this.o.root, DOWNLOADS_DIR);
    mkdirSync(dir, { recursive: true });
    const part = join(dir, `${p.sha256}.tar.gz`);
    let have = existsSync(part) ? statSync(part).size : 0;
    if (have > p.bytes) {
      rmSync(part, { force: true });
      have = 0;
    }
    if (have < p.bytes) {
      const headers: Record<string, string> = {
        authorization: bundleAuthorization(
          this.o.key,
          this.o.generation,
          this.o.coordNow(),
          this.o.agentId,
          p.sha256,
        ),
      };
      if (have > 0) headers.range = `bytes=${have}-`;
      let res: Response;
      try {
        res = await fetch(p.url, { headers, signal: ctx.signal });
      } catch (err) {
        throw new HandlerFailure(`download from ${p.url} failed: ${(err as Error).message}`);
      }
      if (res.status === 200 && have > 0) have = 0; // the server sent it whole: start over
      if (res.status !== 200 && res.status !== 206) {
        const text = (await res.text().catch(() => "")).slice(0, 300);
        throw new HandlerFailure(`download from ${p.url}: HTTP ${res.status} ${text}`, {
          retryable: res.status >= 500 || res.status === 408 || res.status === 429,
        });
      }
      ctx.log(have > 0 ? "resuming the download" : "downloading", { from: have, bytes: p.bytes });
      const fd = openSync(part, have > 0 ? "a" : "w");
      try {
        if (res.body) {
          for await (const chunk of res.body) {
            const bytes = Buffer.from(chunk as Uint8Array);
            if (have + bytes.length > p.bytes) {
              throw new HandlerFailure(`download: more than the ${p.bytes} bytes announced`);
            }
            let off = 0;
            while (off < bytes.length) off += writeSync(fd, bytes, off);
            have += bytes.length;
          }
        }
        fsyncSync(fd);
      } catch (err) {
        if (err instanceof HandlerFailure) rmSync(part, { force: true });
        throw err instanceof HandlerFailure
          ? err
          : new HandlerFailure(
              `download interrupted at ${have} of ${p.bytes} bytes: ${(err as Error).message}`,
            );
      } finally {
        closeSync(fd);
      }
      if (have !== p.bytes) {
        throw new HandlerFailure(
          `download ended at ${have} of ${p.bytes} bytes; resumed next time`,
        );
      }
    }
    ctx.progress(60, "downloaded");
    const data = readFileSync(part);
    const crypto = nodeCrypto();
    const sha = crypto.createHash("sha256").update(data).digest("hex");
    if (sha !== p.sha256) {
      rmSync(part, { force: true });
      throw new HandlerFailure(
        `download: sha256 ${sha.slice(0, 12)}…, expected ${p.sha256.slice(0, 12)}…`,
      );
    }
    return data;
  }

  /**
   * The archive's files, once its manifest's signature verifies with the key this device trusts
   * and every file matches the manifest; refused otherwise, before anything is installed.
   */
  private verify(
    archive: Buffer,
    p: AgentUpdateParams,
  ): Map<string, { data: Buffer; mode: number }> {
    const zlib = createRequire(import.meta.url)("node:zlib") as typeof import("node:zlib");
    let entries: ReturnType<typeof readTar>;
    try {
      entries = readTar(zlib.gunzipSync(archive));
    } catch (err) {
      throw new HandlerFailure(`refused: not a bundle archive: ${(err as Error).message}`, {
        retryable: false,
      });
    }
    const files = new Map<string, { data: Buffer; mode: number }>();
    for (const e of entries) {
      if (e.name.endsWith("/")) continue;
      const slash = e.name.indexOf("/");
      const name = slash < 0 ? e.name : e.name.slice(slash + 1);
      if (name === "" || name.includes("/") || name.startsWith(".")) {
        throw new HandlerFailure(`refused: unexpected path in the archive: ${e.name}`, {
          retryable: false,
        });
      }
      files.set(name, { data: e.data, mode: e.mode ?? 0o644 });
    }
    const refuse = (why: string) =>
      new HandlerFailure(`refused before install: ${why}`, { retryable: false });
    const manifestBytes = files.get(MANIFEST_FILE)?.data;
    if (!manifestBytes) throw refuse(`no ${MANIFEST_FILE}`);
    const sigText = files.get(SIGNATURE_FILE)?.data.toString("utf8");
    if (sigText === undefined) throw refuse(`no ${SIGNATURE_FILE}: the bundle is not signed`);
    const crypto = nodeCrypto();
    let signed = false;
    try {
      const sig = JSON.parse(sigText) as { alg?: unknown; sig?: unknown };
      signed =
        sig.alg === "ed25519" &&
        typeof sig.sig === "string" &&
        crypto.verify(
          null,
          manifestBytes,
          crypto.createPublicKey(this.o.bundlePublicKey),
          Buffer.from(sig.sig, "base64"),
        );
    } catch {
      signed = false;
    }
    if (!signed) {
      throw refuse(
        `${SIGNATURE_FILE}: the signature does not verify with the coordinator's bundle key this device holds`,
      );
    }
    let manifest: z.infer<typeof manifestSchema>;
    try {
      manifest = manifestSchema.parse(JSON.parse(manifestBytes.toString("utf8")));
    } catch (err) {
      throw refuse(`${MANIFEST_FILE}: ${(err as Error).message}`);
    }
    for (const [name, want] of Object.entries(manifest.files)) {
      const got = files.get(name)?.data;
      if (!got) throw refuse(`${name}: missing`);
      const sha = crypto.createHash("sha256").update(got).digest("hex");
      if (got.length !== want.bytes || sha !== want.sha256)
        throw refuse(`${name}: does not match the manifest`);
    }
    for (const name of files.keys()) {
      if (
        name !== MANIFEST_FILE &&
        name !== SIGNATURE_FILE &&
        !Object.hasOwn(manifest.files, name)
      ) {
        throw refuse(`${name}: not in the manifest`);
      }
    }
    if (files.has(IDENTITY_FILE)) throw refuse(`it carries a device identity (${IDENTITY_FILE})`);
    if (!files.has(manifest.agent))
      throw refuse(`${manifest.agent}: the manifest's agent is missing`);
    if (manifest.agent !== "agent.mjs")
      throw refuse(`its agent is ${manifest.agent}, not agent.mjs`);
    const target = { ...manifest.target, nodeAbi: manifest.node.abi };
    const mismatch = targetMismatch(target, this.o.target);
    if (mismatch) throw refuse(mismatch);
    if (manifest.ax.version !== p.version || manifest.profile.name !== p.profile) {
      throw refuse(
        `it is ${manifest.profile.name} ${manifest.ax.version}, the command says ${p.profile} ${p.version}`,
      );
    }
    return files;
  }
}

function nodeCrypto(): typeof import("node:crypto") {
  return createRequire(import.meta.url)("node:crypto") as typeof import("node:crypto");
}

/** Writes the files into a fresh folder beside the slot, then renames it into place. */
function install(
  root: string,
  slot: Slot,
  files: Map<string, { data: Buffer; mode: number }>,
): void {
  const tmp = join(root, `.install-${slot}`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o755 });
  for (const [name, f] of files) {
    const fd = openSync(join(tmp, name), "w", f.mode & 0o777);
    try {
      let off = 0;
      while (off < f.data.length) off += writeSync(fd, f.data, off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
  syncDir(tmp);
  rmSync(join(root, slot), { recursive: true, force: true });
  renameSync(tmp, join(root, slot));
  syncDir(root);
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
