/**
 * One error type and one registry of error codes for the whole project (agent, coordinator and
 * shared code). Callers branch on `code`, never on message text. Every code is documented in
 * docs/errors.md; a test keeps the two in step.
 */

/** Every error code ax can raise, with a one-line meaning. */
export const ERROR_CODES = {
  AX_PROTO_TOO_LARGE: "A message payload is larger than the configured limit.",
  AX_PROTO_BAD_TOPIC: "A message arrived on a topic that is not part of protocol v1.",
  AX_PROTO_BAD_JSON: "A message payload is not valid UTF-8 JSON.",
  AX_PROTO_TOO_DEEP: "A message payload nests arrays and objects deeper than the limit.",
  AX_PROTO_NOT_OBJECT: "A message payload is JSON but not an object.",
  AX_PROTO_BAD_VERSION: "A message has a missing or unsupported protocol version `v`.",
  AX_PROTO_UNKNOWN_TYPE: "A message has a missing or unknown `type` for its topic.",
  AX_PROTO_INVALID_FIELD: "A message field is missing or has the wrong type or value.",
  AX_PROTO_AGENT_MISMATCH: "A message names an agent other than the one in its topic.",
  AX_PROTO_BAD_BATCH: "A batch of reports is empty, too long, or holds a message never batched.",
  AX_AUTH_UNSIGNED: "A message that must be authenticated carries no MAC.",
  AX_AUTH_BAD_MAC:
    "A message's MAC is malformed, wrong, or made with a key its sender does not hold.",
  AX_AUTH_STALE:
    "A message was signed outside the freshness window, or is a replay of one already seen.",
  AX_AUTH_NOT_ENROLLED:
    "A message or connection comes from an agent that is not enrolled, or whose enrolment is revoked.",
  AX_AGENT_ENROLLED: "The agent is already enrolled; rotate its key or revoke it first.",
  AX_SECURITY_KEY: "A key, identity or token file is missing, malformed, or readable by others.",
  AX_CONFIG_INVALID: "A configuration file or option is invalid.",
  AX_CONFIG_READ: "A configuration file could not be read or parsed.",
  AX_JOB_INVALID: "A job definition is invalid.",
  AX_JOB_NOT_FOUND: "No job has the given id.",
  AX_JOB_EXISTS: "A job with the given id already exists.",
  AX_EXEC_NOT_FOUND: "No execution has the given id.",
  AX_EXEC_CONFLICT: "The execution is not in a state that allows the operation.",
  AX_ROLLOUT_NOT_FOUND: "No rollout has the given id.",
  AX_ROLLOUT_CONFLICT:
    "The rollout's id is taken, or the rollout is not in a state that allows the operation.",
  AX_TRIGGER_INVALID: "A trigger (cron expression, interval, instant or time zone) is invalid.",
  AX_FSM_ILLEGAL_TRANSITION: "An execution event is not allowed in the execution's current state.",
  AX_STORE_FAILED: "The store failed to read or write.",
  AX_STORE_MIGRATION: "A store migration failed or the store is newer than this build.",
  AX_STORE_MISSING:
    "A command that only reads the store found no store file where the config says.",
  AX_HANDLER_UNKNOWN: "No handler with the given name is registered.",
  AX_HANDLER_PARAMS: "Handler parameters failed the handler's schema.",
  AX_LINK_FAILED: "The MQTT link failed to connect, subscribe or publish.",
  AX_BROKER_CONFIG: "The broker's password file, ACL or config cannot be written for this fleet.",
  AX_BROKER_RELOAD: "The coordinator could not rewrite Mosquitto's files or signal it to reload.",
  AX_CLI_USAGE: "A CLI command or flag is unknown or has an invalid value.",
  AX_CLI_FILE_EXISTS: "A CLI command would overwrite an existing file.",
  AX_CLI_FILE_WRITE: "A CLI command could not write the file it was to write.",
  AX_AGENT_NOT_FOUND:
    "No agent has the given id (neither enrolled nor ever connected), or none has a selector's tags.",
  AX_AGENT_NO_HANDLER: "The agent, or every agent a selector matches, does not offer the handler.",
  AX_UPDATE_TARGET_MISMATCH:
    "An agent.update was not offered: the bundle is not built for the agent's native target.",
  AX_AGENT_JOURNAL_LOCKED: "An agent's journal is held by another live agent process.",
  AX_AGENT_JOURNAL_FOREIGN: "An agent's journal was created by an agent with another agentId.",
  AX_STORE_BAD_CURSOR: "A paging cursor is malformed: it is not one a listing returned.",
  AX_STORE_CONFLICT:
    "A write was based on a version that is no longer current: another writer changed it first.",
  AX_STORE_FENCED:
    "A coordinator's membership of the store lapsed or was taken over: its writes are refused.",
  AX_STORE_BUSY:
    "The database kept failing a transaction with a retryable error (serialization, deadlock).",
  AX_API_INVALID_REQUEST: "An HTTP request's path, query or body failed validation.",
  AX_API_UNAUTHORIZED:
    "An HTTP request carries no bearer token, or one the coordinator does not know.",
  AX_API_FORBIDDEN: "The bearer token's role does not allow the operation.",
  AX_API_NOT_FOUND: "No HTTP route has the given path.",
  AX_API_METHOD_NOT_ALLOWED: "The HTTP route does not support the request's method.",
  AX_API_TOO_LARGE: "An HTTP request body is larger than the configured limit.",
  AX_API_RANGE_NOT_SATISFIABLE:
    "An HTTP Range header asks for bytes past the end of what the route serves.",
  AX_API_UNSUPPORTED_MEDIA_TYPE: "An HTTP request body is not sent as application/json.",
  AX_API_ORIGIN_REFUSED:
    "An HTTP request comes from a web page of another origin that is not allowed.",
  AX_API_HOST_REFUSED: "An HTTP request's Host header is not one of the coordinator's names.",
  AX_API_TOKEN_EXISTS: "An API token with the given name already exists.",
  AX_API_TOKEN_NOT_FOUND: "No API token has the given name.",
  AX_API_INTERNAL: "The HTTP API failed unexpectedly while handling a request.",
  AX_API_UNREACHABLE: "The CLI could not reach the coordinator's HTTP API.",
  AX_PROFILE_NOT_FOUND: "No firmware profile has the given name.",
  AX_PROFILE_INVALID: "A firmware profile is invalid.",
  AX_BUNDLE_BUILD: "An agent bundle could not be built.",
  AX_BUNDLE_BUDGET: "An agent bundle is larger than its profile's budget.",
  AX_BUNDLE_VERIFY: "An agent bundle does not match its manifest.",
  AX_BUNDLE_SIGNATURE:
    "An agent bundle is unsigned, or its manifest signature does not verify with the trusted key.",
  AX_BUNDLE_INVALID:
    "A bundle sent to be published is not a signed bundle archive that this coordinator's key verifies.",
  AX_BUNDLE_NOT_FOUND: "No published bundle has the given sha256.",
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Options for {@link AxError}. */
export interface AxErrorOptions {
  /** Whether trying the same operation again may succeed. @default false */
  retryable?: boolean;
  /** Structured facts about the failure (ids, field paths, values). */
  context?: Record<string, unknown>;
  /** The underlying error, when this one translates another. */
  cause?: unknown;
}

/** The single error type of ax: a stable `code` from {@link ERROR_CODES}, plus context. */
export class AxError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly context: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: AxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "AxError";
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.context = options.context ?? {};
  }
}

/** True when `err` is an {@link AxError}, optionally with the given code. */
export function isAxError(err: unknown, code?: ErrorCode): err is AxError {
  return err instanceof AxError && (code === undefined || err.code === code);
}
