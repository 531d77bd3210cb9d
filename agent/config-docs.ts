/*
 * What each field of the agent's config means, for docs/config.md (coordinator/config-docs.ts
 * generates it). Kept out of agent/config.ts so that the text does not weigh on the agent
 * bundle: nothing the agent runs imports this file. A test checks that every field of the schema
 * has an entry here and that no entry names a field the schema lacks.
 */

/** A field's entry: its meaning, and its default in words when that is not a plain value. */
export interface AgentFieldDoc {
  description: string;
  defaultText?: string;
}

/** Fields that name a file; a relative one is read from the config file's folder. */
export const AGENT_PATH_FIELDS = ["identityFile", "journal.path"] as const;

/** Each field of the agent config, by path (handler sections by their handler's name). */
export const AGENT_FIELD_DOCS: Readonly<Record<string, AgentFieldDoc>> = {
  agentId: {
    description:
      "The agent's id, unique in the fleet: 1-128 of `A-Z a-z 0-9 . _ : -`. It is in the agent's topics, and an enrolled agent's broker username.",
  },
  mqtt: { description: "The broker the agent reaches the coordinator through." },
  "mqtt.url": {
    description:
      "The broker, `mqtt://host:port`, or `mqtts://host:port` for an agent built with the tls feature.",
  },
  "mqtt.prefix": {
    description:
      "The topic prefix: one or more topic levels separated by `/` (such as `ax` or `plant-3/ax`), each of letters, digits, `.`, `_` and `-`. It must be the coordinator's `mqtt.prefix`.",
  },
  "mqtt.keepaliveS": {
    description:
      "MQTT keepalive, in seconds; the broker publishes the agent's Last Will (offline) after 1.5× this without a packet.",
  },
  "mqtt.username": {
    description: "The broker login.",
    defaultText: "the identity's `mqtt.username`, else none",
  },
  "mqtt.password": {
    description: "The password of `username`.",
    defaultText: "the identity's, else none",
  },
  "mqtt.reconnect": {
    description:
      "Reconnect back-off: full jitter between 0 and min(capMs, baseMs·2^(n−1)) before attempt n, so a broker restart costs an agent seconds (docs/agent.md, “Offline operation”).",
  },
  "mqtt.reconnect.baseMs": { description: "The base of the reconnect back-off." },
  "mqtt.reconnect.capMs": { description: "The longest wait between two reconnect attempts." },
  identity: {
    description:
      "The agent's identity inline, as `ax fleet enroll` wrote it (docs/security.md): its key and broker login. With one, every message it sends is MACed and every message it receives must be. Prefer `identityFile`.",
    defaultText: "read from `identityFile`",
  },
  "identity.ax": { description: 'The format: `"agent-identity/1"`.' },
  "identity.agentId": { description: "The agent the identity is for; must be `agentId`." },
  "identity.generation": {
    description: "The key's generation; the coordinator refuses a message made with any other.",
  },
  "identity.key": {
    description: "The message key: 32 bytes, unpadded base64url (43 characters).",
  },
  "identity.mqtt": { description: "The agent's broker login; its username is its agentId." },
  "identity.mqtt.username": { description: "The broker username." },
  "identity.mqtt.password": { description: "The broker password." },
  "identity.bundlePublicKey": {
    description: "The coordinator's bundle signing key (SPKI PEM), to check bundles sent to it.",
    defaultText: "none",
  },
  identityFile: {
    description:
      "The identity file `ax fleet enroll` wrote (mode 0600; one others can read is refused).",
    defaultText: "`ax-identity.json` beside the config file, when there is one",
  },
  security: { description: "How messages from the coordinator are checked." },
  "security.freshnessMs": {
    description:
      "How far a down message's signing time may be from the coordinator's clock as this agent knows it (checked once it has a clock sample).",
  },
  profile: {
    description:
      "The firmware profile name reported in hello. A bundle's agent has its profile's name; leave the field out there.",
  },
  capacity: { description: "How much work the agent takes on." },
  "capacity.concurrency": { description: "Executions running at once." },
  "capacity.queue": {
    description: "Due executions waiting for a slot; beyond it a due dispatch is answered busy.",
  },
  "capacity.maxPending": {
    description:
      "Executions held (scheduled, queued, running); beyond it dispatches are rejected `journal_full`.",
  },
  tags: {
    description:
      "Tags reported in hello, for routing (at most 256; names of 1–64 letters, digits, `.`, `_` and `-`, values at most 128 characters). An enrolled agent is routed by the tags it was enrolled with instead.",
  },
  journal: {
    description: "The agent's journal: its memory of what it was told and did (docs/agent.md).",
  },
  "journal.path": {
    description:
      "The journal's SQLite file; one journal serves one agent (a second agent on it refuses to start).",
    defaultText:
      "`ax-journal-<agentId>.sqlite` in the working directory (the agent's state directory under the bundle's systemd unit)",
  },
  "journal.synchronous": {
    description: "SQLite's `synchronous`: `NORMAL` or `FULL` (docs/benchmarks.md has the cost).",
  },
  "journal.syncStart": {
    description:
      "Under `NORMAL`, still fsync the commit that marks a command running, so a power cut can never make it run twice.",
  },
  "journal.checkpoint": {
    description:
      'Where WAL checkpoints run: `"thread"` (a worker thread started when writes need one, so the fsyncs of a checkpoint never hold up the wheel) or `"inline"` (inside a commit, as SQLite does by default).',
  },
  "journal.maxOutbox": {
    description: "Unacknowledged reports kept at most before new dispatches are refused.",
  },
  "journal.retainMs": {
    description: "How long finished commands are kept to answer duplicates.",
  },
  handlers: {
    description:
      "The built-in device handlers to offer, one section each (docs/handlers.md); a handler is offered only when its section is there. Only the handlers built into the agent are accepted.",
  },
  "handlers.mqtt.publish": {
    description: "`mqtt.publish`: publishes to a local broker the devices listen on.",
    defaultText: "not offered",
  },
  "handlers.mqtt.publish.url": {
    description:
      "The local broker: `mqtt://`, or `mqtts://`, `ws://`, `wss://` when the agent has the feature.",
  },
  "handlers.mqtt.publish.clientId": {
    description: "The client id on the local broker.",
    defaultText: "a random id",
  },
  "handlers.mqtt.publish.username": {
    description: "The local broker's login.",
    defaultText: "none",
  },
  "handlers.mqtt.publish.password": {
    description: "The password of `username`.",
    defaultText: "none",
  },
  "handlers.mqtt.publish.connectTimeoutMs": {
    description: "How long a connection to the local broker may take.",
  },
  "handlers.http.request": {
    description: "`http.request`: calls an HTTP endpoint on the device or its network.",
    defaultText: "not offered",
  },
  "handlers.http.request.allowOrigins": {
    description:
      "Origins such as `http://127.0.0.1:8080` it may call; empty allows any http(s) origin.",
  },
  "handlers.http.request.defaultTimeoutMs": {
    description: "A request's time limit when its params give none.",
  },
  "handlers.file.write": {
    description: "`file.write`: writes a value to a file, such as a GPIO's.",
    defaultText: "not offered",
  },
  "handlers.file.write.allow": {
    description:
      'Absolute path prefixes writes may go to, such as `"/sys/class/gpio/"`; they match whole path segments.',
  },
  "handlers.exec": {
    description: "`exec`: runs an allowed executable (offered only with `enabled: true`).",
    defaultText: "not offered",
  },
  "handlers.exec.enabled": { description: "Offer `exec`." },
  "handlers.exec.allow": { description: "Absolute paths of the executables that may run." },
  "handlers.exec.maxOutputBytes": {
    description:
      "Bytes kept of stdout and of stderr, each, counted JSON-escaped as they are sent; at most 24 KiB so that both fit a `finished` report.",
  },
  tickMs: { description: "The wheel's tick for device commands." },
  wheelSlots: { description: "Slots of the wheel; one revolution is `tickMs` × `wheelSlots`." },
  heartbeatMs: {
    description: "The heartbeat period until the coordinator's welcome says otherwise.",
  },
  shutdownGraceMs: {
    description:
      "On SIGTERM, how long running work may take to finish before the agent says offline and exits.",
  },
};
