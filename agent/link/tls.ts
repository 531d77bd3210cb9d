import { createRequire } from "node:module";
import type { Transport } from "./transport.js";

// node:tls is loaded on the first mqtts:// connection, not at start: it costs start time and a
// few MB of RSS that an agent on plain mqtt:// never needs.
const load = createRequire(import.meta.url);

/** The `tls` feature: `mqtts://`, verified against the system's CA certificates. */
export const tlsTransport: Transport = (a) =>
  (load("node:tls") as typeof import("node:tls")).connect({
    host: a.host,
    port: a.port,
    // SNI needs a host name; an IP address is sent without it (RFC 6066 §3).
    ...(/^[\d.]+$|:/.test(a.host) ? {} : { servername: a.host }),
  });
