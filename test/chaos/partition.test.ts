import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { partition } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 7 of issue 15: an agent partitioned by SIGSTOP for 7 s (past its 1.5 s lease, the 2 s
 * query and its 2 s keepalive) while two exec children (3 s) run on it — a command, and a job with
 * 3 attempts routed FIRST — then resumed by SIGCONT. The children finish while it is stopped; the
 * job may run a second round on the other agent, and then the record must say both ran.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${partition.name}`, () => {
  it(partition.title, async () => {
    expectTruth(partition, await partition.run());
  }, 90_000);
});
