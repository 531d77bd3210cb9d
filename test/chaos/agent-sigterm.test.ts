import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { agentTerm } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 4 of issue 15: SIGTERM (systemctl stop) of an agent with 2 exec commands running
 * (3 s, inside the 4 s grace), 8 commands scheduled during the grace and after it, a 1 s cron job
 * on both agents, and 4 commands sent to it while it shuts down. It is restarted 1 s after it
 * exits. Nothing may be lost: every deadline (30 s) allows a run after the restart; nothing may
 * start after the SIGTERM, and the running commands must end on their own.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${agentTerm.name}`, () => {
  it(agentTerm.title, async () => {
    expectTruth(agentTerm, await agentTerm.run());
  }, 90_000);
});
