import { AxError, isAxError } from "../../shared/errors.js";
import { flags } from "./args.js";

const USAGE = `ax — a job scheduler for fleets of edge and IoT devices

Usage:
  ax demo [--duration SECONDS] [--http-port PORT]
                                        broker, coordinator and 3 agents on this machine; live
                                        table; the console, API and metrics at the URL it prints
  ax coordinator start --config FILE    run the coordinator (JSON config)
  ax agent start --config FILE          run an agent (JSON config)
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
  ax bundle fleet --config FILE         which agent runs which build (coordinator config)
  ax broker config --config FILE [--out DIR] [--port N] [--host ADDR] [--user NAME]
               [--tls-cert FILE --tls-key FILE [--tls-ca FILE] [--require-client-cert]]
                                        write Mosquitto 2's password file, ACL and
                                        mosquitto.conf for the enrolled fleet (coordinator
                                        config; DIR defaults to its broker.mosquitto.dir)
  ax help                               this text

Operating a running coordinator (its HTTP API):
  ax job add --file FILE                add jobs (one definition, an array, or { "jobs": [...] })
  ax job list | show ID                 list jobs, or show one
  ax job edit ID --file FILE            replace a job's definition (a new version)
  ax job delete | pause | resume ID     delete, pause or resume a job
  ax job trigger ID                     fire a job now
  ax job preview ID [--count N]         a job's next fire times
  ax job preview --trigger JSON         a trigger's next fire times
  ax exec list [--job ID] [--state S,S] [--agent ID] [--kind job|command]
               [--from T] [--to T] [--limit N] [--cursor C | --all]
  ax exec show | cancel | retry ID      an execution and its timeline; cancel; retry
  ax fleet list | show ID               the agents the coordinator knows
  ax fleet enroll AGENT_ID [--tag K=V ...] [--rotate] [--out FILE] [--force]
                                        enrol an agent; writes its identity file (0600,
                                        default ./AGENT_ID.identity.json)
  ax fleet revoke AGENT_ID              revoke an agent's enrolment
  ax fleet identities                   enrolled and revoked agents
  ax token create NAME --role viewer|operator|admin
                                        make an API token (printed once)
  ax token list | revoke NAME           the API's tokens; revoke one
  ax command send --handler H (--agent ID | --tag K=V ...) [--params JSON]
               [--at T] [--deadline T] [--timeout D] [--priority N]
                                        a device command (T: ISO time, UTC ms or +10s)

  These take --url URL (or AX_URL; default http://127.0.0.1:8080), and --json to print the
  API's JSON instead of a table. The token is the first of: --token TOKEN, AX_TOKEN,
  --token-file FILE, AX_TOKEN_FILE, the admin token of --config COORDINATOR_CONFIG (in its
  secrets folder), and ./ax-secrets/admin.token (a coordinator started in this folder).
  fleet enroll | revoke | identities and token need an admin token.
`;

/** The CLI. Returns the process exit code: 0 ok, 1 failure, 2 usage error. */
export async function main(argv: string[]): Promise<number> {
  try {
    const [command, sub, ...rest] = argv;
    switch (command) {
      case undefined:
      case "help":
      case "--help":
      case "-h":
        process.stdout.write(USAGE);
        return 0;
      case "demo":
        return await (await import("./demo.js")).runDemo(
          [sub, ...rest].filter((a): a is string => a !== undefined),
        );
      case "coordinator":
        if (sub !== "start")
          throw new AxError(
            "AX_CLI_USAGE",
            `coordinator: unknown subcommand "${sub ?? ""}" (expected start)`,
          );
        return await (await import("./coordinator-start.js")).coordinatorStart(rest);
      case "agent": {
        if (sub !== "start")
          throw new AxError(
            "AX_CLI_USAGE",
            `agent: unknown subcommand "${sub ?? ""}" (expected start)`,
          );
        const f = flags("agent start", rest, { config: { type: "string" } });
        if (!f.config) throw new AxError("AX_CLI_USAGE", "agent start: --config FILE is required");
        const { loadAgentConfig } = await import("../../agent/config.js");
        const { runAgent } = await import("../../agent/main.js");
        await runAgent(loadAgentConfig(f.config));
        return 0;
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
      case "bundle":
        return await (await import("./bundle.js")).bundleCommand(sub, rest);
      case "broker":
        return await (await import("./broker.js")).brokerCommand(sub, rest);
      default:
        throw new AxError("AX_CLI_USAGE", `unknown command "${command}"; run "ax help"`);
    }
  } catch (err) {
    if (isAxError(err)) {
      process.stderr.write(`ax: ${err.code}: ${err.message}\n`);
      return err.code === "AX_CLI_USAGE" ? 2 : 1;
    }
    process.stderr.write(`ax: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  }
}
