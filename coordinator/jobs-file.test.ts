import { describe, expect, it } from "vitest";
import { axFailure } from "../test/helpers/ax-error.js";
import { parseJobFile } from "./jobs-file.js";

const job = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  handler: "echo",
  trigger: { type: "manual" },
  ...over,
});
const ids = (defs: unknown[]) => defs.map((d) => (d as { id: string }).id);

describe("parseJobFile: the shapes of ax job add and the jobsFile", () => {
  it("takes one definition, a list of them, or { jobs: [...] }", () => {
    expect(ids(parseJobFile(job("one"), "j.json"))).toEqual(["one"]);
    expect(ids(parseJobFile([job("x"), job("y")], "j.json"))).toEqual(["x", "y"]);
    expect(ids(parseJobFile({ jobs: [job("p"), job("q")] }, "j.json"))).toEqual(["p", "q"]);
  });

  it("names the file, each job's index and the field, all at once", () => {
    expect(
      axFailure(() =>
        parseJobFile(
          { jobs: [job("a"), job("b", { priority: 5000, priorty: 1 }), job("a")] },
          "j.json",
        ),
      ),
    ).toBe(
      [
        "AX_JOB_INVALID: j.json: invalid job definitions",
        "jobs.1.priority: Too big: expected number to be <=1000",
        'jobs.1.priorty: unknown key; did you mean "priority"?',
        'jobs.2.id: duplicate job id "a" (also at jobs.0)',
      ].join("\n"),
    );
    expect(axFailure(() => parseJobFile([job("a"), { handler: "echo" }], "j.json"))).toBe(
      [
        "AX_JOB_INVALID: j.json: invalid job definitions",
        "[1].id: is required (string)",
        "[1].trigger: is required (object)",
      ].join("\n"),
    );
  });

  it("refuses a job that fires after itself, an empty list, and keys beside jobs", () => {
    expect(
      axFailure(() => parseJobFile([job("a", { trigger: { type: "after", job: "a" } })], "j.json")),
    ).toBe(
      "AX_JOB_INVALID: j.json: invalid job definition\n[0].trigger.job: a job cannot fire after itself",
    );
    expect(axFailure(() => parseJobFile({ jobs: [] }, "j.json"))).toBe(
      "AX_JOB_INVALID: j.json: invalid job definition\n(root): no job definitions",
    );
    expect(axFailure(() => parseJobFile({ jobs: [job("a")], version: 2 }, "j.json"))).toBe(
      'AX_JOB_INVALID: j.json: invalid job definitions\nversion: unknown key (a jobs file has only "jobs")',
    );
  });

  it("takes only one definition for ax job edit", () => {
    expect(ids(parseJobFile(job("one"), "j.json", true))).toEqual(["one"]);
    expect(axFailure(() => parseJobFile([job("a")], "j.json", true))).toMatch(
      /^AX_JOB_INVALID: j\.json: invalid job definition\n\(root\): Invalid input: expected object, received array/,
    );
  });
});
