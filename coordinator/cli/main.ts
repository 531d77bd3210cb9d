import { AxError, isAxError } from "../../shared/errors.js";
import { flags } from "./args.js";
import { runDemo } from "./demo.js";

const USAGE = `ax — a job scheduler for fleets of edge and IoT devices

Usage:
  ax demo [--duration SECONDS]          broker, coordinator and 3 agents on this machine; live table
  ax coordinator start --config FILE    run the coordinator (JSON config)
  ax agent start --config FILE          run an agent (JSON config)
  ax help                               this text
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
        return await runDemo([sub, ...rest].filter((a): a is string => a !== undefined));
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
