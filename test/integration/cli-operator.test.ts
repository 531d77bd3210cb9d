import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { connect, createServer, type Server } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runAx, runAxTwice, tempDir, testBroker, useCliTarget } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));
const TOKEN = "cli-operate-token-0123456789";

const ax = runAx;

/**
 * Each column of an aligned table starts at the same offset on every line: the header's column
 * starts are where every row has a space before a non-space (or the line's start).
 */
function expectAligned(text: string, header: string[]): string[] {
  const lines = text.trimEnd().split("\n");
  const head = lines[0] as string;
  const starts = header.map((h) => head.indexOf(h));
  expect(starts.every((s, i) => s >= 0 && (i === 0 || s > (starts[i - 1] as number)))).toBe(true);
  for (const line of lines.slice(1)) {
    for (const s of starts.slice(1)) {
      if (s >= line.length) continue; // trailing empty cells are trimmed
      expect(line.slice(s - 2, s), `"${line}" at ${s}`).toBe("  ");
      expect(line[s], `"${line}" at ${s}`).not.toBe(" ");
    }
  }
  return lines.slice(1);
}

describe("ax operator commands", () => {
  const cli = useCliTarget(TOKEN);

  it("adds jobs from a file, lists them as an aligned table and as JSON", async () => {
    const file = join(cli.dir, "jobs.json");
    writeFileSync(
      file,
      JSON.stringify([
        { id: "cli-a", handler: "echo", trigger: { type: "every", every: "1h" } },
        {
          id: "cli-longer-name",
          handler: "mqtt.publish",
          trigger: { type: "cron", expr: "0 9 * * 1-5", tz: "Europe/Berlin" },
        },
      ]),
    );
    const added = await ax(["job", "add", "--file", file, "--json"], cli.env);
    expect(added.stderr).toBe("");
    expect(added.code).toBe(0);
    const jobs = JSON.parse(added.stdout) as { id: string; version: number }[];
    expect(jobs.map((j) => [j.id, j.version])).toEqual([
      ["cli-a", 1],
      ["cli-longer-name", 1],
    ]);

    const list = await ax(["job", "list"], cli.env);
    expect(list.code, list.stderr).toBe(0);
    const header = ["job", "version", "handler", "trigger", "status", "next fire (UTC)"];
    const rows = expectAligned(list.stdout, header);
    expect(rows.map((r) => r.split(/\s{2,}/)[0])).toEqual(["cli-a", "cli-longer-name"]);
    expect(list.stdout).toContain('cron "0 9 * * 1-5" Europe/Berlin');

    const json = await ax(["job", "list", "--json"], cli.env);
    expect((JSON.parse(json.stdout) as { items: unknown[] }).items).toHaveLength(2);
  });

  it("names the file, each field's path and the problem for a bad job file, and adds nothing", async () => {
    const file = join(cli.dir, "bad-jobs.json");
    writeFileSync(
      file,
      JSON.stringify([
        { id: "ok-job", handler: "echo", trigger: { type: "manual" } },
        { id: "bad-job", handler: "echo", trigger: { type: "cron", expr: "* *" }, shards: -1 },
        { id: "ok-job", handler: "echo", trigger: { type: "manual" } },
      ]),
    );
    const r = await ax(["job", "add", "--file", file], cli.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`ax: AX_JOB_INVALID: ${file}: invalid job definitions`);
    expect(r.stderr).toContain(
      "[1].trigger.expr: must have 5 fields (minute hour day month weekday) or 6 (with seconds first), got 2",
    );
    expect(r.stderr).toContain("[1].shards: Too small: expected number to be >=1");
    expect(r.stderr).toContain('[2].id: duplicate job id "ok-job" (also at [0])');
    expect(await cli.coordinator.store.getJob("ok-job")).toBeUndefined();

    writeFileSync(file, "[ not json");
    const r2 = await ax(["job", "add", "--file", file], cli.env);
    expect(r2.code).toBe(1);
    expect(r2.stderr).toContain(`ax: AX_JOB_INVALID: ${file}:1:4: not valid JSON: unexpected "o"`);
    const r3 = await ax(["job", "add", "--file", join(cli.dir, "no-such.json")], cli.env);
    expect(r3.code).toBe(1);
    expect(r3.stderr).toContain(
      `ax: AX_JOB_INVALID: ${join(cli.dir, "no-such.json")}: cannot read: ENOENT: no such file or directory`,
    );

    // A file with a job that exists already adds none of its jobs (it added those before it).
    await cli.coordinator.putJob({
      id: "there-already",
      handler: "echo",
      trigger: { type: "manual" },
    });
    writeFileSync(
      file,
      JSON.stringify([
        { id: "new-one", handler: "echo", trigger: { type: "manual" } },
        { id: "there-already", handler: "echo", trigger: { type: "manual" } },
      ]),
    );
    const r4 = await ax(["job", "add", "--file", file], cli.env);
    expect(r4.code).toBe(1);
    expect(r4.stderr).toContain(
      `ax: AX_JOB_EXISTS: job "there-already" already exists; update it instead (ax job edit there-already --file FILE); no job of ${file} was added`,
    );
    expect(await cli.coordinator.store.getJob("new-one")).toBeUndefined();
  });

  it("shows, edits, pauses, previews and triggers a job", async () => {
    const file = join(cli.dir, "one.json");
    writeFileSync(
      file,
      JSON.stringify({
        id: "cli-b",
        handler: "echo",
        trigger: { type: "every", every: "10s", anchor: 0 },
      }),
    );
    expect((await ax(["job", "add", "--file", file], cli.env)).code).toBe(0);
    writeFileSync(
      file,
      JSON.stringify({
        id: "cli-b",
        handler: "echo",
        params: { v: 2 },
        trigger: { type: "every", every: "10s", anchor: 0 },
      }),
    );
    const edited = await ax(["job", "edit", "cli-b", "--file", file], cli.env);
    expect(edited.stdout.trim()).toBe("job cli-b: version 2");
    // Pausing is state: the version stays, and no next fire time is shown while paused.
    const paused = await ax(["job", "pause", "cli-b"], cli.env);
    expect(paused.stdout.trim()).toBe("job cli-b: paused; it fires nothing until resumed");
    const shown = await ax(["job", "show", "cli-b"], cli.env);
    expect(shown.stdout).toMatch(/^status {2,}paused$/m);
    expect(shown.stdout).toMatch(/^next fire {2,}paused$/m);
    expect(shown.stdout).toContain('"v": 2');
    const listed = expectAligned((await ax(["job", "list"], cli.env)).stdout, [
      "job",
      "version",
      "handler",
      "trigger",
      "status",
      "next fire (UTC)",
    ]).find((r) => r.startsWith("cli-b "));
    expect(listed?.split(/\s{2,}/)).toEqual([
      "cli-b",
      "2",
      "echo",
      "every 10000ms",
      "paused",
      "paused",
    ]);
    const resumed = await ax(["job", "resume", "cli-b"], cli.env);
    expect(resumed.stdout.trim()).toMatch(
      /^job cli-b: resumed; next fire \d{4}-\d\d-\d\dT[\d:.]+Z$/,
    );
    const active = await ax(["job", "show", "cli-b"], cli.env);
    expect(active.stdout).toMatch(/^next fire {2,}\d{4}-\d\d-\d\dT/m);
    // The ID may come after the flags.
    const preview = await ax(
      ["job", "preview", "--count", "3", "--after", "0", "cli-b", "--json"],
      cli.env,
    );
    expect(JSON.parse(preview.stdout)).toEqual({ times: [10_000, 20_000, 30_000] });
    const cron = await ax(
      [
        "job",
        "preview",
        "--trigger",
        '{"type":"cron","expr":"0 12 * * *"}',
        "--after",
        "2026-01-01T00:00:00Z",
        "--count",
        "2",
      ],
      cli.env,
    );
    expect(cron.code, cron.stderr).toBe(0);
    const rows = expectAligned(cron.stdout, ["#", "fire time (UTC)"]);
    expect(rows).toEqual(["1  2026-01-01T12:00:00.000Z", "2  2026-01-02T12:00:00.000Z"]);
    // A cron trigger in a zone: each time in UTC and in the zone, across the spring change.
    const berlin = '{"type":"cron","expr":"0 9 * * *","tz":"Europe/Berlin"}';
    const zoned = await ax(
      ["job", "preview", "--trigger", berlin, "--after", "2026-03-28T00:00:00Z", "--count", "2"],
      cli.env,
    );
    expect(zoned.code, zoned.stderr).toBe(0);
    expect(
      expectAligned(zoned.stdout, ["#", "fire time (UTC)", "fire time (Europe/Berlin)"]),
    ).toEqual([
      "1  2026-03-28T08:00:00.000Z  2026-03-28T09:00:00.000+01:00",
      "2  2026-03-29T07:00:00.000Z  2026-03-29T09:00:00.000+02:00",
    ]);
    // A stored job's preview: the API gives its zone too.
    const stored = await ax(
      ["job", "preview", "cli-longer-name", "--count", "1", "--after", "2026-01-05T00:00:00Z"],
      cli.env,
    );
    expect(stored.code, stored.stderr).toBe(0);
    expect(
      expectAligned(stored.stdout, ["#", "fire time (UTC)", "fire time (Europe/Berlin)"]),
    ).toEqual(["1  2026-01-05T08:00:00.000Z  2026-01-05T09:00:00.000+01:00"]);
    const zonedJson = await ax(
      [
        "job",
        "preview",
        "--trigger",
        berlin,
        "--after",
        "2026-03-28T00:00:00Z",
        "--count",
        "1",
        "--json",
      ],
      cli.env,
    );
    expect(JSON.parse(zonedJson.stdout)).toEqual({ times: [1774684800000], tz: "Europe/Berlin" });
    const trig = await ax(["job", "trigger", "cli-b", "--json"], cli.env);
    const ids = (JSON.parse(trig.stdout) as { executionIds: string[] }).executionIds;
    expect(ids).toHaveLength(1);
    expect((await cli.coordinator.store.getExecution(ids[0] as string))?.jobId).toBe("cli-b");
  });

  it("refuses a command for an agent it does not know, unless --queue", async () => {
    const refused = await ax(
      ["command", "send", "--agent", "no-such-agent", "--handler", "echo"],
      cli.env,
    );
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe("");
    expect(refused.stderr.trim()).toBe(
      'ax: AX_AGENT_NOT_FOUND: agent "no-such-agent" is not known: it is not enrolled and has never connected (to create the command anyway, for an agent still to come, send it with queue: true, or ax command send --queue)',
    );
    expect(await cli.coordinator.store.listExecutions({ agentId: "no-such-agent" })).toEqual([]);
    const tagged = await ax(
      ["command", "send", "--tag", "site=x", "--queue", "--handler", "echo"],
      cli.env,
    );
    expect(tagged.code).toBe(2);
    expect(tagged.stderr.trim()).toBe(
      "ax: AX_CLI_USAGE: command send: --queue applies to --agent only (a --tag selector matches agents already known)",
    );
  });

  it("makes a command, a retry and a run now once per --idempotency-key", async () => {
    const send = (key: string) => [
      ...["command", "send", "--agent", "keyed-agent", "--queue", "--handler", "echo"],
      ...["--idempotency-key", key, "--json"],
    ];
    const [first, again] = await runAxTwice(send("cmd-1"), cli.env);
    expect(again.stdout).toBe(first.stdout);
    const [id] = (JSON.parse(first.stdout) as { executionIds: string[] }).executionIds;
    const keyed = async () =>
      (await cli.coordinator.store.listExecutions({ limit: 1_000_000 })).filter(
        (e) => e.targetAgentId === "keyed-agent",
      );
    expect(await keyed()).toHaveLength(1);
    const bad = await ax(send("two words"), cli.env);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("ax: AX_API_INVALID_REQUEST: the Idempotency-Key header");

    expect((await ax(["exec", "cancel", id as string], cli.env)).code).toBe(0);
    const [retried, retriedAgain] = await runAxTwice(
      ["exec", "retry", id as string, "--idempotency-key", "retry-1", "--json"],
      cli.env,
    );
    expect(retriedAgain.stdout).toBe(retried.stdout);
    expect(await keyed()).toHaveLength(2);

    await cli.coordinator.putJob({
      id: "keyed-job",
      handler: "echo",
      paused: true,
      trigger: { type: "every", every: "1h" },
    });
    const [ran, ranAgain] = await runAxTwice(
      ["job", "trigger", "keyed-job", "--idempotency-key", "run-1"],
      cli.env,
    );
    expect(ranAgain.stdout).toBe(ran.stdout);
    expect(await cli.coordinator.store.listExecutions({ jobId: "keyed-job" })).toHaveLength(1);
  });

  /**
   * A TCP proxy to the coordinator's HTTP port that passes each request on (its Host header
   * made the coordinator's), and for the first `lose` connections drops the answer: the
   * coordinator made what was asked, the client never hears of it.
   */
  async function losingProxy(lose: number): Promise<{ url: string; server: Server }> {
    const target = new URL(cli.env.AX_URL as string);
    const server = createServer((client) => {
      const upstream = connect(Number(target.port), target.hostname);
      client.on("error", () => {});
      upstream.on("error", () => {});
      // The coordinator answers only to its own names: each request's Host is the target's.
      client.on("data", (chunk: Buffer) => {
        upstream.write(
          Buffer.from(
            chunk.toString("latin1").replace(/^host: [^\r]*/im, `host: ${target.host}`),
            "latin1",
          ),
        );
      });
      if (lose > 0) {
        lose--;
        upstream.once("data", () => {
          client.destroy();
          upstream.destroy();
        });
      } else {
        upstream.pipe(client);
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    return { url: `http://127.0.0.1:${port}`, server };
  }

  it("sends a command again when its answer is lost, with the key it made: made once", async () => {
    const made = async (agent: string) =>
      (await cli.coordinator.store.listExecutions({ limit: 1_000_000 }))
        .filter((e) => e.targetAgentId === agent)
        .map((e) => e.id);
    const send = (agent: string, url: string) =>
      ax(["command", "send", "--agent", agent, "--queue", "--handler", "echo", "--json"], {
        ...cli.env,
        AX_URL: url,
      });
    const once = await losingProxy(1);
    try {
      const r = await send("lost-answer-agent", once.url);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toContain(
        "sending the same request again with its Idempotency-Key in 0.5 s",
      );
      const ids = await made("lost-answer-agent");
      expect(ids).toHaveLength(1);
      expect((JSON.parse(r.stdout) as { executionIds: string[] }).executionIds).toEqual(ids);
    } finally {
      once.server.close();
    }
    // No answer ever: five tries make one command, and the error names the key to send it with.
    const never = await losingProxy(Number.POSITIVE_INFINITY);
    try {
      const r = await send("never-answered-agent", never.url);
      expect(r.code).toBe(1);
      expect(r.stderr.match(/sending the same request again/g)).toHaveLength(4);
      expect(r.stderr).toMatch(
        /it may have been made: the same command with --idempotency-key cli-[0-9a-f-]{36} makes it at most once/,
      );
      expect(await made("never-answered-agent")).toHaveLength(1);
    } finally {
      never.server.close();
    }
  }, 30_000);

  it("sends a command, lists and shows executions, cancels and retries one", async () => {
    const sent = await ax(
      [
        "command",
        "send",
        "--agent",
        "nobody-yet",
        "--queue",
        "--handler",
        "echo",
        "--params",
        '{"x":1}',
        "--at",
        "+10m",
        "--deadline",
        "+1m",
      ],
      cli.env,
    );
    expect(sent.code, sent.stderr).toBe(0);
    const [row] = expectAligned(sent.stdout, ["agent", "execution"]);
    const id = (row as string).split(/\s+/)[1] as string;
    const e = await cli.coordinator.store.getExecution(id);
    expect(e).toMatchObject({ targetAgentId: "nobody-yet", params: { x: 1 }, state: "PENDING" });
    expect((e?.deadline ?? 0) - (e?.fireAt ?? 0)).toBe(60_000);

    const list = await ax(["exec", "list", "--agent", "nobody-yet"], cli.env);
    expect(list.code, list.stderr).toBe(0);
    const rows = expectAligned(list.stdout, [
      "execution",
      "job",
      "state",
      "agent",
      "attempt",
      "fire at (UTC)",
      "late",
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toContain("command→nobody-yet");

    const canceled = await ax(["exec", "cancel", id], cli.env);
    expect(canceled.stdout.trim()).toBe(`execution ${id}: CANCELED`);
    const again = await ax(["exec", "cancel", id], cli.env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(
      `ax: AX_EXEC_CONFLICT: execution "${id}" already ended CANCELED`,
    );
    const retried = await ax(["exec", "retry", id, "--json"], cli.env);
    const newId = (JSON.parse(retried.stdout) as { executionId: string }).executionId;
    expect(newId).not.toBe(id);

    const shown = await ax(["exec", "show", id], cli.env);
    expect(shown.stdout).toMatch(/^state {2,}CANCELED$/m);
    expectAligned(shown.stdout.split("\n\n")[1] as string, [
      "at (UTC)",
      "event",
      "from",
      "to",
      "round",
      "agent",
      "reason",
    ]);
    const json = await ax(
      ["exec", "list", "--agent", "nobody-yet", "--state", "pending,canceled", "--all", "--json"],
      cli.env,
    );
    const page = JSON.parse(json.stdout) as { items: { id: string }[]; nextCursor: null };
    expect(page.items.map((x) => x.id)).toEqual([newId, id]);
    expect(page.nextCursor).toBeNull();

    const fleet = await ax(["fleet", "list", "--json"], cli.env);
    expect(JSON.parse(fleet.stdout)).toEqual({
      items: [],
      nextCursor: null,
      total: 0,
      counts: { online: 0, offline: 0 },
    });
    const filtered = await ax(
      [
        "fleet",
        "list",
        "--status",
        "online",
        "--tag",
        "site=north",
        "--search",
        "gw",
        "--all",
        "--json",
      ],
      cli.env,
    );
    expect(filtered.code, filtered.stderr).toBe(0);
    expect(JSON.parse(filtered.stdout)).toMatchObject({ items: [], total: 0 });
    const ghost = await ax(["fleet", "show", "ghost"], cli.env);
    expect(ghost.code).toBe(1);
    expect(ghost.stderr).toContain('ax: AX_AGENT_NOT_FOUND: agent "ghost" not found');
  });

  it.each([
    [
      ["exec", "list", "--limit", "x"],
      'exec list: --limit must be a whole number from 1 to 500, got "x"',
    ],
    [["exec", "list", "--state", "DONE"], 'exec list: --state "DONE" is not a state'],
    [["exec", "list", "--from", "yesterday"], "exec list: --from must be an ISO time"],
    [
      ["exec", "list", "--from", "2026-01-01T00:00:00"],
      'exec list: --from has no time zone: add Z for UTC or an offset such as +01:00 (got "2026-01-01T00:00:00")',
    ],
    [
      ["fleet", "list", "--status", "gone"],
      'fleet list: --status must be online or offline, got "gone"',
    ],
    [
      ["fleet", "list", "--limit", "0"],
      'fleet list: --limit must be a whole number from 1 to 1000, got "0"',
    ],
    [["fleet", "list", "--all", "--cursor", "a"], "fleet list: give --cursor or --all, not both"],
    [["exec", "show"], "exec show: give ID (ax exec show ID)"],
    [["exec", "show", "a", "b"], 'exec show: unexpected argument "b"'],
    [["exec", "stop", "a"], 'exec: unknown subcommand "stop"'],
    [["job", "add"], "job add: --file FILE is required"],
    [
      ["job", "list", "--colour"],
      "job list: unknown flag --colour (it takes --url, --token, --token-file, --config, --json)",
    ],
    [
      ["job", "preview", "x", "--count", "0"],
      "job preview: --count must be a whole number from 1 to 1000",
    ],
    [["command", "send", "--handler", "echo"], "command send: give --agent ID or --tag KEY=VALUE"],
    [
      ["command", "send", "--handler", "echo", "--tag", "site"],
      'command send: --tag must be KEY=VALUE, got "site"',
    ],
    [
      ["command", "send", "--handler", "echo", "--agent", "a", "--params", "[1]"],
      "command send: --params must be a JSON object, got [1]",
    ],
    [
      ["fleet", "list", "--url", "ftp://x"],
      'fleet list: --url must be an http:// or https:// URL, got "ftp://x"',
    ],
  ])("rejects %j with exit code 2 naming the flag", async (args, message) => {
    const r = await ax(args, cli.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`ax: AX_CLI_USAGE: ${message}`);
  });

  it("says when the coordinator cannot be reached, or refuses the token", async () => {
    const r = await ax(["job", "list", "--url", "http://127.0.0.1:9"], cli.env);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "ax: AX_API_UNREACHABLE: cannot reach the coordinator at http://127.0.0.1:9",
    );
    const noToken = await ax(["job", "list"], { AX_URL: cli.http.url });
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toContain("ax: AX_API_UNAUTHORIZED:");
    // Flags win over the environment.
    const flags = await ax(["job", "list", "--json", "--url", cli.http.url, "--token", TOKEN], {
      AX_URL: "http://127.0.0.1:9",
      AX_TOKEN: "wrong",
    });
    expect(flags.code, flags.stderr).toBe(0);
  });
});

describe("ax coordinator start with an http section", () => {
  it("serves the HTTP API on the configured port until SIGTERM", async () => {
    const broker = await testBroker();
    const tmp = tempDir();
    try {
      const config = join(tmp.dir, "coordinator.json");
      writeFileSync(
        config,
        JSON.stringify({
          store: { path: join(tmp.dir, "ax.sqlite") },
          mqtt: { url: broker.url, prefix: broker.prefix },
          // Unsigned agents: this test is not about authentication (test/integration/security*.test.ts are).
          security: { messages: "off" },
          http: {
            port: 0,
            auth: { tokens: [{ tokenFile: join(tmp.dir, "token"), role: "read" }] },
          },
        }),
      );
      writeFileSync(join(tmp.dir, "token"), `${TOKEN}\n`, { mode: 0o600 });
      const child = spawn(process.execPath, [AX, "coordinator", "start", "--config", config], {
        stdio: ["ignore", "ignore", "pipe"],
      });
      const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
      let stderr = "";
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line in ${stderr}`)), 30_000);
        child.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString("utf8");
          const m = /"url":"(http:[^"]+)"/.exec(stderr);
          if (m) {
            clearTimeout(timer);
            resolve(m[1] as string);
          }
        });
      });
      try {
        const health = await fetch(`${url}/api/health`);
        expect(health.status).toBe(200);
        const jobs = await fetch(`${url}/api/jobs`, {
          headers: { authorization: `Bearer ${TOKEN}` },
        });
        expect(jobs.status).toBe(200);
        const anon = await fetch(`${url}/api/jobs`);
        expect(anon.status).toBe(401);
      } finally {
        child.kill("SIGTERM");
      }
      expect(await exited).toBe(0);
    } finally {
      await broker.close();
      tmp.cleanup();
    }
  });

  it("names the file, the field and the problem for a bad http section", async () => {
    const tmp = tempDir();
    try {
      const config = join(tmp.dir, "coordinator.json");
      writeFileSync(
        config,
        JSON.stringify({
          mqtt: { url: "mqtt://127.0.0.1:1" },
          http: {
            host: "0.0.0.0",
            port: 70000,
            auth: "off",
          },
        }),
      );
      const r = await ax(["coordinator", "start", "--config", config]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`ax: AX_CONFIG_INVALID: ${config}: invalid coordinator config`);
      expect(r.stderr).toContain("http.port: Too big: expected number to be <=65535");
      expect(r.stderr).toContain(
        'http.auth: "off" is only allowed on a loopback host (127.0.0.1, ::1, localhost), not "0.0.0.0"; give tokens',
      );
      writeFileSync(
        config,
        JSON.stringify({
          mqtt: { url: "mqtt://127.0.0.1:1" },
          http: { auth: { tokens: [{ token: "short", role: "boss" }, { role: "read" }] } },
        }),
      );
      const r2 = await ax(["coordinator", "start", "--config", config]);
      expect(r2.code).toBe(1);
      expect(r2.stderr).toContain("http.auth.tokens.0.token: must be at least 16 characters");
      expect(r2.stderr).toContain(
        'http.auth.tokens.0.role: must be "viewer", "operator" or "admin"',
      );
      expect(r2.stderr).toContain("http.auth.tokens.1: give exactly one of token and tokenFile");
    } finally {
      tmp.cleanup();
    }
  });
});
