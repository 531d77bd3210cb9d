import { describe, expect, it } from "vitest";
import { runAx, runAxTwice, useCliTarget } from "../helpers/env.js";

/**
 * `ax rollout` against a live coordinator: the flags become the spec the API stores, the tables
 * show what the API answers, each action moves the state, and a bad flag is refused before
 * anything is sent. No agent is online: the API accepts a rollout that matches nobody yet.
 */
const TOKEN = "cli-rollout-token-0123456789";

const ax = runAx;

/** The rows of an aligned table under `header`, each split into its cells. */
function tableRows(text: string, header: string[]): string[][] {
  const lines = text.trimEnd().split("\n");
  expect(lines[0]?.split(/\s{2,}/)).toEqual(header);
  const starts = header.map((h) => (lines[0] as string).indexOf(h));
  for (const line of lines.slice(1)) {
    for (const s of starts.slice(1)) {
      if (s >= line.length) continue; // trailing empty cells are trimmed
      expect(line.slice(s - 2, s), `"${line}" at ${s}`).toBe("  ");
    }
  }
  // Cells are cut at the column starts, so an empty cell stays a cell.
  return lines
    .slice(1)
    .map((line) => starts.map((s, i) => line.slice(s, starts[i + 1] ?? line.length).trim()));
}

const LIST_HEADER = [
  "rollout",
  "state",
  "wave",
  "reached/matching",
  "succeeded",
  "failed",
  "created (UTC)",
];
const WAVE_HEADER = ["wave", "percent", "soak", "cap", "reached", "executions"];
const TIMELINE_HEADER = ["at (UTC)", "event", "from", "to", "by", "reason"];
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

interface Detail {
  rollout: Record<string, unknown> & { state: string; command: { at: number } };
  timeline: {
    event: string;
    fromState: string | null;
    toState: string;
    actor: string | null;
    reason: string | null;
  }[];
}

describe("ax rollout", () => {
  const cli = useCliTarget(TOKEN);

  const show = async (id: string) => {
    const r = await ax(["rollout", "show", id, "--json"], cli.env);
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as Detail;
  };

  it("creates a rollout from its flags, paused, and the API stores the spec they spell", async () => {
    const before = Date.now();
    const created = await ax(
      [
        "rollout",
        "create",
        "--handler",
        "echo",
        "--params",
        '{"x":1}',
        "--tag",
        "site=nowhere",
        "--tag",
        "rack=7",
        "--profile",
        "sensor-hub",
        "--at",
        "+1h",
        "--start-within",
        "2m",
        "--timeout",
        "45s",
        "--rate",
        "exp:10,2,5,100",
        "--waves",
        "1%:10m,10%:90s,100%",
        "--abort-threshold",
        "10%",
        "--abort-min",
        "20",
        "--abort-on",
        "failed,timed_out",
        "--paused",
        "--id",
        "ro-cli-1",
        "--description",
        "from the CLI test",
      ],
      cli.env,
    );
    const after = Date.now();
    expect(created).toEqual({
      code: 0,
      stdout: "rollout ro-cli-1: CREATED; start it with: ax rollout resume ro-cli-1\n",
      stderr: "",
    });
    const { rollout, timeline } = await show("ro-cli-1");
    expect(rollout).toMatchObject({
      id: "ro-cli-1",
      description: "from the CLI test",
      state: "CREATED",
      selector: { tags: { site: "nowhere", rack: "7" }, profile: "sensor-hub" },
      command: { handler: "echo", params: { x: 1 }, startWithin: 120_000, timeout: 45_000 },
      rate: { exponential: { basePerMinute: 10, factor: 2, stepSuccesses: 5, maxPerMinute: 100 } },
      waves: [{ percent: 1, soak: 600_000 }, { percent: 10, soak: 90_000 }, { percent: 100 }],
      abort: { thresholdPercent: 10, minExecuted: 20, on: ["FAILED", "TIMED_OUT"] },
      endsAt: null,
      progress: { matching: 0, reached: 0, succeeded: 0, failed: 0, open: 0 },
    });
    // `+1h` counts from when the CLI ran.
    expect(rollout.command.at).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(rollout.command.at).toBeLessThanOrEqual(after + 3_600_000);
    expect(timeline.map((t) => t.toState)).toEqual(["CREATED"]);

    const text = await ax(["rollout", "show", "ro-cli-1"], cli.env);
    expect(text.code, text.stderr).toBe(0);
    const [summary, waves, events] = text.stdout.trimEnd().split("\n\n") as [
      string,
      string,
      string,
    ];
    expect(summary).toMatch(/^rollout {2,}ro-cli-1$/m);
    expect(summary).toMatch(/^state {2,}CREATED$/m);
    expect(summary).toMatch(/^agents {2,}tags site=nowhere,rack=7; profile sensor-hub$/m);
    expect(summary).toMatch(/^params {2,}\{"x":1\}$/m);
    expect(summary).toMatch(/^start within {2,}2m$/m);
    expect(summary).toMatch(/^timeout {2,}45s$/m);
    expect(summary).toMatch(/^rate {2,}10\/min, ×2 for every 5 succeeded, at most 100\/min$/m);
    expect(summary).toMatch(/^waves {2,}1%:10m,10%:90s,100%$/m);
    expect(summary).toMatch(
      /^abort {2,}at 10% failed of at least 20 ended \(failures: FAILED, TIMED_OUT\)$/m,
    );
    expect(summary).toMatch(/^wave {2,}1\/3$/m);
    expect(summary).toMatch(/^reached {2,}0$/m);
    expect(summary).toMatch(/^by state {2,}-$/m);
    expect(summary).toMatch(/^started {2,}-$/m);
    expect(tableRows(waves, WAVE_HEADER)).toEqual([
      ["1", "1%", "10m", "0", "0", "-"],
      ["2", "10%", "90s", "0", "0", "-"],
      ["3", "100%", "-", "0", "0", "-"],
    ]);
    const [first] = tableRows(events, TIMELINE_HEADER);
    expect(first?.[0]).toMatch(ISO);
    expect(first?.slice(2, 4)).toEqual(["-", "CREATED"]);
  });

  it("lists rollouts newest first, filtered by state, as a table and as JSON", async () => {
    const started = await ax(
      ["rollout", "create", "--handler", "echo", "--agent", "gw-a", "--agent", "gw-b"],
      cli.env,
    );
    expect(started.code, started.stderr).toBe(0);
    const m = /^rollout (\S+): IN_PROGRESS; 0 agents match now\n$/.exec(started.stdout);
    expect(m, started.stdout).not.toBeNull();
    const id = m?.[1] as string;
    expect(id).toMatch(/^ro_/);

    const list = await ax(["rollout", "list"], cli.env);
    expect(list.code, list.stderr).toBe(0);
    const rows = tableRows(list.stdout, LIST_HEADER);
    expect(rows.map((r) => r.slice(0, 6))).toEqual([
      [id, "IN_PROGRESS", "1/1", "0/0", "0", "0"],
      ["ro-cli-1", "CREATED", "1/3", "0/0", "0", "0"],
    ]);
    for (const r of rows) expect(r[6]).toMatch(ISO);

    const created = await ax(["rollout", "list", "--state", "created"], cli.env);
    expect(tableRows(created.stdout, LIST_HEADER).map((r) => r[0])).toEqual(["ro-cli-1"]);

    const page = await ax(["rollout", "list", "--limit", "1", "--json"], cli.env);
    expect(page.code, page.stderr).toBe(0);
    const json = JSON.parse(page.stdout) as { items: { id: string }[]; nextCursor: string | null };
    expect(json.items.map((r) => r.id)).toEqual([id]);
    expect(json.nextCursor).not.toBeNull();
    const all = await ax(["rollout", "list", "--limit", "1", "--all", "--json"], cli.env);
    expect((JSON.parse(all.stdout) as typeof json).items.map((r) => r.id)).toEqual([
      id,
      "ro-cli-1",
    ]);

    const abort = await ax(["rollout", "abort", id], cli.env);
    expect(abort.code, abort.stderr).toBe(0);
    expect(abort.stdout).toMatch(new RegExp(`^rollout ${id}: ABORTED`));
  });

  it("starts, pauses, resumes and aborts a rollout, each answered with its new state", async () => {
    const resumed = await ax(["rollout", "resume", "ro-cli-1"], cli.env);
    expect(resumed).toEqual({ code: 0, stdout: "rollout ro-cli-1: IN_PROGRESS\n", stderr: "" });
    expect((await show("ro-cli-1")).rollout.state).toBe("IN_PROGRESS");

    const paused = await ax(["rollout", "pause", "ro-cli-1", "--reason", "night shift"], cli.env);
    expect(paused).toEqual({
      code: 0,
      stdout: "rollout ro-cli-1: PAUSED (night shift)\n",
      stderr: "",
    });
    expect((await show("ro-cli-1")).rollout.state).toBe("PAUSED");
    const listed = await ax(["rollout", "list", "--state", "PAUSED"], cli.env);
    expect(tableRows(listed.stdout, LIST_HEADER).map((r) => r.slice(0, 2))).toEqual([
      ["ro-cli-1", "PAUSED"],
    ]);

    const again = await ax(["rollout", "pause", "ro-cli-1"], cli.env);
    expect(again.code).toBe(1);
    expect(again.stdout).toBe("");
    expect(again.stderr).toMatch(/^ax: AX_ROLLOUT_CONFLICT: .*PAUSED/);

    // The pause's reason is not news after a resume.
    const resumedAgain = await ax(["rollout", "resume", "ro-cli-1"], cli.env);
    expect(resumedAgain).toEqual({
      code: 0,
      stdout: "rollout ro-cli-1: IN_PROGRESS\n",
      stderr: "",
    });

    const aborted = await ax(
      ["rollout", "abort", "ro-cli-1", "--reason", "canary failed"],
      cli.env,
    );
    expect(aborted).toEqual({
      code: 0,
      stdout: "rollout ro-cli-1: ABORTED (canary failed)\n",
      stderr: "",
    });
    const { rollout, timeline } = await show("ro-cli-1");
    expect(rollout).toMatchObject({ state: "ABORTED", reason: "canary failed" });
    expect(rollout.finishedAt).toEqual(expect.any(Number));
    // The engine may add entries of its own in between (a wave's soak): the state changes are
    // the operator's.
    const changes = timeline.filter((t) => t.fromState !== t.toState);
    expect(changes.map((t) => [t.event, t.fromState, t.toState, t.reason])).toEqual([
      ["created", null, "CREATED", null],
      ["started", "CREATED", "IN_PROGRESS", null],
      ["paused", "IN_PROGRESS", "PAUSED", "night shift"],
      ["resumed", "PAUSED", "IN_PROGRESS", null],
      ["aborted", "IN_PROGRESS", "ABORTED", "canary failed"],
    ]);
    const actor = changes[0]?.actor as string;
    expect(changes.every((t) => t.actor === actor)).toBe(true);

    const text = await ax(["rollout", "show", "ro-cli-1"], cli.env);
    const [summary, , events] = text.stdout.trimEnd().split("\n\n") as [string, string, string];
    expect(summary).toMatch(/^state {2,}ABORTED$/m);
    expect(summary).toMatch(/^reason {2,}canary failed$/m);
    expect(summary).toMatch(/^finished {2,}\d{4}-/m);
    const rows = tableRows(events, TIMELINE_HEADER);
    expect(rows).toHaveLength(timeline.length);
    expect(rows.filter((r) => r[2] !== r[3]).map((r) => r.slice(1))).toEqual([
      ["created", "-", "CREATED", actor, ""],
      ["started", "CREATED", "IN_PROGRESS", actor, ""],
      ["paused", "IN_PROGRESS", "PAUSED", actor, "night shift"],
      ["resumed", "PAUSED", "IN_PROGRESS", actor, ""],
      ["aborted", "IN_PROGRESS", "ABORTED", actor, "canary failed"],
    ]);

    const final = await ax(["rollout", "resume", "ro-cli-1"], cli.env);
    expect(final.code).toBe(1);
    expect(final.stderr).toMatch(/^ax: AX_ROLLOUT_CONFLICT: /);
  });

  it("says which rollout is missing or taken, and what the API refused", async () => {
    const missing = await ax(["rollout", "show", "no-such-rollout"], cli.env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^ax: AX_ROLLOUT_NOT_FOUND: .*no-such-rollout/);
    const taken = await ax(
      ["rollout", "create", "--handler", "echo", "--tag", "a=b", "--id", "ro-cli-1"],
      cli.env,
    );
    expect(taken.code).toBe(1);
    expect(taken.stderr).toMatch(/^ax: AX_ROLLOUT_CONFLICT: .*ro-cli-1/);
    // Well-formed waves that break the spec's rules are the API's to refuse, naming the field.
    const waves = await ax(
      ["rollout", "create", "--handler", "echo", "--tag", "a=b", "--waves", "50%,10%"],
      cli.env,
    );
    expect(waves.code).toBe(1);
    expect(waves.stderr).toBe(
      "ax: AX_API_INVALID_REQUEST: invalid request\n" +
        "body.waves.1.percent: must be more than the wave before (percents are cumulative)\n" +
        "body.waves.1.percent: the last wave must be 100 (every matching agent)\n",
    );
    // So are times already past, in the same words.
    const ended = await ax(
      [
        "rollout",
        "create",
        "--handler",
        "echo",
        "--tag",
        "a=b",
        "--ends-at",
        "2020-01-01T00:00:00Z",
      ],
      cli.env,
    );
    expect(ended.code).toBe(1);
    expect(ended.stderr).toBe(
      "ax: AX_API_INVALID_REQUEST: invalid request\n" +
        "body.endsAt: must be in the future: the rollout's end has passed\n",
    );
    const late = await ax(
      ["rollout", "create", "--handler", "echo", "--tag", "a=b", "--at", "2020-01-01T00:00:00Z"],
      cli.env,
    );
    expect(late.code).toBe(1);
    expect(late.stderr).toBe(
      "ax: AX_API_INVALID_REQUEST: invalid request\n" +
        "body.command.at: at + startWithin is in the past: the rollout's command could only expire\n",
    );
  });

  it.each([
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--rate", "fast"],
      'rollout create: --rate must be N/min (such as 60/min) or exp:BASE,FACTOR,STEP[,MAX] (such as exp:10,2,10,1000), got "fast"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--rate", "exp:10,2"],
      'rollout create: --rate must be N/min (such as 60/min) or exp:BASE,FACTOR,STEP[,MAX] (such as exp:10,2,10,1000), got "exp:10,2"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--waves", "10%:x"],
      'rollout create: --waves: the soak of "10%:x" must be a duration such as 30s, 10m, 1h, got "x"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--waves", "0%,100%"],
      'rollout create: --waves: each wave is a percent above 0, at most 100, got "0%" in "0%,100%"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--waves", "150%"],
      'rollout create: --waves: each wave is a percent above 0, at most 100, got "150%" in "150%"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--rate", "exp:10,0.5,10"],
      'rollout create: --rate must be N/min (such as 60/min) or exp:BASE,FACTOR,STEP[,MAX] (such as exp:10,2,10,1000), got "exp:10,0.5,10"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--waves", "10%,all"],
      'rollout create: --waves must be PERCENT%[:SOAK],… (such as 1%:10m,10%:10m,100%), got "all" in "10%,all"',
    ],
    [
      ["create", "--handler", "echo"],
      "rollout create: give the agents it is for: --tag KEY=VALUE, --agent ID, --profile P or --agent-version V (an agent must match every one given)",
    ],
    [["create", "--tag", "a=b"], "rollout create: --handler NAME is required"],
    [
      ["create", "--handler", "echo", "--tag", "site"],
      'rollout create: --tag must be KEY=VALUE, got "site"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--timeout", "5"],
      'rollout create: --timeout must be a duration such as 500ms, 30s, 5m, got "5"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--at", "soon"],
      'rollout create: --at must be an ISO time (2026-01-31T12:00:00Z), UTC milliseconds or +DURATION (+10s), got "soon"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--abort-threshold", "0"],
      'rollout create: --abort-threshold must be a percent above 0, at most 100 (such as 10 or 10%), got "0"',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--abort-threshold", "5", "--abort-on", "ok"],
      'rollout create: --abort-on "OK" is not an end state that can count as a failure; give one or more of FAILED, TIMED_OUT, EXPIRED, CANCELED',
    ],
    [
      ["create", "--handler", "echo", "--tag", "a=b", "--abort-min", "5"],
      "rollout create: --abort-min and --abort-on refine --abort-threshold PCT: give it too",
    ],
    [
      ["list", "--state", "DONE"],
      'rollout list: --state "DONE" is not a rollout state; states are CREATED, IN_PROGRESS, PAUSED, ABORTED, COMPLETED',
    ],
    [
      ["list", "--limit", "0"],
      'rollout list: --limit must be a whole number from 1 to 500, got "0"',
    ],
    [["show"], "rollout show: give ID (ax rollout show ID)"],
    [
      ["resume", "ro-cli-1", "--reason", "x"],
      "rollout resume: unknown flag --reason (it takes --url, --token, --token-file, --config, --json)",
    ],
    [["paus", "ro-cli-1"], 'rollout: unknown subcommand "paus"; did you mean "pause"?'],
    [[], "rollout: give a subcommand: create, list, show, pause, resume or abort"],
  ])("exits 2 for rollout %j, naming the flag, and sends nothing", async (args, message) => {
    expect(await ax(["rollout", ...args], cli.env)).toEqual({
      code: 2,
      stdout: "",
      stderr: `ax: AX_CLI_USAGE: ${message}\n`,
    });
  });

  it("created nothing for the refused command lines", async () => {
    const all = await ax(["rollout", "list", "--all", "--json"], cli.env);
    expect((JSON.parse(all.stdout) as { items: unknown[] }).items).toHaveLength(2);
  });

  it("makes one rollout per --idempotency-key, and prints it again", async () => {
    const [first, again] = await runAxTwice(
      [
        ...["rollout", "create", "--handler", "echo", "--tag", "site=keyed", "--paused"],
        ...["--idempotency-key", "ro-cli-1", "--json"],
      ],
      cli.env,
    );
    const id = (JSON.parse(first.stdout) as { id: string }).id;
    expect((JSON.parse(again.stdout) as { id: string }).id).toBe(id);
    const all = await ax(["rollout", "list", "--all", "--json"], cli.env);
    const keyed = (
      JSON.parse(all.stdout) as { items: { id: string; selector: { tags?: object } }[] }
    ).items.filter((r) => JSON.stringify(r.selector.tags) === '{"site":"keyed"}');
    expect(keyed.map((r) => r.id)).toEqual([id]);
  });

  it("is in ax help", async () => {
    const help = await ax(["rollout", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("ax rollout create (--handler H | --bundle SHA256)");
    expect(help.stdout).toContain("ax rollout pause | abort ID [--reason TEXT]");
  });
});
