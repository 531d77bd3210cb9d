/**
 * The embedded aedes broker as a process of its own, so a chaos scenario can stop and restart it:
 * `node --import tsx embedded-broker-main.ts PORT`. It stays up until SIGTERM or SIGINT. Its
 * sessions live in memory, so a restart loses them, as a broker without persistence would.
 */
import { startEmbeddedBroker } from "../../../coordinator/broker/embedded.js";

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65_535) {
  console.error(`embedded-broker-main: PORT must be an integer 1-65535, got ${process.argv[2]}`);
  process.exit(2);
}
const broker = await startEmbeddedBroker(port);
console.log(`embedded broker listening on ${broker.url}`);
await new Promise<void>((resolve) => {
  process.once("SIGTERM", () => resolve());
  process.once("SIGINT", () => resolve());
});
await broker.close();
