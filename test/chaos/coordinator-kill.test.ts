import { afterEach, describe, it } from "vitest";
import { expectTruth } from "../helpers/chaos/expect-truth.js";
import { closeOpenHarnesses } from "../helpers/chaos/harness.js";
import { coordinatorKill } from "../helpers/chaos/scenarios.js";

/**
 * Scenario 2 of issue 15: kill -9 of the coordinator with work in every state — a 1 s cron job,
 * 3 failing executions of a job retried after 0–6 s (RETRY_WAITING), 6 commands running 3 s
 * (RUNNING), 20 commands due over 14 s (SCHEDULED or PENDING), 10 due-now commands created
 * just before the kill (PENDING, DISPATCHED) and 4 runs of a job whose group runs one at a time
 * (PENDING) — restarted on the same store after 5 s. Commands
 * whose lead exceeded the 5 s outage must start on time.
 *
 * Common settings (test/helpers/chaos/harness.ts): two agents; coordinator heartbeat 500 ms (lease
 * 1.5 s, a lapsed lease's query waits 2 s, offline after 1.5 s), misfire threshold 2 s; agents
 * heartbeat 500 ms, MQTT keepalive 2 s, reconnect back-off 100 ms–1 s, concurrency 4, queue 64,
 * shutdown grace 4 s. Mosquitto (our own instance, persistence on) when AX_TEST_MQTT_URL is set
 * and mosquitto is installed, the embedded broker in a child process otherwise.
 */
afterEach(closeOpenHarnesses);

describe(`chaos: ${coordinatorKill.name}`, () => {
  it(coordinatorKill.title, async () => {
    expectTruth(coordinatorKill, await coordinatorKill.run());
  }, 90_000);
});
