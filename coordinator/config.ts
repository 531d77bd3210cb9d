import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { z } from "zod";
import { AxError, type ErrorCode } from "../shared/errors.js";
import { parseJsonText } from "../shared/json-text.js";
import { durationSchema } from "./domain/duration.js";
import { formatIssues } from "./domain/job.js";

/** What webhooks can be told about. */
export const ALERT_KINDS = [
  "execution.failed",
  "execution.timed_out",
  "execution.expired",
  "fire.missed",
  "agent.offline",
] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];

/** Hosts only this machine can reach: the only ones where the HTTP API may run without tokens. */
export function isLoopbackHost(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127(\.\d{1,3}){3}$/.test(host);
}

/** Cross-field checks that run even when a field already failed, so every problem is listed. */
const EVEN_WITH_ISSUES = {
  when: (p: { value: unknown }) => typeof p.value === "object" && p.value !== null,
};

/** What an API token may do; each role may do everything the one before it may. */
export const API_ROLES = ["viewer", "operator", "admin"] as const;
export type ApiRole = (typeof API_ROLES)[number];

/** The roles of 0.x config files, still read: `read` is `viewer`, `operate` is `operator`. */
const DEPRECATED_ROLES = { read: "viewer", operate: "operator" } as const;

/** Names of API tokens: the actor recorded for what a token does. */
export const TOKEN_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** One bearer token of the HTTP API and what it may do. */
export const httpTokenSchema = z
  .object({
    /**
     * The name recorded as the actor of what the token does (timelines, job history).
     * @default "config-token-N", N its index in the list
     */
    name: z
      .string()
      .regex(TOKEN_NAME_PATTERN, "must be 1 to 64 letters, digits, '.', '_' or '-'")
      .optional(),
    /** The token itself (at least 16 characters). Give this or `tokenFile`. */
    token: z.string().min(16, "must be at least 16 characters").optional(),
    /** A file holding the token (surrounding whitespace ignored), read at start. */
    tokenFile: z.string().min(1).optional(),
    /**
     * `viewer`: every GET; `operator`: every change but the admin routes; `admin`: everything.
     * `read` and `operate` are deprecated names of viewer and operator.
     */
    role: z
      .enum([...API_ROLES, "read", "operate"], {
        message: 'must be "viewer", "operator" or "admin"',
      })
      .transform((r): ApiRole => (r === "read" || r === "operate" ? DEPRECATED_ROLES[r] : r)),
  })
  .strict()
  .superRefine((t, ctx) => {
    if ((t.token === undefined) === (t.tokenFile === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: ["token"],
        message: "give exactly one of token and tokenFile",
      });
    }
  }, EVEN_WITH_ISSUES);

const tokensAuthSchema = z
  .object({
    /**
     * Tokens besides the admin token file and the tokens made through the API.
     * @default []
     */
    tokens: z.array(httpTokenSchema).default([]),
  })
  .strict()
  .superRefine((a, ctx) => {
    const seen = new Set<string>(["admin"]);
    a.tokens.forEach((t, i) => {
      const name = t.name ?? `config-token-${i}`;
      if (seen.has(name)) {
        ctx.addIssue({
          code: "custom",
          path: ["tokens", i, "name"],
          message: `"${name}" is taken (by the admin token or another token of the list)`,
        });
      }
      seen.add(name);
    });
  });

/**
 * `"off"`, or token auth. Not a z.union: a union only says "Invalid input" when a token in the
 * list is bad, where this names the token's field and the problem.
 */
const httpAuthSchema = z.unknown().transform((value, ctx) => {
  if (value === "off") return "off" as const;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    ctx.addIssue({ code: "custom", message: 'must be "off" or { "tokens": [ ... ] }' });
    return z.NEVER;
  }
  const r = tokensAuthSchema.safeParse(value);
  if (r.success) return r.data;
  for (const issue of r.error.issues) {
    ctx.addIssue({ code: "custom", message: issue.message, path: issue.path });
  }
  return z.NEVER;
}) as unknown as z.ZodType<
  "off" | z.output<typeof tokensAuthSchema>,
  "off" | z.input<typeof tokensAuthSchema>
>;

/** A Host header value: a name or address, with an optional port. */
const hostNameSchema = z
  .string()
  .regex(
    /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?$/,
    "must be a host name or address with an optional port, such as ax.example.com:8080",
  );

const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/** The HTTP API, metrics and console (`ax coordinator start` serves them). */
export const httpConfigSchema = z
  .object({
    /** @default "127.0.0.1" */
    host: z.string().min(1).default("127.0.0.1"),
    /** 0 picks a free port. @default 8080 */
    port: z.number().int().min(0).max(65_535).default(8080),
    /**
     * Token auth: the admin token (`admin.token` in the secrets folder, created at first start),
     * the tokens made through the API, and `tokens` listed here. `"off"` is an explicit opt-out
     * allowed only on a loopback host; the Host, Origin and Content-Type checks stay on.
     * @default { tokens: [] }
     */
    auth: httpAuthSchema.default({ tokens: [] }),
    /**
     * Origins (`scheme://host[:port]`) besides the coordinator's own whose web pages may call
     * the API; a request with any other `Origin` header is refused 403. @default []
     */
    allowedOrigins: z
      .array(
        z
          .string()
          .regex(/^https?:\/\/[^/\s]+$/, "must be an origin such as https://ops.example.com"),
      )
      .default([]),
    /**
     * Host header values answered besides `localhost`, `127.0.0.1`, `[::1]` and `host` (when not
     * a wildcard), each of those with the bound port. A name without a port matches with none or
     * with the bound port. Any other Host is refused 421 (DNS rebinding). @default []
     */
    allowedHosts: z.array(hostNameSchema).default([]),
    /** Largest request body accepted; a larger one is answered 413. @default 1048576 (1 MiB) */
    maxBodyBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 * 1024 * 1024)
      .default(DEFAULT_MAX_BODY_BYTES),
  })
  .strict()
  .superRefine((h, ctx) => {
    // Without tokens anyone who can reach the port can cancel work and send device commands.
    if (h.auth === "off" && typeof h.host === "string" && !isLoopbackHost(h.host)) {
      ctx.addIssue({
        code: "custom",
        path: ["auth"],
        message: `"off" is only allowed on a loopback host (127.0.0.1, ::1, localhost), not "${h.host}"; give tokens`,
      });
    }
  }, EVEN_WITH_ISSUES);
export type HttpConfigInput = z.input<typeof httpConfigSchema>;
export type HttpConfig = Readonly<z.output<typeof httpConfigSchema>>;

/** Coordinator options as users write them in a config file. */
export const coordinatorConfigSchema = z
  .object({
    store: z
      .object({
        /** SQLite file. @default "ax.sqlite" */
        path: z.string().min(1).default("ax.sqlite"),
      })
      .strict()
      .default({ path: "ax.sqlite" }),
    mqtt: z
      .object({
        url: z.string().regex(/^mqtts?:\/\/.+/, "must be an mqtt:// or mqtts:// URL"),
        /** @default "ax" */
        prefix: z
          .string()
          .regex(/^[A-Za-z0-9._-]+$/, "must be one plain topic level")
          .default("ax"),
        username: z.string().optional(),
        password: z.string().optional(),
        sharedGroup: z
          .string()
          .regex(/^[A-Za-z0-9._-]+$/)
          .optional(),
        /**
         * The coordinator's MQTT client id. It is fixed across restarts so that the broker keeps
         * the coordinator's session (`clean: false`) and queues what agents report while it is down.
         * Each coordinator on one broker needs its own. @default derived from the prefix and the
         * store's path: `ax-c-` and 16 hex digits
         */
        clientId: z
          .string()
          .regex(/^[A-Za-z0-9._:-]{1,64}$/, "must be 1 to 64 letters, digits, '.', '_', ':' or '-'")
          .optional(),
        /**
         * Keep the broker session across restarts (`clean: false`). Turn off only for a broker that
         * cannot hold sessions. @default true
         */
        persistentSession: z.boolean().default(true),
      })
      .strict(),
    /** @default { host: "127.0.0.1", port: 8080, auth: { tokens: [] }, maxBodyBytes: 1048576 } */
    http: httpConfigSchema.default({
      host: "127.0.0.1",
      port: 8080,
      auth: { tokens: [] },
      allowedOrigins: [],
      allowedHosts: [],
      maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
    }),
    /** A JSON file of job definitions loaded (and upserted) at start. */
    jobsFile: z.string().optional(),
    /** Agents send heartbeats this often; 3 missed → offline. @default 5s */
    heartbeat: durationSchema.default(5_000),
    /** Dispatch this long before the fire time, so the agent fires from its own wheel. @default 500ms */
    dispatchLead: durationSchema.default(500),
    /**
     * A device command is dispatched as soon as it is known, up to this long before its time, so
     * the agent's journal and wheel carry it through broker and coordinator outages. @default 24h
     */
    commandHorizon: durationSchema.default(86_400_000),
    /** How often the engine looks for work to dispatch, time out, retry or expire. @default 100ms */
    poll: durationSchema.default(100),
    /** Jobs due within this window are held on the firing wheel. @default 5s */
    lookAhead: durationSchema.default(5_000),
    /** A fire this late is a misfire, handled by the job's misfire policy. @default 5s */
    misfireThreshold: durationSchema.default(5_000),
    /**
     * An agent that answers `busy` gets no new work for this long, doubled for each further
     * `busy` in a row (at most 8×); its execution is routed elsewhere or waits. @default 1s
     */
    busyBackoff: durationSchema.default(1_000),
    /** Grace past an execution's timeout before the coordinator times it out itself. @default 5s */
    timeoutGrace: durationSchema.default(5_000),
    /** Webhooks told about failures, misfires and agents going offline. @default none */
    alerts: z
      .object({
        webhooks: z
          .array(
            z
              .object({
                url: z.string().regex(/^https?:\/\/.+/, "must be an http:// or https:// URL"),
                /** Alert kinds sent to this hook. @default all */
                kinds: z.array(z.enum(ALERT_KINDS)).min(1).optional(),
                /** Extra request headers (e.g. Authorization). */
                headers: z.record(z.string(), z.string()).optional(),
                /** Signs each body: header X-Ax-Signature: sha256=HMAC-SHA256(secret, body). */
                secret: z.string().min(16).optional(),
              })
              .strict(),
          )
          .max(32)
          .default([]),
        /** Tries per alert and hook before it is recorded failed. @default 6 */
        maxAttempts: z.number().int().min(1).max(100).default(6),
        /** Retry back-off: base and cap of the full-jitter exponential. @default 1s, 5m */
        backoffBase: durationSchema.default(1_000),
        backoffCap: durationSchema.default(300_000),
        /** One attempt's time limit. @default 10s */
        timeout: durationSchema.default(10_000),
      })
      .strict()
      .default({
        webhooks: [],
        maxAttempts: 6,
        backoffBase: 1_000,
        backoffCap: 300_000,
        timeout: 10_000,
      }),
    /**
     * Who may speak on the broker (docs/security.md). On by default: every message to and from an
     * agent is authenticated with that agent's key, and only enrolled agents are heard.
     */
    security: z
      .object({
        /**
         * The folder of the coordinator's secrets: the fleet key, the bundle signing key and the
         * first admin token. @default "ax-secrets" beside the store's file
         */
        dir: z.string().min(1).optional(),
        /**
         * `"required"`: a message without a valid MAC from an enrolled agent is refused, and every
         * message to an agent is MACed. `"off"`: neither (only for a broker no one else can
         * reach; the coordinator logs a warning at start). @default "required"
         */
        messages: z.enum(["required", "off"]).default("required"),
        /**
         * How far a message's signing time may be from the coordinator's clock; outside it the
         * message is refused as stale or replayed. @default 5m
         */
        freshness: durationSchema.default(300_000),
      })
      .strict()
      .default({ messages: "required", freshness: 300_000 }),
    /** The broker the coordinator keeps in step with its enrolments. @default {} (none) */
    broker: z
      .object({
        /**
         * A Mosquitto run with the files of `ax broker config --out DIR`: after every enrolment,
         * rotation and revocation the coordinator rewrites `DIR/passwd` and `DIR/acl` and sends
         * Mosquitto SIGHUP, which disconnects a revoked agent at once. @default none
         */
        mosquitto: z
          .object({
            /** The folder `ax broker config --out` wrote. */
            dir: z.string().min(1, "must name the folder ax broker config --out wrote"),
            /** Mosquitto's pid file (its `pid_file`). @default "mosquitto.pid" in `dir` */
            pidFile: z.string().min(1).optional(),
          })
          .strict()
          .optional(),
      })
      .strict()
      .default({}),
    /** @default 65536 */
    maxPayloadBytes: z
      .number()
      .int()
      .min(1024)
      .max(16 * 1024 * 1024)
      .default(65_536),
    /**
     * Finished executions and their timelines are purged this many days after they end.
     * @default 30
     */
    retentionDays: z.number().int().min(1).max(3650).default(30),
    /**
     * Stored error text (an execution's message, a timeline entry's detail) is capped at this many
     * UTF-8 bytes.
     * @default 2048
     */
    maxErrorTextBytes: z.number().int().min(256).max(65_536).default(2048),
  })
  .strict()
  .superRefine((c, ctx) => {
    // Mosquitto's files need the coordinator's login, which exists only when it is configured
    // or derived (security.messages "required").
    const hasLogin =
      c.mqtt?.username === undefined
        ? c.security?.messages !== "off"
        : c.mqtt.password !== undefined;
    if (c.broker?.mosquitto !== undefined && !hasLogin) {
      ctx.addIssue({
        code: "custom",
        path: ["broker", "mosquitto"],
        message:
          'needs the coordinator\'s broker login: set mqtt.username and mqtt.password, or security.messages "required"',
      });
    }
  }, EVEN_WITH_ISSUES);

export type CoordinatorConfigInput = z.input<typeof coordinatorConfigSchema>;
export type CoordinatorConfig = Readonly<z.output<typeof coordinatorConfigSchema>>;

/** Parses options; a bad one throws AX_CONFIG_INVALID naming `source`, the field path and the problem. */
export function parseCoordinatorConfig(input: unknown, source = "config"): CoordinatorConfig {
  const result = coordinatorConfigSchema.safeParse(input);
  if (!result.success) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      `${source}: invalid coordinator config\n${formatIssues(result.error)}`,
      {
        context: { source },
      },
    );
  }
  return Object.freeze(result.data);
}

/** The folder of a coordinator's secrets: `security.dir`, or `ax-secrets` beside the store. */
export function secretsDir(config: CoordinatorConfig): string {
  return config.security.dir ?? join(dirname(resolve(config.store.path)), "ax-secrets");
}

/**
 * Reads and parses a JSON file, naming the file in any error, and a syntax error's line and
 * column (`jobs.json:3:5: not valid JSON: …`). `code` is the error's code: AX_CONFIG_READ for a
 * config file; a job file passes its own.
 */
export function readJsonFile(path: string, code: ErrorCode = "AX_CONFIG_READ"): unknown {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new AxError(code, `${path}: cannot read: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const parsed = parseJsonText(text);
  if (parsed.ok) return parsed.value;
  throw new AxError(
    code,
    `${path}:${parsed.line}:${parsed.column}: not valid JSON: ${parsed.reason}`,
    { context: { path, line: parsed.line, column: parsed.column } },
  );
}
