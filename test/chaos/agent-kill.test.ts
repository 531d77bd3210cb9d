import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { agentKill } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 3 of issue 15: kill -9 of an agent while two exec children (3 s each) run on it: a
 * command, and a job with 3 attempts routed FIRST; and a third child (0.5 s) that ends, its
 * effect done, while the agent is down. The agent restarts 1 s later on the same journal. The
 * record must match what the children actually did: the third one SUCCEEDED, from its exit file.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${agentKill.name}`, () => {
  it(agentKill.title, async () => {
    expectTruth(agentKill, await agentKill.run());
  }, 90_000);
});
