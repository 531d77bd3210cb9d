import { connect, type Socket } from "node:net";

/** Where a broker listens, from its URL. */
export interface BrokerAddress {
  /** `mqtt:` or `mqtts:`. */
  protocol: string;
  host: string;
  port: number;
  username: string | undefined;
  password: string | undefined;
}

/** Opens the byte stream to a broker: plain TCP, or TLS when the bundle has that feature. */
export type Transport = (address: BrokerAddress) => Socket;

/** The transports an agent can use, by URL protocol. */
export type Transports = Readonly<Record<string, Transport>>;

/** `mqtt://`: plain TCP. */
export const tcpTransport: Transport = (a) => connect({ host: a.host, port: a.port });

/** Only plain TCP; a bundle's parts add TLS when its profile enables the `tls` feature. */
export const TCP_ONLY: Transports = { "mqtt:": tcpTransport };

/** Plain TCP, plus TLS when the agent has the tls feature. */
export function transportsFor(features: { tls?: Transport | undefined }): Transports {
  return features.tls ? { ...TCP_ONLY, "mqtts:": features.tls } : TCP_ONLY;
}

const DEFAULT_PORTS: Record<string, number> = { "mqtt:": 1883, "mqtts:": 8883 };

/** Parses `mqtt://[user[:password]@]host[:port]` (or mqtts://); throws a TypeError naming the problem. */
export function brokerAddress(url: string): BrokerAddress {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`invalid broker URL "${url}"`);
  }
  const port = u.port === "" ? DEFAULT_PORTS[u.protocol] : Number(u.port);
  if (port === undefined) {
    throw new TypeError(`broker URL "${u.protocol}//${u.host}" must be mqtt:// or mqtts://`);
  }
  return {
    protocol: u.protocol,
    // new URL keeps the brackets of an IPv6 literal; the socket wants the bare address.
    host: u.hostname.replace(/^\[(.*)\]$/, "$1"),
    port,
    username: u.username === "" ? undefined : decodeURIComponent(u.username),
    password: u.password === "" ? undefined : decodeURIComponent(u.password),
  };
}

/** Opens a socket to `address` with the transport for its protocol, or throws naming what is missing. */
export function openTransport(address: BrokerAddress, transports: Transports): Socket {
  const transport = transports[address.protocol];
  if (transport === undefined) {
    throw new TypeError(
      `${address.protocol}// is not available in this agent (its bundle's profile leaves out the feature for it)`,
    );
  }
  return transport(address);
}
