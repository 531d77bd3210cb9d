import { describe, expect, it } from "vitest";
import { axFailure } from "../test/helpers/ax-error.js";
import { EXIT, errorText, exitCodeOf, parseFlags } from "./command-line.js";
import { AxError } from "./errors.js";

const SPECS = {
  url: { type: "string" },
  json: { type: "boolean" },
  tag: { type: "string", multiple: true },
  version: { type: "boolean", short: "v" },
} as const;

const parse = (argv: string[]) => parseFlags("job list", argv, SPECS);

describe("parseFlags", () => {
  it("reads --flag VALUE, --flag=VALUE, booleans, short flags, repeats and positionals", () => {
    expect(
      parse(["a", "--url", "http://x", "--json", "--tag=k=v", "-v", "--tag", "z=1", "b"]),
    ).toEqual({
      values: { url: "http://x", json: true, tag: ["k=v", "z=1"], version: true },
      positionals: ["a", "b"],
    });
  });

  it("takes a value that starts with a single dash, and anything after --", () => {
    expect(parse(["--url", "-5", "--", "--json", "-v"])).toEqual({
      values: { url: "-5" },
      positionals: ["--json", "-v"],
    });
  });

  it.each([
    [["--jsn"], "job list: unknown flag --jsn; did you mean --json?"],
    [["--JSON"], "job list: unknown flag --JSON; did you mean --json?"],
    [["-json"], "job list: unknown flag -json; did you mean --json?"],
    [["--urll=x"], "job list: unknown flag --urll; did you mean --url?"],
    [["--colour"], "job list: unknown flag --colour (it takes --url, --json, --tag, --version)"],
    [["-x"], "job list: unknown flag -x (it takes --url, --json, --tag, --version)"],
    [["--url"], "job list: --url needs a value"],
    [["--url", "--json"], "job list: --url needs a value"],
    [["--json=yes"], 'job list: --json takes no value, got "--json=yes"'],
  ])("rejects %j word for word", (argv, message) => {
    expect(axFailure(() => parse(argv))).toBe(`AX_CLI_USAGE: ${message}`);
  });

  it("says a command that takes no flags takes none", () => {
    expect(axFailure(() => parseFlags("bundle profiles", ["--all"], {}))).toBe(
      "AX_CLI_USAGE: bundle profiles: unknown flag --all (it takes none)",
    );
  });
});

describe("exit codes", () => {
  it("gives one meaning per code: usage 2, any other AxError 1, anything else 70", () => {
    expect(exitCodeOf(new AxError("AX_CLI_USAGE", "x"))).toBe(EXIT.usage);
    expect(exitCodeOf(new AxError("AX_CONFIG_INVALID", "x"))).toBe(EXIT.failed);
    expect(exitCodeOf(new TypeError("x is undefined"))).toBe(EXIT.internal);
    expect(exitCodeOf("thrown text")).toBe(EXIT.internal);
    expect(EXIT).toEqual({ ok: 0, failed: 1, usage: 2, internal: 70, fenced: 75 });
  });

  it("prints an AxError as its code and message, anything else as a bug with its stack", () => {
    expect(errorText("ax", new AxError("AX_JOB_NOT_FOUND", 'job "x" not found'))).toBe(
      'ax: AX_JOB_NOT_FOUND: job "x" not found',
    );
    const bug = new TypeError("boom");
    expect(errorText("agent", bug)).toBe(
      `agent: internal error (a bug; please report it): ${bug.stack}`,
    );
    expect(errorText("agent", 42)).toBe("agent: internal error (a bug; please report it): 42");
  });
});
