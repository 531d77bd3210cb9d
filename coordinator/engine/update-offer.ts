import type { ErrorCode } from "../../shared/errors.js";
import { AGENT_UPDATE_HANDLER, nativeTargetSchema, targetMismatch } from "../../shared/update.js";
import type { AgentRecord, ExecutionRecord } from "../store/port.js";
import type { EngineContext } from "./context.js";
import { applyEvents } from "./transitions.js";

/*
 * The coordinator offers a device only a bundle built for it (docs/rollouts.md, "Agent
 * updates"): an `agent.update` whose bundle's native target differs from the one the agent
 * reported in hello is never sent, since the agent could only fail to load it, or worse, start
 * a bundle whose addon crashes where no health window can catch it.
 */

/** The error code a refused offer's timeline entry records. */
export const TARGET_MISMATCH_CODE: ErrorCode = "AX_UPDATE_TARGET_MISMATCH";

/**
 * Why `exec` must not be sent to `agent`, or undefined when it may be: only an `agent.update`
 * whose `params.target` is not the agent's `hello.target` (or an agent that reports none) is
 * refused.
 */
export function updateRefusal(
  exec: Pick<ExecutionRecord, "handler" | "params">,
  agent: Pick<AgentRecord, "target"> | undefined,
): string | undefined {
  if (exec.handler !== AGENT_UPDATE_HANDLER) return undefined;
  const target = nativeTargetSchema.safeParse(exec.params.target);
  if (!target.success) return "not offered: its params.target is missing or not a native target";
  const why = targetMismatch(target.data, agent?.target);
  return why === undefined ? undefined : `not offered: ${why}`;
}

/**
 * Ends `exec` FAILED without sending it to `agentId`: in one write, the dispatch the agent would
 * have been sent (its send withheld, so no `dispatchedAt`) and the rejection the agent would have
 * answered, final and not retried, as any rejection of the dispatch itself is. The timeline's
 * last entry records `reason` and the code AX_UPDATE_TARGET_MISMATCH.
 */
export async function refuseOffer(
  ctx: EngineContext,
  exec: ExecutionRecord,
  agentId: string,
  reason: string,
  now: number,
): Promise<boolean> {
  const [, rejected] = await applyEvents(
    ctx,
    exec.id,
    [
      {
        event: { type: "dispatch" },
        patch: () => ({ agentId }),
        detail: { agentId, sent: false },
        withhold: ["send_dispatch"],
      },
      {
        event: { type: "rejected", round: exec.round + 1, reason: "invalid_params" },
        patch: () => ({ finishedAt: now, message: reason }),
        detail: { reason, code: TARGET_MISMATCH_CODE, by: "coordinator" },
      },
    ],
    exec,
  );
  if (rejected === "applied") {
    ctx.log("warn", `execution ${exec.id} for ${agentId} ${reason}`, {
      executionId: exec.id,
      agentId,
    });
  }
  return rejected === "applied";
}
