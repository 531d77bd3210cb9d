/**
 * The fleet simulator of bench/fleet.ts: N protocol-v1 agents in this one process, each on its
 * own MQTT connection (a raw `net` socket and the agent's own MQTT 3.1.1 codec, not mqtt.js,
 * which costs too much per connection), so that a coordinator can be measured against 10,000
 * agents on a 2-core machine. bench/fleet.ts bundles it to dist/bench/fleet-sim.mjs and runs it
 * as a child process, so it can be killed with SIGKILL and its CPU is its own.
 *
 *   node dist/bench/fleet-sim.mjs '{"host":"127.0.0.1","port":1883,"prefix":"…","keysFile":"…"}'
 *
 * Each agent speaks the protocol as docs/protocol.md has it: client id = agentId, the broker
 * login of its identity, a Last Will that is its sealed `offline` presence (retained, QoS 1),
 * the subscription to its down topic, a retained `online` presence, `hello` with `batchBytes`
 * (it reads batches of commands), the clock exchange (ClockSync, with the reference agent's rule
 * for `heartbeat.time`), heartbeats timed as the reference agent's (protocol.md, rule 12: the one
 * after the welcome's at a random point of the period, then every `heartbeatMs`, so a fleet
 * connected in a few seconds does not heartbeat in step), `dispatch` → `accepted` with seq rising
 * by one and an outbox kept until `ack` (re-sent on every welcome, on `ack.replay`, and when acks
 * stall for three heartbeats), fires at `fireAt` on its estimate of the coordinator's clock less
 * the estimate's uncertainty (never early), `started` + `finished` as one batch when the welcome
 * carried `batchBytes`, and every message sealed with its own key.
 *
 * What it simplifies, and so does not measure:
 * - the journal is in memory: nothing is written to disk, and a restart would lose it;
 * - one handler, `echo`, which returns at once: no executor, no concurrency limit or queue, no
 *   `running` entries in heartbeats, no timeouts, no `progress`, no `busy`;
 * - a `cancel` of a scheduled command is reported `canceled`; a running one cannot be cancelled
 *   (it has already finished);
 * - it remembers 64 down MAC tags per agent against replays, not 4,096;
 * - plain TCP only (no TLS), clean sessions, and it publishes and subscribes with QoS 1 only;
 * - a start is filed when its dispatch comes, for when the estimate less its uncertainty reaches
 *   fireAt, as the reference agent schedules it, and filed again whenever a clock sample moves
 *   the estimate or its bound; at its start it is checked again, never early;
 * - every agent shares this process's clock (all on one machine): each still keeps its own
 *   offset estimate from its own samples;
 * - starts are stamped in windows, not by each agent: from 30 ms before the first start due, the
 *   simulator busy-waits through a burst of due times (each within 20 ms of the one before, at
 *   most 100 ms in all), in order, read from one dense array, and stamps each start as the clock
 *   reaches it (a real reading of the clock, never before its due time); only then does each
 *   agent take its stamp, and only after that are the reports encoded, sealed and written. Real
 *   devices each do all of this on their own CPU; one thread doing it agent by agent took about
 *   2 µs per start, so a fleet's start skew measured the simulator. The busy wait holds the rest
 *   of this process back, and the writing after it takes longer still: both show as this
 *   process's event-loop lag, which the bench reports beside the skew so the figures the
 *   simulator limits can be told apart. What the operating system takes from the busy wait (two
 *   cores shared with the broker and the coordinator) shows in the simulator's own lateness.
 *
 * Timers: one timing wheel (shared/wheel.ts: one OS timer armed at a time) holds every agent's
 * heartbeats, fires, hello retries and reconnects; besides it there is only the event-loop delay
 * monitor. Never one timer per agent, so its own loop is not what a 10,000-agent run measures.
 *
 * IPC with the parent: it sends `{ t: "started" }` and `{ t: "welcomed", at }` once every agent
 * has been welcomed (at: wall ms); it answers `{ cmd: "lag-start" }` (restart the lag window)
 * and `{ cmd: "status" }` with `{ t: "status", online, lag, counters, … }`.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Simulator } from "./fleet-sim/simulator.js";

export interface FleetSimArgs {
  host: string;
  port: number;
  prefix: string;
  /** JSON: [{ agentId, key (base64url), generation, username, password }]. */
  keysFile: string;
  tags?: Record<string, string>;
  connectConcurrency?: number;
}

export interface SimKey {
  agentId: string;
  key: string;
  generation: number;
  username?: string;
  password?: string;
}

/** Event-loop lag, ms. */
export interface LagFigures {
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export type SimLine =
  | { t: "started" }
  | { t: "welcomed"; at: number }
  | {
      t: "status";
      online: number;
      welcomedOnce: number;
      /** Since the last lag-start. */
      lag: LagFigures;
      /** Since the simulator started. */
      lagTotal: LagFigures;
      counters: Simulator["counters"];
      commands: { held: number; runs: number; runTwice: number };
      /**
       * Over the commands started: the estimates' uncertainty, the simulator's own lateness, and
       * the lateness on the host's clock.
       */
      starts: { uncertainty: Spread; timerLate: Spread; hostLate: Spread };
    };

export interface Spread {
  /** Absent in results from before it was recorded. */
  min?: number;
  p50: number;
  p99: number;
  max: number;
}

function spread(xs: number[]): Spread {
  const s = Float64Array.from(xs).sort();
  const at = (p: number) =>
    s.length === 0
      ? Number.NaN
      : (s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] as number);
  return {
    min: s.length === 0 ? Number.NaN : (s[0] as number),
    p50: at(50),
    p99: at(99),
    max: at(100),
  };
}

/**
 * AX_BENCH_SIM_PROFILE_DIR: a CPU profile of this process from the command's POST (lag-start)
 * for AX_BENCH_SIM_PROFILE_MS (default 10,800: just past a fire 10 s out, before the bench
 * kills this process), written there as sim-PID.cpuprofile. The bench ends it with SIGKILL, so
 * --cpu-prof would write nothing.
 */
function profileWindow(): void {
  const dir = process.env.AX_BENCH_SIM_PROFILE_DIR;
  if (dir === undefined) return;
  const session = new Session();
  session.connect();
  session.post("Profiler.enable", () =>
    session.post("Profiler.start", () => {
      setTimeout(
        () =>
          session.post("Profiler.stop", (err, r) => {
            if (!err)
              writeFileSync(join(dir, `sim-${process.pid}.cpuprofile`), JSON.stringify(r.profile));
            session.disconnect();
          }),
        Number(process.env.AX_BENCH_SIM_PROFILE_MS ?? 10_800),
      );
    }),
  );
}

function main(args: FleetSimArgs): void {
  const send = (line: SimLine) => process.send?.(line);
  const keys = JSON.parse(readFileSync(args.keysFile, "utf8")) as SimKey[];
  const sim = new Simulator({
    host: args.host,
    port: args.port,
    prefix: args.prefix,
    tags: args.tags ?? {},
    connectConcurrency: args.connectConcurrency ?? 200,
    onAllWelcomed: (at) => send({ t: "welcomed", at }),
    agents: keys.map((k) => ({
      agentId: k.agentId,
      key: Buffer.from(k.key, "base64url"),
      generation: k.generation,
      username: k.username,
      password: k.password,
    })),
  });
  const window = monitorEventLoopDelay({ resolution: 10 });
  const total = monitorEventLoopDelay({ resolution: 10 });
  window.enable();
  total.enable();
  const ms = (h: ReturnType<typeof monitorEventLoopDelay>): LagFigures => ({
    p50: h.percentile(50) / 1e6,
    p99: h.percentile(99) / 1e6,
    max: h.max / 1e6,
    mean: h.mean / 1e6,
  });
  process.on("message", (m: { cmd?: string }) => {
    if (m.cmd === "lag-start") {
      window.reset();
      profileWindow();
    } else if (m.cmd === "status") {
      let held = 0;
      let runs = 0;
      let runTwice = 0;
      const uncertainty: number[] = [];
      const timerLate: number[] = [];
      const hostLate: number[] = [];
      for (const a of sim.agents) {
        for (const c of a.journal.values()) {
          held++;
          runs += c.runs;
          if (c.runs > 1) runTwice++;
          if (c.uncertaintyAtStart !== undefined) uncertainty.push(c.uncertaintyAtStart);
          if (c.timerLateMs !== undefined) timerLate.push(c.timerLateMs);
          if (c.hostLateMs !== undefined) hostLate.push(c.hostLateMs);
        }
      }
      send({
        t: "status",
        online: sim.online,
        welcomedOnce: sim.welcomedOnce,
        lag: ms(window),
        lagTotal: ms(total),
        counters: sim.counters,
        commands: { held, runs, runTwice },
        starts: {
          uncertainty: spread(uncertainty),
          timerLate: spread(timerLate),
          hostLate: spread(hostLate),
        },
      });
    }
  });
  process.on("disconnect", () => process.exit(0));
  sim.start();
  send({ t: "started" });
}

main(JSON.parse(process.argv[2] ?? "{}") as FleetSimArgs);
