import type { FirmwareProfile } from "../../shared/profile.js";

/** Where docs/bundles.md installs a bundle; the unit and env file refer to these paths. */
export const INSTALL = {
  /** The bundle's files: agent, native binding, manifest. */
  dir: "/opt/ax-agent",
  /** The device's config file and the env file. */
  etc: "/etc/ax-agent",
  /** The journal (systemd's StateDirectory). */
  state: "/var/lib/ax-agent",
  node: "/usr/bin/node",
} as const;

export const UNIT_FILE = "ax-agent.service";
export const ENV_FILE = "agent.env";
export const EXAMPLE_CONFIG_FILE = "agent.example.json";

/**
 * The ExecStart command line: Node with the profile's heap caps, the launcher (which starts the
 * agent of the install's current slot, or the agent beside it), its config. The benchmark starts
 * agents from this very line (bench/bundle.ts).
 */
export function execStart(profile: FirmwareProfile, agentFile: string): string {
  const semi = profile.node.maxSemiSpaceMb;
  const heap = `--max-old-space-size=${profile.node.maxOldSpaceMb}${semi === undefined ? "" : ` --max-semi-space-size=${semi}`}`;
  return `${INSTALL.node} ${heap} ${INSTALL.dir}/${agentFile} --config \${AX_AGENT_CONFIG}`;
}

/** The systemd unit. */
export function systemdUnit(profile: FirmwareProfile, agentFile: string, version: string): string {
  return `# ax agent, firmware profile ${profile.name}, ax ${version}.
# Install and adapt as docs/bundles.md describes.
[Unit]
Description=ax agent (firmware profile ${profile.name})
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
EnvironmentFile=${INSTALL.etc}/${ENV_FILE}
ExecStart=${execStart(profile, agentFile)}
WorkingDirectory=${INSTALL.state}
StateDirectory=ax-agent
User=ax-agent
Group=ax-agent
Restart=always
RestartSec=2
# On SIGTERM the agent refuses new work and lets running work finish within its
# shutdownGraceMs (10 s unless its config says otherwise), then says offline and exits.
KillSignal=SIGTERM
TimeoutStopSec=20
NoNewPrivileges=yes
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
`;
}

/** The env file template the unit reads. */
export function envFile(profile: FirmwareProfile): string {
  return `# Environment of ${UNIT_FILE} (firmware profile ${profile.name}); systemd reads it from
# ${INSTALL.etc}/${ENV_FILE}. The device's own settings (agentId, broker URL, credentials,
# journal path, handler sections) are in the config file named here; see ${EXAMPLE_CONFIG_FILE}.
AX_AGENT_CONFIG=${INSTALL.etc}/agent.json
`;
}

/** Example sections for the device handlers a profile includes. */
const HANDLER_EXAMPLES: Record<string, unknown> = {
  "mqtt.publish": { url: "mqtt://127.0.0.1:1883" },
  "http.request": { allowOrigins: ["http://127.0.0.1:8080"] },
  "file.write": { allow: ["/sys/class/gpio/"] },
  exec: { enabled: false, allow: [] },
};

/**
 * A device config to start from: what the device must supply (its id, its broker, its
 * credentials, its journal path, its handler sections). Everything else defaults to the profile.
 */
export function exampleConfig(profile: FirmwareProfile): string {
  const handlers: Record<string, unknown> = {};
  for (const name of profile.handlers) {
    if (HANDLER_EXAMPLES[name] !== undefined) handlers[name] = HANDLER_EXAMPLES[name];
  }
  const tls = profile.features.includes("tls");
  const config = {
    agentId: "CHANGE-ME",
    mqtt: {
      url: tls
        ? "mqtts://coordinator-broker.example:8883"
        : "mqtt://coordinator-broker.example:1883",
      username: "CHANGE-ME",
      password: "CHANGE-ME",
    },
    journal: { path: `${INSTALL.state}/journal.sqlite` },
    tags: {},
    handlers,
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

/**
 * The command line a bundle's systemd unit runs, for an install under other folders (a test or
 * a benchmark on this machine): ExecStart with `${VAR}` expanded from the env file, and the
 * unit's paths (Node, the bundle folder, /etc/ax-agent) moved to `where`. Nothing is added.
 */
export function unitCommand(
  unit: string,
  env: string,
  where: { node: string; dir: string; etc: string },
): { command: string; args: string[] } {
  const move = (word: string) =>
    word === INSTALL.node
      ? where.node
      : word.startsWith(`${INSTALL.dir}/`)
        ? `${where.dir}${word.slice(INSTALL.dir.length)}`
        : word.startsWith(`${INSTALL.etc}/`)
          ? `${where.etc}${word.slice(INSTALL.etc.length)}`
          : word;
  const vars = new Map<string, string>();
  for (const line of env.split("\n")) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) vars.set(m[1] as string, move(m[2] as string));
  }
  const exec = /^ExecStart=(.+)$/m.exec(unit)?.[1];
  if (exec === undefined) throw new Error("the unit has no ExecStart line");
  const words = exec
    .trim()
    .split(/\s+/)
    .map((w) =>
      move(
        w.replace(/\$\{([A-Z_][A-Z0-9_]*)\}/g, (_, name: string) => {
          const value = vars.get(name);
          if (value === undefined)
            throw new Error(`ExecStart uses \${${name}}, not in the env file`);
          return value;
        }),
      ),
    );
  const [command, ...args] = words;
  return { command: command as string, args };
}
