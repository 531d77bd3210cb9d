import type { Coordinator } from "../../coordinator.js";
import { IDEMPOTENCY_HEADER, idempotencyOf } from "../../operations/idempotency.js";
import { apiRoute } from "../route.js";
import {
  idParams,
  rolloutActionBody,
  rolloutBody,
  rolloutDetailSchema,
  rolloutListSchema,
  rolloutSchema,
  rolloutsQuery,
} from "../schemas.js";

/** Rollouts: one device command to a selection of the fleet, paced, in waves, with abort criteria. */
export const rolloutRoutes = [
  apiRoute({
    method: "POST",
    path: "/api/rollouts",
    role: "operator",
    operationId: "createRollout",
    summary: "Create a rollout",
    description:
      "One device command for every agent the selector matches (now or while the rollout is " +
      "open) that offers the handler, reached at the rate, wave by wave, and aborted when the " +
      "abort criteria are met (docs/rollouts.md). It starts at once unless start is false " +
      "(CREATED, started by resume). An id that is taken: 409 AX_ROLLOUT_CONFLICT. With an " +
      "Idempotency-Key, the same request again makes nothing more and answers with the " +
      "rollout the first made, as it is now.",
    tag: "rollouts",
    headers: [IDEMPOTENCY_HEADER],
    body: rolloutBody,
    success: { status: 201, description: "The rollout.", schema: rolloutSchema },
    errors: [409],
    handle: async ({ coordinator, body, principal, headers }) =>
      coordinator.rollouts.create(
        body,
        principal.name,
        idempotencyOf(headers["idempotency-key"], principal.name, "POST /api/rollouts", body),
      ),
  }),
  apiRoute({
    method: "GET",
    path: "/api/rollouts",
    role: "viewer",
    operationId: "listRollouts",
    summary: "List rollouts",
    description: "Newest first, optionally in one state, in pages (nextCursor).",
    tag: "rollouts",
    query: rolloutsQuery,
    success: { status: 200, description: "A page of rollouts.", schema: rolloutListSchema },
    errors: [400],
    handle: async ({ coordinator, query }) =>
      coordinator.rollouts.list({
        limit: query.limit,
        ...(query.state === undefined ? {} : { state: query.state }),
        ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
      }),
  }),
  apiRoute({
    method: "GET",
    path: "/api/rollouts/{id}",
    role: "viewer",
    operationId: "getRollout",
    summary: "Show a rollout, its progress and its timeline",
    tag: "rollouts",
    params: idParams,
    success: {
      status: 200,
      description: "The rollout and its timeline.",
      schema: rolloutDetailSchema,
    },
    errors: [404],
    handle: async ({ coordinator, params }) => coordinator.rollouts.detail(params.id),
  }),
  rolloutAction(
    "pause",
    "Pause a rollout",
    "No more agents are reached until it is resumed; executions already sent run on, and the " +
      "abort criteria still apply to them. From IN_PROGRESS or CREATED.",
    (c, id, reason, actor) => c.rollouts.pause(id, reason, actor),
  ),
  rolloutAction(
    "resume",
    "Resume (or start) a rollout",
    "From PAUSED, or CREATED (its start). A reason in the body is not recorded.",
    (c, id, _reason, actor) => c.rollouts.resume(id, actor),
  ),
  rolloutAction(
    "abort",
    "Abort a rollout",
    "ABORTED: no more agents are reached, and every execution it left open is canceled. From " +
      "any state but ABORTED and COMPLETED.",
    (c, id, reason, actor) => c.rollouts.abort(id, reason, actor),
  ),
];

/** `POST /api/rollouts/{id}/ACTION`: an operator's action on one rollout, answered with it. */
function rolloutAction(
  action: "pause" | "resume" | "abort",
  summary: string,
  description: string,
  act: (
    coordinator: Coordinator,
    id: string,
    reason: string | undefined,
    actor: string,
  ) => Promise<unknown>,
) {
  return apiRoute({
    method: "POST",
    path: `/api/rollouts/{id}/${action}`,
    role: "operator",
    operationId: `${action}Rollout`,
    summary,
    description,
    tag: "rollouts",
    params: idParams,
    body: rolloutActionBody,
    bodyOptional: true,
    success: { status: 200, description: "The rollout.", schema: rolloutSchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, body, principal }) =>
      act(coordinator, params.id, body.reason, principal.name),
  });
}
