/**
 * Journaled dispatches per second on the agent: the real `Journal.accept()` path (the command row
 * and its `accepted` report in one transaction), and the whole life of a command
 * (accept → running with its `started` report → succeeded with its `finished` report → ack), with
 * `synchronous` NORMAL and FULL, on a file in os.tmpdir().
 *
 * A third part, the stream, goes through the agent's Executor: commands due at a steady rate are
 * fired by its wheel and run by a no-op handler, and the journal's WAL is read to count the
 * commits and frames (pages) each command cost. `--stream` runs only that part and writes nothing.
 *
 * Run: npm run bench:journal   (or: npx tsx bench/journal.ts [--stream])
 */
import { mkdtempSync, rmSync, statfsSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import * as z from "zod/mini";
import { defineHandler, HandlerRegistry } from "../agent/handlers/registry.js";
import { Journal, type ReportBody } from "../agent/journal/journal.js";
import { Executor } from "../agent/runner/executor.js";
import { systemClock } from "../shared/clock.js";
import { envelope } from "../shared/message.js";
import { type Dispatch, dispatchSchema, type Report } from "../shared/protocol/index.js";
import { holdWal, walStats } from "../test/helpers/wal.js";
import { mdTable, percentile, printTable, writeResults } from "./lib.js";

const ACCEPTS = 20_000;
const CYCLES = 10_000;
const WARMUP = 2_000;
/** Each figure is the median of this many runs, the modes interleaved, so a noisy neighbour on the machine moves both alike. */
const REPEATS = 3;
const MODES = ["NORMAL", "NORMAL+start", "FULL"] as const;
/** The stream: commands per second due on one agent, and for how long. */
const STREAM_RATE = 500;
const STREAM_COMMANDS = 3_000;
/**
 * How the stream's commands fall due: one at a time (every 2 ms at 500/s), or in groups of 10
 * every 20 ms, as schedules aligned on the same instants make them.
 */
const STREAM_GROUPS = [1, 10] as const;
type Mode = (typeof MODES)[number];

/** A realistic device command's params: about 200 bytes of JSON. */
function params(i: number): Record<string, unknown> {
  return {
    topic: `site/plant-3/line-2/valve-${i % 64}/set`,
    payload: { position: i % 100, rampMs: 1500, hold: true },
    qos: 1,
    retain: false,
    reason: "schedule:irrigation-morning",
    correlationId: `c-${i.toString(36).padStart(8, "0")}-7f3a9c`,
  };
}

function makeDispatch(i: number, now: number): Dispatch {
  return {
    v: 1,
    type: "dispatch",
    msgId: `m-${i}`,
    sentAt: now,
    executionId: `ex-${i.toString(36).padStart(8, "0")}`,
    round: 1,
    attempt: 1,
    handler: "mqtt.publish",
    params: params(i),
    fireAt: now + 2_000,
    deadline: now + 60_000,
    timeoutMs: 10_000,
    priority: 0,
  };
}

/** As the agent does it: a fresh envelope (msgId, sentAt) plus the seq. */
const env = (body: ReportBody, seq: number) => ({ ...envelope(body, Date.now()), seq }) as Report;

function openJournal(dir: string, name: string, synchronous: Mode): Journal {
  return new Journal({
    path: join(dir, `${name}.sqlite`),
    synchronous: synchronous === "FULL" ? "FULL" : "NORMAL",
    syncStart: synchronous === "NORMAL+start",
    maxOpen: 1_000_000,
    maxOutbox: 1_000_000,
    now: () => Date.now(),
  });
}

interface Run {
  perSec: number;
  p50Ms: number;
  p99Ms: number;
}

function summarise(latencies: Float64Array, totalMs: number): Run {
  const sorted = latencies.slice().sort();
  return {
    perSec: (latencies.length / totalMs) * 1000,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
  };
}

/** The median of each figure over several runs. */
function median(runs: Run[]): Run {
  const mid = (xs: number[]) =>
    percentile(
      xs.sort((x, y) => x - y),
      50,
    );
  return {
    perSec: mid(runs.map((r) => r.perSec)),
    p50Ms: mid(runs.map((r) => r.p50Ms)),
    p99Ms: mid(runs.map((r) => r.p99Ms)),
  };
}

function benchAccept(dir: string, mode: Mode, n: number, run = 0): Run {
  const j = openJournal(dir, `accept-${mode}-${n}-${run}`, mode);
  try {
    const now = Date.now();
    const dispatches = Array.from({ length: n }, (_, i) => makeDispatch(i, now));
    const lat = new Float64Array(n);
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      if (!j.accept(dispatches[i] as Dispatch, env)) throw new Error(`dispatch ${i} not accepted`);
      lat[i] = performance.now() - t;
    }
    return summarise(lat, performance.now() - start);
  } finally {
    j.close();
  }
}

function benchCycle(dir: string, mode: Mode, n: number, run = 0): Run {
  const j = openJournal(dir, `cycle-${mode}-${n}-${run}`, mode);
  try {
    const now = Date.now();
    const dispatches = Array.from({ length: n }, (_, i) => makeDispatch(i, now));
    const lat = new Float64Array(n);
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      const d = dispatches[i] as Dispatch;
      const accepted = j.accept(d, env);
      if (!accepted) throw new Error(`dispatch ${i} not accepted`);
      const { executionId, round } = d;
      const startedAt = Date.now();
      j.transition(
        accepted.id,
        "scheduled",
        "running",
        { type: "started", executionId, round, startedAt, lateMs: 0 },
        env,
        startedAt,
      );
      j.transition(
        accepted.id,
        "running",
        "succeeded",
        {
          type: "finished",
          executionId,
          round,
          outcome: "succeeded",
          retryable: false,
          message: "ok",
          startedAt,
          finishedAt: Date.now(),
        },
        env,
      );
      j.ack(j.lastSeq);
      lat[i] = performance.now() - t;
    }
    if (j.outboxDepth !== 0 || j.open !== 0) throw new Error("cycle left work behind");
    return summarise(lat, performance.now() - start);
  } finally {
    j.close();
  }
}

interface Stream {
  commands: number;
  ratePerSec: number;
  /** Commands falling due at the same instant. */
  group: number;
  /** Transactions committed, and WAL frames written, from the first start to the last finish. */
  commits: number;
  frames: number;
  commitsPerCommand: number;
  framesPerCommand: number;
  /** How late the wheel started commands (startedAt − fireAt). */
  lateP50Ms: number;
  lateP99Ms: number;
}

/**
 * Commands due every 1/STREAM_RATE s, fired by the Executor's wheel (the agent's default journal:
 * NORMAL with a durable start) and run by a handler that returns at once. They are all dispatched
 * ahead (their accepts are not counted); what is counted is what starting and finishing them
 * wrote, read from the WAL, which a second connection keeps from being reset meanwhile.
 */
async function benchStream(
  dir: string,
  n: number,
  ratePerSec: number,
  group: number,
): Promise<Stream> {
  const path = join(dir, `stream-${n}-${group}.sqlite`);
  const journal = openJournal(dir, `stream-${n}-${group}`, "NORMAL+start");
  const late: number[] = [];
  let finished = 0;
  const noop = defineHandler("noop", z.object({}), async () => ({ ok: true }));
  const monoOffset = Date.now() - performance.now();
  const ex = new Executor({
    journal,
    clock: systemClock,
    handlers: new HandlerRegistry([noop]),
    coordNow: () => Date.now(),
    toMono: (t) => t - monoOffset,
    envelope: env,
    publish: (r) => {
      if (r.type === "started") late.push(r.lateMs);
      if (r.type === "finished") finished++;
    },
    concurrency: 4,
    queue: 64,
    tickMs: 20,
    log: (level, message) => {
      if (level === "error") console.error(message);
    },
  });
  let release: (() => void) | undefined;
  try {
    const first = Date.now() + 500;
    for (let i = 0; i < n; i += 64) {
      ex.batch(() => {
        for (let k = i; k < Math.min(n, i + 64); k++) {
          const d = makeDispatch(k, first);
          ex.dispatch({
            ...d,
            handler: "noop",
            params: {},
            fireAt: first + (Math.floor(k / group) * group * 1000) / ratePerSec,
          });
        }
      });
    }
    release = holdWal(path);
    const before = walStats(`${path}-wal`);
    while (finished < n) await new Promise((resolve) => setTimeout(resolve, 50));
    await new Promise((resolve) => setImmediate(resolve));
    const after = walStats(`${path}-wal`);
    const commits = after.commits - before.commits;
    const frames = after.frames - before.frames;
    const sorted = Float64Array.from(late).sort();
    return {
      commands: n,
      ratePerSec,
      group,
      commits,
      frames,
      commitsPerCommand: commits / n,
      framesPerCommand: frames / n,
      lateP50Ms: percentile(sorted, 50),
      lateP99Ms: percentile(sorted, 99),
    };
  } finally {
    release?.();
    ex.close();
    journal.close();
  }
}

const STREAM_HEADER = [
  "due together",
  "commands",
  "rate/s",
  "commits",
  "WAL frames",
  "commits/cmd",
  "frames/cmd",
  "late p50 ms",
  "late p99 ms",
];

function streamRow(s: Stream): (string | number)[] {
  return [
    String(s.group),
    s.commands,
    s.ratePerSec,
    s.commits,
    s.frames,
    s.commitsPerCommand,
    s.framesPerCommand,
    s.lateP50Ms,
    s.lateP99Ms,
  ];
}

async function benchStreams(dir: string): Promise<Stream[]> {
  const out: Stream[] = [];
  for (const group of STREAM_GROUPS) {
    out.push(await benchStream(dir, STREAM_COMMANDS, STREAM_RATE, group));
  }
  printTable(STREAM_HEADER, out.map(streamRow));
  return out;
}

/** Filesystem of `path` by its statfs magic, so a tmpfs (where fsync costs nothing) shows. */
function fsType(path: string): string {
  const known: Record<number, string> = {
    61267: "ext2/3/4",
    1481003842: "xfs",
    2435016766: "btrfs",
    16914836: "tmpfs",
    2035054128: "overlayfs",
    801189825: "zfs",
    1702057286: "fuse",
  };
  const type = statfsSync(path).type;
  return known[type] ?? `0x${type.toString(16)}`;
}

const dir = mkdtempSync(join(tmpdir(), "ax-bench-journal-"));
try {
  if (process.argv.includes("--stream")) {
    console.log(`journal in ${dir} (${fsType(dir)}); stream through the Executor\n`);
    await benchStreams(dir);
  } else {
    const sample = makeDispatch(0, Date.now());
    dispatchSchema.parse(sample);
    const paramsBytes = JSON.stringify(sample.params).length;
    const fs = fsType(dir);
    const loadBefore = loadavg()[0];
    console.log(
      `journal in ${dir} (${fs}); ${ACCEPTS} accepts and ${CYCLES} cycles per mode, median of ${REPEATS} runs; params ${paramsBytes} bytes\n`,
    );

    for (const mode of MODES) {
      benchAccept(dir, mode, WARMUP);
      benchCycle(dir, mode, WARMUP);
    }
    const acceptRuns: Record<string, Run[]> = Object.fromEntries(MODES.map((m) => [m, []]));
    const cycleRuns: Record<string, Run[]> = Object.fromEntries(MODES.map((m) => [m, []]));
    for (let r = 0; r < REPEATS; r++) {
      for (const mode of MODES) {
        acceptRuns[mode]?.push(benchAccept(dir, mode, ACCEPTS, r));
        cycleRuns[mode]?.push(benchCycle(dir, mode, CYCLES, r));
      }
    }
    const accept: Record<string, Run> = {};
    const cycle: Record<string, Run> = {};
    for (const mode of MODES) {
      accept[mode] = median(acceptRuns[mode] ?? []);
      cycle[mode] = median(cycleRuns[mode] ?? []);
    }
    const a = (m: Mode) => accept[m] as Run;
    const c = (m: Mode) => cycle[m] as Run;

    const header = [
      "synchronous",
      "accept()/s",
      "accept p50 ms",
      "accept p99 ms",
      "cycles/s",
      "cycle p50 ms",
      "cycle p99 ms",
    ];
    const rows = MODES.map((m) => [
      m,
      a(m).perSec,
      a(m).p50Ms,
      a(m).p99Ms,
      c(m).perSec,
      c(m).p50Ms,
      c(m).p99Ms,
    ]);
    printTable(header, rows);
    console.log("");
    const streams = await benchStreams(dir);

    const acceptRatio = a("NORMAL").perSec / a("FULL").perSec;
    const cycleRatio = c("NORMAL").perSec / c("FULL").perSec;
    const figures = {
      accepts: ACCEPTS,
      cycles: CYCLES,
      paramsBytes,
      filesystem: fs,
      /** 1-minute load average before and after: other work on the machine moves these figures. */
      loadAverage: { before: loadBefore, after: loadavg()[0] },
      normal: { accept: a("NORMAL"), cycle: c("NORMAL") },
      normalSyncedStart: { accept: a("NORMAL+start"), cycle: c("NORMAL+start") },
      full: { accept: a("FULL"), cycle: c("FULL") },
      fullSlowdown: { accept: acceptRatio, cycle: cycleRatio },
      streams,
      runs: { repeats: REPEATS, accept: acceptRuns, cycle: cycleRuns },
    };

    const markdown = [
      "## Agent journal: synchronous=NORMAL vs FULL (and the default: NORMAL with a durable start)",
      "",
      mdTable(header, rows),
      "",
      `\`accept()\` is the real journal path for one dispatch, the command row and its \`accepted\` report in one transaction (${ACCEPTS.toLocaleString("en-US")} dispatches, params of ${paramsBytes} bytes); a cycle is one command's whole life (accept, \`running\` with its \`started\` report, \`succeeded\` with its \`finished\` report, then the coordinator's \`ack\`: four commits; ${CYCLES.toLocaleString("en-US")} cycles), both in WAL mode on a file in \`os.tmpdir()\` (${fs} here); each figure is the median of ${REPEATS} interleaved runs.`,
      "With `NORMAL` a commit is in the WAL before it returns, so it survives a crash of the agent process (`kill -9`), but the WAL is fsynced only at checkpoints, so a power loss or kernel crash can lose the last commits, though never corrupt the file.",
      "`FULL` fsyncs the WAL on every commit, so each commit, and the `accepted` the agent sends after it, survives a power loss too.",
      "What an fsync costs depends on the storage: the SD cards and eMMC of edge devices are usually far slower than this machine's disk, so measure there before choosing.",
      "Reproduce with `npm run bench:journal` (`npx tsx bench/journal.ts`).",
      "",
      `FULL is ${acceptRatio.toFixed(1)}× slower than NORMAL for \`accept()\` and ${cycleRatio.toFixed(1)}× slower for the full cycle.`,
      "",
      "`NORMAL+start` is the agent's default: `NORMAL`, except that the commit marking a command `running` — the last one before its handler's side effect — is fsynced. `accept()` keeps NORMAL's speed; each command's start pays one fsync.",
      "Why: under plain `NORMAL` a power loss can undo that commit, and after the reboot the journal would show the command still scheduled and run it a second time — the one thing a valve or relay command must never do.",
      "Losing a later commit is safe: a lost `accepted` leaves nothing run (the coordinator redispatches with a higher round or queries and learns `unknown`), and a lost `finished` leaves the row `running`, which the restart reports `interrupted`, never re-run.",
      "`FULL` buys durability of `accepted` and `finished` too, at the price above; set `journal.synchronous` to `FULL` where that matters more than throughput.",
      "",
      `Through the Executor (the default journal: ${STREAM_COMMANDS.toLocaleString("en-US")} commands due at ${STREAM_RATE}/s, one at a time or ${STREAM_GROUPS.at(-1)} at the same instant, run by a handler that returns at once), what starting and finishing them wrote, counted in the WAL from the first start to the last finish:`,
      "",
      mdTable(STREAM_HEADER, streams.map(streamRow)),
    ].join("\n");

    writeResults("journal", figures, markdown);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
