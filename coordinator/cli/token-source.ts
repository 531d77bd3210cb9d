import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { AxError } from "../../shared/errors.js";
import { loadCoordinatorConfig, secretsDir } from "../config.js";
import { readPrivate, SECRET_FILES } from "../security/secrets.js";

/** Where the CLI found its token, for messages: `--token`, `AX_TOKEN`, a file's path, or none. */
export interface TokenSource {
  token: string | undefined;
  from: string;
}

/** The flags that say where the token is. */
export interface TokenFlags {
  token?: string | undefined;
  "token-file"?: string | undefined;
  config?: string | undefined;
}

/**
 * The token the CLI sends, the first of: `--token`, `AX_TOKEN`, the file `--token-file`, the file
 * `AX_TOKEN_FILE`, the admin token of the coordinator config `--config` (its secrets folder), and
 * `./ax-secrets/admin.token` (where a coordinator started in this folder with the default store
 * keeps it). A named file that cannot be read, or one readable by others, is an error; the default
 * file missing is no token.
 */
export function resolveToken(
  command: string,
  flags: TokenFlags,
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): TokenSource {
  if (flags.token !== undefined) return { token: flags.token, from: "--token" };
  // An empty variable counts as unset.
  if (env.AX_TOKEN) return { token: env.AX_TOKEN, from: "AX_TOKEN" };
  if (flags["token-file"] !== undefined) {
    return fromFile(command, resolve(cwd, flags["token-file"]), "--token-file");
  }
  if (env.AX_TOKEN_FILE) return fromFile(command, resolve(cwd, env.AX_TOKEN_FILE), "AX_TOKEN_FILE");
  if (flags.config !== undefined) {
    const config = loadCoordinatorConfig(flags.config);
    const file = join(secretsDir(config), SECRET_FILES.adminToken);
    return fromFile(command, file, `--config ${flags.config}`);
  }
  const file = join(cwd, "ax-secrets", SECRET_FILES.adminToken);
  if (!existsSync(file)) return { token: undefined, from: `no token (no ${file})` };
  return fromFile(command, file, "the default token file");
}

function fromFile(command: string, path: string, via: string): TokenSource {
  let text: string;
  try {
    text = readPrivate(path);
  } catch (err) {
    if ((err as { code?: string }).code === "AX_SECURITY_KEY") throw err;
    throw new AxError(
      "AX_CLI_USAGE",
      `${command}: cannot read the token file ${path} (${via}): ${(err as Error).message}`,
      { cause: err },
    );
  }
  const token = text.trim();
  if (token.length === 0) {
    throw new AxError("AX_CLI_USAGE", `${command}: the token file ${path} (${via}) is empty`);
  }
  return { token, from: `${path} (${via})` };
}
