import { expect } from "vitest";
import type { Scenario } from "./scenarios.js";
import type { TruthResult } from "./truth.js";

/** A short account of a truth check, for assertion messages and logs. */
export function describeTruth(r: TruthResult): string {
  const lines = [
    `${r.scenario}: ${r.truthful}/${r.total} truthful, ${r.lost} lost, ${r.twice} twice, ` +
      `${r.late} late (max ${r.maxLateMs} ms; ${r.lateRequired}/${r.onTimeRequired} of those held to time), ` +
      `${r.nonTerminal} open, converged in ${r.convergeMs ?? "—"} ms`,
    ...r.findings.map(
      (f) => `  ${f.executionId} (${f.kind}, ${f.state}): ${f.problems.join("; ")}`,
    ),
    ...r.effectFindings.map((f) => `  effect ${f}`),
    ...r.lostFindings.map((f) => `  lost ${f}`),
  ];
  return lines.join("\n");
}

/**
 * What every chaos scenario must end with (issue 15, item 8): 100 % truthful, nothing lost,
 * nothing run twice (unless the scenario may run two rounds, and then the record says so — that
 * is part of "truthful"), nothing open, and nothing late that the issue holds to time.
 */
export function expectTruth(scenario: Scenario, r: TruthResult): void {
  const why = describeTruth(r);
  console.log(why);
  expect(r.total, why).toBeGreaterThan(0);
  expect(r.nonTerminal, why).toBe(0);
  expect(r.truthful, why).toBe(r.total);
  expect(r.lost, why).toBe(0);
  if (!scenario.allowsTwoRounds) expect(r.twice, why).toBe(0);
  expect(r.lateRequired, why).toBe(0);
}
