/**
 * The agent's command line, the one implementation behind both `node agent.mjs --config FILE` (a
 * bundle; agent/cli.ts) and `ax agent start --config FILE` (coordinator/cli/main.ts): its flags,
 * reading the config, running the agent until SIGTERM or SIGINT, printing an error and choosing
 * the exit code (EXIT in shared/command-line.ts; docs/cli.md).
 */
import { EXIT, errorText, exitCodeOf, parseFlags } from "../shared/command-line.js";
import { AxError } from "../shared/errors.js";
import { bundleRuntime } from "./bundle-runtime.js";
import { loadAgentConfig } from "./config.js";
import { jsonLogger, runAgent } from "./main.js";
import { PARTS } from "./parts/included.js";

/** How the agent's command line is run: by which program, as which command. */
export interface AgentCommandLineOptions {
  /** The program's name on stderr: `agent` for a bundle, `ax` for `ax agent start`. */
  program: string;
  /** The command as errors name it: `agent` or `agent start`. */
  command: string;
  /** How it is run, for `--help`: `node agent.mjs` or `ax agent start`. */
  invocation: string;
  /** The version `--version` prints, after `ax agent`. */
  version: string;
  /**
   * The URL of the file that exports better-sqlite3 as `Database`, for the journal's checkpoint
   * thread; only a bundle needs it (agent/cli.ts's own URL; see bundle-runtime.ts).
   */
  entryUrl?: string;
}

const AGENT_FLAGS = {
  config: { type: "string" },
  version: { type: "boolean", short: "v" },
  help: { type: "boolean", short: "h" },
} as const;

function usageText(invocation: string): string {
  return `usage: ${invocation} --config FILE    run an agent until SIGTERM or SIGINT (docs/agent.md)
       ${invocation} --version        print the version
exit codes: 0 stopped cleanly, 1 failed (bad config, …), 2 usage error, 70 internal error
`;
}

/** Runs the agent's command line; resolves with the exit code once the agent has stopped. */
export async function agentCommandLine(
  argv: readonly string[],
  options: AgentCommandLineOptions,
): Promise<number> {
  try {
    const { values, positionals } = parseFlags(options.command, argv, AGENT_FLAGS);
    if (values.help) {
      process.stdout.write(usageText(options.invocation));
      return EXIT.ok;
    }
    if (values.version) {
      const bundle = PARTS.bundle ? ` (${PARTS.bundle.profile} bundle)` : "";
      process.stdout.write(`ax agent ${options.version}${bundle}\n`);
      return EXIT.ok;
    }
    if (positionals.length > 0) {
      throw new AxError(
        "AX_CLI_USAGE",
        `${options.command}: unexpected argument "${positionals[0]}"`,
      );
    }
    if (!values.config) {
      throw new AxError("AX_CLI_USAGE", `${options.command}: --config FILE is required`);
    }
    const config = loadAgentConfig(values.config);
    await runAgent(
      config,
      jsonLogger(config.agentId),
      bundleRuntime(PARTS, options.entryUrl ?? import.meta.url),
    );
    return EXIT.ok;
  } catch (err) {
    process.stderr.write(`${errorText(options.program, err)}\n`);
    return exitCodeOf(err);
  }
}
