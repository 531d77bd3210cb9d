import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
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
});
