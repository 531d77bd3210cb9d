import { type ChildProcess, spawn } from "node:child_process";
import type { KeyObject } from "node:crypto";
import {
  closeSync,
  copyFileSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server, Socket } from "node:net";
import { join } from "node:path";
import { fileEntryOf, MANIFEST_FILE, type Manifest } from "../../coordinator/bundle/manifest.js";
import { SIGNATURE_FILE, signManifest } from "../../coordinator/bundle/signature.js";
import { tarGz } from "../../shared/tar.js";
import { alive, exited } from "./chaos/children.js";

/*
 * Real parts for over-the-air update tests: bundles re-packed from a built one (a newer version,
 * a broken one, one signed by another key), an A/B install the way docs/rollouts.md lays it out,
 * a supervisor that restarts the agent's process as systemd's `Restart=always` does, and a TCP
 * proxy that can slow the coordinator's answers down (to kill a device mid-download).
 */

/** A bundle folder's files (as `ax bundle build` wrote them) and its manifest. */
export function readBundleDir(dir: string): { manifest: Manifest; files: Map<string, Buffer> } {
  const manifest = JSON.parse(readFileSync(join(dir, MANIFEST_FILE), "utf8")) as Manifest;
  const files = new Map<string, Buffer>();
  for (const name of Object.keys(manifest.files)) files.set(name, readFileSync(join(dir, name)));
  return { manifest, files };
}

/**
 * Packs `files` as a bundle archive of `profile` whose manifest is `manifest` with the files'
 * sizes and sha256 filled in, signed with `key`. Returns the archive's bytes.
 */
export function packBundle(
  manifest: Manifest,
  files: ReadonlyMap<string, Buffer>,
  key: KeyObject,
): Buffer {
  const m: Manifest = {
    ...manifest,
    files: Object.fromEntries([...files].map(([n, d]) => [n, fileEntryOf(d)])),
  };
  const bytes = Buffer.from(`${JSON.stringify(m, null, 2)}\n`);
  const sig = Buffer.from(signManifest(bytes, key));
  const name = m.profile.name;
  return tarGz(
    [
      { name: `${name}/`, data: Buffer.alloc(0) },
      { name: `${name}/${MANIFEST_FILE}`, data: bytes },
      { name: `${name}/${SIGNATURE_FILE}`, data: sig },
      ...[...files].map(([n, data]) => ({ name: `${name}/${n}`, data })),
    ],
    new Date(m.builtAt),
  );
}

/** Lays out an A/B install in `root` with the bundle folder `bundleDir` in slot a. */
export function abInstall(root: string, bundleDir: string): void {
  mkdirSync(join(root, "a"), { recursive: true });
  for (const name of readdirSync(bundleDir)) {
    if (name.endsWith(".tar.gz")) continue;
    copyFileSync(join(bundleDir, name), join(root, "a", name));
  }
  copyFileSync(join(bundleDir, "launch.mjs"), join(root, "launch.mjs"));
  symlinkSync("a", join(root, "current"));
}

/** The slot `current` points at. */
export function currentSlotOf(root: string): string {
  return readlinkSync(join(root, "current"));
}

/**
 * A device: `node launch.mjs --config FILE` under a supervisor that starts it again 200 ms after
 * it exits (systemd's Restart=always, RestartSec shortened), until `stop`.
 */
export class SupervisedAgent {
  starts = 0;
  readonly exits: (number | null)[] = [];
  private child: ChildProcess | undefined;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly root: string,
    private readonly configFile: string,
    readonly logFile: string,
  ) {}

  start(): void {
    this.stopped = false;
    this.spawn();
  }

  private spawn(): void {
    if (this.stopped) return;
    const fd = openSync(this.logFile, "a");
    const child = spawn(
      process.execPath,
      ["--max-old-space-size=32", join(this.root, "launch.mjs"), "--config", this.configFile],
      { stdio: ["ignore", fd, fd] },
    );
    closeSync(fd);
    this.starts++;
    this.child = child;
    child.once("exit", (code) => {
      this.exits.push(code);
      if (this.child === child) this.child = undefined;
      this.timer = setTimeout(() => this.spawn(), 200);
    });
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** kill -9: the power goes (the supervisor starts it again, as the device boots). */
  async kill9(): Promise<void> {
    const c = this.child;
    if (c && alive(c)) {
      c.kill("SIGKILL");
      await exited(c);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    const c = this.child;
    if (c && alive(c)) {
      c.kill("SIGTERM");
      const t = setTimeout(() => c.kill("SIGKILL"), 5_000);
      await exited(c);
      clearTimeout(t);
    }
  }

  log(): string {
    try {
      return readFileSync(this.logFile, "utf8");
    } catch {
      return "";
    }
  }
}

/**
 * A TCP proxy in front of `target` (host:port). While `bytesPerSecond` is set, what comes back
 * from the target is passed on at about that rate. Records the first line and Range header of
 * each request it forwards.
 */
export class SlowProxy {
  bytesPerSecond: number | undefined;
  readonly requests: { line: string; range: string | undefined }[] = [];
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly targetPort: number) {
    this.server = createServer((client) => this.pipe(client));
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private pipe(client: Socket): void {
    const upstream = new Socket();
    this.sockets.add(client);
    this.sockets.add(upstream);
    upstream.connect(this.targetPort, "127.0.0.1");
    client.on("data", (d: Buffer) => {
      const text = d.toString("latin1");
      const line = /^[A-Z]+ \S+ HTTP\/1\.[01]/.exec(text)?.[0];
      if (line) this.requests.push({ line, range: /\r\nrange: *([^\r\n]+)/i.exec(text)?.[1] });
      upstream.write(d);
    });
    upstream.on("data", (d: Buffer) => {
      const rate = this.bytesPerSecond;
      if (rate === undefined) {
        client.write(d);
        return;
      }
      upstream.pause();
      let off = 0;
      const step = Math.max(1, Math.floor(rate / 20));
      const tick = () => {
        if (client.destroyed) return;
        client.write(d.subarray(off, off + step));
        off += step;
        if (off < d.length) setTimeout(tick, 50);
        else upstream.resume();
      };
      tick();
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Size of a file, 0 when it is not there. */
export function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

export function writeJson(path: string, value: unknown, mode = 0o644): void {
  writeFileSync(path, JSON.stringify(value, null, 2), { mode });
}
