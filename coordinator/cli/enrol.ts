import { accessSync, chmodSync, constants, existsSync, statSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { AxError } from "../../shared/errors.js";
import type { IdentityRecord } from "../store/port.js";
import { apiClient, CLIENT_FLAGS, parseCommand, print, printJson, tagsFlag } from "./client.js";
import { isoTime, table, tagsText } from "./table.js";

/**
 * `ax fleet enroll AGENT_ID [--tag K=V ...] [--rotate] [--out FILE] [--force]`: enrols an agent
 * and writes its identity file (0600), which holds its key: refused over an existing file
 * unless `--force`, checked before the coordinator is asked, so nothing is enrolled in vain.
 */
export async function fleetEnroll(argv: string[]): Promise<number> {
  const c = "fleet enroll";
  const { flags, args } = parseCommand(
    c,
    argv,
    {
      ...CLIENT_FLAGS,
      tag: { type: "string", multiple: true },
      rotate: { type: "boolean" },
      out: { type: "string" },
      force: { type: "boolean" },
    },
    ["AGENT_ID"],
  );
  const agentId = args[0] as string;
  const tags = tagsFlag(c, "tag", flags.tag);
  const out = resolve(flags.out ?? `${agentId}.identity.json`);
  // A folder is no place for the file, --force or not (docs/cli.md: AX_CLI_USAGE).
  if (existsSync(out) && !flags.force && !statSync(out).isDirectory()) {
    throw new AxError(
      "AX_CLI_FILE_EXISTS",
      `${c}: ${out} exists; pass --force to overwrite it or --out FILE for another`,
      { context: { path: out } },
    );
  }
  // The file must be writable where it goes, the default's folder (this one) too: an enrolment
  // whose identity file cannot be written is one in vain, and enrolling again needs --rotate.
  const folder = dirname(out);
  let problem: string | undefined;
  // An agent id that would make the default a path elsewhere is the API's to refuse (its id rules).
  const checkFolder = flags.out !== undefined || folder === process.cwd();
  try {
    if (checkFolder && !statSync(folder).isDirectory()) problem = `${folder} is not a folder`;
    else if (checkFolder) accessSync(folder, constants.W_OK);
  } catch {
    problem = `its folder ${folder} does not exist or is not writable`;
  }
  if (problem === undefined && existsSync(out)) {
    try {
      if (statSync(out).isDirectory()) problem = "it is a folder";
      else accessSync(out, constants.W_OK);
    } catch {
      problem = "it is not writable";
    }
  }
  if (problem !== undefined) {
    throw new AxError("AX_CLI_USAGE", `${c}: cannot write ${out}: ${problem}`, {
      context: { path: out },
    });
  }
  const r = await apiClient(c, flags).request<{
    identity: IdentityRecord;
    file: Record<string, unknown>;
  }>("POST", "/api/identities", {
    agentId,
    ...(flags.tag === undefined ? {} : { tags }),
    ...(flags.rotate ? { rotate: true } : {}),
  });
  try {
    writeFileSync(out, `${JSON.stringify(r.file, null, 2)}\n`, { mode: 0o600 });
    // The mode applies only to a file created here: one overwritten (--force) is made 0600 too.
    chmodSync(out, 0o600);
  } catch (err) {
    // Checked above, so only a change since (a disk full, a folder removed) gets here.
    throw new AxError(
      "AX_CLI_FILE_WRITE",
      `${c}: agent "${agentId}" is enrolled, but its identity file ${out} could not be written (${(err as Error).message}); enrol it again with --rotate to get a new key and file`,
      { context: { path: out }, cause: err },
    );
  }
  if (flags.json) printJson({ identity: r.identity, file: out });
  else
    print(
      `agent "${agentId}" enrolled (key generation ${r.identity.generation}); its identity file ` +
        `is ${out} (mode 0600): copy it to the device and set identityFile in its config`,
    );
  return 0;
}

/** `ax fleet revoke AGENT_ID`. */
export async function fleetRevoke(argv: string[]): Promise<number> {
  const { flags, args } = parseCommand("fleet revoke", argv, CLIENT_FLAGS, ["AGENT_ID"]);
  const r = await apiClient("fleet revoke", flags).request<IdentityRecord>(
    "POST",
    `/api/identities/${encodeURIComponent(args[0] as string)}/revoke`,
  );
  if (flags.json) printJson(r);
  else print(`agent "${r.agentId}" revoked: its messages and broker login are refused from now on`);
  return 0;
}

/** `ax fleet identities`. */
export async function fleetIdentities(argv: string[]): Promise<number> {
  const { flags } = parseCommand("fleet identities", argv, CLIENT_FLAGS);
  const r = await apiClient("fleet identities", flags).request<{ items: IdentityRecord[] }>(
    "GET",
    "/api/identities",
  );
  if (flags.json) printJson(r);
  else
    print(
      table(
        ["agent", "status", "generation", "tags", "updated (UTC)", "by"],
        r.items.map((i) => [
          i.agentId,
          i.status,
          String(i.generation),
          tagsText(i.tags),
          isoTime(i.updatedAt),
          i.actor,
        ]),
      ),
    );
  return 0;
}
