import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join } from "node:path";
import * as z from "zod/mini";
import { AxError } from "../shared/errors.js";
import { identityFileSchema } from "../shared/identity.js";
import { ID_PATTERN } from "../shared/ids.js";
import { HANDLER_NAMES } from "../shared/profile-names.js";
import { describeIssue } from "../shared/protocol/codec.js";
import { MAX_TAGS, maxKeys } from "../shared/protocol/envelope.js";
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

/**
 * Agent options as written in its config file (JSON), for an agent built with `parts`. The
 * handler sections are typed as if every device handler were built in; at run time only those
 * built in are accepted.
 */
function agentConfigSchema(parts: AgentParts) {
  const handlers = handlersConfigSchema(parts.handlers, parts.features) as unknown as z.ZodMiniType<
    DeviceHandlersConfig,
    DeviceHandlersConfigInput
  >;
  return z.object({
    agentId: z
      .string()
      .check(z.regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)")),
    mqtt: z.object({
      url: brokerUrl(parts),
      /** @default "ax" */
      prefix: z._default(
        z.string().check(z.regex(/^[A-Za-z0-9._-]+$/, "must be one plain topic level")),
        "ax",
      ),
      /** Seconds; the broker publishes the Last Will after 1.5× this. @default 10 */
      keepaliveS: z._default(z.int().check(z.gte(1), z.lte(3600)), 10),
      username: z.optional(z.string()),
      password: z.optional(z.string()),
      /**
       * Reconnect backoff: full jitter between 0 and min(capMs, baseMs·2^(n−1)) before attempt n,
       * so a broker restart costs an agent seconds (docs/agent.md, "Offline operation").
       */
      reconnect: z._default(
        z.object({
          /** @default 500 */
          baseMs: z._default(z.int().check(z.gte(10), z.lte(60_000)), 500),
          /** @default 5000 */
          capMs: z._default(z.int().check(z.gte(10), z.lte(3_600_000)), 5_000),
        }),
        { baseMs: 500, capMs: 5_000 },
      ),
    }),
    /**
     * The agent's identity (docs/security.md): its key and broker login, as `ax fleet enroll`
     * wrote them. With one, every message it sends is MACed and every message it receives must
     * be. Give the file (`identityFile`) rather than its contents where you can.
     */
    identity: z.optional(identityFileSchema),
    /**
     * The identity file. Relative paths are read from the config file's folder.
     * @default "ax-identity.json" beside the config file, when there is one
     */
    identityFile: z.optional(z.string().check(z.minLength(1))),
    security: z._default(
      z.object({
        /**
         * How far a down message's signing time may be from the coordinator's clock as this
         * agent knows it (checked once it has a clock sample). @default 300000 (5 min)
         */
        freshnessMs: z._default(z.int().check(z.gte(1_000), z.lte(86_400_000)), 300_000),
      }),
      { freshnessMs: 300_000 },
    ),
    /** Firmware profile name reported in hello. @default "dev" */
    profile: z._default(z.string().check(z.minLength(1), z.maxLength(64)), "dev"),
    capacity: z._default(
      z.object({
        /** Executions running at once. @default 4 */
        concurrency: z._default(z.int().check(z.gte(1), z.lte(1024)), 4),
        /** Due executions waiting for a slot; beyond it a due dispatch is answered busy. @default 64 */
        queue: z._default(z.int().check(z.gte(0), z.lte(100_000)), 64),
        /** Executions held (scheduled, queued, running); beyond it dispatches are rejected journal_full. @default 10000 */
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
    journal: z._default(
      z.object({
        /**
         * The journal's SQLite file; one journal serves one agent (docs/agent.md, "The journal").
         * @default "ax-journal-<agentId>.sqlite" in the working directory (see {@link journalPath})
         */
        path: z.optional(z.string().check(z.minLength(1))),
        /** See docs/benchmarks.md for the cost of each. @default "NORMAL" */
        synchronous: z._default(z.enum(["NORMAL", "FULL"]), "NORMAL"),
        /** Under NORMAL, still fsync the commit that marks a command running (see docs/agent.md). @default true */
        syncStart: z._default(z.boolean(), true),
        /**
         * Where WAL checkpoints run: "thread" (a worker thread started when writes need one, so
         * the fsyncs of a checkpoint never hold up the wheel) or "inline" (inside a commit, as
         * SQLite does by default; no second thread). @default "thread"
         */
        checkpoint: z._default(z.enum(["thread", "inline"]), "thread"),
        /** Unacknowledged reports kept at most before new dispatches are refused. @default 100000 */
        maxOutbox: z._default(z.int().check(z.gte(100), z.lte(10_000_000)), 100_000),
        /** How long finished commands are kept to answer duplicates. @default 86400000 (24 h) */
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
    /** Built-in device handlers to offer (mqtt.publish, http.request, file.write, exec); see docs/handlers.md. @default {} */
    handlers: z._default(handlers, {}),
    /** Wheel tick for device commands. @default 20 */
    tickMs: z._default(z.int().check(z.gte(1), z.lte(1000)), 20),
    /** Slots of the wheel; one revolution is tickMs × wheelSlots. @default 512 */
    wheelSlots: z._default(z.int().check(z.gte(16), z.lte(65_536)), 512),
    /** Heartbeat period until the coordinator's welcome says otherwise. @default 5000 */
    heartbeatMs: z._default(z.int().check(z.gte(100), z.lte(600_000)), 5_000),
    /** Grace for running work on SIGTERM (rule 13). @default 10000 */
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
 * option throws AX_CONFIG_INVALID naming `source`, the field and the problem.
 */
export function parseAgentConfig(
  input: unknown,
  source = "config",
  parts: AgentParts = PARTS,
  /** The folder relative identity paths are read from, and an identity file looked for in. */
  base?: string,
): AgentConfig {
  const lines = notBuiltIn(input, parts);
  const defaults = parts.bundle?.defaults;
  const merged = defaults && isPlain(input) ? overlay(defaults, input) : input;
  const result = agentConfigSchema(parts).safeParse(merged, { error: describeIssue });
  if (!result.success) {
    for (const i of result.error.issues) {
      const path = i.path.map(String).join(".") || "(root)";
      // The clearer line from notBuiltIn already covers an unknown handler section.
      if (i.code === "unrecognized_keys" && path === "handlers") {
        const rest = i.keys.filter((k) => !lines.some((l) => l.startsWith(`handlers.${k}:`)));
        if (rest.length > 0) lines.push(`${path}: has unknown keys ${rest.join(", ")}`);
        continue;
      }
      lines.push(`${path}: ${i.message}`);
    }
  }
  if (!result.success || lines.length > 0) {
    throw new AxError("AX_CONFIG_INVALID", `${source}: invalid agent config\n${lines.join("\n")}`, {
      context: { source },
    });
  }
  return Object.freeze(withIdentity(result.data, source, base));
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
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new AxError(
      "AX_CONFIG_READ",
      `${path}: cannot read agent config: ${(err as Error).message}`,
      { cause: err },
    );
  }
  return parseAgentConfig(raw, path, parts, dirname(path));
}
