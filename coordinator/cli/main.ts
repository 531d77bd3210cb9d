import { EXIT, errorText, exitCodeOf } from "../../shared/command-line.js";
import { AxError } from "../../shared/errors.js";
import { didYouMean } from "../../shared/suggest.js";
import { packageJson } from "../package-files.js";
import { unknownSubcommand } from "./args.js";

const USAGE = `ax — a job scheduler for fleets of edge and IoT devices

Usage:
  ax demo [--duration SECONDS] [--http-port PORT]
                                        broker, coordinator and 3 agents on this machine; live
                                        table; the console, API and metrics at the URL it prints
  ax coordinator start --config FILE    run the coordinator (JSON config)
  ax store migrate --config FILE        bring the coordinator's store (SQLite file or
                                        PostgreSQL) to this build's schema, as a start would
  ax agent start --config FILE          run an agent (JSON config); the same as a bundle's
                                        node agent.mjs --config FILE
  ax bundle build --profile NAME [--out DIR] [--native-binding FILE]
               [--signing-key FILE | --config COORD_CONFIG | --unsigned] [--identity FILE]
                                        build the agent bundle of a firmware profile
                                        (dist/bundles/NAME/ and NAME.tar.gz), its manifest
                                        signed with the coordinator's bundle key (default
                                        ./ax-secrets/bundle-signing.key); --identity ships an
                                        agent identity as ax-identity.json
  ax bundle verify FILE [--public-key FILE | --config COORD_CONFIG] [--allow-unsigned]
                                        check a bundle (NAME.tar.gz or its folder): its
                                        signature (default ./ax-secrets/bundle-signing.pub)
                                        and every file's size and sha256
  ax bundle profiles                    list the firmware profiles
  ax bundle fleet --config FILE [--bundles DIR]
                                        which agent runs which build (coordinator config;
                                        builds in DIR, default dist/bundles)
  ax broker config --config FILE [--out DIR] [--port N] [--host ADDR] [--user NAME]
               [--tls-cert FILE --tls-key FILE [--tls-ca FILE] [--require-client-cert]]
                                        write Mosquitto 2's password file, ACL and
                                        mosquitto.conf for the enrolled fleet (coordinator
                                        config; DIR defaults to its broker.mosquitto.dir)
  ax help | --help | -h                 this text (also after any command)
  ax version | --version | -v           print the version

Operating a running coordinator (its HTTP API):
  ax job add --file FILE                add jobs (one definition, an array, or { "jobs": [...] })
  ax job list | show ID                 list jobs, or show one
  ax job edit ID --file FILE            replace a job's definition (a new version)
  ax job delete | pause | resume ID     delete, pause or resume a job
  ax job trigger ID                     fire a job now
  ax job preview ID [--count N] [--after T]
                                        a job's next fire times, in UTC and in a cron
                                        trigger's tz
  ax job preview --trigger JSON [--count N] [--after T]
                                        a trigger's next fire times
  ax exec list [--job ID] [--state S,S] [--agent ID] [--kind job|command]
               [--from T] [--to T] [--limit N] [--cursor C | --all]
  ax exec show | cancel | retry ID      an execution and its timeline; cancel; retry
  ax fleet list [--status online|offline] [--tag K=V[,K=V]] [--profile P]
               [--bundle-version V] [--handler H] [--search TEXT]
               [--limit N] [--cursor C | --all]
                                        the agents the coordinator knows, by id, paged
  ax fleet show ID                      one agent
  ax fleet updates ID [--limit N] [--cursor C | --all]
                                        the agent's agent.update executions, newest first
  ax fleet enroll AGENT_ID [--tag K=V ...] [--rotate] [--out FILE] [--force]
                                        enrol an agent; writes its identity file (0600,
                                        default ./AGENT_ID.identity.json)
  ax fleet revoke AGENT_ID              revoke an agent's enrolment
  ax fleet identities                   enrolled and revoked agents
  ax token create NAME --role viewer|operator|admin
                                        make an API token (printed once)
  ax token list | revoke NAME           the API's tokens; revoke one
  ax command send (--handler H | --bundle SHA256) (--agent ID [--queue] | --tag K=V ...)
               [--params JSON] [--at T] [--deadline T] [--timeout D] [--priority N]
                                        a device command (T: ISO time, UTC ms or +10s)
  ax rollout create (--handler H | --bundle SHA256) [--tag K=V ...] [--agent ID ...]
               [--profile P] [--agent-version V] [--params JSON] [--at T]
               [--start-within D] [--timeout D]
               [--rate N/min | --rate exp:BASE,FACTOR,STEP[,MAX]] [--waves P%[:SOAK],...]
               [--abort-threshold PCT [--abort-min N] [--abort-on S,S]] [--ends-at T]
               [--paused] [--id ID] [--description TEXT] [--idempotency-key KEY]
                                        one device command to every agent that matches all
                                        the selector flags given, at a rate, in waves
                                        (1%:10m,10%:10m,100%), aborted when too many fail;
                                        --paused: created, started by resume
  ax rollout list [--state S] [--limit N] [--cursor C | --all]
  ax rollout show ID                    a rollout, its progress by state and wave, timeline
  ax rollout pause | abort ID [--reason TEXT]
  ax rollout resume ID                  pause, abort, or resume (or start) a rollout
  ax bundle publish PATH [--json]       publish a built, signed bundle (NAME.tar.gz or its
                                        folder) for over-the-air updates; prints its sha256
  ax bundle published [--profile P] [--limit N] [--cursor C | --all]
                                        the published bundles, newest first

  These take --url URL (or AX_URL; default http://127.0.0.1:8080), and --json to print the
  API's JSON instead of a table. The token is the first of: --token TOKEN, AX_TOKEN,
  --token-file FILE, AX_TOKEN_FILE, the admin token of --config COORDINATOR_CONFIG (in its
  secrets folder), and ./ax-secrets/admin.token (a coordinator started in this folder).
  fleet enroll | revoke | identities and token need an admin token.

Exit codes (the same for the agent):
  0   success; a long-running command (demo, coordinator start, agent start) stopped cleanly
  1   the operation failed: bad config, a refused request, not found (the error's AX_ code)
  2   usage error: unknown command or flag, missing or bad flag value
  70  internal error: an unexpected exception, a bug
  75  coordinator start: fenced by another coordinator on a shared store; start it again

More: docs/cli.md.
`;

/** The commands, for a did-you-mean on a near miss. */
const COMMANDS = [
  "demo",
  "coordinator",
  "store",
  "agent",
  "bundle",
  "broker",
  "job",
  "exec",
  "fleet",
  "token",
  "command",
  "rollout",
  "help",
  "version",
];

/** ax's version, from package.json: `ax --version` loads nothing else. */
function version(): string {
  return packageJson().version;
}

/** The flags of every command that take no value: any other `--name` takes the next word. */
const BOOLEAN_FLAGS: ReadonlySet<string> = new Set([
  "all",
  "allow-unsigned",
  "force",
  "help",
  "json",
  "paused",
  "queue",
  "require-client-cert",
  "rotate",
  "unsigned",
  "version",
]);

/**
 * True when `--help` or `-h` is among the arguments (before a `--`) where a flag stands: not as
 * the value of a flag before it (`--search -h`), since a value may start with a single dash.
 */
function asksForHelp(argv: string[]): boolean {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === "--") return false;
    if (a === "--help" || a === "-h") return true;
    const next = argv[i + 1];
    const takesValue = a.startsWith("--") && !a.includes("=") && !BOOLEAN_FLAGS.has(a.slice(2));
    if (takesValue && next !== undefined && !next.startsWith("--")) i++;
  }
  return false;
}

/**
 * The CLI. Returns the process exit code (EXIT in shared/command-line.ts): 0 ok, 1 the operation
 * failed, 2 usage error, 70 internal error. Each command's module is loaded only when it runs, so
 * `ax --help` and `ax --version` stay fast.
 */
export async function main(argv: string[]): Promise<number> {
  ignoreClosedPipe(process.stdout);
  ignoreClosedPipe(process.stderr);
  try {
    const [command, sub, ...rest] = argv;
    // `ax agent start --help` is the agent's own usage (agent/command-line.ts).
    if (asksForHelp(argv) && !(command === "agent" && sub === "start")) {
      process.stdout.write(USAGE);
      return EXIT.ok;
    }
    switch (command) {
      case undefined:
      case "help":
        // Checked like every command's line: `ax help jobs` is not a help page of ax's.
        if (sub !== undefined) {
          throw new AxError("AX_CLI_USAGE", `help: unexpected argument "${sub}"`);
        }
        process.stdout.write(USAGE);
        return EXIT.ok;
      case "version":
      case "--version":
      case "-v":
        if (sub !== undefined) {
          throw new AxError("AX_CLI_USAGE", `${command}: unexpected argument "${sub}"`);
        }
        process.stdout.write(`ax ${version()}\n`);
        return EXIT.ok;
      case "demo":
        return await (await import("./demo.js")).runDemo(argv.slice(1));
      case "store":
        if (sub !== "migrate") throw unknownSubcommand("store", sub, ["migrate"]);
        return await (await import("./store.js")).storeMigrate(rest, (line) =>
          process.stdout.write(`${line}\n`),
        );
      case "coordinator":
        if (sub !== "start") throw unknownSubcommand("coordinator", sub, ["start"]);
        return await (await import("./coordinator-start.js")).coordinatorStart(rest);
      case "agent": {
        if (sub !== "start") throw unknownSubcommand("agent", sub, ["start"]);
        // The agent's own command line (agent/command-line.ts) prints its errors itself.
        const { agentCommandLine } = await import("../../agent/command-line.js");
        return await agentCommandLine(rest, {
          program: "ax",
          command: "agent start",
          invocation: "ax agent start",
          version: version(),
        });
      }
      case "job":
        return await (await import("./job.js")).jobCommand(sub, rest);
      case "exec":
        return await (await import("./exec.js")).execCommand(sub, rest);
      case "fleet":
        return await (await import("./fleet.js")).fleetCommand(sub, rest);
      case "token":
        return await (await import("./token.js")).tokenCommand(sub, rest);
      case "command":
        return await (await import("./command.js")).commandCommand(sub, rest);
      case "rollout":
        return await (await import("./rollout.js")).rolloutCommand(sub, rest);
      case "bundle":
        return await (await import("./bundle.js")).bundleCommand(sub, rest);
      case "broker":
        return await (await import("./broker.js")).brokerCommand(sub, rest);
      default: {
        if (command.startsWith("-")) {
          const hint = didYouMean(command.replace(/^-+/, ""), ["help", "version"], (c) => `--${c}`);
          throw new AxError("AX_CLI_USAGE", `unknown flag ${command}${hint || '; run "ax help"'}`);
        }
        const hint = didYouMean(command, COMMANDS);
        throw new AxError(
          "AX_CLI_USAGE",
          `unknown command "${command}"${hint || '; run "ax help"'}`,
        );
      }
    }
  } catch (err) {
    process.stderr.write(`${errorText("ax", err)}\n`);
    return exitCodeOf(err);
  }
}

/**
 * A reader that stops early (`ax job list | head`) is not a failure of the command: what it did
 * not read is dropped, and the command ends as it would have. A long-running one (`ax coordinator
 * start`) whose log reader went away goes on running. Any other write error still throws.
 */
function ignoreClosedPipe(stream: NodeJS.WriteStream): void {
  if (stream.listenerCount("error") > 0) return;
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code !== "EPIPE") throw err;
  });
}
