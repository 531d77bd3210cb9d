import { type Dispatch, dispatchSchema } from "../../shared/protocol/index.js";

/**
 * A valid dispatch of `handler` for round 1 of attempt 1, sent and due at `now`, with a minute to
 * start and ten to run; `over` replaces any field. Parsed, so a test cannot build a bad one.
 */
export function testDispatch(
  executionId: string,
  now: number,
  handler: string,
  over: Partial<Dispatch> = {},
): Dispatch {
  return dispatchSchema.parse({
    v: 1,
    type: "dispatch",
    msgId: `m-${executionId}`,
    sentAt: now,
    executionId,
    round: 1,
    attempt: 1,
    handler,
    params: {},
    fireAt: now,
    deadline: now + 60_000,
    timeoutMs: 600_000,
    priority: 0,
    ...over,
  });
}
