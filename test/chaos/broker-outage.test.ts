import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { brokerOutage } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 1 of issue 15: the broker stopped (SIGTERM) for 10 s and started again on the same port,
 * with a 1 s cron job (an exec effect on either agent) running and 50 device commands due over the
 * next 20 s (every 400 ms from +1 s, alternating agents, exec of 0.2 s and file.write). Commands
 * whose lead exceeded the 10 s outage must start on time.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${brokerOutage.name}`, () => {
  it(brokerOutage.title, async () => {
    expectTruth(brokerOutage, await brokerOutage.run());
  }, 90_000);
});
