import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { jsonLogger as agentLogger } from "../../agent/main.js";
import { tempDir } from "../../test/helpers/env.js";
import { jsonLogger, prettyLine } from "./log.js";

describe("coordinator log", () => {
  const tmp = tempDir("ax-log-");
  afterAll(() => tmp.cleanup());

  it("writes one JSON line per entry with level, time, component, message and the ids", () => {
    const file = join(tmp.dir, "a.log");
    const log = jsonLogger({ file, minLevel: "info" });
    log("debug", "not shown");
    log("info", "execution ex_1 ended SUCCEEDED", { executionId: "ex_1", agentId: "ag-1" });
    log("error", "store: commit failed");
    const lines = readFileSync(file, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({
      level: "info",
      component: "coordinator",
      msg: "execution ex_1 ended SUCCEEDED",
      executionId: "ex_1",
      agentId: "ag-1",
    });
    expect(Number.isNaN(Date.parse(lines[0].time))).toBe(false);
    expect(lines[1]).toMatchObject({ level: "error", msg: "store: commit failed" });
  });

  it("renders a line readably for a terminal, ids as key=value", () => {
    const line = prettyLine(
      JSON.stringify({
        level: "warn",
        time: "2026-11-30T12:00:01.234Z",
        component: "coordinator",
        msg: "dispatch not published",
        executionId: "ex_9",
        detail: { n: 1 },
      }),
    );
    expect(line).toBe(
      '12:00:01.234 WARN  coordinator dispatch not published executionId=ex_9 detail={"n":1}\n',
    );
    expect(prettyLine("not json")).toBe("not json");
  });

  it("an agent's line has the coordinator's time, level, component and msg fields, in one format", () => {
    const file = join(tmp.dir, "both.log");
    const before = Date.now();
    jsonLogger({ file })("warn", "agent ag-1 missed 3 heartbeats", { agentId: "ag-1" });
    const agentLines: string[] = [];
    agentLogger("ag-1", "info", (line) => agentLines.push(line))("warn", "refused message", {
      topic: "ax/v1/agents/ag-1/down",
    });
    const coordinator = JSON.parse(readFileSync(file, "utf8").trim());
    const agent = JSON.parse(agentLines.join("").trim());
    const shape = (rec: Record<string, unknown>) => ({
      keys: ["time", "level", "component", "msg"].filter((k) => typeof rec[k] === "string"),
      timeFormat: String(rec.time).replace(/\d/g, "9"),
    });
    expect(shape(agent)).toEqual(shape(coordinator));
    expect(shape(agent)).toEqual({
      keys: ["time", "level", "component", "msg"],
      timeFormat: "9999-99-99T99:99:99.999Z",
    });
    expect(agent).not.toHaveProperty("t");
    for (const rec of [agent, coordinator]) {
      expect(Date.parse(rec.time)).toBeGreaterThanOrEqual(before - 1);
      expect(rec.level).toBe("warn");
    }
    expect(agent).toMatchObject({ component: "agent", agentId: "ag-1", msg: "refused message" });
    expect(coordinator).toMatchObject({ component: "coordinator", agentId: "ag-1" });
    // Both read the same on a terminal.
    expect(prettyLine(agentLines[0] ?? "")).toBe(
      `${agent.time.slice(11, 23)} WARN  agent refused message agentId=ag-1 topic=ax/v1/agents/ag-1/down\n`,
    );
  });
});
