import { existsSync, statSync } from "node:fs";
import { userInfo } from "node:os";
import { resolve } from "node:path";
import { AxError } from "../../shared/errors.js";
import { MOSQUITTO_FILES, type MosquittoListenOptions, requireLogin } from "../broker/mosquitto.js";
import { writeMosquittoFiles } from "../broker/mosquitto-files.js";
import { loadCoordinatorConfig, requireStore } from "../config.js";
import { coordinatorMqttLogin, openStore, secretsDir } from "../coordinator.js";
import { loadSecrets } from "../security/secrets.js";
import { flags, unknownSubcommand } from "./args.js";

const out = (text: string) => process.stdout.write(`${text}\n`);

/** `ax broker config …`. Returns the exit code. */
export async function brokerCommand(sub: string | undefined, argv: string[]): Promise<number> {
  if (sub !== "config") {
    throw unknownSubcommand("broker", sub, ["config"]);
  }
  return config(argv);
}

const COMMAND = "broker config";

function usage(message: string): AxError {
  return new AxError("AX_CLI_USAGE", `${COMMAND}: ${message}`);
}

/** The listener options from the flags; every inconsistency names its flag. */
export function listenFromFlags(f: {
  port?: string | undefined;
  host?: string | undefined;
  user?: string | undefined;
  "tls-cert"?: string | undefined;
  "tls-key"?: string | undefined;
  "tls-ca"?: string | undefined;
  "require-client-cert"?: boolean | undefined;
}): Omit<MosquittoListenOptions, "dir"> {
  const listen: Omit<MosquittoListenOptions, "dir"> = {};
  if (f.port !== undefined) {
    const n = Number(f.port);
    if (f.port.trim() === "" || !Number.isInteger(n) || n < 1 || n > 65_535) {
      throw usage(`--port must be a port number from 1 to 65535, got "${f.port}"`);
    }
    listen.port = n;
  }
  if (f.host !== undefined) {
    if (!/^[A-Za-z0-9.:_-]+$/.test(f.host))
      throw usage(`--host must be an address, got "${f.host}"`);
    listen.host = f.host;
  }
  const user = f.user ?? userInfo().username;
  if (!/^[A-Za-z0-9._-]+$/.test(user)) throw usage(`--user must be a user name, got "${user}"`);
  listen.user = user;
  const cert = f["tls-cert"];
  const key = f["tls-key"];
  const ca = f["tls-ca"];
  if (cert === undefined && key !== undefined) throw usage("--tls-key needs --tls-cert");
  if (cert !== undefined && key === undefined) throw usage("--tls-cert needs --tls-key");
  if (cert === undefined && ca !== undefined)
    throw usage("--tls-ca needs --tls-cert and --tls-key");
  if (f["require-client-cert"] && ca === undefined) {
    throw usage("--require-client-cert needs --tls-ca (the CA that signs the client certificates)");
  }
  if (cert !== undefined && key !== undefined) {
    // Mosquitto resolves relative paths from its own working folder, not from ours.
    listen.tls = {
      cert: resolve(cert),
      key: resolve(key),
      ...(ca === undefined ? {} : { ca: resolve(ca) }),
      requireClientCert: f["require-client-cert"] === true,
    };
  }
  return listen;
}

async function config(argv: string[]): Promise<number> {
  const f = flags(COMMAND, argv, {
    config: { type: "string" },
    out: { type: "string" },
    port: { type: "string" },
    host: { type: "string" },
    user: { type: "string" },
    "tls-cert": { type: "string" },
    "tls-key": { type: "string" },
    "tls-ca": { type: "string" },
    "require-client-cert": { type: "boolean" },
  });
  if (!f.config) throw usage("--config FILE (the coordinator's config) is required");
  const listen = listenFromFlags(f);
  const coordinatorConfig = loadCoordinatorConfig(f.config);
  const outDir = f.out ?? coordinatorConfig.broker.mosquitto?.dir;
  if (outDir === undefined) {
    throw usage("--out DIR is required (or broker.mosquitto.dir in the coordinator's config)");
  }
  const dir = resolve(outDir);
  if (existsSync(dir) && !statSync(dir).isDirectory()) {
    throw usage(`--out DIR: ${dir} is a file, not a folder`);
  }
  // The fleet is read from the store; a missing one is a wrong path, not an empty fleet.
  requireStore(coordinatorConfig, f.config, COMMAND);
  const secrets = loadSecrets(secretsDir(coordinatorConfig), f.config, COMMAND);
  const login = requireLogin(coordinatorMqttLogin(coordinatorConfig, secrets));
  const store = await openStore(coordinatorConfig);
  let identities: Awaited<ReturnType<typeof store.listIdentities>>;
  try {
    identities = await store.listIdentities();
  } finally {
    await store.close();
  }
  let written: ReturnType<typeof writeMosquittoFiles>;
  try {
    written = writeMosquittoFiles(
      dir,
      {
        prefix: coordinatorConfig.mqtt.prefix,
        fleet: secrets.fleet,
        coordinator: login,
        peers: coordinatorConfig.broker.coordinators,
        identities,
      },
      listen,
    );
  } catch (err) {
    if (err instanceof AxError) throw err;
    // A folder that cannot be made or written is the operation failing, not a bug.
    throw new AxError(
      "AX_BROKER_CONFIG",
      `${COMMAND}: --out ${dir}: cannot write the broker's files: ${(err as Error).message}`,
      { cause: err },
    );
  }
  const enrolled = identities.filter((r) => r.status === "enrolled").length;
  const revoked = identities.length - enrolled;
  const port = listen.port ?? (listen.tls ? 8883 : 1883);
  const scheme = listen.tls ? "mqtts" : "mqtt";
  out(
    `wrote ${written.passwords} (the coordinator "${login.username}" and ${enrolled} agents` +
      `${revoked > 0 ? `; ${revoked} revoked left out` : ""}), ${written.acl}, ${written.conf}`,
  );
  out(`start Mosquitto 2 with:  mosquitto -c ${written.conf}`);
  out(
    `the coordinator's config: "mqtt": { "url": "${scheme}://HOST:${port}" }, and ` +
      `"broker": { "mosquitto": { "dir": "${dir}" } } so that enrolments and revocations reach ` +
      `Mosquitto at once (it reloads on SIGHUP; pid in ${dir}/${MOSQUITTO_FILES.pid})`,
  );
  if (listen.tls?.requireClientCert) {
    out(
      "note: ax agents and the coordinator present no client certificate; with --require-client-cert only clients that do can connect (see docs/operations.md)",
    );
  }
  return 0;
}
