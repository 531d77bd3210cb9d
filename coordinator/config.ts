import "./domain/zod-messages.js";
import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { z } from "zod";
import { issueLines, keyedIssues, unknownKeys } from "../shared/config-issues.js";
import { AxError, type ErrorCode } from "../shared/errors.js";
import { parseJsonText } from "../shared/json-text.js";
import { PREFIX_PATTERN, PREFIX_RULE } from "../shared/protocol/topics.js";
import { durationSchema } from "./domain/duration.js";

/*
 * The coordinator's config file. Each field's meaning is its `.meta()` (`doc` below), which
 * docs/config.md is generated from (`npm run docs:config`; coordinator/config-docs.ts). Unknown
 * keys are refused at every level, with the closest known key (shared/config-issues.ts).
 */

/** A field's entry in docs/config.md: what it means, and its default when that is not a value. */
export interface FieldDoc {
  description: string;
  /** The default in words, for a default that is computed (or none). */
  defaultText?: string;
}

/** Metadata for `.meta()`: the field's meaning (and its default in words). */
const doc = (description: string, defaultText?: string): FieldDoc & z.core.GlobalMeta =>
  defaultText === undefined ? { description } : { description, defaultText };

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
    name: z
      .string()
      .regex(TOKEN_NAME_PATTERN, "must be 1 to 64 letters, digits, '.', '_' or '-'")
      .optional()
      .meta(
        doc(
          "The name recorded as the actor of what the token does (timelines, job history).",
          '`"config-token-N"`, N its index in the list',
        ),
      ),
    token: z
      .string()
      .min(16, "must be at least 16 characters")
      .optional()
      .meta(doc("The token itself (at least 16 characters). Give this or `tokenFile`.", "none")),
    tokenFile: z
      .string()
      .min(1)
      .optional()
      .meta(
        doc(
          "A file holding the token (surrounding whitespace ignored), read at start; only its owner may read it (mode 600), or the start is refused. Give this or `token`.",
          "none",
        ),
      ),
    role: z
      .enum([...API_ROLES, "read", "operate"], {
        message: 'must be "viewer", "operator" or "admin"',
      })
      .transform((r): ApiRole => (r === "read" || r === "operate" ? DEPRECATED_ROLES[r] : r))
      .meta(
        doc(
          "`viewer`: every GET; `operator`: every change but the admin routes; `admin`: everything. `read` and `operate` are deprecated names of viewer and operator.",
        ),
      ),
  })
  .strict()
  .superRefine((t, ctx) => {
    if ((t.token === undefined) === (t.tokenFile === undefined)) {
      // On the entry, not on `token`: a misspelt key's "did you mean" must not stand in for it.
      ctx.addIssue({
        code: "custom",
        path: [],
        message: "give exactly one of token and tokenFile",
      });
    }
  }, EVEN_WITH_ISSUES);

/** `http.auth` when it is not `"off"`. */
export const tokensAuthSchema = z
  .object({
    tokens: z
      .array(httpTokenSchema)
      .default([])
      .meta(
        doc(
          "Tokens besides the admin token (`admin.token` in the secrets folder) and the tokens made through the API.",
        ),
      ),
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
  const r = tokensAuthSchema.safeParse(value, { error: unknownKeys });
  if (r.success) return r.data;
  for (const { path, message } of keyedIssues(r.error.issues, value, ["http", "auth"])) {
    ctx.addIssue({ code: "custom", message, path });
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
    host: z
      .string()
      .min(1)
      .default("127.0.0.1")
      .meta(
        doc(
          'The address the HTTP API, `/metrics` and the console listen on. Without tokens (`auth: "off"`) only a loopback address is allowed.',
        ),
      ),
    port: z
      .number()
      .int()
      .min(0)
      .max(65_535)
      .default(8080)
      .meta(doc("The port; 0 picks a free one.")),
    auth: httpAuthSchema
      .default({ tokens: [] })
      .meta(
        doc(
          'Token auth: the admin token (`admin.token` in the secrets folder, created at first start), the tokens made through the API, and `tokens` listed here. `"off"` is an explicit opt-out allowed only on a loopback host; the Host, Origin and Content-Type checks stay on.',
          '`{ "tokens": [] }`',
        ),
      ),
    allowedOrigins: z
      .array(
        z
          .string()
          .regex(/^https?:\/\/[^/\s]+$/, "must be an origin such as https://ops.example.com"),
      )
      .default([])
      .meta(
        doc(
          "Origins (`scheme://host[:port]`) besides the coordinator's own whose web pages may call the API: their CORS preflights are granted and the answers carry `Access-Control-Allow-Origin` (never credentials: the token goes in the `Authorization` header). A request with any other `Origin` header is refused 403.",
        ),
      ),
    allowedHosts: z
      .array(hostNameSchema)
      .default([])
      .meta(
        doc(
          "Host header values answered besides `localhost`, `127.0.0.1`, `[::1]` and `host` (when not a wildcard), each of those with the bound port. A name without a port matches with none or with the bound port. Any other Host is refused 421 (DNS rebinding).",
        ),
      ),
    maxBodyBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 * 1024 * 1024)
      .default(DEFAULT_MAX_BODY_BYTES)
      .meta(doc("Largest request body accepted; a larger one is answered 413.")),
    publicUrl: z
      .string()
      .regex(
        /^https?:\/\/[^\s/?#@]+(\/[^\s?#]*)?$/,
        "must be an http:// or https:// URL such as https://ax.example.com, without credentials, query or fragment",
      )
      .optional()
      .meta(
        doc(
          "The URL agents reach this API at, put into `agent.update` params (`PUBLIC_URL/api/bundles/SHA256/archive`). Set it when agents reach the coordinator by another name than its listen address (any fleet beyond this machine). Without it: `http://127.0.0.1:PORT` when `host` is a wildcard (`0.0.0.0`, `::`) or `localhost`, else `http://HOST:PORT`, with the port the API listens on (the one picked at start with `port` 0).",
          "derived from `host` and `port`",
        ),
      ),
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

/**
 * The base URL agents download published bundles from: `http.publicUrl` without a trailing
 * slash, or one derived from the listen address. Undefined when there is neither (port 0 is
 * only known once bound).
 */
export function publicBaseUrl(
  http: Pick<HttpConfig, "host" | "port" | "publicUrl">,
): string | undefined {
  if (http.publicUrl !== undefined) return http.publicUrl.replace(/\/+$/, "");
  if (http.port === 0) return undefined;
  const wildcard = ["0.0.0.0", "::", "[::]", "localhost", ""].includes(http.host);
  const host = wildcard
    ? "127.0.0.1"
    : http.host.includes(":") && !http.host.startsWith("[")
      ? `[${http.host}]`
      : http.host;
  return `http://${host}:${http.port}`;
}

/** Coordinator options as users write them in a config file. */
export const coordinatorConfigSchema = z
  .object({
    store: z
      .object({
        path: z
          .string()
          .min(1)
          .default("ax.sqlite")
          .meta(
            doc(
              "The SQLite file of the store. Created by `ax coordinator start` (or `ax store migrate`); the commands that only read it (`ax bundle fleet`, `ax broker config`) refuse a missing one.",
            ),
          ),
        url: z
          .string()
          .regex(
            /^postgres(ql)?:\/\/.+/,
            "must be a postgres:// or postgresql:// URL (user, host, port, database)",
          )
          .optional()
          .meta(
            doc(
              "A PostgreSQL database for the store instead of the SQLite file, for several coordinators sharing one store (docs/operations.md#several-coordinators). Its tables are created and migrated at start. A password may be given here or in the standard `PGPASSWORD` variable.",
              "none (the SQLite file `path`)",
            ),
          ),
        schema: z
          .string()
          .regex(
            /^[a-z_][a-z0-9_]{0,54}$/,
            "must be a lower-case SQL name: letters, digits and '_', at most 55",
          )
          .default("public")
          .meta(
            doc(
              "The PostgreSQL schema that holds ax's tables (`url`), created if missing: several ax installations, or a test, can share one database.",
            ),
          ),
        poolMax: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(10)
          .meta(
            doc(
              "At most this many connections to PostgreSQL (`url`) run the store's queries; each coordinator also holds one for its membership and one that listens for other coordinators' work, so `poolMax` + 2 in all.",
            ),
          ),
      })
      .strict()
      .default({ path: "ax.sqlite", schema: "public", poolMax: 10 })
      .meta(doc("Where the coordinator keeps jobs, executions, agents and enrolments.")),
    cluster: z
      .object({
        id: z
          .string()
          .regex(/^[A-Za-z0-9._:-]{1,64}$/, "must be 1 to 64 letters, digits, '.', '_', ':' or '-'")
          .optional()
          .meta(
            doc(
              "This coordinator's name among the coordinators sharing a PostgreSQL store. Each needs its own; a second start under the same id fences the first (its writes are refused).",
              "the MQTT client id",
            ),
          ),
        leaseMs: z
          .number()
          .int()
          .min(1_000)
          .max(60_000)
          .default(3_000)
          .meta(
            doc(
              "How long this coordinator's membership holds without a renewal, by the database's clock; it renews every third of it. When it lapses, a standby takes over (with `dispatch` `shared`, the others take its share), and this one stops dispatching and exits (code 75) so that its supervisor restarts it (as a standby, or to take its share again).",
            ),
          ),
        firing: z
          .enum(["active", "shared"])
          .default("active")
          .meta(
            doc(
              "Who fires the jobs among the coordinators sharing the store: `active`, the active one alone; `shared`, every live coordinator the jobs that hash to it (the standbys too), each nominal time recorded once by the store's unique fire row. Unless `dispatch` is `shared`, only the active one dispatches and takes the agents' reports. Give every coordinator the same value.",
            ),
          ),
        dispatch: z
          .enum(["active", "shared"])
          .default("active")
          .meta(
            doc(
              "Who dispatches and takes the agents' reports among the coordinators sharing the store: `active`, the active one alone (the others stand by); `shared`, every live coordinator, each for its share: the agents that hash to it (their messages, their commands, their leases and timeouts) and the jobs that hash to it (routed and dispatched by it). Every coordinator then reads every agent's messages and handles its own agents'; when one is lost, its share moves to the others. Needs `firing` `shared`, and no `mqtt.sharedGroup`. Give every coordinator the same value.",
            ),
          ),
      })
      .strict()
      .default({ leaseMs: 3_000, firing: "active", dispatch: "active" })
      .meta(
        doc(
          "Several coordinators on one PostgreSQL store (`store.url`): one is active, the others stand by and take over when its lease lapses; or, with `dispatch` `shared`, all of them work, each its share. Ignored with the SQLite store.",
        ),
      ),
    mqtt: z
      .object({
        url: z
          .string()
          .regex(/^mqtts?:\/\/.+/, "must be an mqtt:// or mqtts:// URL")
          .meta(doc("The broker, `mqtt://host:port` or `mqtts://host:port`.")),
        prefix: z
          .string()
          .regex(PREFIX_PATTERN, PREFIX_RULE)
          .default("ax")
          .meta(
            doc(
              "The topic prefix: one or more topic levels separated by `/` (such as `ax` or `plant-3/ax`), each of letters, digits, `.`, `_` and `-`. Topics are `{prefix}/v1/…` (docs/protocol.md); agents must use the same prefix.",
            ),
          ),
        username: z
          .string()
          .optional()
          .meta(
            doc(
              "The coordinator's broker login.",
              'its client id, with a password derived from the fleet key, when `security.messages` is `"required"`; else none',
            ),
          ),
        password: z.string().optional().meta(doc("The password of `username`.", "none")),
        sharedGroup: z
          .string()
          .regex(/^[A-Za-z0-9._-]+$/, "must be letters, digits, '.', '_' or '-'")
          .optional()
          .meta(
            doc(
              "Subscribe through the shared subscription `$share/GROUP/…`, for a broker that a standby coordinator shares. Refused with `cluster.dispatch` `shared`, where every coordinator reads every agent's messages.",
              "none (plain subscriptions)",
            ),
          ),
        readWindowMs: z
          .number()
          .int()
          .min(0)
          .max(1000)
          .default(0)
          .meta(
            doc(
              "Reads from the broker in batches, at most this many ms apart: after a small read the coordinator stops reading for this long, and what arrives meanwhile is read in one go. A large fleet's idle heartbeats then wake it about 1,000 / `readWindowMs` times a second instead of once each (at 10,000 agents, 50 took its idle CPU from about 11 % of a core to 4 to 5 %). The cost is precision: a message waits up to this long, so an idle agent's clock samples have longer round trips, and starts are recorded less precisely (start skew p99 11 to 27 ms at 50, against 4 to 5 ms: docs/benchmarks.md). A busy connection (a read of 16 KiB or more) is read as it comes, and so is everything until one second after the latest `fireAt` dispatched, when agents holding a start ask for samples. `0` reads every message as it arrives.",
            ),
          ),
        clientId: z
          .string()
          .regex(/^[A-Za-z0-9._:-]{1,64}$/, "must be 1 to 64 letters, digits, '.', '_', ':' or '-'")
          .optional()
          .meta(
            doc(
              "The coordinator's MQTT client id. It is fixed across restarts so that the broker keeps the coordinator's session (`clean: false`) and queues what agents report while it is down. Each coordinator on one broker needs its own.",
              "`ax-c-` and 16 hex digits derived from the prefix and the store's path (on a PostgreSQL store, its URL, the host name and `http.port`)",
            ),
          ),
        persistentSession: z
          .boolean()
          .default(true)
          .meta(
            doc(
              "Keep the broker session across restarts (`clean: false`). Turn off only for a broker that cannot hold sessions.",
            ),
          ),
      })
      .strict()
      .meta(doc("The MQTT broker agents and the coordinator meet on.")),
    http: httpConfigSchema
      .default({
        host: "127.0.0.1",
        port: 8080,
        auth: { tokens: [] },
        allowedOrigins: [],
        allowedHosts: [],
        maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
      })
      .meta(doc("The HTTP API, the metrics (`/metrics`) and the web console.")),
    jobsFile: z
      .string()
      .min(1)
      .optional()
      .meta(
        doc(
          'Job definitions applied at every start, in any shape `ax job add --file` takes (one definition, a list, or `{ "jobs": [ … ] }`): by id, the file wins for the jobs it lists and leaves the others alone. A missing or invalid file refuses the start. See [Jobs from a file](scheduling.md#jobs-from-a-file).',
          "none",
        ),
      ),
    heartbeatMs: durationSchema
      // The welcome carries it, and protocol.md bounds its heartbeatMs to whole milliseconds from
      // 100 to 600000: an agent refuses a welcome outside that, and would never be welcomed.
      .pipe(
        z
          .number()
          .int("must be a whole number of milliseconds")
          .min(100, "must be at least 100 ms")
          .max(600_000, "must be at most 600000 ms (10 minutes)"),
      )
      .default(5_000)
      .meta(
        doc(
          "How often agents send heartbeats (the coordinator's welcome tells them), 100 ms to 10 minutes; three missed and an agent is offline.",
        ),
      ),
    idleHeartbeatMs: durationSchema
      .pipe(
        z
          .number()
          .int("must be a whole number of milliseconds")
          .max(3_600_000, "must be at most 3600000 ms (1 hour)"),
      )
      .default(60_000)
      .meta(
        doc(
          "How far apart an idle agent's heartbeats may be (it runs nothing, holds no command, and has no report waiting for an ack; the welcome tells it), up to 1 hour, and at least `heartbeatMs`; `0` keeps every heartbeat `heartbeatMs` apart, and so does the default when `heartbeatMs` is a minute or more. Three missed and an idle agent is offline; its MQTT keepalive and Last Will tell sooner when it is gone. See [protocol.md](protocol.md#heartbeat).",
        ),
      ),
    dispatchLeadMs: durationSchema
      .default(500)
      .meta(
        doc(
          "How long before its fire time an execution is dispatched, so the agent fires it from its own wheel. A job may set its own `dispatchLead`.",
        ),
      ),
    commandHorizonMs: durationSchema
      .default(86_400_000)
      .meta(
        doc(
          "A device command is dispatched as soon as it is known, up to this long before its time, so the agent's journal and wheel carry it through broker and coordinator outages.",
        ),
      ),
    pollMs: durationSchema
      .default(100)
      .meta(
        doc(
          "How often the engine looks for work to dispatch, time out, retry or expire. While all the pending work waits for agents out of reach, it is read again at most once a second, and at once on what can move it: a new execution, an agent back in reach, an execution made pending again (a `busy` answer, a retry come due). Other reports do not make it read again.",
        ),
      ),
    lookAheadMs: durationSchema
      .default(5_000)
      .meta(doc("Jobs due within this window are held on the firing wheel.")),
    misfireThresholdMs: durationSchema
      .default(5_000)
      .meta(doc("A fire this late is a misfire, handled by the job's misfire policy.")),
    busyBackoffMs: durationSchema
      .default(1_000)
      .meta(
        doc(
          "An agent that answers `busy` gets no new work for this long, doubled for each further `busy` in a row (at most 8×); its execution is routed elsewhere or waits.",
        ),
      ),
    timeoutGraceMs: durationSchema
      .default(5_000)
      .meta(doc("Grace past an execution's timeout before the coordinator times it out itself.")),
    alerts: z
      .object({
        webhooks: z
          .array(
            z
              .object({
                url: z
                  .string()
                  .regex(/^https?:\/\/.+/, "must be an http:// or https:// URL")
                  .meta(doc("Where each alert is POSTed, as JSON.")),
                kinds: z
                  .array(z.enum(ALERT_KINDS))
                  .min(1)
                  .optional()
                  .meta(doc("The alert kinds sent to this hook.", "all of them")),
                headers: z
                  .record(z.string(), z.string())
                  .optional()
                  .meta(doc("Extra request headers (such as Authorization).", "none")),
                secret: z
                  .string()
                  .min(16)
                  .optional()
                  .meta(
                    doc(
                      "Signs each body: header `X-Ax-Signature: sha256=HMAC-SHA256(secret, body)`.",
                      "none (unsigned)",
                    ),
                  ),
              })
              .strict(),
          )
          .max(32)
          .default([])
          .meta(doc("The hooks told about each alert.")),
        maxAttempts: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(6)
          .meta(doc("Tries per alert and hook before it is recorded failed.")),
        backoffBaseMs: durationSchema
          .default(1_000)
          .meta(doc("Retry back-off: the base of the full-jitter exponential.")),
        backoffCapMs: durationSchema
          .default(300_000)
          .meta(doc("Retry back-off: the longest wait between two attempts.")),
        timeoutMs: durationSchema.default(10_000).meta(doc("One attempt's time limit.")),
      })
      .strict()
      .default({
        webhooks: [],
        maxAttempts: 6,
        backoffBaseMs: 1_000,
        backoffCapMs: 300_000,
        timeoutMs: 10_000,
      })
      .meta(
        doc(
          `Webhooks told about failures, misfires and agents going offline: the alert kinds ${ALERT_KINDS.map((k) => `\`${k}\``).join(", ")}.`,
        ),
      ),
    security: z
      .object({
        dir: z
          .string()
          .min(1)
          .optional()
          .meta(
            doc(
              "The folder of the coordinator's secrets: the fleet key, the bundle signing key and the first admin token.",
              "`ax-secrets` beside the store's file",
            ),
          ),
        messages: z
          .enum(["required", "off"])
          .default("required")
          .meta(
            doc(
              '`"required"`: a message without a valid MAC from an enrolled agent is refused, and every message to an agent is MACed. `"off"`: neither (only for a broker no one else can reach; the coordinator logs a warning at start).',
            ),
          ),
        freshnessMs: durationSchema
          .default(300_000)
          .meta(
            doc(
              "How far a message's signing time may be from the coordinator's clock; outside it the message is refused as stale or replayed.",
            ),
          ),
      })
      .strict()
      .default({ messages: "required", freshnessMs: 300_000 })
      .meta(
        doc(
          "Who may speak on the broker (docs/security.md). On by default: every message to and from an agent is authenticated with that agent's key, and only enrolled agents are heard.",
        ),
      ),
    broker: z
      .object({
        coordinators: z
          .array(
            z
              .string()
              .regex(/^[A-Za-z0-9._-]{1,128}$/, "must be 1-128 letters, digits, '.', '_' or '-'"),
          )
          .max(64)
          .refine((ids) => new Set(ids).size === ids.length, "must not name a client id twice")
          .default([])
          .meta(
            doc(
              "The MQTT client ids of the coordinators sharing this store and this broker (several coordinators, docs/operations.md; this one's may be among them, so every one can list the same): their broker logins, derived from the fleet key as this one's is, are written beside this one's in the files `ax broker config` writes and the coordinator keeps in step (`mosquitto`), so that any of them may connect and take over.",
              "none",
            ),
          ),
        mosquitto: z
          .object({
            dir: z
              .string()
              .min(1, "must name the folder ax broker config --out wrote")
              .meta(doc("The folder `ax broker config --out` wrote.")),
            pidFile: z
              .string()
              .min(1)
              .optional()
              .meta(doc("Mosquitto's pid file (its `pid_file`).", "`mosquitto.pid` in `dir`")),
          })
          .strict()
          .optional()
          .meta(
            doc(
              "A Mosquitto run with the files of `ax broker config --out DIR`: after every enrolment, rotation and revocation the coordinator rewrites `DIR/passwd` and `DIR/acl` and sends Mosquitto SIGHUP, which disconnects a revoked agent at once.",
              "none",
            ),
          ),
      })
      .strict()
      .default({ coordinators: [] })
      .meta(doc("The broker the coordinator keeps in step with its enrolments.")),
    maxPayloadBytes: z
      .number()
      .int()
      .min(1024)
      .max(16 * 1024 * 1024)
      .default(65_536)
      .meta(
        doc(
          "The largest MQTT message accepted from an agent, in bytes. The reference agent fits each `finished` report to 64 KiB, not to this: below `65536`, a report with a large `result` is refused and re-sent on every reconnect ([protocol.md](protocol.md#size-limit)).",
        ),
      ),
    retentionDays: z
      .number()
      .int()
      .min(1)
      .max(3650)
      .default(30)
      .meta(
        doc("Finished executions and their timelines are purged this many days after they end."),
      ),
    maxErrorTextBytes: z
      .number()
      .int()
      .min(256)
      .max(65_536)
      .default(2048)
      .meta(
        doc(
          "Stored error text (an execution's message, a timeline entry's detail) is capped at this many UTF-8 bytes.",
        ),
      ),
  })
  .strict()
  .superRefine((c, ctx) => {
    // Mosquitto's files need the coordinator's login, which exists only when it is configured
    // or derived (security.messages "required").
    const hasLogin =
      c.mqtt?.username === undefined
        ? c.security?.messages !== "off"
        : c.mqtt.password !== undefined;
    if ((c.broker?.coordinators.length ?? 0) > 0 && c.mqtt?.username !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["broker", "coordinators"],
        message:
          'needs broker logins derived from the fleet key: leave mqtt.username and mqtt.password unset, with security.messages "required"',
      });
    }
    if (c.cluster?.dispatch === "shared") {
      if (c.cluster.firing !== "shared") {
        ctx.addIssue({
          code: "custom",
          path: ["cluster", "dispatch"],
          message:
            '"shared" needs cluster.firing "shared": each coordinator dispatches the jobs it fires',
        });
      }
      if (c.mqtt?.sharedGroup !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["mqtt", "sharedGroup"],
          message:
            "cannot be used with cluster.dispatch \"shared\": every coordinator must read every agent's messages (each handles its own agents'), and a shared subscription hands each message to one of them",
        });
      }
    }
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

/**
 * The names of 0.x config files that are still read, by path, and the key that replaced each (the
 * durations took the `Ms` suffix the agent's config has). Giving both is an error.
 */
export const DEPRECATED_KEYS: Readonly<Record<string, string>> = {
  heartbeat: "heartbeatMs",
  dispatchLead: "dispatchLeadMs",
  commandHorizon: "commandHorizonMs",
  poll: "pollMs",
  lookAhead: "lookAheadMs",
  misfireThreshold: "misfireThresholdMs",
  busyBackoff: "busyBackoffMs",
  timeoutGrace: "timeoutGraceMs",
  "alerts.backoffBase": "alerts.backoffBaseMs",
  "alerts.backoffCap": "alerts.backoffCapMs",
  "alerts.timeout": "alerts.timeoutMs",
  "security.freshness": "security.freshnessMs",
};

/**
 * Every field that names a file or folder. A relative one is read from the config file's folder
 * when the config comes from a file (`[]` is each item of a list).
 */
export const COORDINATOR_PATH_FIELDS = [
  "store.path",
  "jobsFile",
  "security.dir",
  "broker.mosquitto.dir",
  "broker.mosquitto.pidFile",
  "http.auth.tokens[].tokenFile",
] as const;

type Plain = Record<string, unknown>;
const isPlain = (v: unknown): v is Plain =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** The input with each deprecated key renamed; a warning for each, an error when both are given. */
function renameDeprecated(input: unknown): {
  input: unknown;
  warnings: string[];
  errors: string[];
  /** Each key read under its deprecated name: [new path, the path as written]. */
  renamed: [string, string][];
} {
  const warnings: string[] = [];
  const errors: string[] = [];
  const renamed: [string, string][] = [];
  if (!isPlain(input)) return { input, warnings, errors, renamed };
  const root: Plain = { ...input };
  for (const [old, now] of Object.entries(DEPRECATED_KEYS)) {
    const parts = old.split(".");
    const key = parts.pop() as string;
    const newKey = now.split(".").pop() as string;
    let parent: Plain = root;
    for (const p of parts) {
      const child = parent[p];
      if (!isPlain(child)) {
        parent = {};
        break;
      }
      parent[p] = { ...child };
      parent = parent[p] as Plain;
    }
    if (!Object.hasOwn(parent, key)) continue;
    if (Object.hasOwn(parent, newKey)) {
      errors.push(`${old}: the deprecated name of ${now}, which is given too; keep only ${now}`);
    } else {
      parent[newKey] = parent[key];
      warnings.push(`${old} is deprecated: name it ${now} (the value is read as before)`);
      renamed.push([now, old]);
    }
    delete parent[key];
  }
  return { input: root, warnings, errors, renamed };
}

/**
 * A problem line about a value given under its deprecated name, named as the file has it
 * (`security.freshness: …`, not `security.freshnessMs: …`), so that the line points at the key to
 * fix.
 */
function asWritten(line: string, renamed: readonly [string, string][]): string {
  for (const [now, old] of renamed) {
    if (line.startsWith(`${now}:`)) return `${old}${line.slice(now.length)}`;
  }
  return line;
}

/** Applies `fn` to the value at a field path of {@link COORDINATOR_PATH_FIELDS}, where present. */
function mapField(value: unknown, path: readonly string[], fn: (v: string) => string): void {
  const [head, ...rest] = path;
  if (head === undefined || !isPlain(value)) return;
  const key = head.endsWith("[]") ? head.slice(0, -2) : head;
  const v = value[key];
  if (head.endsWith("[]")) {
    if (Array.isArray(v)) for (const item of v) mapField(item, rest, fn);
  } else if (rest.length > 0) {
    mapField(v, rest, fn);
  } else if (typeof v === "string" && v !== ":memory:") {
    value[key] = fn(v);
  }
}

/** Options of {@link parseCoordinatorConfig}. */
export interface CoordinatorConfigOptions {
  /**
   * The folder relative paths are read from: the config file's. Without it (a config made in
   * code) paths are left as they are, relative to the working folder.
   */
  base?: string | undefined;
  /** Told each warning (a deprecated key), for the caller to log. */
  warn?: ((message: string) => void) | undefined;
}

/**
 * `idleHeartbeatMs` against `heartbeatMs`: one written in the file must be 0 or at least it. Left
 * at its default (a minute) with heartbeats a minute or more apart, it is 0: idle agents heartbeat
 * as the others do, rather than a heartbeat of two minutes being refused for a field not written.
 */
function idleHeartbeatIssues(
  config: { idleHeartbeatMs: number; heartbeatMs: number },
  input: unknown,
): string[] {
  if (config.idleHeartbeatMs === 0 || config.idleHeartbeatMs >= config.heartbeatMs) return [];
  if (!isPlain(input) || input.idleHeartbeatMs === undefined) {
    config.idleHeartbeatMs = 0;
    return [];
  }
  return [
    `idleHeartbeatMs: must be 0 (off) or at least heartbeatMs (${config.heartbeatMs} ms), not ${config.idleHeartbeatMs} ms`,
  ];
}

/**
 * Parses options; a bad one throws AX_CONFIG_INVALID naming `source`, the field path and the
 * problem (an unknown key with the closest known one). With `base`, relative paths are resolved
 * from it.
 */
export function parseCoordinatorConfig(
  input: unknown,
  source = "config",
  options: CoordinatorConfigOptions = {},
): CoordinatorConfig {
  const renamed = renameDeprecated(input);
  const result = coordinatorConfigSchema.safeParse(renamed.input, { error: unknownKeys });
  const lines = [
    ...renamed.errors,
    ...(result.success
      ? idleHeartbeatIssues(result.data, renamed.input)
      : issueLines(result.error.issues, renamed.input).map((l) => asWritten(l, renamed.renamed))),
  ];
  if (!result.success || lines.length > 0) {
    throw new AxError(
      "AX_CONFIG_INVALID",
      `${source}: invalid coordinator config\n${lines.join("\n")}`,
      {
        context: { source },
      },
    );
  }
  for (const w of renamed.warnings) options.warn?.(`${source}: ${w}`);
  const config = result.data;
  const base = options.base;
  if (base !== undefined) {
    for (const field of COORDINATOR_PATH_FIELDS) {
      mapField(config, field.split("."), (p) => resolve(base, p));
    }
  }
  return Object.freeze(config);
}

/**
 * Reads and parses a coordinator config file; relative paths in it are read from its folder (see
 * {@link parseCoordinatorConfig}).
 */
export function loadCoordinatorConfig(
  file: string,
  options: Omit<CoordinatorConfigOptions, "base"> = {},
): CoordinatorConfig {
  const raw = readJsonFile(file);
  const config = parseCoordinatorConfig(raw, file, {
    ...options,
    base: dirname(resolve(file)),
  });
  refuseMovedFiles(raw, config, file);
  return config;
}

/** The string at `path` in the config file as written, if there is one. */
function given(raw: unknown, path: string): string | undefined {
  let v = raw;
  for (const key of path.split(".")) {
    if (typeof v !== "object" || v === null) return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return typeof v === "string" ? v : undefined;
}

/**
 * Before 0.x a relative path in the config was read from the working folder; now it is read from
 * the config file's folder. When a path now points at nothing while the old reading points at a
 * file, going on would silently begin again (an empty store and no jobs, or a new fleet key no
 * agent knows): every command that reads a config file refuses, naming both places. A store on
 * PostgreSQL (`store.url`) has no file, so a stray SQLite file is nothing to it.
 */
function refuseMovedFiles(raw: unknown, config: CoordinatorConfig, file: string): void {
  // Not given, the secrets are `ax-secrets` beside the store's path, given or not. On SQLite the
  // store's file is checked first (the secrets moved with it); on PostgreSQL nothing else is.
  const secrets =
    given(raw, "security.dir") ??
    (config.store.url === undefined
      ? undefined
      : join(dirname(given(raw, "store.path") ?? "ax.sqlite"), "ax-secrets"));
  const fields: [string, string | undefined, string | undefined][] = [
    [
      "store.path",
      config.store.url === undefined ? (given(raw, "store.path") ?? "ax.sqlite") : undefined,
      config.store.path,
    ],
    ["security.dir", secrets, secretsDir(config)],
    ["jobsFile", given(raw, "jobsFile"), config.jobsFile],
    ["broker.mosquitto.dir", given(raw, "broker.mosquitto.dir"), config.broker.mosquitto?.dir],
    [
      "broker.mosquitto.pidFile",
      given(raw, "broker.mosquitto.pidFile"),
      config.broker.mosquitto?.pidFile,
    ],
  ];
  for (const [field, written, now] of fields) {
    if (written === undefined || now === undefined || isAbsolute(written)) continue;
    if (written === ":memory:") continue;
    const before = resolve(written);
    if (before === now || existsSync(now) || !existsSync(before)) continue;
    const what =
      given(raw, field) === undefined
        ? `not given, so "${written}" (its default),`
        : `"${written}"`;
    throw new AxError(
      "AX_CONFIG_INVALID",
      `${file}: ${field}: ${what} is read from the config file's folder, so it is ${now}, which does not exist; ${before} does (earlier versions read relative paths from the working folder). Move it beside the config, or give ${field} as an absolute path`,
      { context: { source: file, field, path: now, previously: before } },
    );
  }
}

/** The folder of a coordinator's secrets: `security.dir`, or `ax-secrets` beside the store. */
export function secretsDir(config: CoordinatorConfig): string {
  return config.security.dir ?? join(dirname(resolve(config.store.path)), "ax-secrets");
}

/**
 * For a command that only reads the store: throws AX_STORE_MISSING, naming the path and the config
 * `source`, when the store's file does not exist (opening it would create an empty one). A
 * PostgreSQL store (`store.url`) has no file to check.
 */
export function requireStore(config: CoordinatorConfig, source: string, command: string): void {
  const path = config.store.path;
  if (config.store.url !== undefined || path === ":memory:" || existsSync(path)) return;
  const where = isAbsolute(path) ? path : resolve(path);
  throw new AxError(
    "AX_STORE_MISSING",
    `${command}: ${where}: no such store (store.path of ${source}; a relative path is read from the config file's folder). ${command} only reads a store: fix store.path, or start the coordinator once, which creates it`,
    { context: { path: where, source } },
  );
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
