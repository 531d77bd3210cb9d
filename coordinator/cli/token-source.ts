import { existsSync } from "node:fs";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { AxError, isAxError } from "../../shared/errors.js";
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
 * keeps it). A named file that cannot be read, is empty, or is readable by others is an
 * AX_SECURITY_KEY error that says which source named it and where it looked; the default file
 * missing is no token.
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
    return fromFile(
      command,
      resolve(cwd, flags["token-file"]),
      "the token file of --token-file",
      cwd,
    );
  }
  if (env.AX_TOKEN_FILE) {
    return fromFile(
      command,
      resolve(cwd, env.AX_TOKEN_FILE),
      "the token file of AX_TOKEN_FILE",
      cwd,
    );
  }
  if (flags.config !== undefined) {
    const config = loadCoordinatorConfig(flags.config);
    const dir = secretsDir(config);
    const via = `the admin token of --config ${flags.config} (its secrets folder ${shown(dir, cwd)})`;
    return fromFile(command, join(dir, SECRET_FILES.adminToken), via, cwd);
  }
  const file = join(cwd, "ax-secrets", SECRET_FILES.adminToken);
  if (!existsSync(file)) {
    return {
      token: undefined,
      from: `none: no --token, AX_TOKEN, --token-file, AX_TOKEN_FILE or --config, and no ${shown(file, cwd)}`,
    };
  }
  return fromFile(command, file, "the default token file", cwd);
}

/** A path for a message: `./x` under the working folder, else absolute. */
function shown(path: string, cwd: string): string {
  const rel = relative(cwd, path);
  return rel === "" ? "." : rel.startsWith("..") || isAbsolute(rel) ? path : `.${sep}${rel}`;
}

function fromFile(command: string, path: string, via: string, cwd: string): TokenSource {
  const where = shown(path, cwd);
  let text: string;
  try {
    text = readPrivate(path);
  } catch (err) {
    // readPrivate's own refusal (readable by others) names the file already.
    const message = isAxError(err, "AX_SECURITY_KEY")
      ? err.message
      : `cannot read ${where}: ${(err as Error).message.replace(/, \w+ '.*'$/, "")}`;
    throw new AxError("AX_SECURITY_KEY", `${command}: ${via}: ${message}`, { cause: err });
  }
  const token = text.trim();
  if (token.length === 0) {
    throw new AxError("AX_SECURITY_KEY", `${command}: ${via}: ${where} is empty`);
  }
  return { token, from: `${where} (${via})` };
}
