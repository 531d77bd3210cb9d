import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { brokerAndCoordinator } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 6 of issue 15: within one minute, the broker stopped 5 s and restarted, then 4 s later
 * the coordinator killed -9 and restarted after 5 s, with a 1 s cron job and 40 commands due over
 * 20 s (every 500 ms from +1 s). Commands whose lead exceeded the whole fault window must start
 * on time.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${brokerAndCoordinator.name}`, () => {
  it(brokerAndCoordinator.title, async () => {
    expectTruth(brokerAndCoordinator, await brokerAndCoordinator.run());
  }, 90_000);
});
