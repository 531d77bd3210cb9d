import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { duplicateDispatch } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 5 of issue 15: the same dispatch delivered 3 times. A client on the broker copies each
 * real dispatch to agent 1 off its down topic and publishes it twice more (QoS 1), for commands
 * that are scheduled, running, and finished when the copies arrive, and once more after all
 * ended. Each must run exactly once.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${duplicateDispatch.name}`, () => {
  it(duplicateDispatch.title, async () => {
    expectTruth(duplicateDispatch, await duplicateDispatch.run());
  }, 90_000);
});
