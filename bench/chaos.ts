/**
 * Chaos benchmark (issue 15, item 9): runs the chaos scenarios of test/chaos/ and prints, per
 * scenario, executions recorded truthfully / total, commands lost, run twice, run late (more than
 * one 20 ms tick) and by how much, and the time to converge after the fault ends.
 *
 *   npm run bench:chaos                          # all seven, about 4 minutes
 *   options: --only broker-outage,partition  --broker mosquitto|embedded  --no-write
 *
 * The broker is our own Mosquitto (a free port, persistence on) when `mosquitto` is installed,
 * else the embedded broker in a child process; never the machine's own instance.
 */
import { execFileSync } from "node:child_process";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { type BrokerKind, mosquittoInstalled } from "../test/helpers/chaos/broker-process.js";
import { describeTruth } from "../test/helpers/chaos/expect-truth.js";
import { SCENARIOS } from "../test/helpers/chaos/scenarios.js";
import type { TruthResult } from "../test/helpers/chaos/truth.js";
import { fmt, mdTable, percentile, printTable, writeResults } from "./lib.js";

const { values } = parseArgs({
  options: {
    only: { type: "string" },
    broker: { type: "string" },
    "no-write": { type: "boolean", default: false },
  },
});

const broker: BrokerKind = (values.broker ??
  (mosquittoInstalled() ? "mosquitto" : "embedded")) as BrokerKind;
if (broker !== "mosquitto" && broker !== "embedded") {
  throw new Error(`--broker must be mosquitto or embedded, got ${JSON.stringify(values.broker)}`);
}
const only = values.only?.split(",").map((s) => s.trim());
const unknown = only?.filter((n) => !SCENARIOS.some((s) => s.name === n)) ?? [];
if (unknown.length > 0) {
  throw new Error(
    `--only: unknown scenario ${unknown.join(", ")}; known: ${SCENARIOS.map((s) => s.name).join(", ")}`,
  );
}
const chosen = SCENARIOS.filter((s) => !only || only.includes(s.name));

function commit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
  } catch {
    return "unknown";
  }
}

/** One scenario's figures; `error` when it could not run to its truth check. */
interface Row {
  scenario: string;
  title: string;
  seconds: number;
  result?: TruthResult;
  error?: string;
}

async function main(): Promise<void> {
  const loadStart = loadavg();
  const started = Date.now();
  const rows: Row[] = [];
  for (const s of chosen) {
    const t = Date.now();
    console.log(`::: ${s.name}: ${s.title}`);
    try {
      const result = await s.run({ broker });
      console.log(describeTruth(result));
      rows.push({ scenario: s.name, title: s.title, seconds: (Date.now() - t) / 1000, result });
    } catch (err) {
      console.log(`${s.name}: did not complete: ${(err as Error).message}`);
      rows.push({
        scenario: s.name,
        title: s.title,
        seconds: (Date.now() - t) / 1000,
        error: (err as Error).message,
      });
    }
  }
  const header = [
    "scenario",
    "truthful",
    "lost",
    "twice",
    "late > 1 tick (max)",
    "held to time late",
    "converge ms",
  ];
  const cells = rows.map((r): string[] => {
    const x = r.result;
    if (!x) return [r.scenario, "error", "—", "—", "—", "—", "—"];
    return [
      r.scenario,
      `${x.truthful}/${x.total} (${fmt((100 * x.truthful) / Math.max(1, x.total))} %)`,
      String(x.lost),
      String(x.twice),
      x.late === 0 ? "0" : `${x.late} (${fmt(x.maxLateMs)} ms)`,
      `${x.lateRequired}/${x.onTimeRequired}${x.lateRequired > 0 ? ` (p50 ${fmt(percentile(x.requiredLateMs, 50))}, max ${fmt(x.maxLateRequiredMs)} ms)` : ""}`,
      x.convergeMs === null ? "not converged" : String(Math.round(x.convergeMs)),
    ];
  });
  printTable(header, cells);
  const loadEnd = loadavg();
  const seconds = (Date.now() - started) / 1000;
  const rev = commit();
  const findings = rows.flatMap((r) => {
    const x = r.result;
    if (!x) return [`- **${r.scenario}**: did not complete: ${r.error ?? ""}`];
    const lines = [
      ...x.findings.slice(0, 4).map((f) => `${f.kind} ${f.state}: ${f.problems.join("; ")}`),
      ...x.lostFindings.slice(0, 3).map((f) => `lost: ${f.replace(/^ex_\w+ /, "")}`),
      ...x.violations.slice(0, 3).map((v) => `violation: ${v}`),
    ];
    return lines.length === 0 ? [] : [`- **${r.scenario}**: ${lines.join(" · ")}`];
  });
  const notes = rows.flatMap((r) =>
    (r.result?.notes ?? []).map((n) => `- **${r.scenario}**: ${n}`),
  );
  // Each target, and the scenarios that missed it in this run.
  const missed = (what: string, bad: (x: TruthResult) => string | undefined): string => {
    const misses = rows.flatMap((r) => {
      const why = r.result ? bad(r.result) : "did not complete";
      return why === undefined ? [] : [`${r.scenario} (${why})`];
    });
    return `- ${what}: ${misses.length === 0 ? "met" : `missed by ${misses.join(", ")}`}`;
  };
  const scenarioOf = (x: TruthResult) => SCENARIOS.find((s) => s.name === x.scenario);
  const targets = [
    missed("100 % truthful", (x) =>
      x.truthful < x.total ? `${x.truthful}/${x.total}` : undefined,
    ),
    missed("0 lost", (x) => (x.lost > 0 ? `${x.lost}` : undefined)),
    missed("0 twice", (x) =>
      x.twice > 0 && !scenarioOf(x)?.allowsTwoRounds ? `${x.twice}` : undefined,
    ),
    missed("0 late (> 1 tick) of the commands held to time", (x) =>
      x.lateRequired > 0
        ? `${x.lateRequired}/${x.onTimeRequired}, max ${fmt(x.maxLateRequiredMs)} ms`
        : undefined,
    ),
    missed("convergence ≤ 2 s after the fault", (x) =>
      x.convergeMs === null
        ? "not converged"
        : x.convergeMs > 2_000
          ? `${Math.round(x.convergeMs)} ms`
          : undefined,
    ),
  ];
  const markdown = `## Chaos: truth under faults

Reproduce with \`npm run bench:chaos\` (\`tsx bench/chaos.ts\`; \`--only NAME,…\`, \`--broker mosquitto|embedded\`). The seven scenarios of \`test/chaos/\` (issue 15), each a fresh run of real processes: ${broker === "mosquitto" ? "our own Mosquitto 2 (a free port, persistence on)" : "the embedded aedes broker in a child process (a restart loses its sessions)"}, the coordinator (\`ax coordinator start\`, SQLite, heartbeat 500 ms) and two agents (\`ax agent start\`, each with its own journal, \`exec\` and \`file.write\`). After the fault the run settles and the **truth check** compares every execution the coordinator recorded with what the agents' journals say happened and with the side effects its handlers left (an exec script's marker lines, file.write's files). **This run:** commit ${rev}, ${fmt(seconds)} s in all; load average ${loadStart.map((l) => l.toFixed(2)).join(" / ")} at start and ${loadEnd.map((l) => l.toFixed(2)).join(" / ")} at the end, on 2 cores shared with other work.

| scenario | fault |
|---|---|
${rows.map((r) => `| ${r.scenario} | ${r.title} |`).join("\n")}

${mdTable(header, cells)}

Columns: **truthful** — executions whose recorded final state, outcome and started rounds equal the journals, with every effect counted as often as the record says the handler succeeded; **lost** — executions that never ran on any agent and ended FAILED or EXPIRED; **twice** — executions whose handler ran to its end more often than asked (two rounds of one attempt, two successes, or the effect twice; a retry after a failure is not counted); **late** — started more than one 20 ms tick after \`fireAt\`, on the agent's estimate of the coordinator's clock; **held to time** — commands whose lead (\`fireAt − createdAt\`) exceeded the outage: how many of them started late, with the median and largest lateness of all of them; **converge** — from the end of the fault until every agent is online and the record agrees with every outcome the journals hold (polled every 100 ms).

Targets: 100 % truthful, 0 lost, 0 twice (the partition may run two rounds, and the record must then say so), 0 late of those held to time, convergence ≤ 2 s after the fault ends.

### This run against the targets

${targets.join("\n")}
${findings.length === 0 ? "" : `\n### What the truth check found\n\n${findings.join("\n")}\n`}${notes.length === 0 ? "" : `\n### Notes\n\n${notes.join("\n")}\n`}`;
  const figures = {
    broker,
    commit: rev,
    seconds,
    loadavg: { start: loadStart, end: loadEnd },
    scenarios: rows.map((r) => ({
      scenario: r.scenario,
      title: r.title,
      seconds: r.seconds,
      ...(r.result ? { result: r.result } : { error: r.error }),
    })),
  };
  if (values["no-write"]) console.log(JSON.stringify(figures, null, 2));
  else writeResults("chaos", figures, markdown);
}

await main();
