import { createServer, type Server } from "node:net";
import { Aedes } from "aedes";
import { coalesceWrites } from "../link/coalesce.js";

/** An MQTT 3.1.1 broker in this process (aedes), for the demo and tests. */
export interface EmbeddedBroker {
  url: string;
  port: number;
  broker: Aedes;
  close(): Promise<void>;
}

/** Starts an embedded broker on 127.0.0.1; `port` 0 picks a free one. */
export async function startEmbeddedBroker(port = 0): Promise<EmbeddedBroker> {
  const broker = await Aedes.createBroker();
  // Rule 10 applies to the broker too: without TCP_NODELAY its small writes (a welcome, a time
  // answer) wait on delayed ACKs, which skews the agents' clock samples by tens of ms.
  broker.on("client", (client) => {
    (client as unknown as { conn?: { setNoDelay?: (on: boolean) => void } }).conn?.setNoDelay?.(
      true,
    );
  });
  // One writev per turn of the loop per connection, not one per packet (coalesce.ts).
  const server: Server = createServer((socket) => {
    coalesceWrites(socket);
    broker.handle(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  const actual = typeof address === "object" && address !== null ? address.port : port;
  return {
    url: `mqtt://127.0.0.1:${actual}`,
    port: actual,
    broker,
    close: async () => {
      await new Promise<void>((resolve) => broker.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
