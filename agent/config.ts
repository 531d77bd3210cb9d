import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import * as z from "zod/mini";
import { issueLines, unknownKeys } from "../shared/config-issues.js";
import { AxError } from "../shared/errors.js";
import { identityFileSchema } from "../shared/identity.js";
import { ID_PATTERN } from "../shared/ids.js";
import { parseJsonText } from "../shared/json-text.js";
import { HANDLER_NAMES } from "../shared/profile-names.js";
import { describeIssue } from "../shared/protocol/codec.js";
import { MAX_TAGS, maxKeys } from "../shared/protocol/envelope.js";
import { PREFIX_PATTERN, PREFIX_RULE } from "../shared/protocol/topics.js";
import type { DeviceHandlersConfig, DeviceHandlersConfigInput } from "./handlers/device/index.js";
import { handlersConfigSchema } from "./handlers/set.js";
import { DEFAULT_IDENTITY_FILE, readIdentityFile } from "./identity.js";
import { PARTS } from "./parts/included.js";
import type { AgentParts } from "./parts/types.js";

/** The broker URL rule: mqtts:// only when the agent has TLS. */
function brokerUrl(parts: AgentParts) {
  return parts.features.tls
    ? z.string().check(z.regex(/^mqtts?:\/\/.+/, "must be an mqtt:// or mqtts:// URL"))
    : z
        .string()
        .check(
          z.regex(
            /^mqtt:\/\/.+/,
            "must be an mqtt:// URL (mqtts:// needs the tls feature, left out of this agent)",
          ),
        );
}

/** The identity given inline: the identity file's fields, and no others. */
const inlineIdentitySchema = z.strictObject({
  ...identityFileSchema.shape,
  mqtt: z.strictObject(identityFileSchema.shape.mqtt.shape),
});

/**
 * Agent options as written in its config file (JSON), for an agent built with `parts`. The
 * handler sections are typed as if every device handler were built in; at run time only those
 * built in are accepted. Unknown keys are refused at every level. What each field means is in
 * agent/config-docs.ts (docs/config.md), not here: the text would weigh on the agent bundle.
 */
export function agentConfigSchema(parts: AgentParts = PARTS) {
  const handlers = handlersConfigSchema(parts.handlers, parts.features) as unknown as z.ZodMiniType<
    DeviceHandlersConfig,
    DeviceHandlersConfigInput
  >;
  return z.strictObject({
    agentId: z
      .string()
      .check(z.regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)")),
    mqtt: z.strictObject({
      url: brokerUrl(parts),
      prefix: z._default(z.string().check(z.regex(PREFIX_PATTERN, PREFIX_RULE)), "ax"),
      keepaliveS: z._default(z.int().check(z.gte(1), z.lte(3600)), 10),
      username: z.optional(z.string()),
      password: z.optional(z.string()),
      reconnect: z._default(
        z.strictObject({
          baseMs: z._default(z.int().check(z.gte(10), z.lte(60_000)), 500),
          capMs: z._default(z.int().check(z.gte(10), z.lte(3_600_000)), 5_000),
        }),
        { baseMs: 500, capMs: 5_000 },
      ),
    }),
    identity: z.optional(inlineIdentitySchema),
    identityFile: z.optional(z.string().check(z.minLength(1))),
    security: z._default(
      z.strictObject({
        freshnessMs: z._default(z.int().check(z.gte(1_000), z.lte(86_400_000)), 300_000),
      }),
      { freshnessMs: 300_000 },
    ),
    profile: z._default(z.string().check(z.minLength(1), z.maxLength(64)), "dev"),
    capacity: z._default(
      z.strictObject({
        concurrency: z._default(z.int().check(z.gte(1), z.lte(1024)), 4),
        queue: z._default(z.int().check(z.gte(0), z.lte(100_000)), 64),
        maxPending: z._default(z.int().check(z.gte(1), z.lte(1_000_000)), 10_000),
      }),
      { concurrency: 4, queue: 64, maxPending: 10_000 },
    ),
    // The bounds of hello.tags: a tag the protocol refuses would keep the agent from registering.
    tags: z._default(
      z
        .record(
          z.string().check(z.regex(/^[A-Za-z0-9._-]{1,64}$/, "bad tag name")),
          z.string().check(z.maxLength(128)),
        )
        .check(maxKeys(MAX_TAGS)),
      {},
    ),
    // Left out, journal.path is ax-journal-<agentId>.sqlite in the working directory (journalPath).
    journal: z._default(
      z.strictObject({
        path: z.optional(z.string().check(z.minLength(1))),
        synchronous: z._default(z.enum(["NORMAL", "FULL"]), "NORMAL"),
        syncStart: z._default(z.boolean(), true),
        checkpoint: z._default(z.enum(["thread", "inline"]), "thread"),
        maxOutbox: z._default(z.int().check(z.gte(100), z.lte(10_000_000)), 100_000),
        retainMs: z._default(z.int().check(z.gte(60_000)), 86_400_000),
      }),
      {
        synchronous: "NORMAL",
        syncStart: true,
        checkpoint: "thread",
        maxOutbox: 100_000,
        retainMs: 86_400_000,
      },
    ),
    handlers: z._default(handlers, {}),
    tickMs: z._default(z.int().check(z.gte(1), z.lte(1000)), 20),
    wheelSlots: z._default(z.int().check(z.gte(16), z.lte(65_536)), 512),
    heartbeatMs: z._default(z.int().check(z.gte(100), z.lte(600_000)), 5_000),
    shutdownGraceMs: z._default(z.int().check(z.gte(0), z.lte(3_600_000)), 10_000),
  });
}

export type AgentConfigInput = z.input<ReturnType<typeof agentConfigSchema>>;
export type AgentConfig = Readonly<z.output<ReturnType<typeof agentConfigSchema>>>;

/**
 * The journal file an agent uses: `journal.path` when set, otherwise `ax-journal-<agentId>.sqlite`
 * in the working directory. Derived from the agentId so that two agents started from one folder
 * never share a journal (issue 15); agentIds cannot hold `/`, so it is always one file name.
 */
export function journalPath(config: Pick<AgentConfig, "agentId" | "journal">): string {
  return config.journal.path ?? `ax-journal-${config.agentId}.sqlite`;
}

/** The journal file name agents used before it was derived from the agentId. */
export const LEGACY_JOURNAL_PATH = "ax-journal.sqlite";

type Plain = Record<string, unknown>;
const isPlain = (v: unknown): v is Plain =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** `over` laid over `under`: objects merge key by key, anything else in `over` wins. */
function overlay(under: Plain, over: Plain): Plain {
  const out: Plain = { ...under };
  for (const [key, value] of Object.entries(over)) {
    const below = out[key];
    out[key] = isPlain(below) && isPlain(value) ? overlay(below, value) : value;
  }
  return out;
}

/**
 * What a config asks for that this agent was not built with: a handler section for a handler
 * left out of its bundle, or a profile other than its bundle's. Zod would say "unknown keys";
 * this says why.
 */
function notBuiltIn(input: unknown, parts: AgentParts): string[] {
  if (!isPlain(input)) return [];
  const lines: string[] = [];
  const bundle = parts.bundle;
  const built = new Set(parts.handlers.map((h) => h.name));
  const builtList = [...built].join(", ") || "none";
  const where = bundle ? `this agent's bundle (profile ${bundle.profile})` : "this agent";
  const handlers = input.handlers;
  if (isPlain(handlers)) {
    for (const key of Object.keys(handlers)) {
      if ((HANDLER_NAMES as readonly string[]).includes(key) && !built.has(key as never)) {
        lines.push(`handlers.${key}: not built into ${where}; it has ${builtList}`);
      }
    }
  }
  if (bundle && input.profile !== undefined && input.profile !== bundle.profile) {
    lines.push(
      `profile: this agent's bundle was built for profile "${bundle.profile}", got ${JSON.stringify(input.profile)} (leave the field out)`,
    );
  }
  return lines;
}

/**
 * Parses agent options for an agent built with `parts` (by default, this one's). A bundle's
 * profile supplies the defaults; what the file sets wins (docs/bundles.md, "Precedence"). A bad
 * option throws AX_CONFIG_INVALID naming `source`, each field and its problem (an unknown key
 * with the closest known one).
 */
export function parseAgentConfig(
  input: unknown,
  source = "config",
  parts: AgentParts = PARTS,
  /**
   * The config file's folder: relative paths (identityFile, journal.path) are read from it, and
   * an identity file is looked for in it. Without it (a config made in code) they are left as
   * they are, relative to the working directory.
   */
  base?: string,
): AgentConfig {
  const lines = notBuiltIn(input, parts);
  const defaults = parts.bundle?.defaults;
  const merged = defaults && isPlain(input) ? overlay(defaults, input) : input;
  const result = agentConfigSchema(parts).safeParse(merged, {
    error: (i) => unknownKeys(i) ?? describeIssue(i),
  });
  if (!result.success) {
    // The clearer line from notBuiltIn already covers a handler section left out of the bundle.
    const said = new Set(lines.map((l) => l.slice(0, l.indexOf(": "))));
    for (const line of issueLines(result.error.issues, merged)) {
      if (!said.has(line.slice(0, line.indexOf(": ")))) lines.push(line);
    }
  }
  if (!result.success || lines.length > 0) {
    throw new AxError("AX_CONFIG_INVALID", `${source}: invalid agent config\n${lines.join("\n")}`, {
      context: { source },
    });
  }
  let config = result.data;
  const journal = config.journal.path;
  if (base !== undefined && journal !== undefined && !isAbsolute(journal)) {
    // Relative to the config file's folder; before 0.x, to the working directory.
    const path = resolve(base, journal);
    if (!existsSync(path) && existsSync(journal) && resolve(journal) !== path) {
      throw new AxError(
        "AX_CONFIG_INVALID",
        `${source}: journal.path: "${journal}" is read from the config file's folder (${path}, no journal there), but ${resolve(journal)} is a journal in the working directory, where earlier versions read it: move it, or give journal.path as an absolute path`,
        { context: { source } },
      );
    }
    config = { ...config, journal: { ...config.journal, path } };
  }
  return Object.freeze(withIdentity(config, source, base));
}

/** The config with its identity read from its file, and checked against its agentId. */
function withIdentity(config: AgentConfig, source: string, base: string | undefined): AgentConfig {
  let identity = config.identity;
  let from = `${source}: identity`;
  if (identity === undefined) {
    let file = config.identityFile;
    if (file !== undefined && base !== undefined && !isAbsolute(file)) file = join(base, file);
    if (file === undefined && base !== undefined) {
      const beside = join(base, DEFAULT_IDENTITY_FILE);
      if (existsSync(beside)) file = beside;
    }
    if (file === undefined) return config;
    identity = readIdentityFile(file);
    from = file;
  }
  if (identity.agentId !== config.agentId) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      `${from}: is the identity of agent "${identity.agentId}", not of "${config.agentId}"`,
      { context: { source } },
    );
  }
  return { ...config, identity };
}

/** Reads and parses an agent config file. */
export function loadAgentConfig(path: string, parts: AgentParts = PARTS): AgentConfig {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new AxError(
      "AX_CONFIG_READ",
      `${path}: cannot read agent config: ${(err as Error).message}`,
      { cause: err },
    );
  }
  // The same file:line:column form as the coordinator's config errors, for an editor to jump to.
  const parsed = parseJsonText(text);
  if (!parsed.ok) {
    throw new AxError(
      "AX_CONFIG_READ",
      `${path}:${parsed.line}:${parsed.column}: not valid JSON: ${parsed.reason}`,
      { context: { path, line: parsed.line, column: parsed.column } },
    );
  }
  return parseAgentConfig(parsed.value, path, parts, dirname(path));
}
